"""The package face and the map of its layers.

- The public names import from `bertlib`, and each is what it says it is: `bertlib.pretrain` is the function,
  whatever submodules have been imported before (a submodule named like a public function would replace it).
- The version matches pyproject.toml.
- CONTRIBUTING.md's table of modules is the import graph: every module of `bertlib` has a row, the row lists
  exactly the bertlib modules it imports, every one of them has a row above it, and the floors only go up.
"""

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import bertlib

ROOT = Path(__file__).resolve().parents[1]
FLOORS = (
    "helpers",
    "data and tokenizer",
    "model parts",
    "model and heads",
    "data pipelines",
    "evaluation and run folders",
    "training loop",
    "recipes",
    "command line",
)


def test_public_names_are_what_they_say_after_every_submodule_is_imported():
    for module in pkgutil.iter_modules(bertlib.__path__):
        if module.name != "__main__":
            importlib.import_module(f"bertlib.{module.name}")
    for name in bertlib.__all__:
        value = getattr(bertlib, name)
        assert not inspect.ismodule(value), f"bertlib.{name} is a module, not the public {name}"
        expected = (
            getattr(importlib.import_module(f"bertlib.{bertlib._PUBLIC[name]}"), name)
            if name in bertlib._PUBLIC
            else value
        )
        assert value is expected
    assert inspect.isfunction(bertlib.pretrain) and inspect.isfunction(bertlib.finetune)
    assert inspect.isfunction(bertlib.distil) and inspect.isclass(bertlib.BertForPreTraining)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        bertlib.nothing  # noqa: B018


def test_a_fresh_process_gets_functions_after_importing_the_recipes_modules():
    code = (
        "import bertlib.distillation, bertlib.pretraining, bertlib.finetuning, inspect; from bertlib import "
        "pretrain, finetune, distil; print(all(map(inspect.isfunction, (pretrain, finetune, distil))))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "True\n"


def test_the_command_line_help_imports_no_torch():
    code = "import sys; from bertlib.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_version_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert bertlib.__version__ == project["version"]


def bertlib_imports(path: Path) -> set[str]:
    "The bertlib modules a module imports (relative or absolute, `from` or plain)."
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:  # a subpackage's module counts as the subpackage
            found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bertlib"):
            found.add(node.module.removeprefix("bertlib").lstrip("."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("bertlib.") for a in node.names if a.name.startswith("bertlib."))
    return found - {""}


def layer_table(text: str) -> list[tuple[str, str, set[str]]]:
    "(floor, module, imports) of each row of CONTRIBUTING.md's table of modules, in order."
    block = re.search(r"<!-- layers:start -->(.*?)<!-- layers:end -->", text, re.S)
    assert block, "CONTRIBUTING.md has no table of modules between <!-- layers:start --> and <!-- layers:end -->"
    rows = []
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[1].startswith("`"):
            rows.append((cells[0], cells[1].strip("`"), {m.strip("` ") for m in cells[2].split(",") if m.strip("` -")}))
    return rows


def check_layers(rows: list[tuple[str, str, set[str]]], imports: dict[str, set[str]]) -> list[str]:
    "What is wrong with `rows` as a map of `imports`; empty when the map is right."
    problems, seen, floor = [], set(), 0
    listed = [module for _, module, _ in rows]
    problems += [f"{m}: no row" for m in sorted(set(imports) - set(listed))]
    problems += [f"{m}: a row but no module" for m in sorted(set(listed) - set(imports))]
    for name, module, uses in rows:
        if name not in FLOORS:
            problems.append(f"{module}: unknown floor {name!r}")
        elif FLOORS.index(name) < floor:
            problems.append(f"{module}: floor {name!r} below the row above it")
        else:
            floor = FLOORS.index(name)
        if module in imports and uses != imports[module]:
            problems.append(f"{module}: the row lists {sorted(uses)}, the code imports {sorted(imports[module])}")
        problems += [f"{module} imports {m}, which is not below it" for m in sorted(uses - seen)]
        seen.add(module)
    return problems


def test_contributing_maps_every_module_and_its_imports():
    modules = {
        p.stem: bertlib_imports(p) for p in (ROOT / "bertlib").glob("*.py") if p.stem not in ("__init__", "_modidx")
    }
    for init in (ROOT / "bertlib").glob("*/__init__.py"):  # a subpackage is one row, its modules' imports its own
        files = list(init.parent.glob("*.py"))
        modules[init.parent.name] = set().union(*map(bertlib_imports, files)) - {f.stem for f in files}
    problems = check_layers(layer_table((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")), modules)
    assert not problems, "CONTRIBUTING.md's table of modules disagrees with the code:\n" + "\n".join(problems)


def test_the_layer_check_catches_an_import_that_reaches_up():
    rows = [("helpers", "files", set()), ("model parts", "config", {"files"}), ("helpers", "checks", set())]
    imports = {"files": set(), "config": {"files", "checks"}, "checks": set()}
    problems = check_layers(rows, imports)
    assert "checks: floor 'helpers' below the row above it" in problems
    assert any(p.startswith("config: the row lists") for p in problems)
    assert check_layers(
        [("helpers", "files", {"config"}), ("model parts", "config", set())], {"files": {"config"}, "config": set()}
    ) == ["files imports config, which is not below it"]


def test_the_files_for_transformers_import_only_torch_and_transformers():
    # they are copied into exports, for people who have torch and transformers but not bertlib
    for path in (ROOT / "bertlib" / "hf_remote").glob("*.py"):
        nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
        absolute = {alias.name.split(".")[0] for node in nodes if isinstance(node, ast.Import) for alias in node.names}
        absolute |= {node.module.split(".")[0] for node in nodes if isinstance(node, ast.ImportFrom) and not node.level}
        relative = {(node.level, node.module) for node in nodes if isinstance(node, ast.ImportFrom) and node.level}
        assert absolute <= {"torch", "transformers"}, f"{path.name} imports {sorted(absolute)}"
        assert relative <= {(1, "configuration_bertlib")}, f"{path.name} imports {relative}"
