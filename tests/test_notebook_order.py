"""The course reads in order: no notebook uses a name that a later notebook builds. A notebook may leave a seam for a
later one (an attribute that is None, a table of switches), but it never imports or calls what only a later notebook
defines; the later notebook adds its own switch."""

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def code_cells(path: Path) -> list[tuple[str, ast.Module]]:
    "Each code cell's id and syntax tree (IPython's `%` and `!` lines left out)."
    cells = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            source = "\n".join(line for line in "".join(cell["source"]).splitlines() if line.lstrip()[:1] not in "%!")
            cells.append((cell["id"], ast.parse(source)))
    return cells


def exported_names(path: Path) -> set[str]:
    "The top-level names the notebook's export cells define (its functions, classes and constants)."
    names = set()
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code" or not "".join(cell["source"]).startswith("#| export"):
            continue
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def bound_and_used(tree: ast.Module) -> tuple[set[str], set[str]]:
    "The names a cell binds (assignments, definitions, imports under their own name) and the names it reads."
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store | ast.Del) else used).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bertlib"):
            used |= {alias.name for alias in node.names}  # a library name: whose notebook builds it?
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return bound, used


def later_names_used() -> list[tuple[str, str, str, str]]:
    "(notebook, cell, name, the later notebook that builds it) for every use of a later notebook's name."
    builder = {}
    for path in NOTEBOOKS:
        for name in exported_names(path):
            builder.setdefault(name, path.stem)
    found = []
    for path in NOTEBOOKS:
        cells = code_cells(path)
        own = set().union(*(bound_and_used(tree)[0] for _, tree in cells)) | exported_names(path)
        for cell_id, tree in cells:
            for name in sorted(bound_and_used(tree)[1] - own):
                if name in builder and builder[name] > path.stem:
                    found.append((path.stem, cell_id, name, builder[name]))
    return found


def test_no_notebook_uses_a_name_that_a_later_notebook_builds():
    assert later_names_used() == []


def test_the_check_sees_a_later_name_when_there_is_one(tmp_path, monkeypatch):
    "The check itself: a notebook 05 that imports notebook 11's `apply_variants` is caught."
    early = {"cell_type": "code", "id": "a", "source": ["from bertlib.model.variants import apply_variants\n"]}
    later = {"cell_type": "code", "id": "b", "source": ["#| export\n", "def apply_variants(model, config): ...\n"]}
    paths = []
    for name, cell in (("05_early", early), ("11_late", later)):
        path = tmp_path / f"{name}.ipynb"
        path.write_text(json.dumps({"cells": [cell]}), encoding="utf-8")
        paths.append(path)
    monkeypatch.setattr(__import__(__name__), "NOTEBOOKS", paths)
    assert later_names_used() == [("05_early", "a", "apply_variants", "11_late")]
