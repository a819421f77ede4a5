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


def test_public_names_are_what_they_say_after_every_submodule_is_imported():
    for module in pkgutil.walk_packages(bertlib.__path__, "bertlib."):
        if module.name != "bertlib.__main__":
            importlib.import_module(module.name)
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
        "import bertlib.recipes.distil, bertlib.recipes.pretrain, bertlib.recipes.finetune, inspect; "
        "from bertlib import pretrain, finetune, distil; "
        "print(all(map(inspect.isfunction, (pretrain, finetune, distil))))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "True\n"


def test_the_command_line_help_imports_no_torch():
    code = "import sys; from bertlib.cli.main import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_the_package_docstring_lists_every_module():
    "nbdev lists a module only when its docstring says more than a summary line: every module must."
    listed = set(re.findall(r"- `bertlib\.([\w.]+)`", bertlib.__doc__))
    modules = {
        ".".join(p.relative_to(LIB).with_suffix("").parts) for p in LIB.rglob("*.py") if not p.name.startswith("_")
    }
    assert not modules - listed, f"modules the package docstring leaves out: {sorted(modules - listed)}"


def test_version_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert bertlib.__version__ == project["version"]


LIB = ROOT / "bertlib"
OUTSIDE_THE_LAYERS = {"__init__", "__main__", "_modidx", "_nbdev"}  # the package face and nbdev's machinery


def module_imports(path: Path) -> set[str]:
    "The bertlib modules (dotted, below `bertlib`) that the module at `path` imports, relative or absolute."
    package = list(path.relative_to(LIB).parent.parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            found.update([".".join(base)] if node.module else [".".join([*base, a.name]) for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bertlib."):
            found.add(node.module.removeprefix("bertlib."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("bertlib.") for a in node.names if a.name.startswith("bertlib."))
    return found


def library_modules() -> dict[str, set[str]]:
    "Every module of the layers (dotted name below `bertlib`) and the bertlib modules it imports."
    modules = {}
    for path in LIB.rglob("*.py"):
        name = ".".join(path.relative_to(LIB).with_suffix("").parts)
        if name not in OUTSIDE_THE_LAYERS and path.name != "__init__.py":
            modules[name] = module_imports(path)
    return modules


def folder_of(module: str) -> str:
    return module.split(".")[0]


def layer_table(text: str) -> list[tuple[str, set[str]]]:
    "(folder, the folders it imports) of each row of CONTRIBUTING.md's table of layers, bottom up."
    block = re.search(r"<!-- layers:start -->(.*?)<!-- layers:end -->", text, re.S)
    assert block, "CONTRIBUTING.md has no table of layers between <!-- layers:start --> and <!-- layers:end -->"
    rows = []
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[1].startswith("`"):
            rows.append((cells[1].strip("`/"), {m.strip("`/ ") for m in cells[2].split(",") if m.strip("`/ -")}))
    return rows


def check_layers(rows: list[tuple[str, set[str]]], modules: dict[str, set[str]]) -> list[str]:
    "What is wrong with `rows` as the map of `modules`' folders and imports; empty when the map is right."
    uses = {folder_of(m): set() for m in modules}
    for module, imported in modules.items():
        uses[folder_of(module)] |= {folder_of(i) for i in imported} - {folder_of(module)}
    listed = [folder for folder, _ in rows]
    problems = [f"{f}: no row" for f in sorted(set(uses) - set(listed))]
    problems += [f"{f}: a row but no folder" for f in sorted(set(listed) - set(uses))]
    below: set[str] = set()
    for folder, imported in rows:
        if folder in uses and imported != uses[folder]:
            problems.append(f"{folder}: the row lists {sorted(imported)}, the code imports {sorted(uses[folder])}")
        problems += [f"{folder} imports {f}, which is not below it" for f in sorted(imported - below)]
        below.add(folder)
    return problems


def import_cycles(modules: dict[str, set[str]]) -> list[list[str]]:
    "The cycles of the module import graph (each as the path that closes it); empty when it is acyclic."
    cycles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for other in sorted(modules.get(module, ()) & modules.keys()):
            if state.get(other) == "open":
                cycles.append([*path[path.index(other) :], other])
            elif other not in state:
                visit(other, [*path, other])
        state[module] = "done"

    for module in sorted(modules):
        if module not in state:
            visit(module, [module])
    return cycles


def test_contributing_maps_every_folder_and_its_imports():
    problems = check_layers(layer_table((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")), library_modules())
    assert not problems, "CONTRIBUTING.md's table of layers disagrees with the code:\n" + "\n".join(problems)


def test_no_module_import_cycle_and_no_crowded_folder():
    modules = library_modules()
    assert not import_cycles(modules)
    per_folder = {}
    for module in modules:
        per_folder.setdefault(folder_of(module), []).append(module)
    crowded = {f: len(m) for f, m in per_folder.items() if len(m) > 10}
    assert not crowded, f"folders of more than 10 modules: {crowded}"


def test_the_layer_check_catches_an_import_that_reaches_up_and_a_cycle():
    rows = [("utils", set()), ("model", {"utils"}), ("data", {"model", "cli"})]
    modules = {"utils.files": set(), "model.config": {"utils.files"}, "data.corpus": {"model.config", "cli.main"}}
    modules["cli.main"] = set()
    problems = check_layers(rows, modules)
    assert "data imports cli, which is not below it" in problems and "cli: no row" in problems
    assert check_layers([("utils", {"model"}), ("model", set())], {"utils.a": {"model.b"}, "model.b": set()}) == [
        "utils imports model, which is not below it"
    ]
    assert import_cycles({"a.x": {"a.y"}, "a.y": {"a.x"}}) == [["a.x", "a.y", "a.x"]]


def test_the_files_for_transformers_import_only_torch_and_transformers():
    # they are copied into exports, for people who have torch and transformers but not bertlib
    for path in (ROOT / "bertlib" / "hf" / "remote").glob("*.py"):
        nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
        absolute = {alias.name.split(".")[0] for node in nodes if isinstance(node, ast.Import) for alias in node.names}
        absolute |= {node.module.split(".")[0] for node in nodes if isinstance(node, ast.ImportFrom) and not node.level}
        relative = {(node.level, node.module) for node in nodes if isinstance(node, ast.ImportFrom) and node.level}
        assert absolute <= {"torch", "transformers"}, f"{path.name} imports {sorted(absolute)}"
        assert relative <= {(1, "configuration_bertlib")}, f"{path.name} imports {relative}"
