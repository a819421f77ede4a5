"""What every results report of the repository shares, the studies of `experiments/` and the benchmarks of
`benchmarks/` alike: how a result file says how it was made, where published results live, what a result must be
before a page shows it, and the writer of a page's generated block.

Hand-written; not part of the library. The scripts are not a package: `experiments/study.py`,
`benchmarks/bench_utils.py`, `benchmarks/report.py` and `experiments/gpu/plan.py` put this folder on `sys.path` and
`import publish`, which lives here beside the pages it writes.

- **How a result was made** (`provenance`): `mode` ("full", as published, or "trial": `--smoke`, `--dry-run`, fewer
  repeats or batches than the script's defaults), what the run was given that decides its precision (repeats,
  warm-up, ...), the machine, torch's threads, the commit and the date.
- **Where published results live** (`PUBLISHED`): the folders whose files the pages are made of. A trial never
  writes there (`trial_destination`).
- **What a page shows** (`read_result`, `check_full`): a result file that is JSON, holds what the report reads, and
  says it was made in full mode. Anything else, or a folder that lacks part of what the page shows, raises
  `MissingResults`, which `refuse_missing` turns into one line on stderr and exit code 2 before anything is written:
  the page keeps its measured numbers.
- **The pages** (`PAGES`, `write_block`): each generated block lives in one page of the site, between
  `<!-- NAME:start -->` and `<!-- NAME:end -->`.
"""

import datetime
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# each generated block and the page of the site it lives in
PAGES = {
    "benchmarks": DOCS / "speed.md",
    "finetune": DOCS / "finetuning.md",
    "variants": DOCS / "variants.md",
    "distil": DOCS / "distillation.md",
    "recipe-study": DOCS / "cpu-recipes.md",
    "cpu-overnight": DOCS / "cpu-overnight.md",
    "gpu-pretraining": DOCS / "gpu-runs.md",
    "course-model": DOCS / "course-model.md",
}
# the folders whose result files the pages are made of: no trial writes into them
PUBLISHED = (
    ROOT / "benchmarks" / "results",
    ROOT / "experiments",
    ROOT / "docs" / "results",
    ROOT / "models",
)
MODES = ("full", "trial")
# what a result depends on: a change here that is not committed marks the commit `-dirty`
SOURCES = ("bertlib", "experiments/*.py", "benchmarks/*.py")


class MissingResults(Exception):
    """The results a report is made of are missing, empty, unreadable, partial or made in a trial mode. Report
    scripts turn it into one line on stderr and exit code 2 (`refuse_missing`), before they write anything: a page
    never trades measured numbers for fewer, or for a trial's."""


@cache
def commit() -> str:
    """The checkout's commit, marked `-dirty` when the library or a script differs from it; 'unknown' outside git.
    Looked up once per process: a process runs the code it loaded when it started."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--", *SOURCES) else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(mode: str, **how: Any) -> dict[str, Any]:
    """How a result was made, for its file: `mode` ("full" or "trial"), `how` (repeats, warm-up, batches: what the
    run was given), the machine, torch's threads, the commit (`commit`) and the date."""
    import torch

    from bertlib.utils.environment import machine

    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: a result is made in one of {MODES}")
    return {
        "mode": mode,
        **how,
        "machine": machine(),
        "threads": torch.get_num_threads(),
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
    }


def machine_info(device: Any) -> dict[str, Any]:
    "Where and when a benchmark ran, field by field (its report shows them): CPU model and cores, GPU, versions, date."
    import platform

    import torch

    from bertlib.utils.environment import cpu_model

    info = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device.type,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def mode_of(defaults: dict[str, Any], given: dict[str, Any]) -> str:
    """Full mode when every setting `given` is at least the script's default (`defaults`), "trial" when one is below:
    fewer repeats, no warm-up, fewer batches than a published result is measured with."""
    return "trial" if any(given[name] < default for name, default in defaults.items()) else "full"


def is_published(path: str | os.PathLike) -> bool:
    "Whether `path` lies in one of the folders whose files the pages are made of (`PUBLISHED`)."
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(folder) for folder in PUBLISHED)


def trial_destination(path: str | os.PathLike, mode: str) -> Path:
    """Where a result meant for `path` goes: `path` itself in full mode, or in trial mode when `path` lies outside
    the published folders; else a file of the same name in a temporary folder, which is said on stderr."""
    if mode == "full" or not is_published(path):
        return Path(path)
    target = Path(tempfile.gettempdir()) / "bertlib-trial-results" / Path(path).name
    print(
        f"a trial's result (fewer repeats, batches or warm-up than the defaults) never replaces a published one: "
        f"writing {target} instead of {path}",
        file=sys.stderr,
    )
    return target


def write_json(path: str | os.PathLike, data: dict, indent: int = 1) -> Path:
    "Write `data` as indented JSON, atomically (`bertlib.utils.files.atomic_write`), making the folder if needed."
    from bertlib.utils.files import atomic_write

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, json.dumps(data, indent=indent) + "\n")


def result_files(folder: Path, pattern: str = "*.json", *, how: str = "") -> list[Path]:
    """The files of `folder` that match `pattern`, sorted; `MissingResults` naming the folder when it does not exist
    or holds none (`how`: the command that makes them, for the message)."""
    found = sorted(folder.glob(pattern)) if folder.is_dir() else []
    if not found:
        where = f"{folder} holds no result files ({pattern})" if folder.is_dir() else f"{folder} does not exist"
        raise MissingResults(f"{where}: nothing to report, so no page is rewritten" + (f"; {how}" if how else ""))
    return found


def read_result(path: Path, needs: Iterable[str] = ()) -> dict[str, Any]:
    """A result file: a JSON object holding every key of `needs` (what the report reads); `MissingResults` naming
    the file when it is empty, not JSON (a run stopped while writing it, say) or lacks one of them."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise MissingResults(f"{path} is not a readable result file ({err}): nothing is rewritten") from err
    if not isinstance(data, dict):
        raise MissingResults(f"{path} holds {type(data).__name__}, not a result: nothing is rewritten")
    if lacking := [key for key in needs if key not in data]:
        keys = ", ".join(map(repr, lacking))
        raise MissingResults(f"{path} lacks {keys}: it is not a whole result, so nothing is rewritten")
    return data


def check_full(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """`result` (read from `path`) when it says it was made in full mode; `MissingResults` when it was a trial or does
    not say how it was made: a page shows only what was measured as it says."""
    mode = (result.get("provenance") or {}).get("mode")
    if mode != "full":
        said = f"was made in {mode} mode" if mode else "does not say how it was made (no provenance)"
        raise MissingResults(f"{path} {said}: only full-mode results are published, so the page is left as it is")
    return result


def write_block(name: str, body: str, page: Path | None = None) -> Path:
    """Replace the text between `<!-- name:start -->` and `<!-- name:end -->` of `page` (by default the block's own
    page, `PAGES[name]`) with `body`; returns the page."""
    page = page or PAGES[name]
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = page.read_text(encoding="utf-8")
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"{page} must contain {start} and {end} exactly once each")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    from bertlib.utils.files import atomic_write

    atomic_write(page, f"{head}{start}\n{body}\n{end}{tail}")
    return page


def page_option(parser: Any, name: str) -> None:
    "Add `--page` to a report's parser: the page whose block `name` it rewrites, by default the site's own."
    default = PAGES[name]
    parser.add_argument(
        "--page",
        type=Path,
        default=default,
        help=f"the page whose generated block is rewritten (default: {default.relative_to(ROOT)})",
    )


def refuse_missing(main: Callable[[], object]) -> None:
    "Run a report script's `main`; results it cannot publish become one line on stderr and exit code 2."
    try:
        main()
    except MissingResults as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
