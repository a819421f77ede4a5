"""Models that no `transformers` class holds (Pre-LN, with or without rotary positions; rotary positions at another
base, with ALBERT's savings or under a sequence classifier) export with bertlib's own modeling file. `transformers`
loads the folder offline with `trust_remote_code=True`, without bertlib, and gives bertlib's logits; the seed's
fill-mask snippet runs on it. Models that HF holds keep their HF classes, and RoBERTa-PreLayerNorm, the one Pre-LN
encoder of `transformers`, is shown not to compute the same function."""

import json
import subprocess
import sys

import pytest
import torch
import transformers
from bert_testing import make_batch, small_config, wordpiece_tokenizer

from bertlib.cli.main import main
from bertlib.data.tokenizer import add_bert_post_processor
from bertlib.evaluation.scores import fill_mask
from bertlib.hf import folders as hf_folders
from bertlib.hf import interop
from bertlib.hf.remote import configuration_bertlib, modeling_bertlib
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.model.heads import BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification
from bertlib.train.factory import load_model

VARIANTS = {  # options on top of small_config that no transformers class holds
    "modern": dict(norm_style="pre", position_embedding_type="rope"),
    "pre-ln": dict(norm_style="pre"),
    "rope at base 500": dict(position_embedding_type="rope", rope_theta=500.0),
    "albert with rope": dict(
        embedding_size=32,
        share_layers=True,
        position_embedding_type="rope",
        norm_style="pre",
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=1e-5,
    ),
}
PAIRS = (
    ["the cat sat on the mat", "a bird", "the big red dog ran quickly under the tree"],
    ["a dog ran", "the log", "it sat"],
)  # three lengths: the batch is padded
# The seed's snippet, run in a fresh Python where bertlib cannot be imported, as its users have it. (Its tokenizer
# line makes transformers 5 ask whether to run the folder's configuration code, since AutoTokenizer reads the config
# first; without an answer, or with "no", it reads the tokenizer files alone.)
SEED_SNIPPET = """
import json, sys
from pathlib import Path
sys.modules["bertlib"] = None  # `import bertlib` now fails
import transformers
from transformers import AutoModelForMaskedLM, AutoTokenizer

path, text, answer = sys.argv[1:]
model = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(path)
Path(answer).write_text(json.dumps(transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer)(text)))
"""


def tokenizer_with_template():
    return add_bert_post_processor(wordpiece_tokenizer())


def export(model, tmp_path):
    "Save `model` (with the test tokenizer) and return the folder."
    return hf_folders.save_pretrained_hf(model.eval(), tokenizer_with_template(), tmp_path / "export")


def padded_batch(path) -> dict[str, torch.Tensor]:
    "Sentence pairs of three lengths, encoded and padded by the exported tokenizer."
    return dict(transformers.AutoTokenizer.from_pretrained(path)(*PAIRS, padding=True, return_tensors="pt"))


def test_the_remote_config_has_bertlib_s_fields_and_defaults():
    assert configuration_bertlib.DEFAULTS == BertConfig().to_dict()


@pytest.mark.parametrize("variant", VARIANTS)
def test_an_export_without_an_hf_class_loads_through_remote_code(variant, tmp_path, remote_code):
    tokenizer = tokenizer_with_template()
    torch.manual_seed(0)
    config = small_config(vocab_size=tokenizer.get_vocab_size(), initializer_range=0.5, **VARIANTS[variant])
    model = BertForPreTraining(config).eval()
    assert interop.hf_class(model) is modeling_bertlib.BertlibForMaskedLM
    path = export(model, tmp_path)
    saved = json.loads((path / "config.json").read_text())
    assert (saved["model_type"], saved["architectures"], saved["auto_map"]) == (
        "bertlib",
        ["BertlibForMaskedLM"],
        interop.OWN_AUTO_MAP,
    )
    assert {"configuration_bertlib.py", "modeling_bertlib.py"} <= {file.name for file in path.iterdir()}

    hf_model = transformers.AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True).eval()
    assert type(hf_model).__name__ == "BertlibForMaskedLM"
    assert type(hf_model).__module__.startswith("transformers_modules.")  # the folder's copy, not bertlib's
    batch = padded_batch(path)
    assert not batch["attention_mask"].all() and batch["token_type_ids"].any()
    with torch.no_grad():
        ours = model(**batch).prediction_logits
        theirs = hf_model(**batch).logits
    assert (ours - theirs).abs().max() < 1e-4

    text = "the cat sat on the [MASK]"
    pipeline = transformers.pipeline(
        "fill-mask", model=hf_model, tokenizer=transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    )
    expected = [tokenizer.token_to_id(token) for token, _ in fill_mask(model, tokenizer, text)[0]]
    assert [guess["token"] for guess in pipeline(text)] == expected


@pytest.mark.parametrize(
    "head, labels, overrides",
    [
        (BertForSequenceClassification, ("neg", "pos"), dict(position_embedding_type="rope")),
        (BertForTokenClassification, ("O", "B-X", "I-X"), dict(norm_style="pre")),
        (BertForQuestionAnswering, ("start", "end"), dict(norm_style="pre", position_embedding_type="rope")),
    ],
    ids=["rope sequence classifier", "pre-ln token classifier", "modern reader"],
)
def test_a_fine_tuned_head_loads_through_its_auto_class(head, labels, overrides, tmp_path, remote_code):
    torch.manual_seed(1)
    model = head(small_config(vocab_size=tokenizer_with_template().get_vocab_size(), **overrides), labels).eval()
    assert interop.hf_class(model) is interop.OWN_CLASSES[head]
    path = export(model, tmp_path)
    auto = {
        BertForSequenceClassification: transformers.AutoModelForSequenceClassification,
        BertForTokenClassification: transformers.AutoModelForTokenClassification,
        BertForQuestionAnswering: transformers.AutoModelForQuestionAnswering,
    }[head]
    hf_model = auto.from_pretrained(path, trust_remote_code=True).eval()
    assert type(hf_model).__name__ == interop.OWN_CLASSES[head].__name__
    if head is not BertForQuestionAnswering:
        assert [hf_model.config.id2label[i] for i in range(len(labels))] == list(labels)
    batch = padded_batch(path)
    with torch.no_grad():
        ours, theirs = model(**batch), hf_model(**batch)
    for name in ("start_logits", "end_logits") if head is BertForQuestionAnswering else ("logits",):
        assert (getattr(ours, name) - getattr(theirs, name)).abs().max() < 1e-4


def test_the_rotation_equals_hf_roformer_s():
    # an independent reference for the modeling file's rotary embeddings: RoFormer holds a Post-LN RoPE model at
    # base 10000, so bertlib's own class and RoFormer must give the same logits for the same weights
    torch.manual_seed(2)
    model = BertForPreTraining(small_config(position_embedding_type="rope")).eval()
    roformer = interop.to_transformers(model)
    own = modeling_bertlib.BertlibForMaskedLM(interop.to_hf_config(model.config, "BertlibForMaskedLM")).eval()
    own.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith(("bert.pooler", "nsp_head"))})
    batch = {
        k: v
        for k, v in make_batch(model.config, 3, 24).items()
        if k in ("input_ids", "attention_mask", "token_type_ids")
    }
    with torch.no_grad():
        assert (own(**batch).logits - roformer(**batch).logits).abs().max() < 1e-4


def test_models_that_hf_holds_keep_their_hf_classes(tmp_path):
    transformers.logging.set_verbosity_error()
    for overrides, expected in (
        (dict(), transformers.BertForMaskedLM),
        (dict(position_embedding_type="rope"), transformers.RoFormerForMaskedLM),
    ):
        model = BertForPreTraining(small_config(vocab_size=tokenizer_with_template().get_vocab_size(), **overrides))
        path = hf_folders.save_pretrained_hf(model, tokenizer_with_template(), tmp_path / expected.__name__)
        assert not (path / "modeling_bertlib.py").exists()
        assert "auto_map" not in json.loads((path / "config.json").read_text())
        assert type(transformers.AutoModelForMaskedLM.from_pretrained(path)) is expected
    assert (
        interop.hf_class(BertForTokenClassification(small_config(position_embedding_type="rope"), ("O", "X")))
        is transformers.RoFormerForTokenClassification
    )


# RoBERTa-PreLayerNorm's names for the parameters of a Pre-LN bertlib model (inside a layer, then outside)
_ROBERTA_LAYER = {
    "attention.query": "attention.self.query",
    "attention.key": "attention.self.key",
    "attention.value": "attention.self.value",
    "attention.output": "attention.output.dense",
    "attention_norm": "attention.LayerNorm",
    "feed_forward_norm": "intermediate.LayerNorm",
    "feed_forward.intermediate": "intermediate.dense",
    "feed_forward.output": "output.dense",
}
_ROBERTA_MODULES = {
    "bert.embeddings.layer_norm": "roberta_prelayernorm.embeddings.LayerNorm",
    "bert.encoder.final_norm": "roberta_prelayernorm.LayerNorm",
    "mlm_head.dense": "lm_head.dense",
    "mlm_head.layer_norm": "lm_head.layer_norm",
    "mlm_head": "lm_head",
}


def roberta_prelayernorm(model: BertForPreTraining) -> transformers.PreTrainedModel:
    """`transformers.RobertaPreLayerNormForMaskedLM` with a Pre-LN bertlib model's weights. RoBERTa numbers positions
    from pad_token_id + 1, so our position table moves down by that many rows."""
    config, pad = model.config, model.config.pad_token_id
    fields = {k: v for k, v in config.to_dict().items() if k in transformers.BertConfig().to_dict()}
    hf_model = transformers.RobertaPreLayerNormForMaskedLM(
        transformers.RobertaPreLayerNormConfig(
            **{**fields, "max_position_embeddings": config.max_position_embeddings + pad + 1}
        )
    )
    state = {
        interop._rename(
            key, "roberta_prelayernorm.encoder.layer.{}", _ROBERTA_LAYER, _ROBERTA_MODULES, "roberta_prelayernorm."
        ): value
        for key, value in model.state_dict().items()
        if not key.startswith(("bert.pooler.", "nsp_head."))
    }
    table = "roberta_prelayernorm.embeddings.position_embeddings.weight"
    state[table] = torch.cat([torch.zeros(pad + 1, config.hidden_size), state[table]])
    state["lm_head.decoder.weight"] = model.bert.embeddings.word_embeddings.weight
    state["lm_head.decoder.bias"] = model.mlm_head.bias
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    assert not missing and not unexpected
    return hf_model.eval()


def max_gap(model: BertForPreTraining, other: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> float:
    "The largest difference between `model`'s MLM logits and `other`'s at the real tokens of `inputs`."
    with torch.no_grad():
        ours, theirs = model(**inputs).prediction_logits, other(**inputs).logits
    return (ours - theirs)[inputs["attention_mask"].bool()].abs().max().item()


def test_roberta_prelayernorm_computes_another_function():
    # Same Pre-LN layers and final LayerNorm as ours, but positions counted over the non-[PAD] tokens from
    # pad_token_id + 1, and an MLM head that always uses GELU: it agrees with bertlib only on right-padded batches
    # of a GELU model, so bertlib exports Pre-LN with its own modeling file, which agrees everywhere.
    torch.manual_seed(3)
    gelu, relu = (BertForPreTraining(small_config(norm_style="pre", hidden_act=act)).eval() for act in ("gelu", "relu"))
    right = {
        k: v
        for k, v in make_batch(gelu.config, 3, 24).items()
        if k in ("input_ids", "attention_mask", "token_type_ids")
    }
    left = {k: v.flip(1) for k, v in right.items()}  # the same rows, padded on the left
    assert not right["attention_mask"].all()
    roberta, own = roberta_prelayernorm(gelu), interop.to_transformers(gelu)
    assert max_gap(gelu, roberta, right) < 1e-4 and max_gap(gelu, own, right) < 1e-4
    assert max_gap(gelu, roberta, left) > 1e-2 and max_gap(gelu, own, left) < 1e-4
    assert max_gap(relu, roberta_prelayernorm(relu), right) > 1e-2
    assert max_gap(relu, interop.to_transformers(relu), right) < 1e-4


def test_the_seed_snippet_runs_on_an_exported_modern_run_without_bertlib(
    tmp_path, tokenizer_file, task_data, monkeypatch, capsys, remote_code
):
    monkeypatch.setenv("BERTLIB_DATA_DIR", str(task_data))
    run, out = tmp_path / "modern", tmp_path / "hf"
    assert (
        main(
            [
                "pretrain",
                "--preset",
                "tiny",
                "--position-embedding-type",
                "rope",
                "--norm-style",
                "pre",
                "--objective",
                "mlm",
                "--mlm-probability",
                "0.3",
                "--batch-size",
                "8",
                "--max-seq-len",
                "64",
                "--eval-batches",
                "2",
                "--eval-every",
                "2",
                "--save-every",
                "2",
                "--max-steps",
                "2",
                "--tokenizer",
                str(tokenizer_file),
                "--output-dir",
                str(run),
            ]
        )
        == 0
    )
    assert main(["export-hf", str(run), str(out)]) == 0
    assert "trust_remote_code=True" in capsys.readouterr().out.splitlines()[-1]

    text = "the river flows into the [MASK] ."
    answer = tmp_path / "answer.json"  # the snippet runs offline, its modules cache in a session folder
    result = subprocess.run(
        [sys.executable, "-c", SEED_SNIPPET, str(out), text, str(answer)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    guesses = json.loads(answer.read_text())
    model, tokenizer = load_model(run)
    expected = fill_mask(model, tokenizer, text)[0]
    assert [g["token"] for g in guesses] == [tokenizer.token_to_id(token) for token, _ in expected]
    assert all(abs(g["score"] - p) < 1e-4 for g, (_, p) in zip(guesses, expected, strict=True))
