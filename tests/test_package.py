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
    ["files", "checks", "environment", "devices"],
    ["data", "task_examples", "config", "train_config"],
    ["tokenizer", "corpus", "batching", "task_sources", "tasks"],
    ["embeddings", "attention", "encoder"],
    ["model", "heads", "electra", "interop"],
    ["pretraining_data", "finetune_data", "packed_data"],
    ["runs"],
    ["checkpoints", "viz", "widget", "task_metrics"],
    ["model_factory"],
    ["evaluate", "electra_evaluate"],
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
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bertlib"):
            found.add(node.module.removeprefix("bertlib").lstrip(".") or "")
    return found - {""}


def test_no_module_imports_a_layer_above_it():
    floor = {module: i for i, names in enumerate(FLOORS) for module in names}
    modules = {p.stem for p in (ROOT / "bertlib").glob("*.py")} - {"__init__", "_modidx"}
    assert modules == set(floor), f"put every module on a floor: {sorted(modules ^ set(floor))}"
    upward = [(m, used) for m in modules for used in _bertlib_imports(ROOT / "bertlib" / f"{m}.py")
              if floor[used] > floor[m]]
    assert not upward, f"imports that reach up a layer: {upward}"
