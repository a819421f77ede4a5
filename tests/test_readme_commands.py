"""Every `python -m bertlib` and `torchrun` command of the README and of the site's pages (`docs/*.md`) runs as written,
only smaller: the commands are read from their ```bash blocks, so the text and the code cannot drift apart. They run
one after the other in a temporary folder where `models/course-mini` is the shipped course model and
`google/bert_uncased_L-4_H-256_A-4` a folder laid out as that hub repository is (transformers loads a local folder
before it asks the hub), so nothing needs the network."""

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hub_layouts import google_layout

ROOT = Path(__file__).resolve().parents[1]
HUB_ID = "google/bert_uncased_L-4_H-256_A-4"
# values that make a command tiny, put in place of the README's own; an option a command lacks is added
SMALLER = {
    "--preset": "tiny",
    "--batch-size": "4",
    "--epochs": "0.0005",
    "--time-budget": "10s",
    "--nproc_per_node": "2",
}
ADDED = {
    "pretrain": {"--preset": "tiny", "--max-seq-len": "32", "--eval-batches": "2", "--device": "cpu"},
    "distil": {
        "--max-steps": "2",
        "--batch-size": "2",
        "--max-seq-len": "32",
        "--eval-batches": "2",
        "--device": "cpu",
    },
    "finetune": {
        "--train-examples": "8",
        "--eval-examples": "4",
        "--max-steps": "2",
        "--batch-size": "4",
        "--max-seq-len": "64",
        "--device": "cpu",
    },
}
LENGTHS = ("--max-steps", "--epochs", "--time-budget")
# runs that a README command reads and no README command before it makes ("also rte, conll2003, squad")
MADE_FIRST = {"runs/squad": "python -m bertlib finetune squad --from models/course-mini --output-dir runs/squad"}


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def readme_commands() -> list[str]:
    """The `python -m bertlib` and `torchrun` lines of every ```bash block of the README and the pages, comments
    removed, in the order they are written (the install-and-run commands of the README are its two commands, run by
    CI itself)."""
    lines = [
        line.split("  #")[0].strip()
        for page in PAGES
        for block in re.findall(r"```bash\n(.*?)\n```", page.read_text(encoding="utf-8"), re.S)
        for line in block.splitlines()
    ]
    return [line for line in lines if line.startswith(("python -m bertlib ", "torchrun "))]


def tiny(command: str) -> list[str]:
    """`command` as an argument list, with `SMALLER`'s values and `ADDED`'s options: a resumed run keeps the
    settings it was made with, and a command that gives its length keeps that way of giving it."""
    words = shlex.split(command)
    argv = (
        [sys.executable, *words[1:]]
        if words[:2] == ["python", "-m"]
        else [str(Path(sys.executable).with_name("torchrun")), *words[1:]]
    )
    for i, word in enumerate(argv):
        name, equals, _ = word.partition("=")
        if name in SMALLER and "--resume" not in argv:
            if equals:
                argv[i] = f"{name}={SMALLER[name]}"
            else:
                argv[i + 1] = SMALLER[name]
    subcommand = next(
        word for word in argv if word in ADDED or word in ("evaluate", "fill-mask", "export-hf", "info", "predict")
    )
    if "--resume" in argv:
        return argv
    for option, value in ADDED.get(subcommand, {}).items():
        if option not in argv and not (option == "--max-steps" and set(LENGTHS) & set(argv)):
            argv += [option, value]
    if subcommand == "pretrain" and not set(LENGTHS) & set(argv):
        argv += ["--max-steps", "3"]
    return argv


def test_the_block_is_found_and_shrunk():
    commands = readme_commands()
    assert len(commands) >= 15 and all(c.startswith(("python -m bertlib ", "torchrun ")) for c in commands)
    first = tiny("python -m bertlib pretrain --preset small --epochs 10 --output-dir runs/small")
    assert first[1:] == [
        "-m",
        "bertlib",
        "pretrain",
        "--preset",
        "tiny",
        "--epochs",
        "0.0005",
        "--output-dir",
        "runs/small",
        "--max-seq-len",
        "32",
        "--eval-batches",
        "2",
        "--device",
        "cpu",
    ]
    assert tiny("python -m bertlib pretrain --output-dir runs/small --resume")[1:] == [
        "-m",
        "bertlib",
        "pretrain",
        "--output-dir",
        "runs/small",
        "--resume",
    ]
    assert "--nproc_per_node=2" in tiny("torchrun --nproc_per_node=4 -m bertlib pretrain --output-dir runs/base")


@pytest.mark.slow
def test_every_readme_command_runs(tmp_path, task_data):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "course-mini").symlink_to(ROOT / "models" / "course-mini")
    google_layout(tmp_path / HUB_ID)
    env = {**os.environ, "BERTLIB_DATA_DIR": str(task_data), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

    def run(command: str) -> str | None:
        start = time.perf_counter()
        done = subprocess.run(tiny(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        print(f"{time.perf_counter() - start:6.1f} s  exit {done.returncode}  {command}")
        return None if done.returncode == 0 else f"{command}\n  exit {done.returncode}: {done.stderr.strip()[-600:]}"

    failures = []
    for command in readme_commands():
        for folder, maker in MADE_FIRST.items():
            if folder in shlex.split(command) and not (tmp_path / folder).exists():
                failures += filter(None, [run(maker)])
        failures += filter(None, [run(command)])
    assert not failures, "README commands that failed:\n" + "\n".join(failures)
