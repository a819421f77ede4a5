"""The course's own tools survive how people run them (issue 42): nbdev exports never damage the library,
`solutions/run_all.py` never replaces a good saved output, and old import paths say where their names went. Each test
names the README claim it backs (section "Runs that survive")."""

import ast
import json
import os
import shutil
import subprocess
import sys
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
        (["#| default_exp model.bert", "#| export\nX = 1"], "both name `#| default_exp model.bert`"),
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
