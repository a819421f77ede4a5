"""Published numbers keep their provenance (issue 42, items 6-9; "Runs that survive"): every result file says how
it was made, the reports publish only complete, full-mode results, a trial (`--smoke`, short benchmark settings)
never writes where published results live, a partial or broken results folder leaves the pages as they are and says
so in one line, and the GPU plan's `collect` takes GPU results only from a GPU run, by what the files say.

The scripts run as a user runs them, each in a process of its own, in a copy of the repository's scripts, pages and
results (the course model linked in), so that what a broken script would overwrite is the copy's."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULT_FILES = sorted(
    [
        *(ROOT / "benchmarks" / "results").glob("*.json"),
        *(ROOT / "experiments").glob("*/results/*.json"),
        ROOT / "experiments" / "recipe_study" / "speed.json",
        ROOT / "models" / "course-mini" / "evaluation.json",
    ]
)
# what is copied: the scripts, the pages and README they write, and the published results they read
COPIED = [
    "README.md",
    "docs/*.md",
    "docs/*.py",
    "docs/*.toml",
    "experiments/*.py",
    "experiments/gpu/*.py",
    "experiments/*/README.md",
    "experiments/*/results/*.json",
    "benchmarks/*.py",
    "benchmarks/results/*.json",
]

pytestmark = pytest.mark.slow


@pytest.fixture
def repo(tmp_path) -> Path:
    "A copy of the repository's scripts, pages and results; the course model and the GPU runs are linked in."
    copy = tmp_path / "repo"
    for pattern in COPIED:
        for path in ROOT.glob(pattern):
            target = copy / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    (copy / "models").symlink_to(ROOT / "models", target_is_directory=True)
    (copy / "docs" / "results").mkdir(parents=True, exist_ok=True)
    (copy / "docs" / "results" / "gpu").symlink_to(ROOT / "docs" / "results" / "gpu", target_is_directory=True)
    return copy


def pages(repo: Path) -> dict[str, str]:
    "What a reader sees of the results: the README and the site's pages, and the studies' own reports."
    found = [repo / "README.md", *(repo / "docs").glob("*.md"), *(repo / "experiments").glob("*/README.md")]
    return {str(path.relative_to(repo)): path.read_text(encoding="utf-8") for path in found}


def script(repo: Path, name: str, *args: str | Path, env: dict | None = None) -> subprocess.CompletedProcess:
    "Run the copy's `name` (a path under the repository) with `args`, from the copy's root."
    return subprocess.run(
        [sys.executable, str(repo / name), *map(str, args)],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**_base_env(), "PYTHONPATH": str(ROOT), **{key: str(value) for key, value in (env or {}).items()}},
        timeout=900,
    )


def _base_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}


def one_line_refusal(done: subprocess.CompletedProcess) -> bool:
    "Exit code 2 and one line on stderr that starts with 'error:': no traceback."
    return done.returncode == 2 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1


def test_claim_every_result_file_says_how_it_was_made():
    "Full or trial mode, the machine, the commit and the date; a benchmark's also its repeats or rounds."
    for path in RESULT_FILES:
        made = json.loads(path.read_text(encoding="utf-8")).get("provenance")
        assert made and made["mode"] in ("full", "trial"), f"{path} does not say how it was made"
        assert made["machine"] and made["commit"] and made["date"], f"{path}: {made}"
        if path.parent.name == "results" and path.parent.parent.name == "benchmarks":
            assert "repeats" in made or "rounds" in made, f"{path}: {made}"


def test_claim_a_study_s_trial_never_rewrites_a_page(repo, task_data):
    "The course model scored on one batch (`--smoke`), and a trial's fine-tuning results reported: no page changes."
    before = pages(repo)
    trial = repo.parent / "trial"
    done = script(repo, "experiments/course_model.py", "--smoke", "--out", trial, env={"BERTLIB_DATA_DIR": task_data})
    assert done.returncode == 0, done.stderr[-3000:]
    assert pages(repo) == before and (trial / "README.md").is_file()
    results = trial / "finetune" / "results"
    results.mkdir(parents=True)
    for path in (repo / "experiments" / "finetune_study" / "results").glob("*-full-*.json"):
        data = json.loads(path.read_text())
        data.setdefault("provenance", {})["mode"] = "trial"  # what `run --smoke` records
        (results / path.name).write_text(json.dumps(data))
    done = script(repo, "experiments/finetune_study.py", "--report", "--out", trial / "finetune")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "left as it is" in done.stderr and "trial mode" in done.stderr
    assert pages(repo) == before


def test_claim_a_benchmark_s_trial_never_replaces_its_published_result(repo, task_data):
    "`finetune_step.py --batches 2 --warmup 0 --repeats 1` without --output: the published result and page stay."
    before, result = pages(repo), (repo / "benchmarks" / "results" / "finetune_step-cpu.json").read_text()
    short = ["--batches", "2", "--warmup", "0", "--repeats", "1", "--train-sentences", "256", "--device", "cpu"]
    done = script(repo, "benchmarks/finetune_step.py", *short, env={"BERTLIB_DATA_DIR": task_data})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (repo / "benchmarks" / "results" / "finetune_step-cpu.json").read_text() == result
    assert "never replaces a published one" in done.stderr
    done = script(repo, "benchmarks/report.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert pages(repo) == before


def test_claim_collect_takes_gpu_results_only_from_a_gpu_run(repo, tmp_path):
    "A CPU trial's files named as GPU results, without the dry run's log: refused in one line, nothing put in place."
    brought = tmp_path / "brought"
    brought.mkdir()
    for name in ("train_step", "finetune_step"):
        data = json.loads((repo / "benchmarks" / "results" / f"{name}-cpu.json").read_text())
        data.setdefault("provenance", {})["mode"] = "trial"
        (brought / f"{name}-cuda.json").write_text(json.dumps(data))
    done = script(repo, "experiments/gpu/plan.py", "collect", brought)
    assert one_line_refusal(done), done.stdout[-2000:] + done.stderr[-2000:]
    assert "measured on cpu" in done.stderr
    assert not list((repo / "benchmarks" / "results").glob("*-cuda.json"))


def test_claim_partial_or_broken_results_leave_the_pages_as_they_are(repo):
    """One of the fine-tuning study's 62 files, a benchmarks folder with one file, a result holding `{}` and the
    recipe study with one file: each is one line on stderr, exit code 2, and no page changes."""
    before = pages(repo)
    study = repo / "experiments" / "finetune_study" / "results"
    for path in sorted(study.iterdir())[1:]:
        path.unlink()
    done = script(repo, "experiments/finetune_study.py", "--report")
    assert one_line_refusal(done) and "lack" in done.stderr, done.stderr[-3000:]

    results = repo / "benchmarks" / "results"
    kept = {path.name: path.read_text() for path in results.iterdir()}
    for path in results.iterdir():
        if path.name != "train_step-cpu.json":
            path.unlink()
    done = script(repo, "benchmarks/report.py")
    assert one_line_refusal(done) and "lacks" in done.stderr, done.stderr[-3000:]
    for name, text in kept.items():
        (results / name).write_text(text)
    (results / "train_step-cpu.json").write_text("{}")
    done = script(repo, "benchmarks/report.py")
    assert one_line_refusal(done) and "train_step-cpu.json" in done.stderr, done.stderr[-3000:]

    recipes = repo / "experiments" / "recipe_study" / "results"
    for path in recipes.iterdir():
        if path.name != "default@third.json":
            path.unlink()
    done = script(repo, "experiments/recipe_report.py", "--gpu-runs", repo / "nowhere")
    assert one_line_refusal(done), done.stderr[-3000:]
    assert pages(repo) == before
