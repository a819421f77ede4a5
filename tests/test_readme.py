import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_shows_the_test_command_that_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index(next(line for line in ci if line.startswith("# README test command"))) + 1]
    assert command in (ROOT / "README.md").read_text()


def test_readme_main_command_uses_the_cli():
    readme = (ROOT / "README.md").read_text()
    assert "python -m bertlib " in readme and "pip install -r requirements.txt -e ." in readme


def _exports() -> dict[str, set[str]]:
    "The modules each notebook writes, by its two-digit number: its `default_exp` and every `#| export NAME`."
    found = {}
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        code = "".join("".join(c["source"]) + "\n" for c in cells if c["cell_type"] == "code")
        found[notebook.name[:2]] = {
            f"bertlib.{m}" for m in re.findall(r"^#\| (?:default_exp|export) ([\w.]+)", code, re.M)
        }
    return found


def _named(cell: str) -> set[str]:
    "The modules a table cell names as exported: those before its first parenthesis (which names hand-written ones)."
    return set(re.findall(r"`(bertlib\.[\w.]+)`", cell.partition("(")[0]))


def test_the_readme_names_what_each_notebook_exports():
    rows = re.findall(r"^\| `(\d\d)_\w+` \|.*\| ([^|]*) \|$", (ROOT / "README.md").read_text(encoding="utf-8"), re.M)
    assert {number: _named(cell) for number, cell in rows} == _exports()


def test_the_tour_names_what_each_notebook_exports():
    "Notebook 00's table of the course: a row for one notebook, or for a range of them (02–05), names their exports."
    cells = json.loads((ROOT / "notebooks" / "00_setup_and_tour.ipynb").read_text(encoding="utf-8"))["cells"]
    text = "".join("".join(c["source"]) + "\n" for c in cells if c["cell_type"] == "markdown")
    exports, covered = _exports(), []
    for first, last, cell in re.findall(r"^\| (\d\d)(?:–(\d\d))?\b[^|]*\|[^|]*\| ([^|]*) \|$", text, re.M):
        numbers = [f"{n:02d}" for n in range(int(first), int(last or first) + 1)]
        assert _named(cell) == set().union(*(exports[n] for n in numbers)), f"the row of notebooks {numbers}"
        covered += numbers
    assert sorted(covered) == sorted(exports)


def test_notebook_00_gives_the_readme_s_install_command():
    "The README's main command installs, then runs: notebook 00 tells a reader to install with the same words."
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    main = next(line for line in re.findall(r"```bash\n(.*?)\n```", readme, re.S) if "bertlib pretrain" in line)
    install = main.split(" && .venv/bin/python")[0]
    cells = json.loads((ROOT / "notebooks" / "00_setup_and_tour.ipynb").read_text(encoding="utf-8"))["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert install.startswith("python3 -m venv") and f"`{install}`" in text


def test_the_readme_is_a_front_door():
    "At most 150 lines: what the course is, the two commands, how to open it, the course table, a few results."
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    assert "<!--" not in readme.replace("<!-- overnight CPU pre-training", ""), "generated blocks live on the pages"
