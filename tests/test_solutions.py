"""The worked solutions of the notebooks' exercises (`solutions/`) exist for every exercise and run.

Every notebook ends with exercises, each naming its solution: a function `exercise_N` of `solutions/sNN_name.py`.
The fast test checks that each named function exists. The slow one runs each module as a learner would
(`python solutions/sNN_name.py`) in quick mode, in its own process, from a temporary folder and with
`BERTLIB_SOLUTIONS_DIR` pointing into it, so that nothing is written into the checkout; it passes when the module
exits cleanly, and every exercise printed its header and at least one number, and the run ended with its summary
line. The whole file takes minutes on a 2-core CPU, hence `slow`.
"""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("s[0-9][0-9]_*.py"))


def named_solutions(notebook: Path) -> tuple[set[str], set[str]]:
    "The solution files and the `exercise_N` functions that a notebook's markdown names."
    text = "".join(
        "".join(c["source"])
        for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        if c["cell_type"] == "markdown"
    )
    return set(re.findall(r"solutions/(s\d\d_\w+\.py)", text)), set(re.findall(r"`(exercise_\d+)`", text))


def exercise_functions(module: Path) -> list[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("exercise_")]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_exercise_names_a_solution_that_exists(notebook):
    files, functions = named_solutions(notebook)
    assert files == {f"s{notebook.name[:2]}_{notebook.stem[3:]}.py"}, f"{notebook.name} names {files}"
    module = ROOT / "solutions" / files.pop()
    assert module.is_file(), f"{notebook.name} names {module.name}, which does not exist"
    defined = exercise_functions(module)
    assert functions and functions == set(defined), (
        f"{notebook.name} names {sorted(functions)}, {module.name} defines {defined}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("module", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_runs_in_quick_mode_and_prints_its_results(module, tmp_path):
    env = {
        **os.environ,
        "BERTLIB_QUICK": "1",
        "BERTLIB_SOLUTIONS_DIR": str(tmp_path / "out"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    env.setdefault("BERTLIB_CACHE_DIR", str(tmp_path / "cache"))  # conftest points it at the session's cache
    result = subprocess.run(
        [sys.executable, str(module)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sections = re.split(r"^== ", result.stdout, flags=re.M)[1:]
    printed = {int(m.group(1)): section for section in sections if (m := re.match(r"exercise (\d+)", section))}
    expected = sorted(int(name.split("_")[1]) for name in exercise_functions(module))
    assert sorted(printed) == expected, f"exercises printed: {sorted(printed)}, defined: {expected}"
    for number, section in printed.items():
        body = section.split("\n", 1)[1] if "\n" in section else ""
        assert re.search(r"\d", body), f"exercise {number} printed no number:\n{section}"
    assert re.search(r"^done: exercise_1 ", result.stdout, flags=re.M), result.stdout[-2000:]
