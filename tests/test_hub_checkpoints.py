"""HF BERTs as users bring them convert to bertlib with equal outputs: models built in code with
`transformers.BertConfig(...)`, and folders laid out as Google's small BERTs, `bert-base-uncased` and transformers'
own `save_pretrained` lay them out (`hub_layouts`). None of these inputs comes from a bertlib export."""

import pytest
import torch
import transformers
from bert_testing import make_batch
from hub_layouts import GOOGLE_SPECIALS, LAYOUTS, SIZES, google_vocab

from bertlib.cli.main import main
from bertlib.hf import folders as hf_folders
from bertlib.hf import interop
from bertlib.model.config import BertConfig
from bertlib.train.factory import load_model

LABELS = 3


def hf_config(**overrides) -> transformers.BertConfig:
    "A config as a user writes it: transformers' own class and defaults, nothing from bertlib."
    fields = {**SIZES, "vocab_size": 97, "num_labels": LABELS, "initializer_range": 0.2, "max_position_embeddings": 64}
    return transformers.BertConfig(**{**fields, **overrides})


@pytest.mark.parametrize(
    "hf_class",
    [
        transformers.BertForPreTraining,
        transformers.BertForSequenceClassification,
        transformers.BertForTokenClassification,
        transformers.BertForQuestionAnswering,
    ],
)
def test_hf_models_built_in_code_convert_with_equal_outputs(hf_class):
    torch.manual_seed(0)
    reader = hf_class is transformers.BertForQuestionAnswering
    hf = hf_class(hf_config(num_labels=2) if reader else hf_config()).eval()
    ours = interop.from_transformers(hf)
    assert ours.config == BertConfig(vocab_size=97, initializer_range=0.2, **{**SIZES, "max_position_embeddings": 64})
    batch = make_batch(ours.config, 3, 16)
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        theirs, mine = hf(**inputs), ours(**inputs)
    mask = inputs["attention_mask"].bool()
    compared = 0
    for name in ("prediction_logits", "seq_relationship_logits", "logits", "start_logits", "end_logits"):
        expected = getattr(theirs, name, None)
        if expected is None:
            continue
        got = getattr(mine, name)
        if expected.shape[:2] == mask.shape:  # per token: padding positions mean nothing
            expected, got = expected[mask], got[mask]
        assert (got - expected).abs().max() < 1e-5, name
        compared += 1
    assert compared == (
        1 if hf_class in (transformers.BertForSequenceClassification, transformers.BertForTokenClassification) else 2
    )


def test_hf_configs_fill_what_they_leave_out_with_berts_meaning_and_refuse_what_bertlib_lacks():
    # Google's original eleven keys: no layer_norm_eps, no pad_token_id, no position_embedding_type
    google = transformers.BertConfig.from_dict(
        {"hidden_size": 48, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 97}
    )
    config = interop.from_hf_config(google)
    assert (config.layer_norm_eps, config.pad_token_id, config.position_embedding_type) == (1e-12, 0, "absolute")
    refused = {
        "position_embedding_type": "relative_key",
        "is_decoder": True,
        "add_cross_attention": True,
        "tie_word_embeddings": False,
        "hidden_act": "gelu_new",
    }
    for name, value in refused.items():
        with pytest.raises(ValueError, match=f"^{name}={value!r} is not supported by bertlib"):
            interop.from_hf_config(hf_config(**{name: value}))
    with pytest.raises(ValueError, match="model_type='roberta' is not supported"):
        interop.from_hf_config(transformers.RobertaConfig())
    with pytest.raises(ValueError, match="num_labels=3 cannot be converted: a span reader scores 2"):
        interop.from_transformers(transformers.BertForQuestionAnswering(hf_config()))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_hub_layout_folders_load_as_encoders_with_equal_outputs(tmp_path, layout):
    folder, hf = LAYOUTS[layout](tmp_path / layout)
    config, state, tokenizer = hf_folders.load_hf_encoder(folder)
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (len(google_vocab()), 48, 2)
    # the vocabulary's own special ids, Google's [CLS] at 101, and the uncased tokenizer's pieces
    reference = transformers.BertTokenizer.from_pretrained(folder)
    assert tokenizer.token_to_id("[CLS]") == GOOGLE_SPECIALS.index("[CLS]") == 101
    for a, b in (("The Cat SAT on the mat", None), ("a big red dog", "The bird flew quickly")):
        encoding = tokenizer.encode(a, b) if b else tokenizer.encode(a)
        expected = reference(a, b) if b else reference(a)
        assert encoding.ids == expected["input_ids"] and encoding.type_ids == expected["token_type_ids"]
    model = interop.from_transformers(hf)
    encoder = {k: v for k, v in model.state_dict().items() if k.startswith("bert.")}
    assert state.keys() == encoder.keys() and all(torch.equal(state[k], encoder[k]) for k in state)
    ids = torch.tensor([tokenizer.encode("the cat sat", "a dog ran").ids])
    with torch.no_grad():
        assert (model.eval().bert(ids).last_hidden_state - hf.bert(ids).last_hidden_state).abs().max() < 1e-5


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_finetune_from_a_hub_layout_folder(tmp_path, layout, task_data, capsys):
    folder, _ = LAYOUTS[layout](tmp_path / layout)
    run = tmp_path / "run"
    assert (
        main(
            [
                "finetune",
                "rte",
                "--from",
                str(folder),
                "--output-dir",
                str(run),
                "--data-dir",
                str(task_data),
                "--train-examples",
                "8",
                "--eval-examples",
                "4",
                "--max-steps",
                "2",
                "--batch-size",
                "4",
                "--max-seq-len",
                "64",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert "LOAD REPORT" not in capsys.readouterr().err  # transformers' report of the unused heads stays quiet
    model, tokenizer = load_model(run)
    assert tokenizer.token_to_id("[CLS]") == 101 and model.config.vocab_size == len(google_vocab())
