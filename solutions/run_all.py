"""Run the worked solutions in full mode and save what each prints beside it, in `solutions/outputs/sNN_name.txt`.
Written by hand.

Each module runs in a process of its own, as a learner runs it (`python solutions/sNN_name.py`), without
`BERTLIB_QUICK` (`--quick` sets it, for a test of this script); what it prints, standard output and errors in the
order they came, is saved under a header that names the machine, torch, the date, the commit, the SHA-256 of the
module's source and the wall time. A module is skipped unless `--force` when its saved output ran in the same mode,
ended well and came from the source as it is now (the recorded hash, not the files' times, which a fresh clone sets
alike); `common.py`, which every module shares, is not counted: after a change there that alters what they print,
give `--force`. A module that fails is saved with its status and its output, and the others still run; but a saved
full-mode output that ended well is never replaced by a failed run, nor by a quick-mode one (the run's output is on the
screen, and the summary says it was not saved).

    python solutions/run_all.py                # every module whose output is missing, failed or from another source
    python solutions/run_all.py s00 s03        # these modules (a prefix of their names, or a path)
    python solutions/run_all.py --force s07    # again, although its output comes from its source as it is
    python solutions/run_all.py --jobs 2 s11   # its exercises as processes of their own, two at a time

The exit status is 1 when a module failed, 0 otherwise; Ctrl-C or SIGTERM stop the module that runs and end with one
line, the outputs saved so far kept. Set `OMP_NUM_THREADS` to time on a known number of threads; the header records
it.

A module's exercises start from the same seed whether they run together or one by one, so `--jobs N` gives what one
process prints, in the same order, in about the time of its longest exercise when there are cores for all; the header
then says so. The exercises share the machine: outputs that time something (s01, s05) are measured alone.
"""

import argparse
import concurrent.futures
import datetime
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
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


def source_hash(module: Path) -> str:
    "The SHA-256 of a module's source, which its saved output's header records."
    return hashlib.sha256(module.read_bytes()).hexdigest()


def saved_header(output: Path) -> dict[str, str]:
    "The fields of a saved output's header (`module`, `source`, `status`, ...); empty when there is none."
    if not output.is_file():
        return {}
    head = output.read_text(encoding="utf-8").partition("\n\n")[0]
    return dict(line[2:].split(": ", 1) for line in head.splitlines() if line.startswith("# ") and ": " in line)


def is_current(module: Path, output: Path, quick: bool) -> bool:
    "True when `output` holds a run in this mode that ended well, of the module's source as it is now."
    saved = saved_header(output)
    return (
        saved.get("module", "").endswith(f", {mode(quick)}")
        and saved.get("status") == "ok"
        and saved.get("source", "").startswith(f"sha256 {source_hash(module)}")
    )


def kept_instead(output: Path, quick: bool, status: int) -> str | None:
    """Why `output` must keep what it holds rather than this run's output, or None: a full-mode run that ended well is
    replaced by neither a quick-mode run nor a failed one."""
    saved = saved_header(output)
    if not (saved.get("module", "").endswith(f", {mode(False)}") and saved.get("status") == "ok"):
        return None
    if quick:
        return "a quick-mode run never replaces a full-mode one"
    return "a failed run never replaces one that ended well" if status != 0 else None


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


def exercise_numbers(module: Path) -> list[int]:
    "The numbers of a module's `exercise_N` functions, the ones its command line runs by number."
    return sorted({int(n) for n in re.findall(r"^def exercise_(\d+)\(", module.read_text(encoding="utf-8"), re.M)})


def run_module(module: Path, quick: bool, jobs: int = 1) -> tuple[int, str, float]:
    """Run `module` as a learner would; its exit status, everything it printed (echoed as it comes) and the seconds.
    With `jobs` above 1, each exercise runs as a process of its own (`python sNN_name.py N`, which starts it from the
    same seed as a run of them all), at most `jobs` at a time, and their outputs are joined in the exercises' order;
    the status is the first failure's. If this script is stopped meanwhile, the modules' processes are stopped too."""
    env = {k: v for k, v in os.environ.items() if k != "BERTLIB_QUICK"}
    if quick:
        env["BERTLIB_QUICK"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"  # so that its prints and its errors reach the file in the order they happened
    numbers = exercise_numbers(module) if jobs > 1 else []
    commands = (
        [[sys.executable, str(module), str(n)] for n in numbers]
        if len(numbers) > 1
        else [[sys.executable, str(module)]]
    )
    running: list[subprocess.Popen] = []
    stopping = threading.Event()

    def run(command: list[str]) -> tuple[int, str]:
        if stopping.is_set():  # the run was stopped before this exercise's turn came
            return 1, ""
        shown = f"[exercise {command[2]}] " if len(commands) > 1 else ""
        with subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as process:
            running.append(process)
            lines = []
            for line in process.stdout:
                print(shown + line, end="", flush=True)
                lines.append(line)
        return process.returncode, "".join(lines)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run, command) for command in commands]
        try:
            results = [future.result() for future in futures]
        except BaseException:  # Ctrl-C from a terminal reached the modules too; a signal sent to this script did not
            stopping.set()
            for future in futures:
                future.cancel()
            for process in running:
                process.terminate()
            raise
    status = next((code for code, _ in results if code != 0), 0)
    return status, "".join(text for _, text in results), time.perf_counter() - start


def header(module: Path, quick: bool, status: int, seconds: float, jobs: int = 1) -> str:
    """The lines that head a saved output: what ran, where, when, from which commit, how long, and how it ended (and,
    when its exercises ran as processes of their own, how many at a time)."""
    shown = module.relative_to(ROOT) if module.is_relative_to(ROOT) else module
    minutes = f" ({seconds / 60:.1f} min)" if seconds >= 60 else ""
    lines = {
        "module": f"{shown}, {mode(quick)}",
        "machine": machine(),
        "torch": torch.__version__,
        "threads": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "source": f"sha256 {source_hash(module)}",
        "wall time": f"{seconds:.0f} s{minutes}",
        **(
            {"processes": f"one per exercise, {jobs} at a time"}
            if jobs > 1 and len(exercise_numbers(module)) > 1
            else {}
        ),
        "status": "ok" if status == 0 else f"failed (exit status {status})",
    }
    return "".join(f"# {name}: {value}\n" for name, value in lines.items())


class Stopped(Exception):
    "SIGTERM, turned into an exception as Ctrl-C is, so that the run stops the module and ends with one line."

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, frame) -> None:
    raise Stopped(signum)


def run_all(modules: list[Path], output_dir: Path, force: bool, quick: bool, jobs: int = 1) -> dict[str, str]:
    "Run `modules` and save their outputs in `output_dir`; what became of each, by name."
    results = {}
    for module in modules:
        output = output_dir / f"{module.stem}.txt"
        if not force and is_current(module, output, quick):
            results[module.stem] = "skipped: its output comes from its source as it is"
            continue
        print(f"\n### {module.name}", flush=True)
        status, text, seconds = run_module(module, quick, jobs)
        outcome = f"{'ok' if status == 0 else 'FAILED'} in {seconds:.0f} s"
        why = kept_instead(output, quick, status)
        if why is None:
            atomic_write(output, header(module, quick, status, seconds, jobs) + "\n" + text)
            results[module.stem] = f"{outcome} -> {output}"
        else:
            results[module.stem] = f"{outcome}, not saved: {output} keeps its full-mode output ({why})"
    return results


def main(argv: list[str] | None = None) -> int:
    "Run the chosen modules and save their outputs; 1 when one failed, 128 + the signal's number when stopped."
    parser = argparse.ArgumentParser(
        prog="python solutions/run_all.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("modules", nargs="*", help="prefixes of module names (s07) or paths; default: every module")
    parser.add_argument("--force", action="store_true", help="run a module even when its output is current")
    parser.add_argument("--quick", action="store_true", help="run in quick mode (BERTLIB_QUICK=1), as CI does")
    parser.add_argument(
        "--jobs", type=int, default=1, help="run each module's exercises as separate processes, this many at a time"
    )
    parser.add_argument("--output-dir", type=Path, default=OUTPUTS, help=f"where outputs go (default: {OUTPUTS})")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more processes at a time")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        results = run_all(chosen_modules(args.modules), args.output_dir, args.force, args.quick, args.jobs)
    except (KeyboardInterrupt, Stopped) as stop:
        name = "SIGINT" if isinstance(stop, KeyboardInterrupt) else str(stop)
        print(f"run_all.py: stopped by {name}; the outputs saved before are kept", file=sys.stderr)
        return 128 + (signal.SIGINT if isinstance(stop, KeyboardInterrupt) else stop.signum)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("\n" + "\n".join(f"{stem}: {result}" for stem, result in results.items()))
    return 1 if any(r.startswith("FAILED") for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
