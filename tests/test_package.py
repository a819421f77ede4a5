"""The package face: the public names import from `bertlib`, the version matches pyproject.toml, and the
layers never import a layer above them."""
import ast
import tomllib
from pathlib import Path

import pytest

import bertlib

ROOT = Path(__file__).resolve().parents[1]
# bottom to top; a module may import only modules on its own floor or below (see CONTRIBUTING.md)
FLOORS = [
    ["hf_remote"],  # imports nothing of bertlib: it is copied into exports for people without bertlib
    ["helpers"],
    ["data", "tokenizer", "corpus", "batching", "task_examples", "task_sources", "tasks"],
    ["config", "embeddings", "attention", "encoder"],
    ["model", "heads", "electra", "interop"],
    ["pretraining_data", "finetune_data", "packed_data"],
    ["train_config", "runs", "evaluate", "electra_evaluate", "viz", "widget", "task_metrics"],
    ["trainer"],
    ["pretrain", "finetune", "distil"],
    ["cli", "__main__"],
]


def test_public_names_import_from_the_package():
    from bertlib import BertConfig, BertForPreTraining, load_model, pretrain  # noqa: F401

    assert all(getattr(bertlib, name) is not None for name in bertlib.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        bertlib.nothing  # noqa: B018


def test_version_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert bertlib.__version__ == project["version"]


def _bertlib_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:  # a subpackage's module counts as the subpackage
            found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bertlib"):
            found.add(node.module.removeprefix("bertlib").lstrip(".") or "")
    return found - {""}


def test_no_module_imports_a_layer_above_it():
    floor = {module: i for i, names in enumerate(FLOORS) for module in names}
    modules = {p.stem for p in (ROOT / "bertlib").glob("*.py")} - {"__init__", "_modidx"}
    packages = {p.parent.name for p in (ROOT / "bertlib").glob("*/__init__.py")}
    assert modules | packages == set(floor), f"put every module on a floor: {sorted((modules | packages) ^ set(floor))}"
    upward = [(m, used) for m in modules for used in _bertlib_imports(ROOT / "bertlib" / f"{m}.py")
              if floor[used] > floor[m]]
    assert not upward, f"imports that reach up a layer: {upward}"


def test_the_files_for_transformers_import_only_torch_and_transformers():
    # they are copied into exports, for people who have torch and transformers but not bertlib
    for path in (ROOT / "bertlib" / "hf_remote").glob("*.py"):
        nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
        absolute = {alias.name.split(".")[0] for node in nodes if isinstance(node, ast.Import) for alias in node.names}
        absolute |= {node.module.split(".")[0] for node in nodes if isinstance(node, ast.ImportFrom) and not node.level}
        relative = {(node.level, node.module) for node in nodes if isinstance(node, ast.ImportFrom) and node.level}
        assert absolute <= {"torch", "transformers"}, f"{path.name} imports {sorted(absolute)}"
        assert relative <= {(1, "configuration_bertlib")}, f"{path.name} imports {relative}"
