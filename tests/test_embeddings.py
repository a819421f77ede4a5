import pytest
import torch
import transformers
from bert_testing import make_batch, small_config
from transformers.models.bert import modeling_bert

from bertlib.model.embeddings import BertEmbeddings
from bertlib.model.inputs import check_index_range


def hf_embeddings(ours: BertEmbeddings) -> modeling_bert.BertEmbeddings:
    fields = {k: v for k, v in ours.config.to_dict().items() if k != "norm_style"}
    hf = modeling_bert.BertEmbeddings(transformers.BertConfig(**fields))
    hf.load_state_dict({k.replace("layer_norm", "LayerNorm"): v for k, v in ours.state_dict().items()})
    return hf


@pytest.mark.parametrize(
    "overrides, batch, seq",
    [
        (dict(), 3, 40),
        (dict(max_position_embeddings=512), 2, 512),
        (dict(hidden_size=8, num_attention_heads=1), 4, 1),
        (dict(type_vocab_size=3, pad_token_id=5), 2, 17),
    ],
)
def test_equals_transformers_outputs_and_gradients(overrides, batch, seq):
    config = small_config(**overrides)
    torch.manual_seed(0)
    ours = BertEmbeddings(config).eval()
    torch.nn.init.normal_(ours.layer_norm.weight)  # non-trivial LayerNorm parameters
    torch.nn.init.normal_(ours.layer_norm.bias)
    hf = hf_embeddings(ours).eval()
    inputs = make_batch(config, batch, seq)
    ids, types = inputs["input_ids"], inputs["token_type_ids"]
    weights = torch.randn(config.hidden_size)
    out, ref = ours(ids, types), hf(input_ids=ids, token_type_ids=types)
    assert (out - ref).abs().max() < 1e-5
    (out * weights).square().sum().backward()
    (ref * weights).square().sum().backward()
    for name, param in ours.named_parameters():
        hf_param = dict(hf.named_parameters())[name.replace("layer_norm", "LayerNorm")]
        assert (param.grad - hf_param.grad).abs().max() < 1e-5, name
    assert ours.word_embeddings.weight.grad[config.pad_token_id].abs().max() == 0  # [PAD] never learns


def test_defaults_and_normalisation():
    config = small_config()
    emb = BertEmbeddings(config).eval()
    ids = make_batch(config, 2, 9)["input_ids"]
    assert torch.equal(emb(ids), emb(ids, torch.zeros_like(ids)))
    out = emb(ids)
    assert out.shape == (2, 9, config.hidden_size)
    assert out.mean(-1).abs().max() < 1e-5 and (out.std(-1, unbiased=False) - 1).abs().max() < 1e-4


def test_dropout_only_in_training():
    emb = BertEmbeddings(small_config(hidden_dropout_prob=0.5))
    ids = torch.tensor([[2, 7, 3]])
    assert not torch.equal(emb.train()(ids), emb(ids))
    assert torch.equal(emb.eval()(ids), emb(ids))


@pytest.mark.parametrize(
    "ids, types, message",
    [
        (
            torch.zeros(1, 65, dtype=torch.long),
            None,
            "input_ids has seq_len=65, but the model reads 1 to BertConfig.max_position_embeddings=64 tokens; truncate",
        ),
        (torch.zeros(2, 0, dtype=torch.long), None, "input_ids has seq_len=0"),
        (torch.tensor([[2, 97, 3]]), None, "input_ids contains 97, outside 0..96 (BertConfig.vocab_size=97)"),
        (torch.tensor([[2, -3, 300]]), None, "input_ids contains -3, outside 0..96"),
        (
            torch.tensor([[2, 5, 3]]),
            torch.tensor([[0, 2, 1]]),
            "token_type_ids contains 2, outside 0..1 (BertConfig.type_vocab_size=2)",
        ),
        (
            torch.tensor([[2, 5, 3]]),
            torch.tensor([[0, 1]]),
            "token_type_ids has shape (1, 2), but input_ids has (1, 3)",
        ),
        (torch.tensor([2, 5, 3]), None, "input_ids must have shape [batch, seq_len]; got shape (3,)"),
    ],
)
def test_bad_inputs_raise_clear_errors(ids, types, message):
    emb = BertEmbeddings(small_config())
    with pytest.raises(ValueError) as err:
        emb(ids, types)
    assert message in str(err.value)


def test_check_index_range_ignores_the_ignore_index():
    check_index_range("labels", torch.tensor([-100, 0, 96]), 97, "vocab", ignore_index=-100)
    with pytest.raises(ValueError, match=r"labels contains -99, outside 0..96 or -100 \(vocab\)"):
        check_index_range("labels", torch.tensor([-100, -99]), 97, "vocab", ignore_index=-100)
    check_index_range("empty", torch.tensor([], dtype=torch.long), 1, "nothing to check")
