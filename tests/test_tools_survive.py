"""The course's own tools survive how people run them (issue 42): nbdev exports never damage the library,
`solutions/run_all.py` never replaces a good saved output, and old import paths say where their names went. Each test
names the README claim it backs (section "Runs that survive")."""

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import missing_tool

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------ nbdev exports
def notebook(*cells: str) -> str:
    "A notebook of code cells, as Jupyter saves one."
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "id": f"c{i}",
                    "metadata": {},
                    "outputs": [],
                    "source": source.splitlines(keepends=True),
                }
                for i, source in enumerate(cells)
            ],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )


def library(project: Path) -> dict[str, bytes]:
    "Every file of the project's package, by path."
    lib = project / "bertlib"
    return {
        p.relative_to(lib).as_posix(): p.read_bytes()
        for p in lib.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def nbdev_export(project: Path, *notebooks: str) -> subprocess.CompletedProcess:
    "`nbdev-export` in `project`, of all its notebooks or of one (`--path`), as a user runs it."
    command = Path(sys.executable).with_name("nbdev-export")
    if not command.is_file():
        missing_tool(f"no nbdev-export beside {sys.executable}")
    env = {k: v for k, v in os.environ.items() if k != "IN_TEST"}  # nbdev exports nothing under IN_TEST
    env["PYTHONPATH"] = str(ROOT)  # the processor of pyproject.toml's export_procs, bertlib._nbdev
    path = ["--path", *notebooks] if notebooks else []
    return subprocess.run([str(command), *path], cwd=project, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    "A copy of the project's notebooks, settings and library, hand-written modules included."
    folder = tmp_path_factory.mktemp("project")
    shutil.copytree(
        ROOT / "notebooks", folder / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints", "runs")
    )
    shutil.copytree(ROOT / "bertlib", folder / "bertlib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", folder)
    return folder


def refused(done: subprocess.CompletedProcess) -> str:
    "The one line `nbdev-export` stopped with."
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nbdev-export: "), done.stderr
    return lines[0]


@pytest.mark.slow
def test_claim_nbdev_exports_cannot_damage_the_library(project):
    "README: one notebook exports the files all of them do; no notebook writes a hand-written module, or outside."
    before = library(project)
    assert nbdev_export(project).returncode == 0
    assert library(project) == before, "a full export no longer reproduces the library"
    for name in ("06_pretraining_data.ipynb", "11_variants.ipynb", "11_variants.ipynb", "10_finetuning.ipynb"):
        done = nbdev_export(project, f"notebooks/{name}")
        assert done.returncode == 0, done.stderr[-2000:]
        changed = sorted(path for path, data in library(project).items() if before.get(path) != data)
        assert not changed, f"exporting {name} alone changed {changed}"

    outside = f"h4evil{uuid.uuid4().hex[:8]}"
    rogue = project / "notebooks" / "99_rogue.ipynb"
    for cells, said in (
        (["#| default_exp utils.files", "#| export\nX = 1"], "bertlib/utils/files.py is written by hand"),
        (["#| default_exp scratch.x", "#| export utils.files\nX = 1"], "bertlib/utils/files.py is written by hand"),
        (["#| default_exp __init__", "#| export\nX = 1"], "bertlib/__init__.py is written by hand"),
        (["#| default_exp scratch.x", f"#| export ..tmp.{outside}\nX = 1"], "does not name a module of the package"),
        (["#| default_exp scratch.x", "#| export data.pairs scratch.y\nX = 1"], "must name one module"),
        (["#| default_exp", "#| export\nX = 1"], "must name one module"),
        (["#| default_exp data.pairs", "#| export\nX = 1"], "exports to `data.pairs`, the module of"),
        (["#| default_exp model.variants", "#| export\nX = 1"], "both name `#| default_exp model.variants`"),
        (["#| export\nX = 1"], "no `#| default_exp` module"),
    ):
        rogue.write_text(notebook(*cells), encoding="utf-8")
        for args in ((), ("notebooks/99_rogue.ipynb",), ("notebooks/06_pretraining_data.ipynb",)):
            line = refused(nbdev_export(project, *args))
            assert said in line and "99_rogue.ipynb" in line, (cells, line)
            assert library(project) == before, cells
        assert not (Path("/tmp") / f"{outside}.py").exists()
    rogue.unlink()


QUOTE_LAST = '"""Ends in a quote: "x\\""""'  # as a notebook may write them: each comes out exactly
BACKSLASH_N = "'''A backslash and an n, not a newline: \\\\n, and a \"quote\"'''"
RAW = 'r"""A raw one: \\d+ \\n"""'
DOCSTRINGS = (("# why this module exists", QUOTE_LAST, ""), ("", BACKSLASH_N, "  # said after it"), ("", RAW, ""))


@pytest.mark.slow
def test_claim_nbdev_exports_pass_docstrings_through_exactly(project):
    "README: the string that opens a module's first cell is its docstring exactly as written, comments kept."
    rogue = project / "notebooks" / "99_docs.ipynb"
    before = library(project)
    for i, (above, literal, after) in enumerate(DOCSTRINGS):
        cell = f"#| export scratch.doc{i}\n" + (f"{above}\n" if above else "") + f"{literal}{after}\n\nA = {i}\n"
        rogue.write_text(notebook("#| default_exp scratch.own", "#| export\nOWN = 0", cell), encoding="utf-8")
        done = nbdev_export(project, "notebooks/99_docs.ipynb")
        assert done.returncode == 0, done.stderr[-2000:]
        text = (project / "bertlib" / "scratch" / f"doc{i}.py").read_text(encoding="utf-8")
        assert text.startswith(f"{literal}\n\n# AUTOGENERATED"), text
        assert above in text and after.strip() in text and f"A = {i}\n" in text, text
        imported = subprocess.run(
            [sys.executable, "-c", f"import bertlib.scratch.doc{i} as m; print(repr(m.__doc__))"],
            cwd=project,
            capture_output=True,
            text=True,
        )
        assert imported.returncode == 0, imported.stderr[-1000:]
        assert imported.stdout.strip() == repr(ast.literal_eval(literal))
    rogue.unlink()
    shutil.rmtree(project / "bertlib" / "scratch")
    assert nbdev_export(project).returncode == 0
    assert library(project) == before


# ---------------------------------------------------------------------------------------------- solutions/run_all.py
RUN_ALL = ROOT / "solutions" / "run_all.py"
STAND_IN = """import os, sys, time
print("== exercise 1: a stand-in\\n42", flush=True)
if os.environ.get("STAND_IN_FAILS"):
    raise SystemExit("no data, no network")
time.sleep(float(os.environ.get("STAND_IN_SECONDS", "0")))
"""


def run_all(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, str(RUN_ALL), "--output-dir", str(tmp_path / "outputs"), *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_claim_run_all_keeps_good_outputs(tmp_path):
    "README: run_all.py decides what is stale by the source's content; a failed or quick run never replaces a full one."
    module = tmp_path / "s97_stand_in.py"
    module.write_text(STAND_IN)
    output = tmp_path / "outputs" / "s97_stand_in.txt"
    assert run_all(tmp_path, str(module)).returncode == 0
    good = output.read_bytes()
    assert b"\n# status: ok\n" in good and b", full mode\n" in good

    for when in (time.time() + 60, time.time() - 60):  # a fresh clone: the files' times say nothing of their content
        os.utime(module, (when, when))
        os.utime(output, (when - 30, when - 30))
        done = run_all(tmp_path, str(module))
        assert "s97_stand_in: skipped" in done.stdout and "== exercise" not in done.stdout, done.stdout
    for args, env in (((str(module), "--quick"), {}), (("--force", str(module)), {"STAND_IN_FAILS": "1"})):
        done = run_all(tmp_path, *args, **env)
        assert "not saved: " in done.stdout and "keeps its full-mode output" in done.stdout, done.stdout
        assert output.read_bytes() == good, args
    module.write_text(STAND_IN + "# a changed source\n")
    assert run_all(tmp_path, str(module)).returncode == 0 and output.read_bytes() != good

    started = subprocess.Popen(  # Ctrl-C (SIGINT) and SIGTERM, sent to run_all.py alone
        [sys.executable, str(RUN_ALL), "--output-dir", str(tmp_path / "outputs"), "--force", str(module)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "STAND_IN_SECONDS": "600"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a terminal's Ctrl-C, even when the tests run in the background, where a shell starts them ignoring SIGINT
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert "== exercise 1" in next(line for line in started.stdout if "==" in line)
        started.send_signal(signal.SIGINT)
        _, err = started.communicate(timeout=60)
    finally:
        started.kill()
    assert started.returncode == 130 and err.strip().splitlines() == [
        "run_all.py: stopped by SIGINT; the outputs saved before are kept"
    ], err


SOLUTION_STOPPED = """import os, sys
sys.path.insert(0, {solutions!r})
from common import cli, output_dir
from bertlib import BertConfig, PretrainConfig, load_tokenizer, pretrain


def exercise_1():
    "a run that SIGTERM stops"
    tokenizer = load_tokenizer({tokenizer!r})
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size())
    settings = PretrainConfig(max_steps=10**6, batch_size=4, max_seq_len=32, log_every=1, eval_every=10**6)
    pretrain(output_dir("run"), config, settings, tokenizer=tokenizer, on_log=lambda r: print("logged", flush=True))


if __name__ == "__main__":
    cli(__name__)
"""


def test_claim_a_solution_stopped_by_sigterm_says_so_in_one_line(tokenizer_file, tmp_path):
    "README: a solution stopped mid-run says so in one line, and not to resume a run it kept in a temporary folder."
    module = tmp_path / "s96_stopped.py"
    module.write_text(SOLUTION_STOPPED.format(solutions=str(ROOT / "solutions"), tokenizer=str(tokenizer_file)))
    env = {k: v for k, v in os.environ.items() if k not in ("BERTLIB_SOLUTIONS_DIR", "BERTLIB_QUICK")}
    started = subprocess.Popen(
        [sys.executable, str(module)],
        env={**env, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "logged" in next(line for line in started.stdout if line.startswith("logged"))
        started.send_signal(signal.SIGTERM)
        _, err = started.communicate(timeout=120)
    finally:
        started.kill()
    lines = [line for line in err.splitlines() if "%|" not in line and line.strip()]
    assert started.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err[-2000:]
    assert lines[-1] == (
        "s96_stopped.py: exercise 1 stopped by SIGTERM; run it again with python solutions/s96_stopped.py 1"
    ), lines
    assert "--resume" not in err and not any(tmp_path.glob("bertlib-solutions-*")), err[-2000:]


# ------------------------------------------------------------------------------------------------ old import paths
OLD_PATHS = """
import importlib, json, warnings
found = []
for old, name, new in {cases!r}:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(f"from {{old}} import {{name}} as value", scope := {{}})
            value = scope["value"]
        except Exception as err:
            found.append([old, name, f"{{type(err).__name__}}: {{err}}", []])
            continue
    same = value is getattr(importlib.import_module(new), name)
    said = [[w.category.__name__, str(w.message), w.filename] for w in caught]
    found.append([old, name, same, said])
print(json.dumps(found))
"""
OLD_CASES = [  # bertlib 0.2's flat layout, as the README and notebooks of the time used it
    ("bertlib.model", "BertModel", "bertlib.model.bert"),
    ("bertlib.model", "head_index", "bertlib.model.bert"),
    ("bertlib.data", "load_wikitext2", "bertlib.data.wikitext"),
    ("bertlib.viz", "plot_attention", "bertlib.viz.attention"),
    ("bertlib.tasks", "load_task", "bertlib.tasks.load"),
    ("bertlib.tasks", "TASK_NAMES", "bertlib.tasks.examples"),
    ("bertlib.tokenizer", "train_tokenizer", "bertlib.data.tokenizer"),
    ("bertlib.evaluate", "fill_mask", "bertlib.evaluation.scores"),
    ("bertlib.config", "BertConfig", "bertlib.model.config"),
    ("bertlib.interop", "to_transformers", "bertlib.hf.interop"),
    ("bertlib.trainer", "fit", "bertlib.train.loop"),
    ("bertlib.trainer", "train_step", "bertlib.train.loop"),
    ("bertlib.runs", "resumed_config", "bertlib.train.lifecycle"),
]


def test_claim_old_import_paths_work_for_a_release_and_say_where_they_went(tmp_path):
    "README: bertlib 0.2's flat import paths still work, each with a DeprecationWarning that names the new path."
    done = subprocess.run(
        [sys.executable, "-c", OLD_PATHS.format(cases=OLD_CASES)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = set()
    for (old, name, new), (_, _, same, said) in zip(OLD_CASES, json.loads(done.stdout), strict=True):
        assert same is True, (old, name, same)
        deprecations = [message for category, message, _ in said if category == "DeprecationWarning"]
        assert all(new in m for m in deprecations) and len(deprecations) <= 1, (old, name, said)
        if old not in seen or old in ("bertlib.model", "bertlib.tasks"):  # an old module warns as it is imported
            assert deprecations and {w for c, _, w in said if c == "DeprecationWarning"} == {"<string>"}, said
        seen.add(old)
    package = subprocess.run(  # the layout stays one folder per layer: no module file stands in for an old one
        [sys.executable, "-c", "import bertlib.model, sys; from bertlib.model import no_such_name"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert "ImportError: cannot import name 'no_such_name' from 'bertlib.model'" in package.stderr, package.stderr
    assert sorted(p.stem for p in (ROOT / "bertlib").glob("*.py")) == ["__init__", "__main__", "_modidx", "_nbdev"]
