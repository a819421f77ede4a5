"""What every study in `experiments/` shares: where its files go, atomic result files, the commit and machine that
made them, and the README blocks they generate.

Hand-written; not part of the library. The studies are scripts (`python experiments/NAME.py`), so this folder is on
their `sys.path` and they import this module as `study`; bertlib comes from its installation (`pip install -e .`).
"""

import argparse
import importlib.util
import json
import subprocess
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from bertlib.utils.environment import machine
from bertlib.utils.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]
# what a result depends on: a change here that is not committed marks the commit `-dirty`
SOURCES = ("bertlib", "experiments/*.py")


@cache
def commit() -> str:
    """The checkout's commit, marked `-dirty` when the library or a study differs from it; 'unknown' outside git.
    Looked up once per process (`parse` does it first): a process runs the code it loaded when it started."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--", *SOURCES) else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance() -> dict:
    "Where a result comes from: the machine, torch's threads and the commit (`commit`)."
    return {"machine": machine(), "threads": torch.get_num_threads(), "commit": commit()}


def write_json(path: Path, data: dict) -> Path:
    "Write `data` as indented JSON, atomically (`bertlib.utils.files.atomic_write`), making the folder if needed."
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, json.dumps(data, indent=1) + "\n")


def _benchmarks_report() -> ModuleType:
    # benchmarks/ is a folder of scripts, not a package; its report module owns what every report shares: the
    # README-block writer and the refusal of missing results
    spec = importlib.util.spec_from_file_location("benchmarks_report", ROOT / "benchmarks" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_reports = _benchmarks_report()
# A report refuses results that are missing or empty (`result_files` and `read_json`, a result file, raise
# `MissingResults`), and a script's `refuse_missing(main)` turns that into one line on stderr and exit code 2 before
# any file is written.
MissingResults = _reports.MissingResults
result_files = _reports.result_files
read_json = _reports.read_result
refuse_missing = _reports.refuse_missing


def update_readme(readme: Path, block: str, body: str) -> None:
    "Replace the text between `<!-- block:start -->` and `<!-- block:end -->` of `readme` with `body`."
    _reports.update_readme(readme, body, f"<!-- {block}:start -->", f"<!-- {block}:end -->")


def output_options(parser: argparse.ArgumentParser, folder: Path, smoke: str | None = None) -> None:
    """Add `--out` (the study's folder, `folder` by default), `--readme` (the README whose block the study rewrites)
    and, when the study has a smallest mode (`smoke` says what it does), `--smoke`, which needs an `--out`."""
    parser.add_argument(
        "--out",
        type=Path,
        default=folder,
        help=f"folder of the results, runs and report (default: {folder.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        default=ROOT / "README.md",
        help="the README whose generated block is rewritten (default: the project's)",
    )
    if smoke:
        parser.add_argument("--smoke", action="store_true", help=f"{smoke}; only with --out elsewhere")


def parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    "Parse the command line and note the commit the process starts from; `--smoke` must not write into the study."
    commit()
    args = parser.parse_args()
    if getattr(args, "smoke", False) and args.out.resolve() == Path(parser.get_default("out")).resolve():
        parser.error("--smoke writes a tiny result: give it an --out other than the study's folder")
    return args
