"""The worked solutions of the notebooks' exercises (`solutions/`) exist for every exercise and run.

Every notebook ends with exercises, each naming its solution: a function `exercise_N` of `solutions/sNN_name.py`.
The fast tests check that each named function exists, and that the solutions reach bertlib's internal names only
through `solutions/common.py`'s table, every name of which exists. The slow ones run each module as a learner would
(`python solutions/sNN_name.py`) in quick mode, in its own process, from a temporary folder and with
`BERTLIB_SOLUTIONS_DIR` pointing into it, so that nothing is written into the checkout; a module passes when it
exits cleanly, and every exercise printed its header and at least one number, and the run ended with its summary
line. They also check a module's command line (`--help`, one exercise by number) and `solutions/run_all.py`, which
saves the outputs with their header. The slow ones take minutes on a 2-core CPU.
"""

import ast
import datetime
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bertlib.utils.environment import machine

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("s[0-9][0-9]_*.py"))
CHEAP = ROOT / "solutions" / "s04_encoder.py"  # seconds in quick mode, three exercises, nothing trained


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


@pytest.mark.parametrize("module", SOLUTIONS, ids=lambda p: p.stem)
def test_every_solution_has_a_saved_full_mode_run_that_ended_well(module):
    "What a learner reads beside a solution: its output from `run_all.py` in full mode, whole, under its header."
    saved = ROOT / "solutions" / "outputs" / f"{module.stem}.txt"
    assert saved.is_file(), f"no saved output: run python solutions/run_all.py {module.stem[:3]}"
    header, _, printed = saved.read_text(encoding="utf-8").partition("\n\n")
    assert header.startswith(f"# module: solutions/{module.name}, full mode\n# machine: ")
    assert "\n# status: ok" in header and "quick mode True" not in printed
    assert printed.startswith(f"{module.name}: exercises "), "the run's own first line"


def test_solutions_reach_bertlib_internals_only_through_the_table_of_common():
    "A module that the library moves then breaks in one place, `INTERNALS`, which this test resolves name by name."
    direct = [
        f"{path.name}: {line.strip()}"
        for path in [*SOLUTIONS, ROOT / "solutions" / "run_all.py"]
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.match(r"\s*(from|import) bertlib\.", line)
    ]
    assert not direct, "import these through solutions/common.py's INTERNALS: " + "; ".join(direct)
    spec = importlib.util.spec_from_file_location("solutions_common", ROOT / "solutions" / "common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    missing = []
    for name in common.INTERNALS:
        try:
            common.internal(name)
        except (ImportError, AttributeError) as err:
            missing.append(f"{name} ({err})")
    assert not missing, "INTERNALS names what bertlib no longer has: " + "; ".join(missing)
    with pytest.raises(AttributeError):
        common.internal("no_such_name")


def _environment(tmp_path: Path, quick: bool = True) -> dict[str, str]:
    "The environment a solution runs in here: quick mode, its files and caches under `tmp_path`."
    env = {
        **os.environ,
        "BERTLIB_SOLUTIONS_DIR": str(tmp_path / "out"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    if quick:
        env["BERTLIB_QUICK"] = "1"
    env.setdefault("BERTLIB_CACHE_DIR", str(tmp_path / "cache"))  # conftest points it at the session's cache
    return env


def _run(args: list[str], tmp_path: Path, **options) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env=_environment(tmp_path, **options),
        capture_output=True,
        text=True,
        timeout=1200,
    )


def test_runs_without_an_output_folder_go_to_a_temporary_one_removed_at_exit(tmp_path):
    "A full-mode module trains dozens of runs: with no BERTLIB_SOLUTIONS_DIR, none of their gigabytes stay behind."
    env = {k: v for k, v in _environment(tmp_path).items() if k != "BERTLIB_SOLUTIONS_DIR"}
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    code = "from common import output_dir; a, b = output_dir('a'), output_dir('b'); print(a.parent == b.parent, a)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT / "solutions", env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    same, folder = done.stdout.split()
    assert same == "True" and Path(folder).is_relative_to(tmp_path / "tmp")
    assert not any((tmp_path / "tmp").iterdir()), "the temporary folder outlived the process"


@pytest.mark.slow
def test_a_solution_module_lists_its_exercises_and_runs_one_by_number(tmp_path):
    helped = _run([str(CHEAP), "--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: python solutions/{CHEAP.name}"), helped.stdout
    for number in (1, 2, 3):
        assert re.search(rf"^  {number}  \S", helped.stdout, flags=re.M), helped.stdout
    assert "== exercise" not in helped.stdout  # --help runs nothing

    one = _run([str(CHEAP), "2"], tmp_path)
    assert one.returncode == 0, one.stderr
    assert re.findall(r"^== exercise (\d+)", one.stdout, flags=re.M) == ["2"], one.stdout
    assert re.search(r"^done: exercise_2 \(\d+ s\)$", one.stdout, flags=re.M), one.stdout

    wrong = _run([str(CHEAP), "7"], tmp_path)
    assert wrong.returncode == 2 and "== exercise" not in wrong.stdout
    assert wrong.stderr.strip().splitlines()[-1].endswith("no exercise 7 in s04_encoder.py; it has 1, 2, 3")


@pytest.mark.slow
def test_run_all_saves_each_output_under_its_header_and_goes_on_after_a_failure(tmp_path):
    ok, broken = tmp_path / "s97_ok.py", tmp_path / "s98_broken.py"
    ok.write_text('print("== exercise 1: a stand-in\\n42")\n')
    broken.write_text('print("== exercise 1: fails")\nraise SystemExit("broken on purpose")\n')
    outputs = tmp_path / "outputs"
    script = str(ROOT / "solutions" / "run_all.py")
    args = [script, "--quick", "--output-dir", str(outputs)]
    first = _run([*args, "s04", str(broken), str(ok)], tmp_path, quick=False)
    assert first.returncode == 1, first.stdout + first.stderr  # one module failed; the others still ran

    saved = (outputs / "s04_encoder.txt").read_text(encoding="utf-8")
    head, _, body = saved.partition("\n\n")
    fields = dict(line[2:].split(": ", 1) for line in head.splitlines())
    assert list(fields) == ["module", "machine", "torch", "threads", "date", "commit", "source", "wall time", "status"]
    assert fields["module"] == "solutions/s04_encoder.py, quick mode (BERTLIB_QUICK=1)"
    assert fields["machine"] == machine() and fields["torch"] == torch.__version__
    assert fields["status"] == "ok" and re.fullmatch(r"\d+ s", fields["wall time"])
    date = datetime.datetime.strptime(fields["date"], "%Y-%m-%d %H:%M UTC").replace(tzinfo=datetime.UTC)
    assert -60 < time.time() - date.timestamp() < 3600, fields["date"]
    head_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert fields["commit"].split()[0] == (head_commit.stdout.strip() or "unknown")
    assert re.findall(r"^== exercise (\d+)", body, flags=re.M) == ["1", "2", "3"], body
    assert re.search(r"^done: exercise_1 \(\d+ s\), exercise_2", body, flags=re.M), body

    failed = (outputs / "s98_broken.txt").read_text(encoding="utf-8")
    assert "\n# status: failed (exit status 1)\n" in failed and failed.rstrip().endswith("broken on purpose")

    again = _run([*args, str(ok), str(broken)], tmp_path, quick=False)
    assert re.search(r"^s97_ok: skipped", again.stdout, flags=re.M), again.stdout  # from its source as it is
    assert re.search(r"^s98_broken: FAILED", again.stdout, flags=re.M), again.stdout  # a failure is never current
    ok.write_text(ok.read_text() + "# the source changed after its output was saved\n")
    rerun = _run([*args, str(ok)], tmp_path, quick=False)
    assert re.search(r"^s97_ok: ok in \d+ s", rerun.stdout, flags=re.M), rerun.stdout
    current = _run([*args, str(ok)], tmp_path, quick=False)  # the quick output is current in quick mode ...
    assert re.search(r"^s97_ok: skipped", current.stdout, flags=re.M), current.stdout
    full = _run([script, "--output-dir", str(outputs), str(ok)], tmp_path, quick=False)
    assert re.search(r"^s97_ok: ok", full.stdout, flags=re.M), full.stdout  # ... but does not stand for a full run
    assert (outputs / "s97_ok.txt").read_text().startswith(f"# module: {ok}, full mode\n")


@pytest.mark.slow
@pytest.mark.parametrize("module", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_runs_in_quick_mode_and_prints_its_results(module, tmp_path):
    result = _run([str(module)], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sections = re.split(r"^== ", result.stdout, flags=re.M)[1:]
    printed = {int(m.group(1)): section for section in sections if (m := re.match(r"exercise (\d+)", section))}
    expected = sorted(int(name.split("_")[1]) for name in exercise_functions(module))
    assert sorted(printed) == expected, f"exercises printed: {sorted(printed)}, defined: {expected}"
    for number, section in printed.items():
        body = section.split("\n", 1)[1] if "\n" in section else ""
        assert re.search(r"\d", body), f"exercise {number} printed no number:\n{section}"
    assert re.search(r"^done: exercise_1 ", result.stdout, flags=re.M), result.stdout[-2000:]


def test_run_all_with_jobs_runs_each_exercise_alone_and_joins_their_outputs_in_order(tmp_path):
    "`--jobs 2`: one process each, saved in the order of a run of them all (the slow first one too), a failure kept."
    module = tmp_path / "s96_split.py"
    module.write_text(
        "import sys, time\n"
        "def exercise_1():\n    time.sleep(1.0); print('== exercise 1: slow')\n"  # ends after exercise 2
        "def exercise_2():\n    print('== exercise 2: quick')\n"
        "def exercise_3():\n    print('== exercise 3: fails'); raise SystemExit(3)\n"
        "chosen = [int(a) for a in sys.argv[1:]] or [1, 2, 3]\n"
        "print(f'{sys.argv[0]}: exercises {chosen}')\n"
        "for number in chosen:\n    globals()[f'exercise_{number}']()\n"
    )
    outputs = tmp_path / "outputs"
    script = str(ROOT / "solutions" / "run_all.py")
    result = _run([script, "--quick", "--jobs", "2", "--output-dir", str(outputs), str(module)], tmp_path, quick=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"^\[exercise 2\] == exercise 2: quick$", result.stdout, flags=re.M), result.stdout
    head, _, body = (outputs / "s96_split.txt").read_text(encoding="utf-8").partition("\n\n")
    fields = dict(line[2:].split(": ", 1) for line in head.splitlines())
    assert fields["processes"] == "one per exercise, 2 at a time" and fields["status"] == "failed (exit status 3)"
    assert re.findall(r"^== exercise (\d+)", body, flags=re.M) == ["1", "2", "3"], body
    assert re.findall(r"exercises \[(\d)\]", body) == ["1", "2", "3"], body  # each in a process of its own

    wrong = _run([script, "--jobs", "0", str(module)], tmp_path, quick=False)
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines()[-1].endswith(
        "give 1 or more processes at a time"
    )
