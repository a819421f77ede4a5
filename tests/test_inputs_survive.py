"""Runs survive the inputs a hostile user gives them (issue 34): empty data, data of the wrong shape, an unusable
cache folder, SIGTERM while data is prepared, and long or mismatched inputs to `predict`. Each test names the README
claim it backs (section "Runs that survive"). Commands that used to spin for ever run in a process of their own,
with a time limit."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from test_surfaces import TINY, task_run

import bertlib.data.corpus as corpus_module
from bertlib.cli.main import main
from bertlib.data.tokenizer import pre_tokenize
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.recipes.finetune import query_len
from bertlib.recipes.predict import predict
from bertlib.tasks.examples import CONLL_TAGS
from bertlib.train.factory import load_model
from bertlib.train.lifecycle import lock_path
from bertlib.train.runs import create_run
from bertlib.train.settings import FinetuneConfig

ROOT = Path(__file__).resolve().parents[1]
WIKITEXT = "wikitext/wikitext-2-v1"
LIMIT = 120  # seconds: far more than any of these commands needs, and far less than for ever


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def data_folder(task_data: Path, folder: Path, files: dict[str, bytes | pa.Table]) -> Path:
    """A data folder laid out as `task_data`, its files linked, but for `files` (path inside it: bytes, or a table
    written as parquet)."""
    for source in task_data.rglob("*"):
        if source.is_file():
            target = folder / source.relative_to(task_data)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source)
    for name, content in files.items():
        (folder / name).unlink(missing_ok=True)
        if isinstance(content, pa.Table):
            pq.write_table(content, folder / name)
        else:
            (folder / name).write_bytes(content)
    return folder


def rows(*texts) -> pa.Table:
    "A WikiText parquet table with these rows."
    return pa.table({"text": pa.array(list(texts), pa.string())})


def run_within(limit: float, *args: str) -> subprocess.CompletedProcess:
    "Python with `args` in a process of its own; one still running after `limit` seconds fails the test, killed."
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run(
            [sys.executable, *args], env=environment, capture_output=True, text=True, timeout=limit, check=False
        )
    except subprocess.TimeoutExpired as spun:
        pytest.fail(f"{' '.join(args[:4])} ... still ran after {limit} s: {(spun.stderr or '')[-300:]!r}")


def nothing_written(run: Path) -> None:
    assert not run.exists() and not lock_path(run).exists(), sorted(p.name for p in run.parent.iterdir())


@pytest.fixture(scope="module")
def tiny(tokenizer_file):
    return [*TINY, "--tokenizer", str(tokenizer_file)]


@pytest.fixture(scope="module")
def pretrained(tiny, tmp_path_factory):
    "A pre-training run of 2 steps on the real data: the encoder and teacher of the runs below."
    run = tmp_path_factory.mktemp("pretrained") / "run"
    assert main(["pretrain", *tiny, "--max-steps", "2", "--eval-every", "2", "--output-dir", str(run)]) == 0
    return run


# ----------------------------------------------------------------------------------------------- empty input
def test_claim_no_command_hangs_on_empty_input(tiny, pretrained, task_data, tmp_path):
    "README: empty training data is one line naming its file, exit 2, before anything is written; nothing spins."
    empty = data_folder(task_data, tmp_path / "empty", {f"{WIKITEXT}/train-00000-of-00001.parquet": rows()})
    blank_rows = rows(*["", " \n"] * 50)
    blank = data_folder(task_data, tmp_path / "blank", {f"{WIKITEXT}/train-00000-of-00001.parquet": blank_rows})
    header = data_folder(task_data, tmp_path / "header", {"glue/SST-2/train.tsv": b"sentence\tlabel\n"})
    train_parquet = f"{WIKITEXT}/train-00000-of-00001.parquet"
    steps = ["--max-steps", "4", "--eval-every", "4"]
    commands = {
        "pretrain-empty": (["pretrain", *tiny, *steps, "--data-dir", str(empty)], empty / train_parquet),
        "pretrain-blank": (["pretrain", *tiny, *steps, "--data-dir", str(blank)], blank / train_parquet),
        "pretrain-untokenized": (["pretrain", *TINY, *steps, "--data-dir", str(empty)], empty / train_parquet),
        "distil": (["distil", "--teacher", str(pretrained), *steps, "--data-dir", str(blank)], blank / train_parquet),
        "finetune": (
            ["finetune", "sst2", "--from", str(pretrained), *steps, "--data-dir", str(header)],
            header / "glue/SST-2/train.tsv",
        ),
    }
    for name, (args, named) in commands.items():
        run = tmp_path / name
        done = run_within(LIMIT, "-m", "bertlib", *args, "--output-dir", str(run))
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 2 and last.startswith("error: ") and str(named) in last, (name, done.stderr[-500:])
        assert "tokens but the model's vocab_size" not in last  # the tokenizer was trained on nothing: say that
        nothing_written(run)


# Runs `fit` on packed data whose epoch 1 holds what `SHORT` says; SIGTERM arrives while epoch 1 is prepared.
SIGTERM_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from bertlib.data.packed import PackedDataset
    from bertlib.data.tokenizer import load_tokenizer
    from bertlib.model.bert import BertForPreTraining
    from bertlib.model.config import BertConfig
    from bertlib.recipes.objectives import train
    from bertlib.train.settings import TrainConfig
    from bertlib.utils.processes import TrainingInterrupted

    tokenizer, short = load_tokenizer(sys.argv[1]), sys.argv[2] == "short"

    class Preparing(PackedDataset):
        def set_epoch(self, epoch):
            super().set_epoch(epoch)
            if epoch == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # while the data of epoch 1 is prepared
            if epoch >= 1 and short:
                self.offset = len(self.stream)  # epochs that hold no sequence, as some data gives

    sentence = tokenizer.encode("the game was released in japan .", add_special_tokens=False).ids
    data = Preparing([[sentence * 8]], tokenizer, 16, seed=0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size()))
    cfg = TrainConfig(max_steps=50, batch_size=2, log_every=1, eval_every=100, save_every=100, device="cpu")
    try:
        train(model, data, cfg, show_progress=False)
    except TrainingInterrupted as stop:
        print(stop, file=sys.stderr)
        sys.exit(128 + stop.signum)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    """
)


def test_claim_every_process_honours_sigterm_within_a_step(tokenizer_file, tmp_path):
    """README: SIGTERM while a run prepares the data of a step stops it at that step (143), or the data that gives
    no step is one line (2); it never waits for a step that cannot come."""
    (tmp_path / "script.py").write_text(SIGTERM_SCRIPT)
    for epoch, code, said in (("whole", 143, "stopped by SIGTERM at step "), ("short", 2, "error: epoch 1 ")):
        done = run_within(LIMIT, str(tmp_path / "script.py"), str(tokenizer_file), epoch)
        assert done.returncode == code and done.stderr.strip().splitlines()[-1].startswith(said), done.stderr[-500:]


# ------------------------------------------------------------------------------------------------ every split
def test_claim_every_split_is_checked_before_anything_is_written(tiny, pretrained, task_data, tmp_path, capsys):
    """README: a fine-tuning split without examples (a header-only TSV, a CoNLL file of -DOCSTART- alone, an empty
    validation file) and a WikiText split without text are one line naming the file, before anything is written."""
    cases = {
        "sst2-train": ("sst2", "glue/SST-2/train.tsv", b"sentence\tlabel\n"),
        "sst2-validation": ("sst2", "glue/SST-2/dev.tsv", b"sentence\tlabel\n"),
        "conll-train": ("conll2003", "conll2003/train.txt", b"-DOCSTART- -X- -X- O\n\n"),
        "conll-validation": ("conll2003", "conll2003/valid.txt", b""),
    }
    few = ["--train-examples", "8", "--eval-examples", "4", "--batch-size", "4", "--max-steps", "2"]
    for name, (task, file, content) in cases.items():
        data = data_folder(task_data, tmp_path / f"data-{name}", {file: content})
        run = tmp_path / name
        args = ["finetune", task, "--from", str(pretrained), *few, "--data-dir", str(data), "--output-dir", str(run)]
        assert main(args) == 2, name
        assert str(data / file) in one_line_error(capsys), name
        nothing_written(run)
    validation = f"{WIKITEXT}/validation-00000-of-00001.parquet"
    data = data_folder(task_data, tmp_path / "data-wikitext", {validation: rows(" = Title = ", "")})
    run = tmp_path / "pretrain"
    assert main(["pretrain", *tiny, "--max-steps", "2", "--data-dir", str(data), "--output-dir", str(run)]) == 2
    assert str(data / validation) in one_line_error(capsys)
    nothing_written(run)


def test_claim_a_wikitext_file_of_the_wrong_shape_is_named(tiny, pretrained, task_data, tmp_path, capsys):
    "README: a WikiText file without a column `text` of strings is one line naming the file and the column."
    train = f"{WIKITEXT}/train-00000-of-00001.parquet"
    for name, content in (
        ("numbers", pa.table({"text": pa.array([1, 2, 3], pa.int64())})),
        ("renamed", pa.table({"line": pa.array(["a b c ."], pa.string())})),
        ("not-parquet", b"text\na b c .\n"),
    ):
        data = data_folder(task_data, tmp_path / f"data-{name}", {train: content})
        run = tmp_path / name
        assert main(["pretrain", *tiny, "--max-steps", "2", "--data-dir", str(data), "--output-dir", str(run)]) == 2
        err = one_line_error(capsys)
        assert str(data / train) in err and "'text'" in err, err
        nothing_written(run)
    validation = f"{WIKITEXT}/validation-00000-of-00001.parquet"
    data = data_folder(task_data, tmp_path / "data-evaluate", {validation: pa.table({"line": pa.array(["a"])})})
    assert main(["evaluate", str(pretrained), "--data-dir", str(data)]) == 2  # a command that reads a run, too
    err = one_line_error(capsys)
    assert str(data / validation) in err and "'text'" in err, err


def test_claim_an_unusable_cache_folder_is_named(tiny, tmp_path, monkeypatch, capsys):
    """README: BERTLIB_CACHE_DIR set to a file, or to a folder that cannot be written, is one line naming the
    variable, before anything is written."""
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("BERTLIB_CACHE_DIR", str(tmp_path / "file"))
    run = tmp_path / "run"
    assert main(["pretrain", *tiny, "--max-steps", "2", "--output-dir", str(run)]) == 2
    assert f"BERTLIB_CACHE_DIR={tmp_path / 'file'}" in one_line_error(capsys)
    nothing_written(run)

    def read_only(path, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setenv("BERTLIB_CACHE_DIR", str(tmp_path / "read-only"))
    monkeypatch.setattr(corpus_module, "atomic_write", read_only)  # a read-only file system, which root cannot bypass
    assert main(["pretrain", *tiny, "--max-steps", "2", "--output-dir", str(run)]) == 2
    err = one_line_error(capsys)
    assert f"BERTLIB_CACHE_DIR={tmp_path / 'read-only'}" in err and "Read-only file system" in err, err
    nothing_written(run)


# -------------------------------------------------------------------------------------------------- predict
@pytest.fixture(scope="module")
def task_runs(fast_tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    return {task: task_run(folder / task, task, fast_tokenizer) for task in ("sst2", "rte", "conll2003", "squad")}


LONG = " ".join(["Peter Blackburn met the European Commission in Brussels on Thursday ."] * 40)  # 440 words


def test_claim_predict_reads_long_text_in_windows(task_runs, fast_tokenizer):
    "README: a tagger reads a text longer than its window in windows of whole words: it tags every word it returns."
    model, tokenizer = load_model(task_runs["conll2003"])
    with torch.no_grad():  # a head that says B-PER wherever it reads: a word it never read would be O
        model.classifier.bias.fill_(0).index_fill_(0, torch.tensor(CONLL_TAGS.index("B-PER")), 1e4)
    assert len(fast_tokenizer.encode(LONG).ids) > 4 * 64
    result = predict(model, tokenizer, "conll2003", LONG, max_seq_len=64)
    assert len(result["words"]) == len(pre_tokenize(LONG)) == len(result["tags"]) == 440
    assert set(result["tags"]) == {"B-PER"}


def test_claim_predict_checks_its_task(task_runs):
    "README: the library's predict refuses a task its model was not fine-tuned for, in one line."
    model, tokenizer = load_model(task_runs["sst2"])
    for task, inputs in (("rte", {"pair": "it is"}), ("conll2003", {}), ("squad", {"question": "who ?"}), ("sst3", {})):
        with pytest.raises(ValueError) as refused:
            predict(model, tokenizer, task, "a fine film", **inputs)
        said = str(refused.value)
        assert "\n" not in said and (f"fine-tuned for sst2, not {task}" in said or "task='sst3'" in said), said
    tagger, tokenizer = load_model(task_runs["conll2003"])
    with pytest.raises(ValueError, match="fine-tuned for conll2003, not sst2"):
        predict(tagger, tokenizer, "sst2", "a fine film")
    with pytest.raises(ValueError, match="is a BertForPreTraining, not one fine-tuned for sst2"):
        predict(BertForPreTraining(model.config), tokenizer, "sst2", "a fine film")


class CountingTokenizer:
    "A tokenizer that notes the length of every text it encodes, and otherwise is the tokenizer it wraps."

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def encode(self, text, *args, **kwargs):
        self.lengths.append(sum(map(len, text)) if isinstance(text, list) else len(text))
        return self.tokenizer.encode(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_claim_predict_tokenizes_only_what_it_reads(task_runs):
    "README: predict on 10 MB of text tokenizes the start its window reads, and says what it says of that start."
    huge = " ".join(["a gorgeous , witty , seductive movie ."] * 270_000)  # 10.5 MB
    for task, pair in (("sst2", None), ("rte", "it is a movie .")):
        model, tokenizer = load_model(task_runs[task])
        counting = CountingTokenizer(tokenizer)
        result = predict(model, counting, task, huge, pair=pair, max_seq_len=64)
        assert max(counting.lengths) < 10_000, task
        read = " ".join(huge.split()[:200])  # more than the window holds: the same pieces reach the model
        assert result == predict(model, tokenizer, task, read, pair=pair, max_seq_len=64), task


def test_claim_predict_cuts_a_long_question_as_training_does(task_runs, fast_tokenizer, capsys):
    "README: a question longer than a window is cut to the question pieces training keeps, not refused."
    run = task_runs["squad"]
    model, tokenizer = load_model(run)
    paragraph = "Peter Blackburn lives in Brussels ."
    question = " ".join(["who lives in brussels and works for the commission ?"] * 330)  # 3,000 words
    kept = query_len(64, 64)
    assert kept < 64 and len(fast_tokenizer.encode(question, add_special_tokens=False).ids) > 3000
    short = tokenizer.decode(tokenizer.encode(question, add_special_tokens=False).ids[:kept])
    answer = predict(model, tokenizer, "squad", paragraph, question=question, max_seq_len=64)
    assert answer == predict(model, tokenizer, "squad", paragraph, question=short, max_seq_len=64)
    assert main(["predict", str(run), paragraph, "--question", question, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == answer


# ------------------------------------------------------------------------------------------- no message says delete
def test_claim_no_message_tells_the_user_to_delete_a_file(tiny, pretrained, tmp_path, capsys):
    "README: a file that is not a tokenizer, or a damaged one, is named with the way to fix it, and no file is deleted."
    damaged = tmp_path / "damaged" / "tokenizer.json"
    damaged.parent.mkdir()
    damaged.write_bytes((pretrained / "tokenizer.json").read_bytes()[:500])  # a copy cut short
    for given in (Path("/etc/passwd"), pretrained / "vocab.txt", damaged):
        args = ["pretrain", *tiny, "--tokenizer", str(given), "--max-steps", "1", "--output-dir", str(tmp_path / "r")]
        assert main(args) == 2
        err = one_line_error(capsys)
        assert f"{given} is not a tokenizer.json" in err and "give the tokenizer.json" in err, err
        assert "delete" not in err and given.exists(), err
        nothing_written(tmp_path / "r")
    run = tmp_path / "run"
    shutil.copytree(pretrained, run)
    (run / "tokenizer.json").write_bytes(damaged.read_bytes())
    assert main(["fill-mask", str(run), "the [MASK] ."]) == 2
    err = one_line_error(capsys)
    assert "cannot be loaded" in err and "back from a backup of the run" in err and "delete" not in err, err


# ----------------------------------------------------------------------------------------------- the smaller ones
def test_claim_help_and_debug_read_as_documented(pretrained):
    "README: `python -m bertlib --help` describes the tool in whole sentences; --debug works after the command too."
    helped = run_within(LIMIT, "-m", "bertlib", "--help")
    assert helped.returncode == 0, helped.stderr
    description = " ".join(helped.stdout.split("\n\n")[1].split())
    assert description.endswith("`python -m bertlib COMMAND --help` explains each command."), description
    debugged = run_within(LIMIT, "-m", "bertlib", "info", str(pretrained / "nowhere"), "--debug")
    assert "Traceback" in debugged.stderr and "RunError: no run folder" in debugged.stderr, debugged.stderr[-800:]
    before = run_within(LIMIT, "-m", "bertlib", "--debug", "info", str(pretrained / "nowhere"))
    assert "Traceback" in before.stderr, before.stderr[-800:]


def test_claim_a_run_without_a_checkpoint_says_so_in_one_message(fast_tokenizer, tmp_path, capsys):
    "README: a run that has no checkpoint yet says that to every reader, with or without --newest."
    config = BertConfig.from_preset("tiny", vocab_size=fast_tokenizer.get_vocab_size())
    run = create_run(tmp_path / "run", config, FinetuneConfig(task="sst2", source="x", max_steps=1), fast_tokenizer)
    said = set()
    for args in (
        ["predict", str(run), "a fine film"],
        ["predict", str(run), "a fine film", "--newest"],
        ["export-hf", str(run), str(tmp_path / "hf")],
        ["export-hf", str(run), str(tmp_path / "hf"), "--newest"],
    ):
        assert main(args) == 2, args
        said.add(one_line_error(capsys).replace(" --newest", ""))
    assert said == {f"error: {run} has no checkpoint yet; wait for the first one or resume the run\n"}, said
    assert main(["info", str(run)]) == 0
    assert "best/       none yet" in capsys.readouterr().out


def test_claim_a_task_edited_in_config_json_is_refused(fast_tokenizer, tmp_path, capsys):
    "README: a fine-tuned run whose config.json names another task than its weights were trained for is refused."
    run = task_run(tmp_path / "sst2", "sst2", fast_tokenizer)
    config = json.loads((run / "config.json").read_text())
    config["training"]["task"] = "rte"
    (run / "config.json").write_text(json.dumps(config, indent=2))
    for args in (
        ["predict", str(run), "a fine film", "--pair", "it is"],
        ["export-hf", str(run), str(tmp_path / "hf")],
    ):
        assert main(args) == 2, args
        err = one_line_error(capsys)
        assert "negative, positive" in err and "entailment, not_entailment" in err and "config.json" in err, err
    assert not (tmp_path / "hf").exists()


def test_claim_thread_counts_are_checked(tiny, tmp_path, monkeypatch, capsys):
    "README: --threads above the machine's CPUs, or an OMP_NUM_THREADS that is not a number, is one line, exit 2."
    run = tmp_path / "run"
    assert main(["pretrain", *tiny, "--max-steps", "1", "--threads", "1000", "--output-dir", str(run)]) == 2
    err = one_line_error(capsys)
    assert f"--threads 1000 is more than the {os.cpu_count()} CPUs of this machine" in err, err
    nothing_written(run)
    monkeypatch.setenv("OMP_NUM_THREADS", "abc")
    assert main(["pretrain", *tiny, "--max-steps", "1", "--output-dir", str(run)]) == 2
    assert "OMP_NUM_THREADS='abc' is not a number of threads" in one_line_error(capsys)
    nothing_written(run)


SECOND_SIGTERM = textwrap.dedent(
    """
    import os, signal, sys, time
    from bertlib.utils.processes import stop_signals

    with stop_signals():
        print("ready", flush=True)
        time.sleep(60)  # a slow step: the first SIGTERM waits for its end, the second ends the process at once
    """
)


def test_claim_a_second_sigterm_exits_with_a_line(tmp_path):
    "README: the first SIGTERM asks for a checkpoint at the end of the step; a second one ends at once, saying so."
    process = subprocess.Popen(
        [sys.executable, "-c", SECOND_SIGTERM],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout.readline() == "ready\n"
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=LIMIT)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM
    assert err.strip().splitlines() == ["stopped at once by a second SIGTERM, without a checkpoint of this step"], err


def test_claim_messages_are_whole(pretrained, tmp_path, capsys):
    "README: an error names a path with a newline in it whole, a missing tokenizer fully, and in good grammar."
    odd = tmp_path / "a\nrun"
    assert main(["info", str(odd)]) == 2
    shown = str(odd).replace("\n", "\\n")
    assert one_line_error(capsys).startswith(f"error: no run folder {shown}; runs are made by ")
    run = tmp_path / "run"
    shutil.copytree(pretrained, run)
    (run / "tokenizer.json").unlink()
    assert main(["info", str(run)]) == 2
    assert one_line_error(capsys).endswith(
        "is missing; restore it from a backup of the run (with vocab.txt beside it)\n"
    )
    shutil.copytree(pretrained, tmp_path / "resumed")
    assert main(["pretrain", "--output-dir", str(tmp_path / "resumed"), "--resume", "--lr", "0.5"]) == 2
    assert "but lr differs from " in one_line_error(capsys)


def test_claim_a_tokenizer_that_splits_mask_is_refused_before_training(tiny, pretrained, tmp_path, capsys):
    "README: a tokenizer that cuts [MASK] into pieces is refused before anything is written, not after training."
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    # the tokenizer a user builds from a vocab.txt with the tokenizers library, without registering the special tokens
    built = Tokenizer(models.WordPiece.from_file(str(pretrained / "vocab.txt"), unk_token="[UNK]"))
    built.normalizer, built.pre_tokenizer = normalizers.BertNormalizer(), pre_tokenizers.BertPreTokenizer()
    built.save(str(tmp_path / "tokenizer.json"))
    run = tmp_path / "run"
    args = ["pretrain", *TINY, "--tokenizer", str(tmp_path / "tokenizer.json"), "--max-steps", "1"]
    assert main([*args, "--output-dir", str(run)]) == 2
    err = one_line_error(capsys)
    assert "the tokenizer cuts [MASK] into 4 pieces ([ mas ##k ])" in err, err
    nothing_written(run)
