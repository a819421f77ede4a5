"""Runs survive what users do: interrupts, kills, NaNs, bad values and damaged files. Each test names the README
claim it backs (section "Runs that survive")."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import bertlib.train.checkpoints as checkpoints_module
import bertlib.train.runs as runs_module
from bertlib.cli.main import main
from bertlib.data.pretraining import PretrainingDataset
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.recipes.objectives import train
from bertlib.train.checkpoints import checkpoints, save_checkpoint
from bertlib.train.runs import NonFiniteLoss, RunError, read_metrics
from bertlib.train.settings import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--preset", "tiny", "--batch-size", "8", "--max-seq-len", "64", "--eval-batches", "1", "--num-workers", "0"]
LENGTH = ["--max-steps", "30", "--log-every", "1", "--eval-every", "30"]


@pytest.fixture(scope="module")
def tiny(tokenizer_file):
    return [*TINY, "--tokenizer", str(tokenizer_file)]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl") if "loss" in r]


def cli(*args: str) -> subprocess.Popen:
    "The command line in a process of its own, as a user would run it."
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "bertlib", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory):
    "An uninterrupted run: the losses every interrupted run must land on."
    run = tmp_path_factory.mktemp("straight") / "run"
    assert main(["pretrain", *tiny, *LENGTH, "--save-every", "2", "--output-dir", str(run)]) == 0
    return run


def test_claim_settings_are_checked_before_anything_is_written(tiny, tmp_path, capsys):
    "README: a bad value is a one-line error, and nothing is written."
    (tmp_path / "file").write_text("x")
    for args in (
        ["--device", "tpu9"],
        ["--num-workers", "-1"],
        ["--max-seq-len", "1000"],
        ["--lr", "inf"],
        ["--lr", "nan"],
        ["--max-grad-norm", "-1"],
        ["--max-grad-norm", "0"],
        ["--weight-decay", "-1"],
        *([["--device", "cuda"]] if not torch.cuda.is_available() else []),
    ):
        assert main(["pretrain", *tiny, "--max-steps", "2", *args, "--output-dir", str(tmp_path / "run")]) == 2
        one_line_error(capsys)
        assert not (tmp_path / "run").exists(), args
    assert main(["pretrain", *tiny, "--max-steps", "2", "--output-dir", str(tmp_path / "file")]) == 2
    assert "is a file" in one_line_error(capsys)


def stop_once(run: Path, signum: int, *args: str) -> int:
    """Run the CLI with `args`, send it one `signum` once it has logged a step of its own, and return the step its
    checkpoint was taken at, checking the way it said so."""
    before = len(losses(run)) if run.exists() else 0
    process = cli(*args)
    while len(losses(run)) <= before and process.poll() is None:  # wait for a logged step of this process
        time.sleep(0.05)
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, err
    last = err.strip().splitlines()[-1]  # above it, only the progress bar
    assert last.startswith(f"stopped by {signal.Signals(signum).name}") and "checkpoint saved" in last
    assert "Traceback" not in err
    return int(last.split("at step ")[1].split(":")[0])


@pytest.mark.slow
def test_claim_ctrl_c_saves_a_checkpoint_and_resume_retraces_the_run(tiny, straight, tmp_path):
    """README: Ctrl-C (or SIGTERM) writes a checkpoint at the current step and exits with 130 (143); one signal is
    enough for a resumed run too, and the run, resumed, retraces the unbroken one."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        run = tmp_path / signal.Signals(signum).name
        stopped_at = stop_once(run, signum, "pretrain", *tiny, *LENGTH, "--save-every", "100", "--output-dir", str(run))
        assert [c.name for c in checkpoints(run)] == [f"step-{stopped_at:07d}"]
        again = stop_once(run, signum, "pretrain", "--output-dir", str(run), "--resume")
        assert again > stopped_at and checkpoints(run)[-1].name == f"step-{again:07d}"
        assert main(["pretrain", "--output-dir", str(run), "--resume"]) == 0
        assert losses(run) == losses(straight)


@pytest.mark.slow
def test_claim_kill_9_at_any_moment_leaves_a_run_that_resumes_exactly(tiny, straight, tmp_path):
    "README: a crash never leaves a broken run: kill -9 at random moments, then --resume, gives the same losses."
    run = tmp_path / "killed"
    rng = random.Random(0)
    first = ["pretrain", *tiny, *LENGTH, "--save-every", "2", "--output-dir", str(run)]

    def command() -> list[str]:  # a folder appears whole (config and tokenizer) or not at all
        return ["pretrain", "--output-dir", str(run), "--resume"] if run.exists() else first

    for _ in range(5):
        process = cli(*command())
        time.sleep(rng.uniform(3.0, 9.0))  # start-up takes a few seconds, a step a few hundredths
        process.kill()
        process.communicate()
        if process.returncode == 0:
            break
    assert main(command()) == 0
    assert losses(run) == losses(straight)


def test_claim_a_kill_while_old_checkpoints_are_deleted_leaves_no_broken_checkpoint(tmp_path, monkeypatch):
    "README: old checkpoints are removed so that a kill never leaves a listed, broken one."
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=50))
    for step in (1, 2):
        save_checkpoint(tmp_path, model, {"step": step}, step, keep=2)
    real_rmtree = shutil.rmtree

    def dying_rmtree(path, *args, **kwargs):  # deletes one file, then the process "dies"
        path = Path(path)
        if path.is_dir() and any(path.iterdir()):
            next(path.iterdir()).unlink()
            raise KeyboardInterrupt
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(checkpoints_module.shutil, "rmtree", dying_rmtree)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, model, {"step": 3}, 3, keep=2)
    monkeypatch.undo()
    assert [c.name for c in checkpoints(tmp_path)] == ["step-0000002", "step-0000003"]
    for checkpoint in checkpoints(tmp_path):
        checkpoints_module.load_checkpoint(checkpoint, model)  # every listed checkpoint is whole
    save_checkpoint(tmp_path, model, {"step": 4}, 4, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-0000003", "step-0000004"]


@pytest.fixture(scope="module")
def small(fast_tokenizer, corpus):
    return fast_tokenizer, corpus.documents()[:6]


def tiny_model(tokenizer) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(
        BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=64)
    )


def test_claim_a_non_finite_loss_stops_the_run_and_keeps_the_good_checkpoints(small, tmp_path):
    "README: NaN stops the run with a one-line error naming the step; no checkpoint of bad weights is written."
    tokenizer, documents = small
    dataset = PretrainingDataset(documents, tokenizer, 64, seed=0)
    good = TrainConfig(max_steps=2, batch_size=8, max_seq_len=64, save_every=1, log_every=1, device="cpu")
    train(tiny_model(tokenizer), dataset, good, run_dir=tmp_path, show_progress=False)
    before = {c.name: (c / "model.safetensors").read_bytes() for c in checkpoints(tmp_path)}

    def poison(entry):  # what a diverging step does to the weights
        if entry["step"] == 3:
            with torch.no_grad():
                model.nsp_head.weight.fill_(float("nan"))

    model = tiny_model(tokenizer)
    longer = TrainConfig(max_steps=5, batch_size=8, max_seq_len=64, save_every=1, log_every=1, device="cpu")
    with pytest.raises(NonFiniteLoss, match=r"not finite at step 3"):
        train(model, dataset, longer, run_dir=tmp_path, resume=True, on_log=poison, show_progress=False)
    assert {c.name: (c / "model.safetensors").read_bytes() for c in checkpoints(tmp_path)} == before


def test_claim_on_nan_skip_skips_bad_steps_and_goes_on(small):
    "README: `--on-nan skip` leaves the weights of a bad step untouched and trains on."
    tokenizer, documents = small
    dataset = PretrainingDataset(documents, tokenizer, 64, seed=0)
    cfg = TrainConfig(max_steps=4, batch_size=8, max_seq_len=64, log_every=1, device="cpu", on_nan="skip")
    model = tiny_model(tokenizer)
    with torch.no_grad():
        model.nsp_head.weight[0, 0] = float("nan")  # every step's loss is NaN
    records = train(model, dataset, cfg, show_progress=False)
    assert [r["step"] for r in records if "skipped" in r.get("event", "")] == [1, 2, 3, 4]


def test_claim_every_bad_input_is_one_line_and_exit_2(straight, tmp_path, capsys):
    "README: mistakes are one-line errors with exit code 2, and nothing is overwritten."
    run = tmp_path / "run"
    shutil.copytree(straight, run)
    cases = [
        ["evaluate", str(run), "--batch-size", "0"],
        ["evaluate", str(run), "--device", "bogus"],
        ["export-hf", str(run), str(run), "--overwrite"],
        ["export-hf", str(run), str(run / "config.json")],
        ["fill-mask", str(run), "caf\udce9 [MASK] ."],
    ]
    if not torch.cuda.is_available():
        cases.append(["evaluate", str(run), "--device", "cuda"])
    config = (run / "config.json").read_bytes()
    for args in cases:
        assert main(args) == 2, args
        one_line_error(capsys)
    assert (run / "config.json").read_bytes() == config  # the export into the run itself was refused

    broken = tmp_path / "list"
    shutil.copytree(run, broken)
    (broken / "config.json").write_text("[1, 2]")
    assert main(["info", str(broken)]) == 2
    assert "damaged" in one_line_error(capsys)

    damaged_metrics = tmp_path / "metrics"
    shutil.copytree(run, damaged_metrics)
    lines = (damaged_metrics / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    (damaged_metrics / "metrics.jsonl").write_bytes(b"".join(lines[:2] + [b'{"step": \xff}\n'] + lines[2:]))
    assert main(["info", str(damaged_metrics), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["last_train"]["step"] == 30


def test_claim_a_damaged_tensor_file_is_detected_and_weights_alone_suffice(straight, tmp_path, capsys):
    "README: each checkpoint file carries a checksum; commands that read weights need only the weights."
    run = tmp_path / "run"
    shutil.copytree(straight, run)
    newest = checkpoints(run)[-1]
    (newest / "training_state.pt").unlink()  # evaluation, fill-mask and export read only the weights
    assert main(["evaluate", str(run), "--json"]) == 0
    capsys.readouterr()
    weights = newest / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100:-50] = b"\x7f" * 50  # tensor bytes garbled, header intact
    weights.write_bytes(bytes(data))
    for args in (
        ["evaluate", str(run)],
        ["fill-mask", str(run), "a [MASK] ."],
        ["export-hf", str(run), str(tmp_path / "hf")],
        ["pretrain", "--output-dir", str(run), "--resume"],
    ):
        assert main(args) == 2, args
        assert "model.safetensors does not match its checksum" in one_line_error(capsys)
    with pytest.raises(RunError, match="checksum"):
        checkpoints_module.load_weights(newest, tiny_model_for(run))


def tiny_model_for(run: Path) -> BertForPreTraining:
    return BertForPreTraining(runs_module.load_run(run)[0])


def test_claim_resume_refuses_what_it_would_ignore_and_extending_is_announced(straight, tiny, tmp_path, capsys):
    "README: --resume refuses flags it would ignore; a longer run recomputes its schedule, and says so."
    run = tmp_path / "run"
    shutil.copytree(straight, run)
    for flags in (["--preset", "mini"], ["--vocab-size", "100"], ["--tokenizer", tiny[-1]]):
        assert main(["pretrain", "--output-dir", str(run), "--resume", *flags]) == 2
        assert flags[0] in one_line_error(capsys)
    assert main(["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "32"]) == 0
    assert "schedule is recomputed" in capsys.readouterr().err
    events = [r for r in read_metrics(run / "metrics.jsonl") if "event" in r]
    assert events and events[0]["step"] == 30 and "32 steps instead of 30" in events[0]["event"]


def test_claim_resume_retraces_logging_windows_that_straddle_a_checkpoint(small, tmp_path):
    "README: --resume retraces an uninterrupted run exactly, also when --log-every does not divide --save-every."
    tokenizer, documents = small
    cfg = TrainConfig(max_steps=9, batch_size=8, max_seq_len=64, log_every=3, save_every=4, device="cpu")

    def run(folder, **kwargs):
        return train(
            tiny_model(tokenizer),
            PretrainingDataset(documents, tokenizer, 64, seed=0),
            cfg,
            run_dir=folder,
            show_progress=False,
            **kwargs,
        )

    reference = [r["loss"] for r in run(tmp_path / "straight")]

    def crash_after_step_5(entry):
        if entry["step"] == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "crashed", on_log=crash_after_step_5)
    assert [c.name for c in checkpoints(tmp_path / "crashed")][-1] == "step-0000004"
    run(tmp_path / "crashed", resume=True)
    assert losses(tmp_path / "crashed") == reference


def test_a_tensor_two_modules_share_is_saved_once_and_loads_shared(tmp_path):
    "(ELECTRA's generator and discriminator share their embeddings: safetensors refuses shared memory.)"

    def tied() -> torch.nn.Module:
        model = torch.nn.ModuleDict({"embed": torch.nn.Embedding(7, 3), "decode": torch.nn.Linear(3, 7)})
        model["decode"].weight = model["embed"].weight
        return model

    torch.manual_seed(0)
    model = tied()
    folder = save_checkpoint(tmp_path, model, {"step": 1}, 1)
    torch.manual_seed(1)
    loaded = tied()
    checkpoints_module.load_weights(folder, loaded)
    assert loaded["decode"].weight is loaded["embed"].weight
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
