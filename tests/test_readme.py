from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_shows_the_test_command_that_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index(next(line for line in ci if line.startswith("# README test command"))) + 1]
    assert command in (ROOT / "README.md").read_text()


def test_readme_main_command_uses_the_cli():
    readme = (ROOT / "README.md").read_text()
    assert "python -m bertlib " in readme and "pip install -r requirements.txt -e ." in readme
