"""Reports never replace results with nothing (README, "Runs that survive"): every script that rewrites a generated
block of the README from result files refuses, in one line on stderr and exit code 2, when those results are
missing or empty, and leaves the README and its own folder as they were. A report made of part of its results says
what it lacks.

The scripts run as a user runs them (`python benchmarks/report.py`, `python experiments/NAME.py`), each in a process
of its own, against a copy of the README.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# each report script, with the options that point it at its results (the folder is added after them)
REPORTS = {
    "benchmarks/report.py": ["--results-dir"],
    "experiments/finetune_study.py": ["--report", "--out"],
    "experiments/variants_study.py": ["--report", "--out"],
    "experiments/distil_study.py": ["--report", "--out"],
    "experiments/recipe_report.py": ["--out"],
    "experiments/course_model.py": ["--card", "--out"],
}


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["missing", "empty"])
@pytest.mark.parametrize("script", REPORTS)
def test_claim_reports_never_replace_results_with_nothing(script, folder, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    results = tmp_path / "results"
    if folder == "empty":
        results.mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *REPORTS[script], str(results), "--readme", str(readme)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, f"{script} exited with {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert str(results) in done.stderr
    assert readme.read_text(encoding="utf-8") == (ROOT / "README.md").read_text(encoding="utf-8")
    assert (sorted(results.iterdir()) == []) if folder == "empty" else not results.exists()

