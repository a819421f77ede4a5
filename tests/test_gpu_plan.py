"""The GPU plan (experiments/gpu/plan.py) on the CPU, before any GPU session needs it: every part's commands, paths and
outputs at tiny size (`--dry-run`), in a copy of the repository as the device tool makes one, with the staged data;
and the arithmetic that decides when the course part leaves notebook 07 for the compiled recipe.

The dry run executes small stand-ins under the names of notebooks 07 and 10: the notebooks themselves run on every
CI replay (nbval), and the plan depends on no cell of theirs, only on their file names, on their running top to
bottom and on the run folders they write under `$BERTLIB_RUNS_DIR`; the stand-ins do that in seconds, where the two
notebooks take about 10 minutes in quick mode on the 2-core machine. So the chain runs as a session would run it:
stage, course, collect, finetune (from the collected model), collect, speed.
"""

import importlib
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import nbformat
import pytest
import torch

import bertlib

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "experiments" / "gpu"

# notebook 07's part in the plan: a pre-training run under $BERTLIB_RUNS_DIR, read from the notebooks' folder
STAND_IN_07 = """
import os
from dataclasses import replace
from pathlib import Path

import bertlib

assert bertlib.quick_mode(), "a dry run is in quick mode"
assert (Path("..") / "models" / "course-mini" / "config.json").is_file(), "the notebook runs in notebooks/"
model_config, cfg = bertlib.course_configs(bertlib.quick_mode())
cfg = replace(cfg, max_steps=12, log_every=3, eval_every=6, save_every=6, eval_batches=2)
records = bertlib.pretrain(Path(os.environ["BERTLIB_RUNS_DIR"]) / "stand-in", model_config, cfg, show_progress=False)
print(records[-1])
"""
# notebook 10's: fine-tuning from the course model that the course part made and `collect` put in place
STAND_IN_10 = """
import json
import os
from pathlib import Path

import bertlib

source = Path("..") / "models" / "course-mini"
assert json.loads((source / "made_by.json").read_text())["dry_run"], "the course part's model, collected"
cfg = bertlib.FinetuneConfig(
    task="rte", source=str(source), train_examples=32, eval_examples=16, max_steps=4, batch_size=8, log_every=2
)
bertlib.finetune(Path(os.environ["BERTLIB_RUNS_DIR"]) / "10" / "rte", cfg, show_progress=False)
"""


@pytest.fixture(scope="module")
def plan_module():
    "experiments/gpu/plan.py as a module (the folder is one of scripts, not a package)."
    sys.path.insert(0, str(GPU))
    try:
        yield importlib.import_module("plan")
    finally:
        sys.path.remove(str(GPU))


def copy_of_the_repository(target: Path) -> Path:
    """What the device tool sends: the tracked files and the untracked ones that git does not ignore (as a git
    checkout, so that `stage` can measure it and see .gpu/ ignored), with the stand-ins under the notebooks' names."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, map(os.fsdecode, listed)):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes((ROOT / name).read_bytes())
    for number, source in (("07", STAND_IN_07), ("10", STAND_IN_10)):
        (path,) = (target / "notebooks").glob(f"{number}_*.ipynb")
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source.strip())]), path)
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)
    subprocess.run(["git", "add", "-A"], cwd=target, check=True)
    return target


def plan(repo: Path, *args: str | Path, code: int = 0) -> str:
    "Run the copy's plan with `args`; fail with its output unless it exits with `code`; return its output."
    done = subprocess.run(
        [sys.executable, str(repo / "experiments" / "gpu" / "plan.py"), *map(str, args)],
        cwd=repo,
        text=True,
        capture_output=True,
    )
    assert done.returncode == code, f"plan {args}: exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def ran_to_the_end(path: Path) -> bool:
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    return all(c.execution_count and not any(o.output_type == "error" for o in c.outputs) for c in cells)


@pytest.mark.slow
def test_every_part_dry_runs_in_a_copy_of_the_repository(tmp_path, task_data):
    repo = copy_of_the_repository(tmp_path / "repo")
    out = tmp_path / "out"
    original_07 = (repo / "notebooks").glob("07_*.ipynb").__next__().read_text()

    staged = plan(repo, "stage", "--no-wheels", "--data-from", task_data)
    assert (repo / ".gpu" / "data" / "wikitext" / "wikitext-2-v1" / "train-00000-of-00001.parquet").is_file()
    assert all(
        (repo / ".gpu" / "data" / folder).is_dir() for folder in ("glue/SST-2", "glue/RTE", "conll2003", "squad")
    )
    travels = float(re.search(r"travels: ([\d.]+) MiB", staged)[1])
    assert 0 < travels < 64

    plan(repo, "course", "--dry-run", "--out", out / "course")
    assert sorted(p.name for p in (out / "course").iterdir()) == [
        "07_pretraining.ipynb",
        "course-mini.tar.gz",
        "log-course.txt",
    ]
    assert ran_to_the_end(out / "course" / "07_pretraining.ipynb")
    assert not list((repo / "notebooks").glob(".plan-*")), "the executed copy is removed"
    assert (repo / "notebooks" / "07_pretraining.ipynb").read_text() == original_07, "the checkout's notebook stays"
    with tarfile.open(out / "course" / "course-mini.tar.gz") as tar:
        tar.extractall(tmp_path / "packed", filter="data")
    packed = tmp_path / "packed" / "course-mini"
    model, tokenizer = bertlib.load_model(packed)
    assert model.config.num_hidden_layers == bertlib.course_configs(True)[0].num_hidden_layers
    made = json.loads((packed / "made_by.json").read_text())
    assert made["route"] == "notebook" and made["run"] == "stand-in" and made["finished"] and made["steps"] == 12
    assert (packed / "checkpoints" / "step-0000012" / "model.safetensors").is_file(), "the newest checkpoint is kept"

    # the recipe outside the notebook, where the course part goes when the notebook cannot end in time
    plan(repo, "course", "--dry-run", "--route", "compiled", "--out", out / "compiled")
    with tarfile.open(out / "compiled" / "course-mini.tar.gz") as tar:
        tar.extractall(tmp_path / "compiled", filter="data")
    made = json.loads((tmp_path / "compiled" / "course-mini" / "made_by.json").read_text())
    assert made["route"] == "compiled" and made["finished"] and made["steps"] == 20
    bertlib.load_model(tmp_path / "compiled" / "course-mini")

    refused = plan(repo, "collect", out / "course", code=2)
    assert "dry run" in refused and len(refused.strip().splitlines()) == 1
    collected = plan(repo, "collect", out / "course", "--dry-run")
    assert "python experiments/course_model.py" in collected
    course_mini = repo / "models" / "course-mini"
    assert json.loads((course_mini / "made_by.json").read_text())["dry_run"]
    assert (course_mini / "README.md").is_file() and (course_mini / "evaluation.json").is_file(), "kept for the card"
    assert [c.name for c in (course_mini / "checkpoints").iterdir()] == ["step-0000012"]
    assert (repo / "docs" / "results" / "gpu" / "runs" / "plan-stand-in" / "log.txt").is_file()
    assert (repo / "docs" / "results" / "gpu" / "plan-log-course.txt").is_file()
    assert ran_to_the_end(repo / "notebooks" / "07_pretraining.ipynb")

    plan(repo, "finetune", "--dry-run", "--out", out / "finetune")
    assert ran_to_the_end(out / "finetune" / "10_finetuning.ipynb")
    with tarfile.open(out / "finetune" / "finetune-runs.tar.gz") as tar:
        names = tar.getnames()
    assert "finetune-runs/10/rte/metrics.jsonl" in names and not any("checkpoints" in n for n in names)
    plan(repo, "collect", out / "finetune", "--dry-run")
    assert (repo / "docs" / "results" / "gpu" / "finetune-runs" / "10" / "rte" / "metrics.jsonl").is_file()

    plan(repo, "speed", "--dry-run", "--out", out / "speed")
    for name in ("train_step-cuda.json", "train_step-cuda-eager.json"):
        results = json.loads((out / "speed" / name).read_text())["results"]
        assert len(results) == 1 and results[0]["bertlib"]["tokens_per_second"] > 0, name
    assert "bertlib" in (out / "speed" / "profile-base-after.txt").read_text()
    collected = plan(repo, "collect", out / "speed", "--dry-run")
    assert (repo / "benchmarks" / "results" / "train_step-cuda.json").is_file()
    assert "python benchmarks/report.py" in collected


def test_a_part_refuses_more_than_a_device_call_and_a_missing_folder(tmp_path):
    for args in (("course", "--max-minutes", "11"), ("collect",), ("collect", tmp_path / "nowhere")):
        done = subprocess.run([sys.executable, str(GPU / "plan.py"), *map(str, args)], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, args


def test_the_wheels_are_what_the_notebook_runner_needs_beyond_the_gpu_image(plan_module):
    wheels = plan_module.requirement_closure(plan_module.NOTEBOOK_RUNNER, plan_module.ON_DEVICE)
    # nbclient -> jupyter-client -> pyzmq and tornado; ipykernel -> ipython -> jedi -> parso: followed all the way
    assert {"nbclient", "nbformat", "jupyter-client", "pyzmq", "tornado", "ipykernel", "ipython", "parso"} <= set(
        wheels
    )
    assert not set(wheels) & plan_module.ON_DEVICE
    with pytest.raises(plan_module.PlanError, match="not installed"):
        plan_module.requirement_closure(("no-such-distribution",), frozenset())


def test_the_projection_counts_the_long_steps_at_their_cost(plan_module):
    # 8,370 short steps and 930 long ones at 20 steps/s: 418.5 s for the short ones, 46.5 s per unit of long cost
    assert plan_module.projected_seconds(0, 9300, 8370, 20.0, 1.0) == pytest.approx(465.0)
    assert plan_module.projected_seconds(0, 9300, 8370, 20.0, 4.0) == pytest.approx(418.5 + 4 * 46.5)
    assert plan_module.projected_seconds(8370, 9300, 8370, 20.0, 4.0) == pytest.approx(4 * 46.5)


def fake_run(runs: Path, step: int, total: int) -> None:
    "A pre-training run folder as far as the projection reads it: settings, metrics and a checkpoint's state."
    run = runs / "course-full"
    (run / "checkpoints" / "step-0000930").mkdir(parents=True, exist_ok=True)
    torch.save({"step": 930, "total_steps": total}, run / "checkpoints" / "step-0000930" / "training_state.pt")
    training = {"max_seq_len": 128, "long_seq_len": 512, "long_share": 0.1}
    (run / "config.json").write_text(json.dumps({"training": training}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": step, "loss": 3.0}) + "\n")


@pytest.mark.parametrize(("steps_per_s", "doomed"), [(20.0, False), (10.0, True)])
def test_the_course_part_leaves_a_notebook_that_cannot_end_in_time(
    plan_module, tmp_path, monkeypatch, steps_per_s, doomed
):
    said = []
    part = type("Part", (), {"say": staticmethod(said.append)})
    clock = [1000.0]
    monkeypatch.setattr(plan_module.time, "monotonic", lambda: clock[0])
    watch = plan_module.Projection(part, tmp_path, deadline=clock[0] + 60 + 600)
    fake_run(tmp_path, 930, 9300)
    assert watch() is False  # the first look only starts the clock
    clock[0] += 60
    # 600 s are left; the rest of the run at 1x long cost takes (8,370 - step + 930) / steps_per_s:
    # 358.5 s at 20 steps/s (from step 2,130), 777 s at 10 (from step 1,530)
    fake_run(tmp_path, 930 + round(60 * steps_per_s), 9300)
    assert watch() is doomed and watch.doomed is doomed
    assert any(f"{steps_per_s:.1f} steps/s" in line for line in said), said


def test_the_readme_calls_name_the_plan_s_parts_and_fit_the_device_tool(plan_module):
    text = (GPU / "README.md").read_text()
    calls = [json.loads(line) for line in re.findall(r'^ *(\{"command".*\})$', text, re.MULTILINE)]
    assert [re.search(r"plan\.py (\w+)", c["command"])[1] for c in calls] == ["course", "finetune", "speed"]
    for call in calls:
        assert len(call["command"]) <= 2000 and call["carry"] == [".gpu"] and call["timeout_s"] <= 600, call
        plan_module.build_parser().parse_args(call["command"].split()[2:])  # exits on an option the plan lacks
    named = set(re.findall(r"(?:experiments|benchmarks)/[\w/]+\.py", text + (GPU / "plan.py").read_text()))
    assert named and all((ROOT / p).is_file() for p in named), sorted(p for p in named if not (ROOT / p).is_file())
