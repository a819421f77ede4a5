"""Every surface holds against a hostile user: fine-tuning, predict, distil and export, two writers, broken models,
bad paths and a shared CPU (issue 28). Each test names the README claim it backs (section "Runs that survive")."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import transformers

import bertlib.utils.devices as devices_module
from bertlib.cli.main import main
from bertlib.model.config import BertConfig
from bertlib.recipes.finetune import SELECTION_METRIC, _keep_best, finetune
from bertlib.tasks.examples import SquadExample
from bertlib.tasks.features import squad_windows
from bertlib.train.checkpoints import best_checkpoint, best_validation, checkpoints, save_checkpoint
from bertlib.train.factory import build_model
from bertlib.train.lifecycle import lock_path
from bertlib.train.runs import create_run, load_run, read_metrics
from bertlib.train.settings import FinetuneConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--preset", "tiny", "--batch-size", "8", "--max-seq-len", "64", "--eval-batches", "1", "--num-workers", "0"]


def one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


def cli(*args: str, cwd: Path | None = None) -> subprocess.Popen:
    "The command line in a process of its own, as a user would run it."
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "bertlib", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def tiny(tokenizer_file):
    return [*TINY, "--tokenizer", str(tokenizer_file)]


@pytest.fixture(scope="module")
def pretrained(tiny, tmp_path_factory):
    "A pre-training run of 4 steps (checkpoints at 2 and 4): the encoder, teacher and export source below."
    run = tmp_path_factory.mktemp("pretrained") / "run"
    assert (
        main(
            ["pretrain", *tiny, "--max-steps", "4", "--save-every", "2", "--eval-every", "4", "--output-dir", str(run)]
        )
        == 0
    )
    return run


@pytest.fixture(scope="module")
def finetuned(pretrained, task_data, tmp_path_factory):
    "SST-2 fine-tuned from `pretrained` for 2 epochs of 2 steps, validated and saved after each."
    run = tmp_path_factory.mktemp("finetuned") / "run"
    assert (
        main(
            [
                "finetune",
                "sst2",
                "--from",
                str(pretrained),
                "--data-dir",
                str(task_data),
                "--train-examples",
                "16",
                "--eval-examples",
                "8",
                "--batch-size",
                "8",
                "--epochs",
                "2",
                "--output-dir",
                str(run),
            ]
        )
        == 0
    )
    return run


def task_run(folder: Path, task: str, tokenizer, max_seq_len: int = 64, poison: bool = False) -> Path:
    "A fine-tuning run folder of `task` with a random head, as training leaves it (best/ included), made at once."
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=128)
    cfg = FinetuneConfig(task=task, source="nowhere", max_steps=1, max_seq_len=max_seq_len, doc_stride=32, device="cpu")
    torch.manual_seed(0)
    model = build_model(config, cfg)
    if poison:  # what --lr 1e30 with --on-nan skip leaves
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
    create_run(folder, config, cfg, tokenizer)
    save_checkpoint(folder, model, {"step": 1}, 1)
    save_checkpoint(folder / "best", model, {"step": 1, "scores": {"step": 1, SELECTION_METRIC[task]: 0.5}}, 1)
    return folder


def copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


# ------------------------------------------------------------------------------------------- one writer at a time
@pytest.fixture
def processes():
    "Processes a test starts, killed at its end whatever happened."
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.slow
def test_claim_a_run_folder_has_one_writer_at_a_time(tiny, tmp_path, processes):
    "README: a second writer of a run folder gets one line and exit 2; a killed writer's lock is taken over, said."
    run = tmp_path / "run"
    long = ["--max-steps", "100000", "--log-every", "1", "--save-every", "5", "--eval-every", "100000"]
    first = cli("pretrain", *tiny, *long, "--output-dir", str(run))
    processes.append(first)
    while not checkpoints(run) and first.poll() is None:  # training, with a checkpoint to resume from
        time.sleep(0.1)
    for args in (
        ["pretrain", "--output-dir", str(run), "--resume"],
        ["pretrain", *tiny, "--output-dir", str(run)],
        ["finetune", "sst2", "--from", str(run), "--output-dir", str(run)],
    ):
        second = cli(*args)
        processes.append(second)
        _, err = second.communicate(timeout=300)
        assert second.returncode == 2, (args, err)
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert f"being written by another process (pid {first.pid})" in err
    first.kill()  # kill -9: the system drops the lock, the file still names the dead process
    first.communicate()
    assert lock_path(run).read_text().strip() == str(first.pid)
    step = int(checkpoints(run)[-1].name.removeprefix("step-"))
    third = cli("pretrain", "--output-dir", str(run), "--resume", "--max-steps", str(step + 1))
    processes.append(third)
    _, err = third.communicate(timeout=300)
    assert third.returncode == 0, err
    assert f"took over the lock of {run} from process {first.pid}" in err
    assert not lock_path(run).exists() and [p.name for p in tmp_path.iterdir()] == ["run"]

    # two new runs started at once: one trains, the other is told why not, and nothing is left behind
    both = [cli("pretrain", *tiny, *long, "--output-dir", str(tmp_path / "dup")) for _ in range(2)]
    processes += both
    while not checkpoints(tmp_path / "dup") and any(p.poll() is None for p in both):
        time.sleep(0.1)
    [loser] = [p for p in both if p.poll() is not None]
    [winner] = [p for p in both if p is not loser]
    winner.kill()
    winner.communicate()
    err = loser.communicate()[1]
    assert loser.returncode == 2 and err.count("\n") == 1 and f"(pid {winner.pid})" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".dup.lock", "dup", "run"]  # the killed winner's lock


# --------------------------------------------------------------------------------------------------- resume length
def test_claim_resume_refuses_a_length_that_ends_before_the_newest_checkpoint(pretrained, finetuned, tmp_path, capsys):
    "README: --resume with --max-steps (or --epochs) that would end before the newest checkpoint is refused."
    for run, args in (
        (copy(pretrained, tmp_path / "p"), ["pretrain", "--max-steps", "3"]),
        (copy(finetuned, tmp_path / "f"), ["finetune", "sst2", "--epochs", "1"]),
    ):
        config = (run / "config.json").read_bytes()
        assert main([*args, "--output-dir", str(run), "--resume"]) == 2
        assert "is at step 4, past the end of a run of" in one_line_error(capsys)
        assert (run / "config.json").read_bytes() == config


# --------------------------------------------------------------------------------------------------------- best/
def test_claim_best_is_what_the_summary_says_and_is_never_replaced_silently(finetuned, task_data, tmp_path, capsys):
    "README: a missing or damaged best/ is refused with the way out (--newest, said); resume keeps the best score."
    run = copy(finetuned, tmp_path / "run")
    for broken in ("missing", "incomplete"):
        if broken == "missing":
            shutil.rmtree(run / "best")
        else:
            shutil.copytree(finetuned / "best", run / "best")
            (best_checkpoint(run) / "checksums.json").unlink()
        for args in (["predict", str(run), "a fine film"], ["export-hf", str(run), str(tmp_path / f"hf-{broken}")]):
            assert main(args) == 2
            assert "--newest" in one_line_error(capsys)
        assert main(["predict", str(run), "a fine film", "--newest"]) == 0
        assert f"using {checkpoints(run)[-1]} (--newest)" in capsys.readouterr().err
    assert main(["info", str(run)]) == 0
    assert "best/       missing" in capsys.readouterr().out

    # resuming without best/: the lost best score stays the one to beat, and the summary reads best/ itself
    lost = max(r["accuracy"] for r in read_metrics(run / "metrics.jsonl") if r.get("split") == "validation")
    shutil.rmtree(run / "best")
    assert (
        main(["finetune", "sst2", "--output-dir", str(run), "--resume", "--epochs", "4", "--data-dir", str(task_data)])
        == 0
    )
    captured = capsys.readouterr()
    assert f"best is missing: only a validation above its accuracy of {lost:.4f} will fill it again" in captured.err
    kept = best_validation(run)
    if kept is None:
        assert "best is missing: no validation since it was lost beat it" in captured.err
    else:
        assert kept["scores"]["accuracy"] > lost
        assert f"best validation accuracy {kept['scores']['accuracy']:.4f} at step {kept['step']}" in captured.out


def test_a_resumed_run_without_best_replaces_it_only_with_a_better_validation(tmp_path, fast_tokenizer):
    run = task_run(tmp_path / "run", "sst2", fast_tokenizer)
    shutil.rmtree(run / "best")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "split": "validation", "accuracy": 0.75}) + "\n")
    events = []
    model = build_model(*list(load_run(run))[:2])
    log = _keep_best(run, model, "accuracy", events.append)
    assert "above its accuracy of 0.7500" in events[0]["event"]
    log({"step": 2, "split": "validation", "accuracy": 0.7})
    assert best_checkpoint(run) is None
    log({"step": 3, "split": "validation", "accuracy": 0.8})
    assert best_validation(run)["step"] == 3


# -------------------------------------------------------------------------------------------------------- export
def test_claim_export_never_writes_into_a_run_folder(finetuned, pretrained, tmp_path, capsys):
    "README: export-hf refuses to write into any bertlib run folder (or inside one), the source or another."
    other = copy(pretrained, tmp_path / "other")
    files = {name: (other / name).read_bytes() for name in ("config.json", "tokenizer.json")}
    for target in (other, other / "hf", finetuned, finetuned / "best"):
        assert main(["export-hf", str(finetuned), str(target), "--overwrite"]) == 2
        assert "bertlib run folder" in one_line_error(capsys)
    assert {name: (other / name).read_bytes() for name in files} == files
    assert main(["export-hf", str(finetuned), str(tmp_path / "hf")]) == 0


def test_claim_the_export_cuts_long_text_where_predict_does(tmp_path, fast_tokenizer, capsys):
    "README: the export's tokenizer says the length the run was fine-tuned at, so a pipeline and predict agree."
    run = task_run(tmp_path / "run", "sst2", fast_tokenizer, max_seq_len=32)
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 0
    capsys.readouterr()
    saved = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert saved["model_max_length"] == 32
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"))
    long = " ".join(["a gorgeous , witty , seductive movie that never lets its audience down ."] * 8)
    assert len(fast_tokenizer.encode(long).ids) > 100
    for text in (long, "a fine film"):
        assert main(["predict", str(run), text, "--json"]) == 0
        ours = json.loads(capsys.readouterr().out)["probabilities"]
        theirs = {r["label"]: r["score"] for r in pipe(text, top_k=None, truncation=True)}
        assert theirs == pytest.approx(ours, abs=1e-5)


# ------------------------------------------------------------------------------------------------------- predict
@pytest.fixture(scope="module")
def task_runs(fast_tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    return {task: task_run(folder / task, task, fast_tokenizer) for task in ("sst2", "rte", "conll2003", "squad")}


def test_claim_predict_refuses_bad_text_in_one_line_for_every_task(task_runs, capsys):
    "README: text not in UTF-8, empty or blank text or paragraph, a missing or extra text: one line, exit 2."
    needs = {"sst2": [], "conll2003": [], "rte": ["--pair", "it is"], "squad": ["--question", "who is it ?"]}
    for task, run in task_runs.items():
        for text in ("caf\udce9 au lait", "", "   \t"):
            assert main(["predict", str(run), text, *needs[task]]) == 2, (task, text)
            one_line_error(capsys)
        if needs[task]:  # the second input: not UTF-8, blank, or left out
            for value in ("caf\udce9", " "):
                assert main(["predict", str(run), "a text", needs[task][0], value]) == 2, (task, value)
                one_line_error(capsys)
            assert main(["predict", str(run), "a text"]) == 2
            assert f"give {needs[task][0]} too" in one_line_error(capsys)
        for extra in (["--pair", "b"], ["--question", "q ?"]):  # an input the task does not read
            if extra[0] not in needs[task]:
                assert main(["predict", str(run), "a text", *needs[task], *extra]) == 2, (task, extra)
                assert f"leave out {extra[0]}" in one_line_error(capsys)
        assert main(["predict", str(run), "Peter lives in Brussels .", *needs[task]]) == 0
        capsys.readouterr()


# --------------------------------------------------------------------------------------------------------- --from
def test_claim_bad_from_paths_are_one_line(pretrained, tokenizer_file, tmp_path, capsys):
    "README: --from a file or one checkpoint folder is a one-line error naming what to give instead."
    for source, message in (
        (tokenizer_file, "is a file"),
        (checkpoints(pretrained)[-1], f"give the run folder ({pretrained})"),
    ):
        assert main(["finetune", "sst2", "--from", str(source), "--output-dir", str(tmp_path / "run")]) == 2
        assert message in one_line_error(capsys)
        assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------- absolute references
def test_claim_a_fine_tuning_run_finds_its_source_from_any_folder(pretrained, task_data, tmp_path, monkeypatch):
    "README: runs record where their source is as an absolute path, so --resume works from any working directory."
    for folder in ("a", "b/deeper"):
        (tmp_path / folder).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a")
    cfg = FinetuneConfig(
        task="sst2",
        source=os.path.relpath(pretrained),
        train_examples=8,
        eval_examples=8,
        max_steps=2,
        epochs=None,
        batch_size=8,
        log_every=1,
        device="cpu",
    )

    def stop_before_the_first_checkpoint(entry):
        if entry.get("step") == 1 and "loss" in entry:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune("run", cfg, data_dir=task_data, on_log=stop_before_the_first_checkpoint, show_progress=False)
    assert load_run(tmp_path / "a" / "run")[1].source == str(pretrained.resolve())
    assert not checkpoints(tmp_path / "a" / "run")
    monkeypatch.chdir(tmp_path / "b" / "deeper")  # the encoder is loaded again, from the recorded path
    records = finetune(tmp_path / "a" / "run", data_dir=task_data, resume=True, show_progress=False)
    assert records[-1]["step"] == 2


@pytest.mark.slow
def test_claim_a_distilled_run_finds_its_teacher_from_any_folder(pretrained, tmp_path, monkeypatch, capsys):
    "README: a student records its teacher's absolute path; a moved teacher is named anew with --teacher on resume."
    teacher = copy(pretrained, tmp_path / "teacher")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    options = ["--batch-size", "8", "--max-seq-len", "64", "--eval-batches", "1", "--save-every", "1"]
    monkeypatch.chdir(tmp_path / "a")
    assert main(["distil", "--teacher", "../teacher", "--output-dir", "student", *options, "--max-steps", "1"]) == 0
    student = tmp_path / "a" / "student"
    assert load_run(student)[1].teacher == str(teacher.resolve())
    monkeypatch.chdir(tmp_path / "b")
    assert main(["distil", "--output-dir", str(student), "--resume", "--max-steps", "2"]) == 0
    capsys.readouterr()
    moved = tmp_path / "moved"
    teacher.rename(moved)
    assert main(["distil", "--output-dir", str(student), "--resume", "--max-steps", "3"]) == 2
    assert "if it moved, say where it is now with --teacher" in one_line_error(capsys)
    assert main(["distil", "--output-dir", str(student), "--resume", "--max-steps", "3", "--teacher", "../moved"]) == 0
    assert load_run(student)[1].teacher == str(moved.resolve())
    assert "the run's length changes from 2 steps to 3 steps" in capsys.readouterr().err  # said once it is allowed
    assert main(["distil", "--output-dir", str(student), "--resume", "--teacher", str(pretrained)]) == 2
    assert "teacher differ" in one_line_error(capsys)  # the recorded teacher is still there: no switching


# ------------------------------------------------------------------------------------------------- broken models
def test_claim_a_broken_model_is_not_reported_as_fine(pretrained, task_data, tmp_path, fast_tokenizer, capsys):
    "README: a run whose outputs are not finite stops with one line; --json output is always valid JSON."
    assert (
        main(
            [
                "finetune",
                "sst2",
                "--from",
                str(pretrained),
                "--data-dir",
                str(task_data),
                "--lr",
                "1e30",
                "--on-nan",
                "skip",
                "--train-examples",
                "16",
                "--eval-examples",
                "8",
                "--batch-size",
                "4",
                "--max-steps",
                "6",
                "--eval-every",
                "3",
                "--output-dir",
                str(tmp_path / "skip"),
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    assert "outputs are not finite" in captured.err and "best validation" not in captured.out
    assert best_checkpoint(tmp_path / "skip") is None

    broken = task_run(tmp_path / "broken", "sst2", fast_tokenizer, poison=True)
    assert main(["predict", str(broken), "a fine film", "--json"]) == 2
    assert "outputs are not finite" in one_line_error(capsys)
    with open(broken / "metrics.jsonl", "a") as f:
        f.write('{"step": 1, "loss": NaN, "grad_norm": Infinity}\n')
    assert main(["info", str(broken), "--json"]) == 0

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    assert json.loads(capsys.readouterr().out, parse_constant=refuse)["last_train"]["loss"] is None


# ---------------------------------------------------------------------------------------------- smaller defects
def test_claim_settings_that_cannot_work_are_refused_before_anything_is_written(tiny, tmp_path, capsys):
    "README: fine-tuning lengths too short for the task, ELECTRA variants that HF ELECTRA lacks."
    for args in (
        ["finetune", "sst2", "--from", "x", "--max-seq-len", "2"],
        ["finetune", "rte", "--from", "x", "--max-seq-len", "4"],
        *[
            ["pretrain", *tiny, "--objective", "electra", "--max-steps", "1", *variant]
            for variant in (["--position-embedding-type", "rope"], ["--share-layers"], ["--pairing", "sop"])
        ],
    ):
        assert main([*args, "--output-dir", str(tmp_path / "run")]) == 2, args
        one_line_error(capsys)
        assert not (tmp_path / "run").exists()


def test_claim_a_stride_longer_than_a_window_skips_no_text(fast_tokenizer):
    "README: a SQuAD --doc-stride longer than a window starts each window where the one before ends."
    context = " ".join(f"word{i}" for i in range(300))
    example = SquadExample("q", "t", context, "which word ?", ())
    pieces = len(fast_tokenizer.encode(context, add_special_tokens=False).ids)
    items, meta = squad_windows(example, fast_tokenizer, max_seq_len=32, doc_stride=500)
    covered = [offsets for window in meta for offsets in window["offsets"] if offsets is not None]
    assert len(items) > 1 and len(covered) == pieces and covered == sorted(set(covered))  # each piece once, in order


def test_claim_messages_name_the_real_problem(finetuned, tmp_path, monkeypatch, capsys):
    "README: each mistake gets a one-line error about that mistake."
    monkeypatch.chdir(tmp_path)
    Path("file").write_text("x")
    for args, message in (
        (["finetune", "rte", "--output-dir", str(finetuned), "--resume"], "which fine-tunes sst2, not rte"),
        (["predict", "nowhere", "a film"], "`finetune`"),
        (["finetune", "sst2", "--from", "x", "--output-dir", "file"], "is a file"),
        (["finetune", "sst2", "--from", "x", "--output-dir", "file/run"], "is not a folder"),
        (["finetune", "sst2", "--from", "x", "--output-dir", "/proc/nope"], "cannot write the run folder"),
        (["finetune", "sst2", "--from", "x", "--output-dir", ""], "--output-dir is empty"),
    ):
        assert main(args) == 2, args
        assert message in one_line_error(capsys), args
    assert main(["finetune", "rte", "--output-dir", str(finetuned), "--resume"]) == 2
    assert "--from" not in one_line_error(capsys)  # none was given
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_claim_info_and_help_describe_a_fine_tuning_run(finetuned, capsys):
    "README: info shows a fine-tuning run's task, source and best/; export-hf's help says it exports best/."
    assert main(["info", str(finetuned)]) == 0
    out = capsys.readouterr().out
    best = best_validation(finetuned)
    assert "task        sst2, from " + str(load_run(finetuned)[1].source) in out
    assert f"best/       step {best['step']}, accuracy {best['scores']['accuracy']:.4g}" in out
    with pytest.raises(SystemExit):
        main(["export-hf", "--help"])
    assert "best validation" in capsys.readouterr().out


SLOW_STEP = """
import hashlib
import signal
import time
from bertlib.utils.processes import stop_signals
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a background job inherits SIGINT ignored
start = time.perf_counter()
hashlib.pbkdf2_hmac("sha256", b"k", b"s", 100_000)
rounds = int(100_000 * 3 / (time.perf_counter() - start))  # about 3 s on any CPU (a fixed count took 0.5 s)
try:
    with stop_signals() as received:
        print("ready", flush=True)
        hashlib.pbkdf2_hmac("sha256", b"k", b"s", rounds)  # one long C call: Python's handlers wait for its end
        print("asked to stop", received, flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_claim_two_ctrl_c_during_one_slow_step_exit_at_once():
    "README: a second Ctrl-C exits at once, also when both come during one step that Python cannot interrupt."
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_STEP],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    assert process.communicate(timeout=120)[0].strip() == "interrupted"


# ------------------------------------------------------------------------------------------------- CPU threads
def test_claim_training_uses_the_idle_cpus_unless_told_and_keeps_the_count(tiny, tmp_path, monkeypatch, capsys):
    "README: the thread count follows the CPUs idle at the start (said), --threads decides, and a resume keeps it."
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(devices_module, "idle_cpus", lambda: 0.6)  # another process keeps a core and more busy
        assert devices_module.cpu_threads() == (1, 0.6)
        assert devices_module.cpu_threads(3) == (3, None)
        run = tmp_path / "run"
        assert main(["pretrain", *tiny, "--max-steps", "1", "--output-dir", str(run)]) == 0
        assert "training with 1 CPU thread(s): 0.6 of" in capsys.readouterr().err
        assert load_run(run)[1].threads == 1 and torch.get_num_threads() == 1

        monkeypatch.setattr(devices_module, "idle_cpus", lambda: float(devices_module.TORCH_THREADS))
        assert main(["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "2"]) == 0
        assert load_run(run)[1].threads == 1  # the run's own count: it resumes bit for bit
        assert "CPU thread" not in capsys.readouterr().err  # nothing to advise: more threads would round otherwise

        monkeypatch.setattr(devices_module, "idle_cpus", lambda: 0.2)
        assert main(["pretrain", *tiny, "--max-steps", "1", "--threads", "2", "--output-dir", str(tmp_path / "b")]) == 0
        assert "CPU thread" not in capsys.readouterr().err and load_run(tmp_path / "b")[1].threads == 2
        assert main(["pretrain", "--output-dir", str(tmp_path / "b"), "--resume", "--max-steps", "2"]) == 0
        assert "--threads 1 would be faster" in capsys.readouterr().err
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's setting: nothing measured
        assert devices_module.cpu_threads() == (devices_module.TORCH_THREADS, None)
    finally:
        torch.set_num_threads(before)


def test_every_claim_of_runs_that_survive_names_a_test_that_exists():
    "The 'Runs that survive' page backs each claim with a test by name: each name is a test of tests/."
    page = (ROOT / "docs" / "runs-that-survive.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(test_\w+)`", page))
    defined = set(
        re.findall(
            r"^def (test_\w+)",
            "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").glob("test_*.py")),
            re.M,
        )
    )
    assert len(named) >= 15 and named <= defined, sorted(named - defined)
