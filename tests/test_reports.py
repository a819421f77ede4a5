"""Reports never replace results with nothing ("Runs that survive"): every script that rewrites a generated block of
the site's pages from result files refuses, in one line on stderr and exit code 2, when those results are missing or
empty, and leaves the page and its own folder as they were. A report made of part of its results says what it lacks,
and publishes nothing (tests/test_published_numbers.py).

The scripts run as a user runs them (`python benchmarks/report.py`, `python experiments/NAME.py`), each in a process
of its own, against a copy of the page.
"""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# each report script, with the options that point it at its results (the folder is added after them), and its page
REPORTS = {
    "benchmarks/report.py": (["--results-dir"], "speed.md"),
    "experiments/finetune_study.py": (["--report", "--out"], "finetuning.md"),
    "experiments/variants_study.py": (["--report", "--out"], "variants.md"),
    "experiments/distil_study.py": (["--report", "--out"], "distillation.md"),
    "experiments/recipe_report.py": (["--out"], "cpu-recipes.md"),
    "experiments/course_model.py": (["--card", "--out"], "course-model.md"),
}


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["missing", "empty"])
@pytest.mark.parametrize("script", REPORTS)
def test_claim_reports_never_replace_results_with_nothing(script, folder, tmp_path):
    options, name = REPORTS[script]
    page = tmp_path / name
    page.write_text((ROOT / "docs" / name).read_text(encoding="utf-8"), encoding="utf-8")
    results = tmp_path / "results"
    if folder == "empty":
        results.mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *options, str(results), "--page", str(page)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, f"{script} exited with {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert str(results) in done.stderr
    assert page.read_text(encoding="utf-8") == (ROOT / "docs" / name).read_text(encoding="utf-8")
    assert (sorted(results.iterdir()) == []) if folder == "empty" else not results.exists()


@pytest.fixture
def finetune_study(monkeypatch):
    "The fine-tuning study's module, imported as the studies import each other: from experiments/ on the path."
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    return importlib.import_module("finetune_study")


def finetune_result(plan: str, init: str, seed: int, lr: float, score: float) -> dict:
    "A result file of the fine-tuning study as `run` writes it, with `score` as its best validation (a fraction)."
    task = plan.split("-")[0]
    metric = {"conll2003": "f1", "squad": "f1"}.get(task, "accuracy")
    best = {"step": 20, "split": "validation", metric: score, **({"exact_match": score / 2} if task == "squad" else {})}
    settings = {"lr": lr, "epochs": 3.0, "batch_size": 32, "max_seq_len": 128, "doc_stride": 42, "train_examples": None}
    return {
        "plan": plan,
        "task": task,
        "init": init,
        "seed": seed,
        "settings": settings,
        "metric": metric,
        "best": best,
        "validations": [{**best, "step": 10, metric: score - 0.01}, best],
        "train": [{"step": 10, "loss": 0.7}, {"step": 20, "loss": 0.6}],
        "minutes": 2.0,
        "machine": "Test CPU, 2 cores",
        "threads": 1,
        "commit": "abc1234",
        "provenance": {"mode": "full", "machine": "Test CPU, 2 cores", "threads": 1, "commit": "abc1234"},
    }


def write_results(study: Path, results: list[dict]) -> Path:
    """The fine-tuning study's result files in `study/results`, named as `run` names them, and a copy of the site's
    page beside them, for the report to rewrite: its path."""
    folder = study / "results"
    folder.mkdir(parents=True, exist_ok=True)
    for r in results:
        (folder / f"{r['plan']}-lr{r['settings']['lr']:g}-{r['init']}-s{r['seed']}.json").write_text(json.dumps(r))
    page = study.parent / "finetuning.md"
    page.write_text((ROOT / "docs" / "finetuning.md").read_text(encoding="utf-8"), encoding="utf-8")
    return page


def test_the_finetune_report_chooses_the_rates_judges_the_targets_and_names_what_it_lacks(finetune_study, tmp_path):
    runs = [
        # RTE: pre-trained validates best at 1e-4, random init at 3e-4
        ("rte-full", "pretrained", 0, 1e-4, 0.60),
        ("rte-full", "pretrained", 0, 3e-4, 0.55),
        ("rte-full", "pretrained", 1, 1e-4, 0.58),
        ("rte-full", "pretrained", 2, 1e-4, 0.62),
        ("rte-full", "random", 0, 1e-4, 0.53),
        ("rte-full", "random", 0, 3e-4, 0.54),
        # SST-2: pre-trained best at 3e-4, short of BERT-Tiny's 83.2, and worth only 2 points over random weights
        ("sst2-full", "pretrained", 0, 1e-4, 0.80),
        ("sst2-full", "pretrained", 0, 3e-4, 0.81),
        ("sst2-full", "pretrained", 1, 3e-4, 0.79),
        ("sst2-full", "pretrained", 2, 3e-4, 0.80),
        ("sst2-full", "random", 0, 1e-4, 0.78),
        ("sst2-full", "random", 0, 3e-4, 0.77),
        # SQuAD: one run so far; CoNLL-2003: none
        ("squad-full", "pretrained", 0, 1e-4, 0.20),
    ]
    gpu = dict(machine="Test CPU, 16 cores; NVIDIA Test GPU; torch 2.0", threads=3, minutes=0.5)
    results = [
        finetune_result(*run) | (gpu if run[:2] == ("sst2-full", "pretrained") and run[2] > 0 else {}) for run in runs
    ]
    page = write_results(tmp_path / "study", results)
    finetune_study.report(tmp_path / "study", page)
    # partial results: the study's report says what they hold and lack, and the page stays as it was
    assert page.read_text(encoding="utf-8") == (ROOT / "docs" / "finetuning.md").read_text(encoding="utf-8")
    block = (tmp_path / "study" / "README.md").read_text(encoding="utf-8").split("## Learning rates tried")[0]
    assert "**Not published**: the full-data plans lack runs" in block
    assert "| RTE accuracy (`rte-full`) | 60.0 ± 2.0 (n=3) | 54.0 (n=1) | +6.0 | 0.0001, 0.0003 | all |" in block
    assert "| SST-2 accuracy (`sst2-full`) | 80.0 ± 1.0 (n=3) | 78.0 (n=1) | +2.0 | 0.0003, 0.0001 |" in block
    assert "| SQuAD v1.1 F1 (EM) (`squad-full`) | 20.0 (10.0) (n=1) | – | – | 0.0001 so far, – |" in block
    # a dev score beside a test-set score is no verdict; a gain is judged against the seeds' spread too
    assert (
        "SST-2 accuracy ≥ 83.2 (BERT-Tiny's test-set score): 80.0 on the dev set, a different measurement, so no"
        in block
    )
    assert "SST-2 accuracy +2.0, missed by 1.0 points; RTE accuracy +6.0, met" in block
    # (squad-full-e4, a second SQuAD plan with no results either, adds its title after these)
    assert "Not judged yet, for want of results from both starts: CoNLL-2003 entity F1, SQuAD v1.1 F1" in block
    assert "`conll2003-full`: no results yet" in block
    assert "`squad-full`: pre-trained seed 0 at lr 0.0003, pre-trained seed 1, pre-trained seed 2, random init" in block
    # two of SST-2's runs were made on a GPU: the minutes are given per machine, and both machines are named; so is
    # RTE's one machine, since the table mixes them
    assert "| 3 | 32 | 128 | 20 | 2.0 (Test CPU, 2 cores), 0.5 (Test GPU) |" in block
    assert "| 3 | 32 | 128 | 20 | 2.0 (Test CPU, 2 cores) |" in block
    assert (
        "Machines: Test CPU, 16 cores; NVIDIA Test GPU; torch 2.0 (3 threads) and Test CPU, 2 cores (1 thread);"
        in block
    )
    # the published small models beside ours, each marked test or dev, read from docs/literature_numbers.toml
    assert "| BERT-Mini | 4 layers, hidden 256 | 85.9 | 57.9 | – | – | test |" in block
    assert "| ELECTRA-Small | 12 layers, hidden 256 | 91.2 | 66.7 | – | EM 75.8 | dev |" in block
    assert (
        "| course `mini`, pre-trained (this study) | 4 layers, hidden 256 | 80.0 | 60.0 | – | F1 20.0, EM 10.0 |"
        in block
    )
    assert "![learning curves](curves.png)" in block and (tmp_path / "study" / "curves.png").stat().st_size
    study_readme = (tmp_path / "study" / "README.md").read_text(encoding="utf-8")
    assert "| SST-2 accuracy (`sst2-full`) | pre-trained | 80.0 | 81.0 | 0.0003 |" in study_readme
    assert "| SQuAD v1.1 F1 (`squad-full`) | pre-trained | 20.0 (10.0) | not run | 0.0001 so far |" in study_readme
    assert "## Earlier slices" not in study_readme  # none of the slice plans' results are in the folder


def test_a_plan_that_extends_another_runs_at_the_rate_it_chose_and_its_score_is_judged(finetune_study, tmp_path):
    """squad-full-e4 extends squad-full: the pre-trained start only, at the rate squad-full chose (3e-4 here; its
    runs at another rate are not the plan's); the SQuAD target is judged on it, the gain on squad-full's two starts."""
    runs = [
        ("squad-full", "pretrained", 0, 1e-4, 0.20),
        ("squad-full", "pretrained", 0, 3e-4, 0.27),
        ("squad-full", "pretrained", 1, 3e-4, 0.28),
        ("squad-full", "pretrained", 2, 3e-4, 0.26),
        ("squad-full", "random", 0, 1e-4, 0.10),
        ("squad-full", "random", 0, 3e-4, 0.09),
        ("squad-full-e4", "pretrained", 0, 1e-4, 0.35),
        ("squad-full-e4", "pretrained", 0, 3e-4, 0.29),
        ("squad-full-e4", "pretrained", 1, 3e-4, 0.30),
    ]
    page = write_results(tmp_path / "study", [finetune_result(*run) for run in runs])

    def report() -> str:
        finetune_study.report(tmp_path / "study", page)
        return (tmp_path / "study" / "README.md").read_text(encoding="utf-8")

    study_readme = report()
    assert "`squad-full-e4`: pre-trained seed 2)" in study_readme  # a started extension must be whole
    assert "SQuAD v1.1 F1 ≥ 30 (the study's): 29.5 (`squad-full-e4`), missed by 0.5 points so far" in study_readme
    write_results(tmp_path / "study", [finetune_result("squad-full-e4", "pretrained", 2, 3e-4, 0.31)])
    study_readme = report()
    block = study_readme.split("## Learning rates tried")[0]
    assert "`squad-full-e4`" not in block.split("**Not in the table yet**")[1].split("\n")[0]
    assert "| SQuAD v1.1 F1 (EM) (`squad-full-e4`) | 30.0 ± 1.0 (15.0) (n=3) | – | – | 0.0003, – |" in block
    assert "| SQuAD v1.1 F1 (EM) (`squad-full`) | 27.0 ± 1.0 (13.5) (n=3) | 10.0 (5.0) (n=1) | +17.0 |" in block
    assert "SQuAD v1.1 F1 ≥ 30 (the study's): 30.0 (`squad-full-e4`), met." in block
    assert "SQuAD v1.1 F1 +17.0 (`squad-full`), met" in block
    assert (
        "`squad-full-e4` runs `squad-full` again, fresh, with epochs 4 instead of 2 (a schedule of its own), from the "
        "pre-trained start only, at the rate `squad-full` chose." in block
    )
    assert "| SQuAD v1.1 F1 (`squad-full-e4`) | pre-trained | not run | 29.0 (14.5) | 0.0003 (`squad-full`'s) |" in (
        study_readme
    )


def test_the_finetune_report_refuses_results_without_a_full_data_run(finetune_study, tmp_path):
    "Only the earlier slices' results: the block would hold none of the four tasks, so nothing is written."
    results = tmp_path / "study" / "results"
    results.mkdir(parents=True)
    (results / "sst2-pretrained-s0.json").write_text(json.dumps(finetune_result("sst2", "pretrained", 0, 1e-4, 0.7)))
    page = tmp_path / "finetuning.md"
    page.write_text("<!-- finetune:start -->\nmeasured\n<!-- finetune:end -->\n")
    with pytest.raises(finetune_study.MissingResults, match="holds no full-data result"):
        finetune_study.report(tmp_path / "study", page)
    assert "measured" in page.read_text() and sorted(p.name for p in (tmp_path / "study").iterdir()) == ["results"]
