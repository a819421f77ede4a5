"""Run the worked solutions in full mode and save what each prints beside it, in `solutions/outputs/sNN_name.txt`.
Written by hand.

Each module runs in a process of its own, as a learner runs it (`python solutions/sNN_name.py`), without
`BERTLIB_QUICK` (`--quick` sets it, for a test of this script); what it prints, standard output and errors in the
order they came, is saved under a header that names the machine, torch, the date, the commit and the wall time. A
module whose saved output is newer than its source and than `common.py` is skipped unless `--force`; a module that
fails is saved with its status and its output, and the others still run.

    python solutions/run_all.py                # every module whose output is missing, failed or older than its source
    python solutions/run_all.py s00 s03        # these modules (a prefix of their names, or a path)
    python solutions/run_all.py --force s07    # again, although its output is newer than its source

The exit status is 1 when a module failed, 0 otherwise. Set `OMP_NUM_THREADS` to time on a known number of threads;
the header records it.
"""

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import ROOT, atomic_write, machine

SOLUTIONS = Path(__file__).resolve().parent
OUTPUTS = SOLUTIONS / "outputs"
MODULES = sorted(SOLUTIONS.glob("s[0-9][0-9]_*.py"))


def chosen_modules(names: list[str]) -> list[Path]:
    "The modules that `names` pick (a prefix of a module's name, or the path of a file), all of them when none."
    if not names:
        return MODULES
    chosen = []
    for name in names:
        if name.endswith(".py") and Path(name).is_file():
            chosen.append(Path(name).resolve())
            continue
        found = [m for m in MODULES if m.stem.startswith(name)]
        if not found:
            raise SystemExit(f"run_all.py: no solution module starts with {name!r}; they are {_stems(MODULES)}")
        chosen += found
    return list(dict.fromkeys(chosen))


def _stems(paths: list[Path]) -> str:
    return ", ".join(p.stem for p in paths)


def mode(quick: bool) -> str:
    return "quick mode (BERTLIB_QUICK=1)" if quick else "full mode"


def is_current(module: Path, output: Path, quick: bool) -> bool:
    "True when `output` holds a successful run in this mode, newer than the module and than `common.py`."
    if not output.is_file():
        return False
    newest_source = max(module.stat().st_mtime, (SOLUTIONS / "common.py").stat().st_mtime)
    text = output.read_text(encoding="utf-8")
    saved_mode = text.partition("\n")[0].rpartition(", ")[2]
    return output.stat().st_mtime > newest_source and saved_mode == mode(quick) and "\n# status: ok\n" in text


def commit() -> str:
    "The checkout's commit, and whether the code that the outputs come from differs from it."
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "bertlib", "models", "solutions", ":(exclude)solutions/outputs"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" with uncommitted changes to bertlib/, models/ or solutions/" if changed else "")


def run_module(module: Path, quick: bool) -> tuple[int, str, float]:
    "Run `module` as a learner would; its exit status, everything it printed (echoed as it comes) and the seconds."
    env = {k: v for k, v in os.environ.items() if k != "BERTLIB_QUICK"}
    if quick:
        env["BERTLIB_QUICK"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"  # so that its prints and its errors reach the file in the order they happened
    start = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, str(module)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        lines = []
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    return process.returncode, "".join(lines), time.perf_counter() - start


def header(module: Path, quick: bool, status: int, seconds: float) -> str:
    "The lines that head a saved output: what ran, where, when, from which commit, how long, and how it ended."
    shown = module.relative_to(ROOT) if module.is_relative_to(ROOT) else module
    minutes = f" ({seconds / 60:.1f} min)" if seconds >= 60 else ""
    lines = {
        "module": f"{shown}, {mode(quick)}",
        "machine": machine(),
        "torch": torch.__version__,
        "threads": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "wall time": f"{seconds:.0f} s{minutes}",
        "status": "ok" if status == 0 else f"failed (exit status {status})",
    }
    return "".join(f"# {name}: {value}\n" for name, value in lines.items())


def main(argv: list[str] | None = None) -> int:
    "Run the chosen modules and save their outputs; 1 when one failed."
    parser = argparse.ArgumentParser(
        prog="python solutions/run_all.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("modules", nargs="*", help="prefixes of module names (s07) or paths; default: every module")
    parser.add_argument("--force", action="store_true", help="run a module even when its output is current")
    parser.add_argument("--quick", action="store_true", help="run in quick mode (BERTLIB_QUICK=1), as CI does")
    parser.add_argument("--output-dir", type=Path, default=OUTPUTS, help=f"where outputs go (default: {OUTPUTS})")
    args = parser.parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for module in chosen_modules(args.modules):
        output = args.output_dir / f"{module.stem}.txt"
        if not args.force and is_current(module, output, args.quick):
            results[module.stem] = "skipped: its output is newer than its source"
            continue
        print(f"\n### {module.name}", flush=True)
        status, text, seconds = run_module(module, args.quick)
        atomic_write(output, header(module, args.quick, status, seconds) + "\n" + text)
        results[module.stem] = f"{'ok' if status == 0 else 'FAILED'} in {seconds:.0f} s -> {output}"
    print("\n" + "\n".join(f"{stem}: {result}" for stem, result in results.items()))
    return 1 if any(r.startswith("FAILED") for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
