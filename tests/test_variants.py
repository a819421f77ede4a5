"""Every variant of issue 16 goes through the same command line as BERT: pre-train, resume, evaluate, fine-tune
and export (as bertlib's own class, loaded with `trust_remote_code=True`, where `transformers` has none); and rotary
positions score sequences longer than it was trained on with nothing untrained, where a position table has rows
that never learned."""

import json

import pytest
import torch
import transformers
from bert_testing import small_config

from bertlib.cli.main import main
from bertlib.model.bert import BertForPreTraining

VARIANTS = {  # switches on top of the tiny preset; the HF class its pre-training model loads as
    "rope": (["--position-embedding-type", "rope"], "RoFormerForMaskedLM"),
    "pre-ln": (["--norm-style", "pre"], "BertlibForMaskedLM"),
    "roberta": (["--objective", "mlm", "--mlm-probability", "0.3"], "BertForMaskedLM"),
    "albert": (["--embedding-size", "32", "--share-layers", "--pairing", "sop"], "AlbertForMaskedLM"),
    "modern": (
        ["--position-embedding-type", "rope", "--norm-style", "pre", "--objective", "mlm"],
        "BertlibForMaskedLM",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_variant_runs_through_the_command_line(
    variant, tmp_path, tokenizer_file, task_data, capsys, monkeypatch, remote_code
):
    monkeypatch.setenv("BERTLIB_DATA_DIR", str(task_data))
    switches, hf_class = VARIANTS[variant]
    run = tmp_path / variant
    options = [
        "--preset",
        "tiny",
        *switches,
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
        "--tokenizer",
        str(tokenizer_file),
        "--output-dir",
        str(run),
    ]
    assert main(["pretrain", *options, "--max-steps", "2"]) == 0
    assert main(["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "4"]) == 0
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()][-1] == 4
    assert main(["evaluate", str(run), "--json"]) == 0
    assert "mlm_perplexity" in json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (
        main(
            [
                "finetune",
                "rte",
                "--from",
                str(run),
                "--output-dir",
                str(tmp_path / "rte"),
                "--max-steps",
                "1",
                "--train-examples",
                "8",
                "--eval-examples",
                "8",
                "--batch-size",
                "8",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 0
    own = hf_class.startswith("Bertlib")  # bertlib's own class: its code is in the folder
    hf_model = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=own)
    assert type(hf_model).__name__ == hf_class and type(hf_model).__module__.startswith("transformers_modules.") == own


def test_training_at_one_length_leaves_the_table_rows_past_it_untrained():
    # why absolute positions do not generalise to longer inputs: rows past the training length never get a gradient,
    # while a rotary model has no position parameters at all, only a rule it applies at any offset
    model = BertForPreTraining(small_config())
    ids = torch.randint(5, 97, (2, 16))
    labels = torch.where(torch.rand(2, 16) < 0.3, ids, -100)
    labels[0, 0] = ids[0, 0]
    model(ids, labels=labels, next_sentence_label=torch.zeros(2, dtype=torch.long)).loss.backward()
    grad = model.bert.embeddings.position_embeddings.weight.grad
    assert grad[:16].abs().sum(-1).gt(0).all() and grad[16:].eq(0).all()
    rope = BertForPreTraining(small_config(position_embedding_type="rope"))
    assert not any("position" in name for name, _ in rope.named_parameters())
