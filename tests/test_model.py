from functools import partial

import pytest
import torch
import torch.nn.functional as F
import transformers
from bert_testing import make_batch, model_pair, small_config

from bertlib.hf import interop
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining, BertModel
from bertlib.model.config import BertConfig
from bertlib.model.encoder import BertEncoder, init_bert_weights
from bertlib.model.variants import add_final_norm

# (config overrides, batch, seq): odd sizes, one layer and one head, the shortest and the longest input
CONFIGS = {
    "1 layer, 1 head, hidden 48, seq 1": (dict(num_hidden_layers=1, num_attention_heads=1), 3, 1),
    "hidden 48, vocab 97, padded pairs": (dict(), 4, 29),
    "seq 512": (dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, max_position_embeddings=512), 2, 512),
    "relu, 3 segments, eps 1e-5, pad id 7": (
        dict(hidden_act="relu", type_vocab_size=3, layer_norm_eps=1e-5, pad_token_id=7, num_attention_heads=3),
        3,
        21,
    ),
    "tiny preset, BERT init": (BertConfig.from_preset("tiny", max_position_embeddings=128).to_dict(), 3, 48),
}


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.mark.parametrize("name", CONFIGS)
def test_equals_transformers(name):
    overrides, batch, seq = CONFIGS[name]
    config = small_config(**overrides)
    ours, hf = model_pair(config)
    inputs = make_batch(config, batch, seq, padded=seq > 1)
    labels, nsp = inputs.pop("labels"), inputs.pop("next_sentence_label")
    kwargs = dict(**inputs, output_attentions=True, output_hidden_states=True)

    full = ours(**kwargs)
    sparse = ours(**kwargs, labels=labels, next_sentence_label=nsp)
    ref = hf(**kwargs, labels=labels, next_sentence_label=nsp)
    selected = labels != IGNORE_INDEX
    ref_mlm = F.cross_entropy(ref.prediction_logits.view(-1, config.vocab_size), labels.view(-1))
    ref_nsp = F.cross_entropy(ref.seq_relationship_logits, nsp)

    assert full.prediction_logits.shape == (batch, seq, config.vocab_size)
    assert sparse.prediction_logits.shape == (selected.sum(), config.vocab_size)
    assert max_diff(full.prediction_logits, ref.prediction_logits) < 1e-5
    assert max_diff(sparse.prediction_logits, ref.prediction_logits[selected]) < 1e-5
    assert max_diff(full.seq_relationship_logits, ref.seq_relationship_logits) < 1e-5
    assert len(full.hidden_states) == len(ref.hidden_states) == config.num_hidden_layers + 1
    assert all(max_diff(a, b) < 1e-5 for a, b in zip(full.hidden_states, ref.hidden_states, strict=True))
    assert all(max_diff(a, b) < 1e-5 for a, b in zip(full.attentions, ref.attentions, strict=True))
    assert abs(sparse.loss - ref.loss) < 1e-5
    assert abs(sparse.mlm_loss - ref_mlm) < 1e-5 and abs(sparse.nsp_loss - ref_nsp) < 1e-5

    sparse.loss.backward()
    ref.loss.backward()
    hf_params = dict(hf.named_parameters())
    for key, param in ours.named_parameters():
        assert max_diff(param.grad, hf_params[interop.hf_name(key)].grad) < 1e-5, key


def test_fast_attention_path_equals_explicit_in_the_whole_model():
    config = small_config(num_hidden_layers=3)
    ours, _ = model_pair(config)
    inputs = make_batch(config, 4, 33)
    fast = ours(**inputs)
    slow = ours(**inputs, output_attentions=True)
    assert fast.attentions is None and len(slow.attentions) == 3
    assert max_diff(fast.prediction_logits, slow.prediction_logits) < 1e-5
    assert abs(fast.loss - slow.loss) < 1e-6


def test_loss_parts_and_empty_selection():
    config = small_config()
    model, _ = model_pair(config)
    inputs = make_batch(config, 2, 10)
    only_mlm = model(inputs["input_ids"], labels=inputs["labels"])
    only_nsp = model(inputs["input_ids"], next_sentence_label=inputs["next_sentence_label"])
    assert only_mlm.loss is only_mlm.mlm_loss and only_mlm.nsp_loss is None
    assert only_nsp.loss is only_nsp.nsp_loss and only_nsp.mlm_loss is None
    assert model(inputs["input_ids"]).loss is None
    nothing = model(inputs["input_ids"], labels=torch.full_like(inputs["input_ids"], IGNORE_INDEX))
    assert nothing.prediction_logits.shape == (0, config.vocab_size)
    assert nothing.mlm_loss.item() == 0.0  # not NaN, as a plain mean over no positions would be
    nothing.mlm_loss.backward()


def test_mlm_decoder_is_the_word_embedding_matrix():
    config = small_config()
    model, _ = model_pair(config)
    assert all(p.shape != (config.vocab_size, config.hidden_size) for p in model.mlm_head.parameters())
    ids = torch.tensor([[2, 10, 11, 3]])
    before = model(ids).prediction_logits
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight[50] += 1.0  # token 50 is not in the input
    after = model(ids).prediction_logits
    assert not torch.equal(before[..., 50], after[..., 50]) and torch.equal(before[..., 51], after[..., 51])


def test_initialisation_follows_bert():
    torch.manual_seed(0)
    config = BertConfig.from_preset("mini")
    model = BertForPreTraining(config)
    params = dict(model.named_parameters())
    for key in (
        "bert.embeddings.word_embeddings.weight",
        "bert.encoder.layers.3.feed_forward.intermediate.weight",
        "mlm_head.dense.weight",
        "nsp_head.weight",
    ):
        assert abs(params[key].std().item() - 0.02) < 0.002, key
    assert params["bert.embeddings.word_embeddings.weight"][config.pad_token_id].abs().max() == 0
    for key, p in params.items():
        if key.endswith("bias"):
            assert p.abs().max() == 0, key
        if "norm" in key and key.endswith("weight"):
            assert torch.all(p == 1), key
    torch.manual_seed(0)
    again = BertForPreTraining(config)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters(), strict=True))


@pytest.mark.parametrize("preset", ["tiny", "mini", "base", "large"])
def test_parameter_count_equals_transformers(preset):
    config = BertConfig.from_preset(preset, vocab_size=30522)
    with torch.device("meta"):
        ours = sum(p.numel() for p in BertForPreTraining(config).parameters())
        hf = transformers.BertForPreTraining(interop.to_hf_config(config))
        hf.tie_weights()  # transformers 5.0.0 leaves a model built on the meta device untied
    assert ours == hf.num_parameters()
    if preset == "base":
        assert ours == 110_106_428


def test_pre_ln_has_a_final_norm_and_runs():
    config = small_config(norm_style="pre")
    model = BertForPreTraining(config).eval()
    assert model.bert.encoder.final_norm is not None
    assert BertModel(small_config()).encoder.final_norm is None
    inputs = make_batch(config, 2, 12)
    out = model(**inputs, output_hidden_states=True)
    assert torch.isfinite(out.loss)
    body = model.bert(
        inputs["input_ids"],
        token_type_ids=inputs["token_type_ids"],
        attention_mask=inputs["attention_mask"],
        output_hidden_states=True,
    )
    assert torch.equal(body.hidden_states[-1], body.last_hidden_state)
    assert body.last_hidden_state.mean(-1).abs().max() < 1e-4  # normalised by the final LayerNorm


def test_training_mode_dropout_matches_transformers():
    # Same seed, same order of dropout calls (embeddings, then after each sub-layer): the same masks as HF.
    # output_hidden_states keeps every position in the last layer, so its dropout draws as many numbers as HF's.
    config = small_config(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.0)
    ours, hf = model_pair(config)
    inputs = make_batch(config, 3, 20)
    torch.manual_seed(5)
    out = ours.train()(**inputs, output_hidden_states=True)
    torch.manual_seed(5)
    ref = hf.train()(**inputs)
    assert max_diff(out.seq_relationship_logits, ref.seq_relationship_logits) < 1e-5
    assert abs(out.loss - ref.loss) < 1e-5


@pytest.mark.parametrize("style", ["post", "pre"])
def test_encoder_equals_torch_transformer_encoder(style):
    # PyTorch's own encoder is the reference for Pre-LN, which HF BERT lacks (and a second one for Post-LN).
    config = small_config(norm_style=style, num_hidden_layers=3, layer_norm_eps=1e-5)
    torch.manual_seed(0)
    ours = BertEncoder(config).eval()
    if style == "pre":  # a Pre-LN stack's last LayerNorm is a variant's part (notebook 11), as in BertModel
        add_final_norm(ours, config)
    ours.apply(partial(init_bert_weights, std=0.2))
    ref = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(
            48, 4, 96, dropout=0.0, activation="gelu", layer_norm_eps=1e-5, batch_first=True, norm_first=style == "pre"
        ),
        num_layers=3,
        norm=torch.nn.LayerNorm(48, eps=1e-5) if style == "pre" else None,
        enable_nested_tensor=False,
    ).eval()
    for layer, theirs in zip(ours.layers, ref.layers, strict=True):
        a = layer.attention
        theirs.self_attn.in_proj_weight.data = torch.cat([a.query.weight, a.key.weight, a.value.weight]).detach()
        theirs.self_attn.in_proj_bias.data = torch.cat([a.query.bias, a.key.bias, a.value.bias]).detach()
        for mine, other in [
            (a.output, theirs.self_attn.out_proj),
            (layer.feed_forward.intermediate, theirs.linear1),
            (layer.feed_forward.output, theirs.linear2),
            (layer.attention_norm, theirs.norm1),
            (layer.feed_forward_norm, theirs.norm2),
        ]:
            other.load_state_dict(mine.state_dict())
    x = torch.randn(3, 17, 48)
    mask = torch.ones(3, 17, dtype=torch.long)
    mask[1, 9:] = 0
    with torch.no_grad():
        out = ours(x, mask).last_hidden_state
        expected = ref(x, src_key_padding_mask=mask == 0)
    assert max_diff(out[mask == 1], expected[mask == 1]) < 1e-5


def test_dropout_only_in_training():
    config = small_config()
    model, _ = model_pair(config)
    ids = make_batch(config, 2, 10)["input_ids"]
    assert torch.equal(model.eval()(ids).prediction_logits, model(ids).prediction_logits)
    assert not torch.equal(model.train()(ids).prediction_logits, model(ids).prediction_logits)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(labels=torch.full((2, 10), 97)), "labels contains 97, outside 0..96 or -100 (BertConfig.vocab_size=97)"),
        (dict(labels=torch.full((2, 10), -5)), "labels contains -5"),
        (dict(labels=torch.full((2, 9), 1)), "labels has shape (2, 9), but input_ids has (2, 10)"),
        (dict(attention_mask=torch.ones(2, 11)), "attention_mask has shape (2, 11), but input_ids has (2, 10)"),
        (dict(next_sentence_label=torch.tensor([0, 2])), "next_sentence_label contains 2, outside 0..1"),
        (dict(next_sentence_label=torch.tensor([0])), "next_sentence_label has 1 entries for a batch of 2"),
        (dict(input_ids=torch.full((2, 65), 5)), "BertConfig.max_position_embeddings=64"),
        (dict(input_ids=torch.full((2, 10), 97)), "input_ids contains 97"),
    ],
)
def test_bad_inputs_raise_clear_errors(change, message):
    config = small_config()
    model, _ = model_pair(config)
    inputs = {**make_batch(config, 2, 10), **change}
    if inputs["input_ids"].shape != (2, 10):
        inputs = dict(input_ids=inputs["input_ids"])
    with pytest.raises(ValueError) as err:
        model(**inputs)
    assert message in str(err.value)


def test_arguments_after_input_ids_are_keyword_only():
    "An HF-style call `model(ids, mask)` must fail loudly instead of reading the mask as segment ids."
    config = small_config()
    model, _ = model_pair(config)
    inputs = make_batch(config, 2, 12)
    for module in (model, model.bert):
        with pytest.raises(TypeError, match="positional"):
            module(inputs["input_ids"], inputs["attention_mask"])
    out = model(inputs["input_ids"], attention_mask=inputs["attention_mask"], token_type_ids=inputs["token_type_ids"])
    assert out.prediction_logits.shape[:2] == inputs["input_ids"].shape
