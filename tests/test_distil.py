"""Distillation (issue 17): the student starts from the right teacher tensors, DistilBERT's loss equals a hand
computation (and its soft part is zero for a student identical to its teacher), and a whole run from the command
line, with its one-line refusals."""

import json
import math

import pytest
import torch
import transformers
from bert_testing import make_batch, small_config, spawn_group

from bertlib.cli.main import main
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining
from bertlib.recipes.distil import (
    Distillation,
    distil,
    distillation_losses,
    load_teacher,
    student_from_teacher,
    teacher_layers,
)
from bertlib.recipes.pretrain import pretrain
from bertlib.train.runs import RunError, create_run
from bertlib.train.settings import DistilConfig, FinetuneConfig, PretrainConfig


def test_the_student_takes_evenly_spread_layers():
    assert teacher_layers(12, 6) == [0, 2, 4, 7, 9, 11]  # DistilBERT's pick from BERT-base
    assert teacher_layers(4, 2) == [0, 3] and teacher_layers(4, 1) == [0] and teacher_layers(3, 3) == [0, 1, 2]
    with pytest.raises(ValueError, match="student_layers=5"):
        teacher_layers(4, 5)


def test_the_student_copies_the_right_teacher_tensors():
    torch.manual_seed(0)
    teacher = BertForPreTraining(small_config(num_hidden_layers=6))
    student = student_from_teacher(teacher)
    assert student.config.num_hidden_layers == 3 and student.config.hidden_size == teacher.config.hidden_size
    ours, theirs = student.state_dict(), teacher.state_dict()
    for j, i in enumerate([0, 2, 5]):
        for key in [k for k in ours if k.startswith(f"bert.encoder.layers.{j}.")]:
            assert torch.equal(ours[key], theirs[key.replace(f"layers.{j}.", f"layers.{i}.")]), key
    rest = [k for k in ours if not k.startswith("bert.encoder.layers.")]
    assert rest and all(torch.equal(ours[k], theirs[k]) for k in rest)  # embeddings, pooler, both heads
    assert (
        ours["bert.embeddings.word_embeddings.weight"].data_ptr()
        != theirs["bert.embeddings.word_embeddings.weight"].data_ptr()
    )  # copies: training the student leaves the teacher be
    with pytest.raises(ValueError, match="ALBERT"):
        student_from_teacher(BertForPreTraining(small_config(share_layers=True)))


@pytest.mark.parametrize("soft_targets", ["all", "masked"])
def test_the_loss_equals_a_hand_computation(soft_targets):
    torch.manual_seed(1)
    teacher = BertForPreTraining(small_config(num_hidden_layers=4)).eval()
    student = BertForPreTraining(small_config(num_hidden_layers=2)).eval()  # random: the parts are all non-zero
    batch = make_batch(teacher.config, 3, 10)
    t = 3.0
    soft, mlm, cos = distillation_losses(student, teacher, batch, t, soft_targets)
    selected, real = batch["labels"] != IGNORE_INDEX, batch["attention_mask"] == 1
    inputs = dict(token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"])
    with torch.no_grad():
        s_out = student(batch["input_ids"], **inputs, output_hidden_states=True)
        t_out = teacher(batch["input_ids"], **inputs, output_hidden_states=True)
        own_mlm = student(batch["input_ids"], **inputs, labels=batch["labels"]).mlm_loss  # BERT's sparse MLM path
    rows = real if soft_targets == "all" else selected
    s_logits, t_logits = s_out.prediction_logits[rows], t_out.prediction_logits[rows]
    p_t = (t_logits / t).softmax(-1)
    kl = (p_t * (p_t.log() - (s_logits / t).log_softmax(-1))).sum(-1).mean()  # KL(teacher || student) per row
    s_h, t_h = s_out.hidden_states[-1][real], t_out.hidden_states[-1][real]
    cosine = ((s_h * t_h).sum(-1) / (s_h.norm(dim=-1) * t_h.norm(dim=-1))).mean()
    assert soft.item() == pytest.approx(t**2 * kl.item(), rel=1e-4)
    assert mlm.item() == pytest.approx(own_mlm.item(), rel=1e-5)
    assert cos.item() == pytest.approx(1 - cosine.item(), rel=1e-4)
    objective = Distillation(
        teacher,
        DistilConfig(
            max_steps=1,
            teacher="t",
            temperature=t,
            soft_targets=soft_targets,
            alpha_ce=5.0,
            alpha_mlm=2.0,
            alpha_cos=1.0,
        ),
    )
    weighted = objective.losses(student, batch)
    assert [w.item() for w in weighted] == pytest.approx([5 * soft.item(), 2 * mlm.item(), cos.item()], rel=1e-5)
    assert objective.counts(batch) == (int(rows.sum()), int(selected.sum()), int(real.sum()))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0, 7.0])
def test_the_soft_loss_is_zero_for_a_student_identical_to_its_teacher(temperature):
    torch.manual_seed(2)
    teacher = BertForPreTraining(small_config()).eval()
    student = student_from_teacher(teacher, teacher.config.num_hidden_layers).eval()
    batch = make_batch(teacher.config, 3, 10)
    for soft_targets in ("all", "masked"):
        soft, _, cos = distillation_losses(student, teacher, batch, temperature, soft_targets)
        assert abs(soft.item()) < 1e-5 and abs(cos.item()) < 1e-5


def test_a_teacher_must_be_a_bert_pre_training_run(tmp_path, fast_tokenizer):
    config = small_config(vocab_size=fast_tokenizer.get_vocab_size())
    for name, cfg, message in (
        ("task", FinetuneConfig(task="rte", source="x"), "fine-tuning run"),
        ("electra", PretrainConfig(max_steps=1, objective="electra"), "ELECTRA run"),
    ):
        create_run(tmp_path / name, config, cfg, fast_tokenizer)
        with pytest.raises(RunError, match=message):
            load_teacher(tmp_path / name)
    with pytest.raises(RunError, match="no run folder"):
        load_teacher(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="temperature"):
        DistilConfig(max_steps=1, temperature=0.0)
    with pytest.raises(ValueError, match="soft_targets"):
        DistilConfig(max_steps=1, soft_targets="some")
    with pytest.raises(ValueError, match="all 0"):
        DistilConfig(max_steps=1, alpha_ce=0, alpha_mlm=0, alpha_cos=0)


def _distil(rank: int, teacher: str, out: str) -> None:
    distil(
        out,
        DistilConfig(
            teacher=teacher, max_steps=2, batch_size=8, max_seq_len=32, eval_every=2, eval_batches=1, device="cpu"
        ),
        show_progress=False,
    )


@pytest.mark.slow
def test_two_processes_distil(tmp_path, fast_tokenizer):
    "DistributedDataParallel needs a gradient for every trainable parameter: the student's NSP head is frozen."
    teacher = tmp_path / "teacher"
    model_config = small_config(vocab_size=fast_tokenizer.get_vocab_size(), num_hidden_layers=2)
    pretrain(
        teacher,
        model_config,
        PretrainConfig(max_steps=1, batch_size=8, max_seq_len=32, eval_batches=1, device="cpu"),
        tokenizer=fast_tokenizer,
        show_progress=False,
    )
    spawn_group(_distil, str(teacher), str(tmp_path / "student"))
    assert json.loads((tmp_path / "student" / "config.json").read_text())["model"]["num_hidden_layers"] == 1


def test_a_distillation_run_through_the_command_line(tmp_path, tokenizer_file, capsys):
    teacher, student = tmp_path / "teacher", tmp_path / "student"
    options = [
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
    ]
    assert (
        main(
            [
                "pretrain",
                "--preset",
                "tiny",
                "--num-hidden-layers",
                "4",
                *options,
                "--max-steps",
                "2",
                "--tokenizer",
                str(tokenizer_file),
                "--output-dir",
                str(teacher),
            ]
        )
        == 0
    )
    assert main(["distil", "--output-dir", str(student), *options, "--max-steps", "2"]) == 2
    assert "--teacher" in capsys.readouterr().err
    assert main(["distil", "--teacher", str(tmp_path / "nowhere"), "--output-dir", str(student)]) == 2
    assert (
        main(
            [
                "distil",
                "--teacher",
                str(teacher),
                "--output-dir",
                str(student),
                *options,
                "--max-steps",
                "2",
                "--temperature",
                "3",
            ]
        )
        == 0
    )
    assert "validation at step 2" in capsys.readouterr().out
    assert main(["distil", "--teacher", str(tmp_path), "--output-dir", str(student), "--resume"]) == 2
    assert main(["pretrain", "--output-dir", str(student), "--resume"]) == 2
    assert "python -m bertlib distil" in capsys.readouterr().err
    assert main(["distil", "--output-dir", str(student), "--resume", "--max-steps", "4"]) == 0
    saved = json.loads((student / "config.json").read_text())
    assert saved["recipe"] == "distil" and saved["model"]["num_hidden_layers"] == 2
    assert (saved["training"]["teacher"], saved["training"]["temperature"]) == (str(teacher), 3.0)
    train = [json.loads(line) for line in (student / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in train if "loss" in r]
    assert steps and all(
        math.isclose(r["loss"], r["weighted_soft_loss"] + r["weighted_mlm_loss"] + r["weighted_cos_loss"], rel_tol=1e-6)
        for r in steps
    )
    capsys.readouterr()
    assert main(["evaluate", str(student), "--json"]) == 0
    assert "mlm_perplexity" in json.loads(capsys.readouterr().out.splitlines()[-1])
    assert main(["export-hf", str(student), str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf")
    assert type(hf) is transformers.BertForMaskedLM and hf.config.num_hidden_layers == 2
