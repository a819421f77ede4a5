"""The GPU plan: what a session that is lent a GPU runs, one part per device call, and the same parts at tiny size on a
CPU (`--dry-run`, run by tests/test_gpu_plan.py) to prove their commands, paths and outputs beforehand. The device
calls, the staging and what to do with the results: experiments/gpu/README.md.

    python experiments/gpu/plan.py stage                  # here: data and wheels into .gpu/ (carried to the GPU)
    python3 experiments/gpu/plan.py course                # on the GPU: one part per device call
    python experiments/gpu/plan.py collect DIR            # here: the files a call brought back, put in their places
    python experiments/gpu/plan.py course --dry-run       # the same part on a CPU, quick mode, tiny sizes

Parts (device calls, in the order to run them; one H100, 16 cores; minutes estimated from docs/results/gpu):
  course    notebook 07 in full mode, which trains the course model's recipe (mini, 100 epochs of batch 256 =
            9,300 steps, the last 10% at 512 tokens), packed as the new models/course-mini. Estimate 9 to 11
            minutes: session 3 ran the notebook at ~700k tokens/s (~22 steps/s of 256 pairs of ~122 tokens), so
            the 8,370 short steps take ~6.2 min, the 930 steps at 512 tokens (4x the tokens each) 0.7 to 2.8 min,
            the rest of the notebook ~2 min (session 3: 452 s for 7,440 steps); the host syncs removed since
            should make it faster, but it may not fit. So from the run's first checkpoint on, the log projects
            the end of training (a step at 512 tokens costing 1x to 4x one at 128), and if even 1x cannot end
            before the part's deadline (--max-minutes, default 9.5), the notebook is stopped and the same recipe
            trains outside it with torch.compile and 8 loader workers for the time left (`--route compiled`
            goes there at once; notebook 07 then keeps its saved outputs).
  finetune  notebook 10 in full mode, from the models/course-mini that `collect` put in place (so run it after
            the course part's collect). Estimate 5 to 15 minutes: 7 SST-2 runs of 6,315 steps of 32, RTE,
            CoNLL-2003 (1,317 steps) and SQuAD, at 60 to 150 steps/s (no GPU run of it yet). Past its deadline it
            stops and brings back what ran: the notebook up to the cell that was cut (evidence, not a result to
            save) and the settings and metrics of every run.
  speed     the cuda suite of benchmarks/train_step.py beside transformers, compiled (with peak memory) then
            eager, and the profile of a compiled base step. Estimate 5 to 8 minutes (session 1 ran one compiled
            row in under 150 s). Each command has its cap (5, 2.5 and 1.5 minutes) within the deadline, and the
            suite writes its JSON after every row, so a slow command keeps what it finished and leaves the others
            their time.
Every part writes its log and results into $OUT (the device tool brings that folder back: at most 8 files of
16 MiB), ends by --max-minutes whatever happens, and packs what it has before then.

Hand-written; not part of the library.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import date
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))  # docs/publish.py: what a published result must say of itself
import publish  # noqa: E402

HERE = Path(__file__).resolve().parent
STAGE = ROOT / ".gpu"  # gitignored; the device calls carry it: `carry: [".gpu"]`
DATA_FOLDERS = ("wikitext/wikitext-2-v1", "glue/SST-2", "glue/RTE", "conll2003", "squad")  # what bertlib reads
CARRY_LIMIT = 64 * 2**20  # the device tool's limit on everything that travels: the working tree and the carried paths
RETURN_LIMIT = 16 * 2**20  # the largest file the device tool brings back from $OUT
# What executes a notebook without jupyter (experiments/gpu/run_notebook.py), and what of its requirements the GPU
# machine's image holds (/work/.library/device/KINDS.md lists it): the rest travels as wheels.
NOTEBOOK_RUNNER = ("nbclient", "ipykernel")
ON_DEVICE = frozenset({"attrs", "packaging", "psutil", "pygments", "python-dateutil", "six", "typing-extensions"})
# What bertlib needs that the image lacks (seqeval) or holds at a version requirements.txt excludes (its tokenizers
# 0.23.2 cuts a pair one piece differently, which failed notebook 10's check cell there on 2026-11-26): they travel
# too, at the versions installed here, without what they need (numpy and scikit-learn are in the image).
LIBRARY_WHEELS = ("seqeval", "tokenizers")
DEVICE_PYTHON = "3.12"  # the GPU machine's python3, for which the wheels are chosen
SITE = Path(tempfile.gettempdir()) / "gpu-plan-site"  # where the wheels are installed on the device
PART_MINUTES = 9.5  # each device call may run 10 minutes; the rest is margin for the call itself
PACK_SECONDS = 40  # kept at the end of a part to pack and copy what it made
AFTER_TRAINING_SECONDS = 45  # notebook 07's cells after its training run (plots, the resume demo, the check cell)
GRACE_SECONDS = 30  # a stopped command's time to save (a run writes a checkpoint on SIGTERM) before it is killed
PARTS = ("stage", "course", "finetune", "speed", "collect")
DRY_MARK = "a dry run"  # in the first line of a dry run's logs, where `collect` looks for it


class PlanError(Exception):
    "Bad input or a missing prerequisite: one line, exit code 2."


# ---------------------------------------------------------------------------------------------------------------- stage


def requirement_closure(roots: tuple[str, ...], provided: frozenset[str]) -> dict[str, str]:
    """The distributions `roots` need on Python `DEVICE_PYTHON` under Linux, with the versions installed here; a
    distribution in `provided` is there already, so neither it nor what it needs is listed."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    where = {"python_version": DEVICE_PYTHON, "sys_platform": "linux", "platform_system": "Linux", "extra": ""}
    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found or name in provided:
            continue
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            raise PlanError(f"{name} is not installed here, its wheel is unknown; pip install {name}") from None
        for line in requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(where):
                todo.append(req.name)
    return dict(sorted(found.items()))


def tree_bytes() -> int:
    "What the device tool sends besides the carried paths: tracked files, and untracked ones that git does not ignore."
    done = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True
    )
    if done.returncode != 0:
        raise PlanError(f"{ROOT} is not a git checkout, so what travels cannot be measured")
    listed = done.stdout.split(b"\0")
    return sum((ROOT / os.fsdecode(p)).stat().st_size for p in listed if p and (ROOT / os.fsdecode(p)).is_file())


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def stage(args: argparse.Namespace) -> None:
    """Copy the data the parts read into .gpu/data and the notebook runner's wheels into .gpu/wheels, then check that
    the tree and .gpu fit the device tool's 64 MiB."""
    source = Path(args.data_from or os.environ.get("BERTLIB_DATA_DIR") or "")
    if not str(source) or not (source / DATA_FOLDERS[0]).is_dir():
        raise PlanError(
            f"no data to stage: give --data-from DIR or set BERTLIB_DATA_DIR to a folder holding {DATA_FOLDERS[0]}/"
        )
    STAGE.mkdir(exist_ok=True)  # git tells an ignored folder by its pattern's slash only once it exists
    if subprocess.run(["git", "check-ignore", "-q", str(STAGE)], cwd=ROOT).returncode != 0:
        raise PlanError(f"{STAGE.name}/ is not ignored by git: add /{STAGE.name}/ to .gitignore")
    shutil.rmtree(STAGE / "data", ignore_errors=True)
    for folder in DATA_FOLDERS:
        if not (source / folder).is_dir():
            raise PlanError(f"{source / folder} is missing; the parts read it")
        shutil.copytree(source / folder, STAGE / "data" / folder)
    for note in source.glob("*/SOURCE.md"):  # provenance and licence travel with the data
        shutil.copy2(note, STAGE / "data" / note.relative_to(source))
    print(f"data: {folder_bytes(STAGE / 'data') / 2**20:.1f} MiB in {STAGE / 'data'}")
    if not args.no_wheels:
        wheels = requirement_closure(NOTEBOOK_RUNNER, ON_DEVICE)
        shutil.rmtree(STAGE / "wheels", ignore_errors=True)
        platforms = [f"--platform={p}_x86_64" for p in ("manylinux_2_28", "manylinux_2_17", "manylinux2014")]
        download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", *platforms]
        download += [f"--python-version={DEVICE_PYTHON}", "--implementation=cp", "-d", str(STAGE / "wheels")]
        if subprocess.run(download + [f"{n}=={v}" for n, v in wheels.items()]).returncode != 0:
            raise PlanError("pip could not download the wheels (see above); or stage with --no-wheels and carry them")
        for name in LIBRARY_WHEELS:
            wheels[name] = version(name)
            pinned = f"{name}=={wheels[name]}"
            published = subprocess.run(download + [pinned], capture_output=True).returncode == 0
            if not published:  # seqeval has only a source distribution: build its wheel here
                build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
                if subprocess.run([*build, "-w", str(STAGE / "wheels"), pinned]).returncode != 0:
                    raise PlanError(f"pip could neither download nor build a wheel of {pinned} (see above)")
        print(f"wheels: {len(wheels)}, {folder_bytes(STAGE / 'wheels') / 2**20:.1f} MiB in {STAGE / 'wheels'}")
    total = tree_bytes() + folder_bytes(STAGE)
    print(f"travels: {total / 2**20:.1f} MiB of the device tool's {CARRY_LIMIT / 2**20:.0f} (tree and {STAGE.name}/)")
    if total > CARRY_LIMIT:
        raise PlanError(f"the tree and {STAGE.name}/ hold {total / 2**20:.1f} MiB, over the device tool's 64 MiB")


# ------------------------------------------------------------------------------------------------ running under a clock


def descendants(pid: int) -> list[int]:
    "The processes under `pid`, from /proc (a notebook's kernel runs in a session of its own, so no group holds them)."
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_tree(process: subprocess.Popen) -> None:
    """SIGTERM to `process` (a notebook is saved, a training run checkpoints), then SIGKILL to it and to everything
    it started that is still there after `GRACE_SECONDS`: a kernel left behind would hold the GPU."""
    below = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Part:
    "One part on one machine: its deadline, its log (also in $OUT) and the environment of its commands."

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name, self.dry = name, args.dry_run
        self.start = time.monotonic()
        self.deadline = self.start + 60 * args.max_minutes
        self.out = Path(args.out or os.environ.get("OUT") or ROOT / "runs" / "gpu-plan" / "out").resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = ROOT / "runs" / "gpu-plan" / name  # run folders and packs; runs/ is gitignored
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.log = open(self.out / f"log-{name}.txt", "w", encoding="utf-8")
        self.failed: list[str] = []  # the commands that failed or ran out of time: the part's exit code is then 1
        self.say(f"{name}: {DRY_MARK if self.dry else 'for real'}, until {args.max_minutes:g} minutes from now")
        self.env = self._environment()

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.start:6.0f} s] {text}\n"
        sys.stdout.write(line)
        sys.stdout.flush()
        self.log.write(line)
        self.log.flush()

    def left(self) -> float:
        "Seconds to the part's deadline."
        return self.deadline - time.monotonic()

    def _environment(self) -> dict[str, str]:
        data = STAGE / "data" if (STAGE / "data").is_dir() else os.environ.get("BERTLIB_DATA_DIR")
        if not data or not Path(data, DATA_FOLDERS[0]).is_dir():
            raise PlanError(f"no data: run `python experiments/gpu/plan.py stage` first and carry {STAGE.name}/")
        env = {k: v for k, v in os.environ.items() if k != "BERTLIB_QUICK"}
        paths = [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
        if self.name in ("course", "finetune") and self._install_notebook_runner():
            paths.insert(0, str(SITE))
        env.update(
            PYTHONPATH=os.pathsep.join(paths),
            PYTHONUNBUFFERED="1",
            BERTLIB_DATA_DIR=str(Path(data).resolve()),
            BERTLIB_RUNS_DIR=str(self.work / "runs"),
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
        )
        if self.dry:
            env["BERTLIB_QUICK"] = "1"
        return env

    def _install_notebook_runner(self) -> bool:
        """Install the staged wheels (on the GPU machine: the notebook runner and `LIBRARY_WHEELS`); True if they are to
        be used. A dry run uses what is installed here."""
        import importlib.util

        wheels = sorted((STAGE / "wheels").glob("*.whl"))
        if self.dry or (not wheels and all(map(importlib.util.find_spec, ("nbclient", "ipykernel", "seqeval")))):
            return False
        if not wheels:
            raise PlanError(
                f"nbclient or seqeval is missing and {STAGE.name}/wheels holds no wheels: stage and carry them"
            )
        install = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        install += ["--no-cache-dir", "--upgrade", "--target", str(SITE), *map(str, wheels)]
        if subprocess.run(install).returncode != 0:
            raise PlanError("the staged wheels did not install (see above)")
        return True

    def header(self) -> None:
        """The machine and versions, first in every log, kept as `self.machine`; a part that is no dry run stops here
        without a GPU."""
        if shutil.which("nvidia-smi"):
            self.run("GPU", ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"], 30)
        code = (
            "import torch, transformers; gpu = torch.cuda.is_available(); "
            "print(torch.cuda.get_device_name(0) if gpu else 'no GPU', torch.__version__, transformers.__version__, "
            "gpu, sep='|')"
        )
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            raise PlanError(f"torch or transformers does not import here: {done.stderr.strip().splitlines()[-1:]}")
        name, torch_version, transformers_version, gpu = done.stdout.strip().split("|")
        self.machine = f"{name}, torch {torch_version}, transformers {transformers_version}"
        self.say(f"machine: {self.machine}; {os.cpu_count()} CPUs")
        if not self.dry and gpu != "True":
            raise PlanError("torch sees no GPU here; run the part with --dry-run on a CPU")

    def run(self, what: str, argv: list[str], cap: float | None = None, watch: Callable[[], bool] | None = None) -> int:
        """Run `argv` in the repository root, its output into the log, until it ends, `cap` seconds pass, the part's
        deadline (less `PACK_SECONDS`) comes, or `watch()` (called every few seconds) says stop. Its exit code;
        124 when stopped. Anything but 0 counts as a failure of the part, unless `watch` asked for the stop."""
        budget = self.left() - PACK_SECONDS if cap is None else min(cap, self.left() - PACK_SECONDS)
        if budget <= 0:
            self.say(f"skipped {what}: no time left")
            return 124
        self.say(f"{what} (at most {budget:.0f} s): {' '.join(argv)}")
        process = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        reader = threading.Thread(target=self._copy_output, args=(process,), daemon=True)
        reader.start()
        end, stopped, asked = time.monotonic() + budget, False, False
        while process.poll() is None:
            time.sleep(2)
            asked = watch is not None and self._asks_to_stop(watch)
            if asked or time.monotonic() > end:
                self.say(f"stopping {what}" + ("" if asked else ": out of time"))
                stop_tree(process)
                stopped = True
        reader.join(10)
        code = 124 if stopped else process.returncode
        self.say(f"{what}: exit code {code}")
        if code and not asked:
            self.failed.append(f"{what} (exit code {code})")
        return code

    def _asks_to_stop(self, watch: Callable[[], bool]) -> bool:
        try:
            return watch()
        except (OSError, RuntimeError, ValueError, KeyError) as err:  # a file read while the run rewrote it
            self.say(f"watch: {type(err).__name__}: {err}")
            return False

    def _copy_output(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            sys.stdout.write(line)
            self.log.write(line)
        self.log.flush()

    def keep(self, path: Path, name: str | None = None) -> None:
        "Copy a result into $OUT, saying so if it is too large to come back."
        target = self.out / (name or path.name)
        shutil.copy2(path, target)
        size = target.stat().st_size
        note = " (over the device tool's 16 MiB: it will not come back)" if size > RETURN_LIMIT else ""
        self.say(f"kept {target.name}: {size / 2**20:.2f} MiB{note}")


# --------------------------------------------------------------------------------------------------------------- parts


def notebook(number: str) -> Path:
    "The course's notebook `number` (by its number, so that a new title does not break the plan)."
    found = sorted((ROOT / "notebooks").glob(f"{number}_*.ipynb"))
    if len(found) != 1:
        raise PlanError(f"expected one notebooks/{number}_*.ipynb, found {[p.name for p in found]}")
    return found[0]


def run_notebook(part: Part, number: str, watch: Callable[[], bool] | None = None) -> int:
    """Execute a copy of notebook `number` beside it (so that its relative paths hold and the checkout's notebook
    stays as it is), its cells allowed the whole part; the executed copy goes to $OUT, also when cut."""
    path = notebook(number)
    copy = path.with_name(f".plan-{path.name}")  # gitignored, and a name that `notebook` does not match
    shutil.copy2(path, copy)
    try:
        timeout = max(60, int(part.left()))
        code = part.run(
            f"notebook {path.name}",
            [sys.executable, str(HERE / "run_notebook.py"), str(copy), "--timeout", str(timeout)],
            watch=watch,
        )
        part.keep(copy, path.name)
    finally:
        copy.unlink(missing_ok=True)
    return code


def run_folders(runs: Path) -> list[Path]:
    "The run folders under `runs` that hold a checkpoint, the one with the most training steps first."

    def steps(run: Path) -> int:
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        return max((r["step"] for r in records if "loss" in r), default=0)

    found = {p.parent.parent for p in runs.glob("**/checkpoints/step-*")}
    return sorted((run for run in found if (run / "metrics.jsonl").exists()), key=steps, reverse=True)


def training_state(run: Path) -> dict | None:
    "The newest checkpoint's step and length of the run (`total_steps`), or None before the first checkpoint."
    import torch

    newest = sorted(run.glob("checkpoints/step-*/training_state.pt"))
    if not newest:
        return None
    state = torch.load(newest[-1], map_location="cpu", weights_only=True)
    return {"step": state["step"], "total_steps": state["total_steps"]}


def projected_seconds(step: int, total: int, long_from: int, steps_per_s: float, long_cost: float) -> float:
    """Seconds until a run at `step` of `total` ends, going on at `steps_per_s`, where each step from `long_from` on
    (the long sequences) costs `long_cost` steps before it."""
    short = max(0, long_from - step)
    long = total - max(step, long_from)
    return (short + long * long_cost) / steps_per_s


class Projection:
    """Watches the pre-training run that notebook 07 writes under `runs`: says every minute where it stands and when it
    would end, and reports it doomed when even the cheapest long steps (1x a short one) cannot end by `deadline`."""

    def __init__(self, part: Part, runs: Path, deadline: float) -> None:
        self.part, self.runs, self.deadline = part, runs, deadline
        self.total: int | None = None
        self.long_from, self.long_cost = 0, 1.0
        self.first: tuple[float, int] | None = None
        self.said = 0.0
        self.doomed = False

    def __call__(self) -> bool:
        found = run_folders(self.runs) if self.runs.is_dir() else []
        if not found:
            return False
        run = found[0]
        if self.total is None:
            state = training_state(run)
            if state is None:
                return False
            training = json.loads((run / "config.json").read_text())["training"]
            self.total = state["total_steps"]
            long = training.get("long_seq_len")
            self.long_from = round(self.total * (1 - training["long_share"])) if long else self.total
            self.long_cost = long / training["max_seq_len"] if long else 1.0
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        step = max((r["step"] for r in records if "loss" in r), default=0)
        now = time.monotonic()
        if self.first is None:
            self.first = (now, step)
            return False
        if now - self.first[0] < 45 or step <= self.first[1] or step >= self.long_from:
            return False  # too soon to measure the pace of the short steps, or past them
        rate = (step - self.first[1]) / (now - self.first[0])
        low = projected_seconds(step, self.total, self.long_from, rate, 1.0)
        high = projected_seconds(step, self.total, self.long_from, rate, self.long_cost)
        if now - self.said >= 60:
            self.said = now
            ends = (
                f"{low:.0f} s" if high == low else f"{low:.0f} to {high:.0f} s (a long step 1x to {self.long_cost:g}x)"
            )
            self.part.say(
                f"{run.name}: step {step:,} of {self.total:,}, {rate:.1f} steps/s; training ends in {ends}; "
                f"{self.deadline - now:.0f} s are left for it"
            )
        self.doomed = now + low > self.deadline
        if self.doomed:
            self.part.say(f"even at 1x the run would end {now + low - self.deadline:.0f} s after its deadline")
        return self.doomed


def train_course(run: Path, dry: bool) -> None:
    """The course model's recipe (`bertlib.course_configs`) outside the notebook, compiled and with 8 loader workers:
    what `--route compiled` runs. In a dry run, quick mode's recipe for a few steps on the CPU."""
    from dataclasses import replace

    import bertlib

    model_config, cfg = bertlib.course_configs(quick=dry, gpu=not dry)
    fast = dict(max_steps=20, eval_every=20, save_every=20, device="cpu") if dry else dict(compile=True, num_workers=8)
    show = lambda record: print(record, flush=True)  # noqa: E731
    bertlib.pretrain(run, model_config, replace(cfg, **fast), on_log=show, show_progress=False)


def course(part: Part, route: str) -> None:
    """Notebook 07 in full mode (or the recipe compiled, when the notebook cannot end in time), its run packed as
    course-mini with `made_by.json`, the facts its card (experiments/course_model.py) states."""
    runs = part.work / "runs"
    if route in ("auto", "notebook"):
        watch = Projection(part, runs, part.deadline - PACK_SECONDS - AFTER_TRAINING_SECONDS)
        run_notebook(part, "07", watch if route == "auto" else None)
        if watch.doomed:
            route = "compiled"
    if route == "compiled":
        shutil.rmtree(runs, ignore_errors=True)
        dry = ["--dry-run"] if part.dry else []
        part.run("the course recipe, compiled", [sys.executable, __file__, "train-course", str(runs / "course"), *dry])
    found = run_folders(runs) if runs.is_dir() else []
    if not found:
        raise PlanError(f"no run with a checkpoint under {runs}: nothing to pack (see log-course.txt)")
    packed = part.work / "course-mini"
    # the newest checkpoint, not the best at 128 tokens: only the end of the schedule has had the 512-token steps
    part.run("pack", [sys.executable, str(HERE / "pack_run.py"), str(found[0]), str(packed), "--newest"], cap=120)
    (packed / "made_by.json").write_text(json.dumps(made_by(part, route, found[0]), indent=1) + "\n")
    with tarfile.open(part.work / "course-mini.tar.gz", "w:gz") as tar:
        tar.add(packed, arcname="course-mini")
    part.keep(part.work / "course-mini.tar.gz")


def made_by(part: Part, route: str, run: Path) -> dict:
    "How the course model was made, in the words of its card, and the facts behind them."
    state = training_state(run)
    finished = state["step"] == state["total_steps"]
    notebook_route = route != "compiled"
    return {
        "command": "python3 experiments/gpu/plan.py course",
        "machine": f"{part.machine}, bf16 autocast",
        "script": "notebook 07 in full mode (bertlib.course_configs(quick=False) on a GPU), alone on the GPU"
        if notebook_route
        else "bertlib.course_configs(quick=False) on a GPU, trained outside notebook 07 with torch.compile and 8 "
        "loader workers (experiments/gpu/plan.py's compiled route), alone on the GPU",
        "kept": "the newest checkpoint (the end of the schedule, after the long sequences), its weights cast to "
        "float16 (experiments/gpu/pack_run.py --newest); the optimiser state is not shipped",
        "note": f"the run ended its schedule at step {state['step']:,}"
        if finished
        else f"the run stopped at step {state['step']:,} of its {state['total_steps']:,} (the part's time limit)",
        "route": "notebook" if notebook_route else "compiled",
        "run": run.name,
        "steps": state["step"],
        "total_steps": state["total_steps"],
        "finished": finished,
        "part_minutes": round((time.monotonic() - part.start) / 60, 1),
        "date": date.today().isoformat(),
        "dry_run": part.dry,
    }


def finetune(part: Part) -> None:
    "Notebook 10 in full mode on models/course-mini; the settings and metrics of its runs come back."
    run_notebook(part, "10")
    runs = part.work / "runs"
    if not runs.is_dir():
        raise PlanError(f"notebook 10 made no run under {runs} (see log-finetune.txt)")

    def settings_and_metrics(entry: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if entry.isdir():
            return None if entry.name.endswith("/checkpoints") else entry
        return entry if entry.name.endswith(("/config.json", "/metrics.jsonl")) else None

    with tarfile.open(part.work / "finetune-runs.tar.gz", "w:gz") as tar:
        tar.add(runs, arcname="finetune-runs", filter=settings_and_metrics)
    part.keep(part.work / "finetune-runs.tar.gz")


def speed(part: Part) -> None:
    """The cuda suite of the training-step benchmark, compiled then eager, the profile of a compiled base step, and
    the fine-tuning step beside transformers."""
    bench = [sys.executable, str(ROOT / "benchmarks" / "train_step.py")]
    profile = [sys.executable, str(ROOT / "benchmarks" / "profile_step.py")]
    if part.dry:  # the same scripts and outputs at tiny size on the CPU, eager (compiling on 2 cores takes minutes)
        tiny = ["--preset", "tiny", "--vocab-size", "8192", "--batch-size", "4", "--seq-len", "32", "--device", "cpu"]
        bench += [*tiny, "--warmup", "1", "--repeats", "1", "--no-memory", "--no-compile"]
        profile += [*tiny, "--steps", "1"]
    else:
        bench += ["--suite", "cuda"]
        profile += ["--compile"]
    eager = [] if part.dry else ["--no-compile", "--no-memory"]
    part.run("training step, compiled", [*bench, "--output", str(part.out / "train_step-cuda.json")], cap=300)
    part.run("training step, eager", [*bench, *eager, "--output", str(part.out / "train_step-cuda-eager.json")], 150)
    part.run("profile", [*profile, "--output", str(part.out / "profile-base-after.txt")], cap=90)
    finetune_step = [sys.executable, str(ROOT / "benchmarks" / "finetune_step.py")]
    tiny = ["--batches", "2", "--train-sentences", "256", "--warmup", "0", "--repeats", "1"]
    finetune_step += ["--device", "cpu", *tiny] if part.dry else ["--device", "cuda"]
    part.run("fine-tuning step", [*finetune_step, "--output", str(part.out / "finetune_step-cuda.json")], 90)


# ------------------------------------------------------------------------------------------------------------- collect


def complete(path: Path) -> bool:
    "Whether every code cell of the notebook at `path` ran (nbclient skips empty ones), and none failed."
    cells = [
        c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()
    ]
    return all(c.get("execution_count") and not any(o["output_type"] == "error" for o in c["outputs"]) for c in cells)


def collect(folder: Path, dry: bool) -> list[str]:
    """Put the files a device call brought back (`folder`) where the repository keeps them, and return the commands to
    run next. A notebook that did not run to its end stays in `folder`; a dry run's files go in only with `dry`."""
    if not folder.is_dir():
        raise PlanError(f"{folder} is not a folder of results")
    logs = [path.read_text().split("\n", 1)[0] for path in folder.glob("log-*.txt")]
    if not dry and any(DRY_MARK in line for line in logs):
        raise PlanError(f"{folder} holds a dry run's results: they go into a checkout only with --dry-run")
    for path in sorted(folder.glob("*_step-cuda*.json")) if not dry else ():
        gpu_result(path)
    results = ROOT / "docs" / "results" / "gpu"
    archive = folder / "course-mini.tar.gz"
    placed, then = [], []
    if archive.exists():
        made = install_course_model(archive, dry)
        record = results / "runs" / f"plan-{made['run']}"
        if (folder / "log-course.txt").exists():
            shutil.copy2(folder / "log-course.txt", record / "log.txt")
        placed.append(f"{archive.name} -> models/course-mini and {record.relative_to(ROOT)}")
        then += [
            "python experiments/course_model.py  # scores the new model, rewrites its card and docs/course-model.md",
            f"python experiments/gpu_report.py  # after adding {record.name} to its SESSIONS",
        ]
    for path in sorted(folder.iterdir()):
        if path == archive:
            continue
        if path.suffix == ".ipynb":
            if not complete(path):
                placed.append(f"{path.name}: did not run to its end, so it stays in {folder}")
                continue
            target = notebook(path.name.split("_", 1)[0])
            then.append("pytest tests/test_notebook_numbers.py  # the notebooks' prose against their new outputs")
        elif path.name.startswith("log-"):
            target = results / f"plan-{path.name}"
        elif path.name.startswith(("train_step-cuda", "finetune_step-cuda")):
            target = ROOT / "benchmarks" / "results" / path.name
            then.append("python benchmarks/report.py  # the speed tables of docs/speed.md")
        elif path.name == "profile-base-after.txt":
            target = results / path.name
        elif path.name == "finetune-runs.tar.gz":
            shutil.rmtree(results / "finetune-runs", ignore_errors=True)
            with tarfile.open(path) as tar:
                tar.extractall(results, filter="data")
            placed.append(f"{path.name} -> {(results / 'finetune-runs').relative_to(ROOT)}")
            continue
        else:
            placed.append(f"{path.name}: no place for it, left in {folder}")
            continue
        shutil.copy2(path, target)
        placed.append(f"{path.name} -> {target.relative_to(ROOT)}")
    print("\n".join(placed))
    return list(dict.fromkeys(then))


def gpu_result(path: Path) -> None:
    """Refuse a benchmark's result that its file does not show to be a GPU run's: measured on a cuda device, in full
    mode (`docs/publish.py`). A log beside it proves nothing: the file is what the page would be made of."""
    try:
        data = publish.read_result(path, ("machine",))
    except publish.MissingResults as err:
        raise PlanError(str(err)) from None
    device = (data["machine"] or {}).get("device")
    mode = (data.get("provenance") or {}).get("mode", "an unrecorded")
    if device != "cuda" or mode != "full":
        raise PlanError(
            f"{path} was measured on {device} in {mode} mode: only a GPU run's full-mode results are collected "
            "(a dry run's go into a checkout with --dry-run), so nothing was put in place"
        )


def install_course_model(archive: Path, dry: bool) -> dict:
    """Replace models/course-mini by the packed run, keeping its card and evaluation until experiments/course_model.py
    rewrites them; the run's settings, metrics and making also go to docs/results/gpu/runs/plan-RUN. Returns the
    making (`made_by.json`)."""
    target = ROOT / "models" / "course-mini"
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        packed = Path(tmp) / "course-mini"
        made = json.loads((packed / "made_by.json").read_text())
        if made["dry_run"] and not dry:
            raise PlanError(f"{archive} comes from a dry run: it replaces the course model only with --dry-run")
        for name in ("README.md", "evaluation.json"):
            if (target / name).exists():
                shutil.copy2(target / name, packed / name)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(packed, target)
        record = ROOT / "docs" / "results" / "gpu" / "runs" / f"plan-{made['run']}"
        record.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "metrics.jsonl", "made_by.json"):
            shutil.copy2(packed / name, record / name)
    return made


# ---------------------------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    "The plan's command line."
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=(*PARTS, "train-course"), help="what to do (train-course: used by the course part)")
    p.add_argument("folder", nargs="?", help="collect: the folder a device call brought back; train-course: the run")
    p.add_argument("--dry-run", action="store_true", help="on a CPU, in quick mode, at tiny sizes")
    p.add_argument("--max-minutes", type=float, default=PART_MINUTES, help="the part ends by then, packed")
    p.add_argument("--out", help="results folder (default: $OUT, the device tool's)")
    p.add_argument("--route", choices=("auto", "notebook", "compiled"), default="auto", help="course: see above")
    p.add_argument("--data-from", help="stage: the data folder (default: $BERTLIB_DATA_DIR)")
    p.add_argument("--no-wheels", action="store_true", help="stage: the data only")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not 0 < args.max_minutes <= 10:
            raise PlanError(f"--max-minutes {args.max_minutes:g} is not valid: a device call runs at most 10 minutes")
        if args.part in ("collect", "train-course") and not args.folder:
            raise PlanError(f"{args.part} needs a folder")
        if args.part == "stage":
            stage(args)
        elif args.part == "collect":
            for command in collect(Path(args.folder), args.dry_run):
                print(f"then: {command}")
        elif args.part == "train-course":
            train_course(Path(args.folder), args.dry_run)
        else:
            part = Part(args.part, args)
            part.header()
            if args.part == "course":
                course(part, args.route)
            else:
                {"finetune": finetune, "speed": speed}[args.part](part)
            part.say(f"{args.part} done in {(time.monotonic() - part.start) / 60:.1f} min; results in {part.out}")
            if part.failed:
                part.say(f"failed: {'; '.join(part.failed)}")
                return 1
    except PlanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
