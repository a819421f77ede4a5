"""Nothing lost, nothing false (issue 34): runs never nest, an export is replaced whole, a run learns from the data it
started with, an incomplete or rotated checkpoint is named or passed over rightly, a changed thread count and a slowed
run are said, a full disk is one line, and messages send the user the right way. Each test names the README claim it
backs (section "Runs that survive")."""

import errno
import io
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch
import transformers
from safetensors import SafetensorError

import bertlib.train.checkpoints as checkpoints_module
import bertlib.train.loop as loop_module
import bertlib.train.runs as runs_module
import bertlib.utils.devices as devices_module
from bertlib.cli.main import build_parser, main
from bertlib.evaluation.scores import evaluate_run
from bertlib.hf import folders as hf_folders
from bertlib.model.config import BertConfig
from bertlib.train.checkpoints import checkpoints, save_checkpoint
from bertlib.train.factory import build_model, load_model
from bertlib.train.lifecycle import lock_path
from bertlib.train.runs import RunError, create_run, load_run, read_metrics
from bertlib.train.settings import FinetuneConfig, PretrainConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--preset", "tiny", "--batch-size", "8", "--max-seq-len", "64", "--eval-batches", "1", "--num-workers", "0"]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def last_line_error(capsys) -> str:
    "The error a command ended with, after the lines it said on the way: one line, the last, and no traceback."
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:] and "Traceback" not in lines, lines
    return lines[-1]


@pytest.fixture(scope="module")
def tiny(tokenizer_file):
    return [*TINY, "--tokenizer", str(tokenizer_file)]


@pytest.fixture(scope="module")
def pretrained(tiny, tmp_path_factory):
    "A pre-training run of 4 steps with checkpoints at 2 and 4."
    run = tmp_path_factory.mktemp("pretrained") / "run"
    args = ["pretrain", *tiny, "--max-steps", "4", "--save-every", "2", "--eval-every", "4", "--output-dir", str(run)]
    assert main(args) == 0
    return run


def copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def made_run(folder: Path, tokenizer, cfg) -> Path:
    "A run folder of `cfg`'s recipe with fresh weights as its checkpoint 1, made at once (no training)."
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=128)
    torch.manual_seed(0)
    create_run(folder, config, cfg, tokenizer)
    save_checkpoint(folder, build_model(config, cfg), {"step": 1}, 1)
    return folder


# ---------------------------------------------------------------------------------------------- runs never nest
def test_claim_runs_never_nest(pretrained, tiny, task_data, tmp_path, capsys):
    "README: no command writes into a folder inside a run, nor a run into a folder that holds a run below it."
    run = copy(pretrained, tmp_path / "run")
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    nested = run / "checkpoints" / "step-0000030"  # a step the run has not reached yet
    for args in (
        ["finetune", "sst2", "--from", str(run), "--data-dir", str(task_data), "--max-steps", "1"],
        ["pretrain", *tiny, "--max-steps", "1"],
        ["distil", "--teacher", str(run), "--max-steps", "1"],
    ):
        assert main([*args, "--output-dir", str(nested)]) == 2, args
        assert f"is inside, the bertlib run folder {run.resolve()}" in one_line_error(capsys)
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before  # not even a lock file

    # a run that an older bertlib let in below another is neither replaced by the outer run nor by an export
    inner = copy(pretrained, nested)
    config = (inner / "config.json").read_bytes()
    assert main(["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "30", "--save-every", "2"]) == 2
    assert f"holds the bertlib run folder {inner.resolve()}" in one_line_error(capsys)
    assert (inner / "config.json").read_bytes() == config and not (run / "checkpoints" / "step-0000006").exists()
    export = tmp_path / "hf"
    assert main(["export-hf", str(pretrained), str(export)]) == 0
    shutil.move(inner, export / "inner")
    capsys.readouterr()
    assert main(["export-hf", str(pretrained), str(export), "--overwrite"]) == 2
    assert f"holds the bertlib run folder {(export / 'inner').resolve()}" in one_line_error(capsys)
    assert (export / "inner" / "config.json").read_bytes() == config


# --------------------------------------------------------------------------------------- an export is replaced whole
KILLER = """
import os, signal, sys
import shutil, transformers
import torch
from bertlib.data.tokenizer import load_tokenizer
from bertlib.hf import folders
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig

tokenizer_file, out, point = sys.argv[1:]
tokenizer = load_tokenizer(tokenizer_file)
torch.manual_seed(2)
model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size()))


def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


calls = {"replace": 0}
replace = os.replace


def replace_then_die(a, b):  # the second rename: between two files moved in, or between two folders renamed
    calls["replace"] += 1
    if calls["replace"] == 2:
        die()
    replace(a, b)


if point == "writing":
    transformers.PreTrainedTokenizerFast.save_pretrained = die
elif point == "renaming":
    os.replace = replace_then_die
elif point == "cannot swap":
    folders._exchange = lambda a, b: False
    os.replace = replace_then_die
elif point == "cleaning up":
    shutil.rmtree = die
folders.save_pretrained_hf(model, tokenizer, out)
"""


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else {}


def test_claim_an_export_is_replaced_whole(tokenizer_file, fast_tokenizer, tmp_path):
    "README: export-hf --overwrite builds the new export beside the old one and swaps: a kill leaves one of them."
    from bertlib.model.bert import BertForPreTraining

    models = {}
    for seed in (1, 2):
        torch.manual_seed(seed)
        models[seed] = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=fast_tokenizer.get_vocab_size()))
    hf_folders.save_pretrained_hf(models[2], fast_tokenizer, tmp_path / "reference")
    new = files_of(tmp_path / "reference")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for point in ("writing", "renaming", "cannot swap", "cleaning up"):
        folder = tmp_path / point / "export"
        hf_folders.save_pretrained_hf(models[1], fast_tokenizer, folder)
        old = files_of(folder)
        killed = subprocess.run(
            [sys.executable, "-c", KILLER, str(tokenizer_file), str(folder), point], env=env, capture_output=True
        )
        assert killed.returncode in (-signal.SIGKILL, 0), killed.stderr.decode()[-2000:]
        left = files_of(folder)
        if point != "cannot swap":  # there the old export is moved aside for a moment, and comes back below
            assert left in (old, new), (point, sorted(left))
        hf_folders.save_pretrained_hf(models[2], fast_tokenizer, folder)  # the next export cleans up after the kill
        assert files_of(folder) == new, point
        assert [p.name for p in folder.parent.iterdir()] == ["export"], point


# ------------------------------------------------------------------------------------- the data a run learns from
def test_claim_the_data_a_run_learns_from_is_checked_on_resume(tiny, task_data, tmp_path, capsys):
    "README: config.json records a fingerprint of the training data; --resume on other data is refused."
    small = tmp_path / "small" / "wikitext" / "wikitext-2-v1"
    small.mkdir(parents=True)
    full = task_data / "wikitext" / "wikitext-2-v1"
    for split in ("validation", "test"):
        (small / f"{split}-00000-of-00001.parquet").symlink_to(full / f"{split}-00000-of-00001.parquet")
    pq.write_table(pq.read_table(full / "train-00000-of-00001.parquet").slice(0, 400), small / "train.parquet")
    (small / "train.parquet").rename(small / "train-00000-of-00001.parquet")

    run = tmp_path / "run"
    length = ["--save-every", "2", "--eval-every", "100"]
    assert (
        main(["pretrain", *tiny, "--max-steps", "2", *length, "--data-dir", str(task_data), "--output-dir", str(run)])
        == 0
    )
    capsys.readouterr()
    config, metrics = (run / "config.json").read_bytes(), (run / "metrics.jsonl").read_bytes()
    resume = ["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "4"]
    assert main([*resume, "--data-dir", str(tmp_path / "small")]) == 2
    err = one_line_error(capsys)
    assert "36,718 rows" in err and "gives 400 rows" in err and "--data-dir" in err
    assert (run / "config.json").read_bytes() == config and (run / "metrics.jsonl").read_bytes() == metrics
    saved = runs_module.read_run(run).data
    assert saved["rows"] == 36718 and saved["read_from"] == str(task_data.resolve())
    assert main([*resume, "--data-dir", str(task_data)]) == 0


# --------------------------------------------------------------------------------- an incomplete checkpoint is named
def test_claim_an_incomplete_checkpoint_is_named(pretrained, tmp_path, capsys):
    "README: a newest checkpoint without its weights or checksums (or empty) is named by every reader, in one line."
    for damage in ("model.safetensors", "checksums.json", "everything"):
        run = copy(pretrained, tmp_path / damage.replace(".", "-"))
        newest = run / "checkpoints" / "step-0000004"
        for file in newest.iterdir():
            if damage in (file.name, "everything"):
                file.unlink()
        missing = "model.safetensors, checksums.json" if damage == "everything" else damage
        named = f"{newest} is incomplete ({missing} missing), so step-0000002"
        for args in (
            ["fill-mask", str(run), "the [MASK] ."],
            ["evaluate", str(run), "--json"],
            ["export-hf", str(run), str(tmp_path / f"hf-{newest.parent.parent.name}")],
        ):
            assert main(args) == 0, args
            err = capsys.readouterr().err
            assert [line for line in err.splitlines() if line.startswith("warning: ")] == [
                f"warning: {named}, the newest complete checkpoint, is read instead; restore the missing files from "
                "a backup to read it"
            ], (args, err)
        assert main(["info", str(run)]) == 0
        assert f"checkpoints step-0000002, step-0000004 incomplete ({missing} missing)" in capsys.readouterr().out
        if damage == "everything":  # the run writes step 4 again, whole
            assert main(["pretrain", "--output-dir", str(run), "--resume"]) == 0
            said = f"step 2: resuming from {newest.parent / 'step-0000002'}, metrics.jsonl cut back to it; {newest} is"
            assert f"{said} incomplete ({missing} missing), so the run goes on from the checkpoint before it" in (
                capsys.readouterr().err
            )
            assert [c.name for c in checkpoints(run)] == ["step-0000002", "step-0000004"]

    for step_dir in checkpoints(run):
        (step_dir / "checksums.json").unlink()
    assert main(["fill-mask", str(run), "the [MASK] ."]) == 2
    assert "has no complete checkpoint: " in one_line_error(capsys)


def test_claim_a_checkpoint_rotated_away_while_read_is_not_an_error(fast_tokenizer, tmp_path):
    "README: a reader whose checkpoint its writer rotates away meanwhile reads the newest one; no message says delete."
    run = made_run(tmp_path / "run", fast_tokenizer, PretrainConfig(max_steps=1))
    model = build_model(load_run(run)[0])
    stop, failures = threading.Event(), []

    def writer() -> None:  # a run that saves at every step and keeps two checkpoints
        step = 2
        while not stop.is_set():
            save_checkpoint(run, model, {"step": step}, step, keep=2)
            step += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(150):
            try:
                load_model(run)
            except RunError as err:
                failures.append(str(err))
    finally:
        stop.set()
        thread.join()
    assert not failures, f"{len(failures)} of 150 reads failed, e.g. {failures[0]}"

    # the messages about damaged files keep the files: a way out that deletes nothing
    newest = checkpoints(run)[-1]
    (newest / "model.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(RunError, match="does not match its checksum") as damaged:
        load_model(run)
    (run / "tokenizer.json").write_text("{not json")
    with pytest.raises(RunError, match="tokenizer.json cannot be loaded") as broken:
        load_run(run)
    for err in (damaged.value, broken.value):
        assert "delete" not in str(err), err


# ------------------------------------------------------------------------------------------------------ CPU threads
def test_claim_a_changed_thread_count_is_said_and_recorded(tiny, tmp_path, monkeypatch, capsys):
    "README: --threads on a resumed run says that the count changed and the run is no longer bit-exact, and records it."
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(devices_module, "idle_cpus", lambda: 0.2)  # a busy machine
    before = torch.get_num_threads()
    try:
        run = tmp_path / "run"
        assert main(["pretrain", *tiny, "--max-steps", "2", "--threads", "2", "--output-dir", str(run)]) == 0
        capsys.readouterr()
        assert main(["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "4", "--threads", "1"]) == 0
        err = capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
    for false in ("as the run started", "resumes exactly", "--threads 1 would be faster"):
        assert false not in err
    events = [r for r in read_metrics(run / "metrics.jsonl") if "thread" in r.get("event", "")]
    assert [r["step"] for r in events] == [2], events
    assert "from here on, not the 2 it computed with up to step-0000002" in events[0]["event"]
    assert "no longer bit-exact" in events[0]["event"] and f"step 2: {events[0]['event']}" in err
    assert load_run(run)[1].threads == 1


class FakeClock:
    "A clock that runs with time.perf_counter, plus the seconds a test adds."

    def __init__(self) -> None:
        self.added = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.added


def test_claim_a_slowed_run_says_so(tiny, tmp_path, monkeypatch, capsys):
    "README: a CPU run that slows to well under its starting speed while the machine got busier says so, once."
    clock = FakeClock()
    monkeypatch.setattr(loop_module, "time", SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(loop_module, "PACE_SECONDS", 0.0, raising=False)  # every logged step is a stretch

    class Share:  # a busy process starts beside the run after its first three stretches
        calls = 0

        def others(self) -> float:
            Share.calls += 1
            return 0.0 if Share.calls <= 3 else 1.0

    monkeypatch.setattr(loop_module, "CpuShare", Share, raising=False)
    step = loop_module.train_step

    def slowed_step(loop):
        result = step(loop)
        if loop.step > 4:
            clock.added += 60.0  # each step now takes a minute
        return result

    monkeypatch.setattr(loop_module, "train_step", slowed_step)
    before = torch.get_num_threads()
    run = tmp_path / "a run"
    try:
        args = ["pretrain", *tiny, "--max-steps", "10", "--log-every", "1", "--threads", "2", "--output-dir", str(run)]
        assert main(args) == 0
    finally:
        torch.set_num_threads(before)
    err = capsys.readouterr().err
    events = [r["event"] for r in read_metrics(run / "metrics.jsonl") if "slowed" in r.get("event", "")]
    assert len(events) == 1 and err.count("training slowed to") == 1, err
    assert "while other processes keep 1.0 of the" in events[0]
    command = events[0].split("resume it with fewer threads: ")[1]
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "bertlib"]
    resumed = build_parser().parse_args(words[3:])
    assert (resumed.output_dir, resumed.resume, resumed.threads) == (str(run), True, 1)


# ------------------------------------------------------------------------------------------------------- full disk
def no_space(*args, **kwargs):
    "A writer on a full disk."
    raise OSError(errno.ENOSPC, "No space left on device")


def test_claim_a_full_disk_during_a_checkpoint_is_one_line_and_the_run_resumes(
    tiny, fast_tokenizer, tmp_path, monkeypatch, capsys
):
    "README: a full disk while a checkpoint is written: one line naming the disk, exit 2, no leftover, --resume works."
    run = tmp_path / "run"
    assert main(["pretrain", *tiny, "--max-steps", "2", "--save-every", "2", "--output-dir", str(run)]) == 0
    save = checkpoints_module.save_safetensors

    def half_then_full(model, path, *args, **kwargs):
        Path(path).write_bytes(b"\0" * 4096)
        no_space()

    monkeypatch.setattr(checkpoints_module, "save_safetensors", half_then_full)
    resume = ["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "4", "--save-every", "4"]
    capsys.readouterr()
    assert main(resume) == 2
    err = last_line_error(capsys)
    assert "error: the disk mounted at " in err and "is full (" in err, err
    assert f"so {run / 'checkpoints' / 'step-0000004'} could not be written" in err and "with --resume" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000002"]
    monkeypatch.setattr(checkpoints_module, "save_safetensors", save)
    monkeypatch.setattr(loop_module, "write_metrics", no_space)  # metrics.jsonl, cut back to the checkpoint
    assert main(resume) == 2
    assert f"so {run} could not be written" in last_line_error(capsys)
    monkeypatch.undo()
    assert main(resume) == 0
    assert [c.name for c in checkpoints(run)] == ["step-0000002", "step-0000004"]
    monkeypatch.setattr(transformers.PreTrainedTokenizerFast, "save_pretrained", no_space)  # an export
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 2
    assert f"so {tmp_path / 'hf'} could not be written" in last_line_error(capsys)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]

    # the writers' own errors: safetensors' quotes the system's words; torch's zip writer says nothing of the disk
    model = build_model(load_run(run)[0])
    monkeypatch.setattr(checkpoints_module, "save_safetensors", safetensors_on_a_full_disk)
    with pytest.raises(RunError, match="is full"):
        save_checkpoint(tmp_path / "other", model, {"step": 1}, 1)
    monkeypatch.setattr(checkpoints_module, "save_safetensors", save)
    monkeypatch.setattr(checkpoints_module.torch, "save", torch_on_a_full_disk)
    monkeypatch.setattr(runs_module.shutil, "disk_usage", lambda path: SimpleNamespace(free=0))
    with pytest.raises(RunError, match="is full"):
        save_checkpoint(tmp_path / "other", model, {"step": 1}, 1)
    monkeypatch.undo()
    assert not list((tmp_path / "other" / "checkpoints").iterdir())

    # a new run: its folder never appears half-made
    capsys.readouterr()
    monkeypatch.setattr(runs_module, "save_tokenizer", no_space)
    assert main(["pretrain", *tiny, "--max-steps", "2", "--output-dir", str(tmp_path / "new")]) == 2
    assert "is full" in one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "run"]


def safetensors_on_a_full_disk(*args, **kwargs):
    raise SafetensorError(
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
    )


def torch_on_a_full_disk(*args, **kwargs):
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")


# ---------------------------------------------------------------------------------- messages that send the right way
def test_claim_reading_a_run_as_another_kind_says_what_it_is(pretrained, fast_tokenizer, tmp_path):
    "README: a checkpoint read as another model says which model it holds; an HF folder is not 'run format None'."
    electra = made_run(tmp_path / "electra", fast_tokenizer, PretrainConfig(max_steps=1, objective="electra"))
    task = FinetuneConfig(task="sst2", source="nowhere", max_steps=1, max_seq_len=64)
    finetuned = made_run(tmp_path / "sst2", fast_tokenizer, task)
    for run, made in ((electra, "ElectraForPreTraining"), (finetuned, "BertForSequenceClassification")):
        with pytest.raises(RunError) as err:
            evaluate_run(run, max_batches=1)
        assert f"holds the weights of a {made} (what the run {run} trains), not of the BertForPreTraining" in str(
            err.value
        )
        assert "config.json edited" not in str(err.value)
    assert main(["export-hf", str(pretrained), str(tmp_path / "hf")]) == 0
    with pytest.raises(RunError, match=r"is an HF transformers folder \(bert\), not a bertlib run") as err:
        load_model(tmp_path / "hf")
    assert "format None" not in str(err.value)


def test_claim_printed_commands_paste_into_a_shell(tiny, tmp_path, monkeypatch, capsys):
    "README: a command the CLI prints is quoted for a shell: a path with a space or a leading '-' pastes as it is."
    monkeypatch.chdir(tmp_path)
    assert main(["pretrain", *tiny, "--max-steps", "2", "--output-dir=-odd run"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("test scores: ")]
    words = shlex.split(line.removeprefix("test scores: "))
    args = build_parser().parse_args(words[3:])
    assert (args.command, Path(args.run).resolve(), args.split) == ("evaluate", tmp_path / "-odd run", "test")


def test_claim_the_progress_estimate_leaves_validation_out(tiny, tmp_path, monkeypatch):
    "README: the progress bar's estimate of the time left counts training only, not the validations between steps."
    from tqdm import tqdm

    clock, estimates = FakeClock(), []

    class Bar(tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "disable": False, "file": io.StringIO(), "mininterval": 0})
            self._time = clock
            self.start_t = self.last_print_t = clock()

        def update(self, n=1):
            super().update(n)
            rate = self.format_dict["rate"]
            estimates.append((self.total - self.n) / rate if rate else None)

    def an_hour_of_validation(*args, **kwargs):
        clock.added += 3600.0
        return evaluate(*args, **kwargs)

    import bertlib.recipes.objectives as objectives

    evaluate = objectives.validation_metrics
    monkeypatch.setattr(objectives, "validation_metrics", an_hour_of_validation)
    monkeypatch.setattr(loop_module, "tqdm", Bar)
    monkeypatch.setattr(loop_module, "time", SimpleNamespace(perf_counter=clock))
    args = ["pretrain", *tiny, "--max-steps", "12", "--eval-every", "4", "--log-every", "1"]
    assert main([*args, "--output-dir", str(tmp_path / "run")]) == 0
    after = [e for e in estimates[5:] if e is not None]  # the steps after the first validation
    assert after and max(after) < 600, estimates


# --------------------------------------------------------------------------------------------------------- SIGTERM
def test_claim_sigterm_ends_a_run_before_its_first_step_and_frees_its_folder(tiny, tmp_path):
    "README: SIGTERM while a run prepares its data ends it at once; the folder's lock goes with the process."
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "bertlib", "pretrain", *tiny, "--max-steps", "1000", "--output-dir", str(run)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while not lock_path(run).exists() and process.poll() is None:  # the run holds its folder
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
    again = (
        ["pretrain", "--output-dir", str(run), "--resume"]
        if run.exists()
        else ["pretrain", *tiny, "--output-dir", str(run)]
    )
    assert main([*again, "--max-steps", "1"]) == 0  # no lock is left behind


# ------------------------------------------------------------------------- no command writes into another's run
def test_claim_runs_never_hold_another_commands_output(pretrained, fast_tokenizer, tmp_path, capsys):
    "README: `prepare` refuses a run, or a folder in one; a run whose tokenizer was swapped is refused by every reader."
    run = copy(pretrained, tmp_path / "run")
    sst2 = made_run(tmp_path / "sst2", fast_tokenizer, FinetuneConfig(task="sst2", source="x", max_steps=1))
    save_checkpoint(sst2 / "best", build_model(load_run(sst2)[0], load_run(sst2)[1]), {"step": 1, "scores": {}}, 1)
    before = {p: p.read_bytes() for p in [*run.rglob("*"), *sst2.rglob("*")] if p.is_file()}
    for out in (run, sst2 / "best", run / "checkpoints"):
        assert main(["prepare", "--output-dir", str(out), "--cased", "--overwrite", "--vocab-size", "64"]) == 2
        assert "the bertlib run folder" in one_line_error(capsys)
    assert {p: p.read_bytes() for p in [*run.rglob("*"), *sst2.rglob("*")] if p.is_file()} == before

    # the tokenizer a user's `prepare --cased` made, of the same size, copied over the run's own
    size = str(fast_tokenizer.get_vocab_size())
    assert main(["prepare", "--output-dir", str(tmp_path / "cased"), "--cased", "--vocab-size", size]) == 0
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copyfile(tmp_path / "cased" / name, run / name)
    capsys.readouterr()
    for args in (
        ["fill-mask", str(run), "the united [MASK] of america ."],
        ["evaluate", str(run), "--json"],
        ["info", str(run)],
        ["export-hf", str(run), str(tmp_path / "hf")],
        ["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "6"],
        ["finetune", "sst2", "--from", str(run), "--output-dir", str(tmp_path / "tuned"), "--max-steps", "1"],
    ):
        assert main(args) == 2, args
        err = one_line_error(capsys)
        assert f"{run / 'tokenizer.json'} is not the tokenizer the run was made with" in err, err
    assert not (tmp_path / "hf").exists() and not (tmp_path / "tuned").exists()


# ------------------------------------------------------------------------------- a quota or a file-size limit
def limited(limit: int, *args: str) -> subprocess.CompletedProcess:
    "The command line in a process of its own whose files may not grow past `limit` bytes (`ulimit -f`)."
    import resource

    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "bertlib", *args], env=env, capture_output=True, text=True, preexec_fn=set_limit
    )


def test_claim_a_quota_or_file_size_limit_is_one_line_naming_the_path(pretrained, tmp_path, monkeypatch, capsys):
    "README: a file-size limit (`ulimit -f`) or a used-up quota is one line naming the path, for every writer."
    run = copy(pretrained, tmp_path / "run")
    newest = run / "checkpoints" / "step-0000004"
    weights, state = ((newest / name).stat().st_size for name in ("model.safetensors", "training_state.pt"))
    assert weights < state
    resume = ["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "6", "--save-every", "6"]
    cases = {  # the limit stops torch's zip writer, safetensors', and Python's (the tokenizer's vocab.txt)
        "checkpoint": (resume, (weights + state) // 2, run / "checkpoints" / "step-0000006", "continue the run"),
        "export": (["export-hf", str(run), str(tmp_path / "hf")], weights // 2, tmp_path / "hf", "export again"),
        "prepare": (["prepare", "--output-dir", str(tmp_path / "tok")], 20_000, tmp_path / "tok" / "vocab.txt", None),
    }
    for name, (args, limit, path, then) in cases.items():
        done = limited(limit, *args)
        last = done.stderr.splitlines()[-1]
        assert done.returncode == 2 and last.startswith("error: ") and "Traceback" not in done.stderr, (name, last)
        assert str(path) in last and "unexpected" not in last, (name, last)
        if then is not None:
            assert "file-size limit of this process (" in last and "ulimit -f" in last, last
            assert f"so {path} could not be written; raise the limit" in last and f"then {then}" in last, last
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000002", "step-0000004"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "tok"] and not list((tmp_path / "tok").iterdir())

    def over_quota(*args, **kwargs):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(checkpoints_module.torch, "save", over_quota)
    assert main(["pretrain", "--output-dir", str(run), "--resume", "--max-steps", "6", "--save-every", "6"]) == 2
    err = last_line_error(capsys)
    assert "the disk quota on " in err and f"so {run / 'checkpoints' / 'step-0000006'} could not be written" in err


def test_claim_a_full_disk_is_reported_with_the_space_it_has_once_the_partial_files_are_gone(tmp_path, monkeypatch):
    "README: the free space a full-disk error reports counts the space of the partial files, which are removed."
    space = {"taken": 0}

    class Writer:  # torch's zip writer: its file stays open, its space taken, while its error is alive
        def __init__(self, path):
            Path(path).write_bytes(b"\0" * 64)
            space["taken"] += 10 << 20

        def __del__(self):
            space["taken"] -= 10 << 20

    def save_on_a_full_disk(state, path):
        writer = Writer(path)  # noqa: F841 (held by this frame, as torch's is by its own)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(checkpoints_module.torch, "save", save_on_a_full_disk)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(free=(10 << 20) - space["taken"]))
    with pytest.raises(RunError, match=r"is full \(10\.0 MiB free once the partial files were removed\)"):
        save_checkpoint(tmp_path, torch.nn.Linear(2, 2), {"step": 1}, 1)


# ------------------------------------------------------------------------------------------ weights others can read
def test_claim_weights_are_readable_as_the_rest_of_the_folder(pretrained, fast_tokenizer, tmp_path, capsys):
    "README: checkpoints and exports give their weights the permissions the umask gives every other file."
    for mask in (0o022, 0o002):
        before = os.umask(mask)
        try:
            run = made_run(tmp_path / f"run-{mask:o}", fast_tokenizer, PretrainConfig(max_steps=1))
            assert main(["export-hf", str(run), str(tmp_path / f"hf-{mask:o}")]) == 0
        finally:
            os.umask(before)
        files = [*run.rglob("*.*"), *(tmp_path / f"hf-{mask:o}").iterdir()]
        modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in files if p.is_file()}
        assert set(modes.values()) == {oct(0o666 & ~mask)}, modes
        assert any(name.endswith("model.safetensors") for name in modes)


# ------------------------------------------------------------------------------------------- an export via a symlink
def test_claim_an_export_onto_a_symlink_replaces_what_it_points_to(pretrained, fast_tokenizer, tmp_path, capsys):
    "README: export-hf --overwrite through a symbolic link replaces the export it points to, whole; the link stays."
    other = made_run(tmp_path / "other", fast_tokenizer, PretrainConfig(max_steps=1))
    exports = tmp_path / "exports"
    assert main(["export-hf", str(other), str(exports / "reference")]) == 0
    assert main(["export-hf", str(pretrained), str(exports / "real")]) == 0
    (tmp_path / "link").symlink_to(exports / "real")
    assert main(["export-hf", str(other), str(tmp_path / "link"), "--overwrite"]) == 0, capsys.readouterr().err
    assert (tmp_path / "link").is_symlink() and (tmp_path / "link").resolve() == exports / "real"
    assert files_of(exports / "real") == files_of(exports / "reference")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports", "link", "other"]
    assert sorted(p.name for p in exports.iterdir()) == ["real", "reference"]
