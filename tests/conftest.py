"""Shared fixtures and test policies.

- WikiText-2 comes from $BERTLIB_DATA_DIR when set (CI), else from the hub.
- One WikiText tokenizer is trained per session and shared (`fast_tokenizer`, `tokenizer_file`).
- Nothing is written outside temporary folders: corpus caches, the run folders of the notebooks replayed, and the
  code that `transformers` loads with `trust_remote_code=True` (`remote_code`) go to session folders.
- `pytest -m "not slow"` is the fast lane; notebook replays (nbval) count as slow.
- A missing tool (a browser, say) skips a test on a developer's machine and fails it under CI (`CI=1`, set by
  `.ci/run`), so CI never passes by skipping: call `missing_tool(reason)`.
- Training runs use torch's thread count (OMP_NUM_THREADS, set here for this process and the commands it starts)
  instead of one measured from the CPUs idle at the time: a count that follows the load would make runs that tests
  compare bit for bit round differently.
"""

import os
from pathlib import Path

import pytest
import torch

from bertlib.data.corpus import wikitext_corpus
from bertlib.data.tokenizer import save_tokenizer, train_wikitext_tokenizer
from bertlib.data.wikitext import load_wikitext2
from bertlib.utils.environment import resolve_data_dir

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing_tool(reason: str) -> None:
    "Skip on a developer's machine, fail under CI: there a missing tool must not pass silently."
    if IN_CI:
        pytest.fail(f"{reason} (CI=1, so this fails instead of skipping)")
    pytest.skip(reason)


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def _written_to_temporary_folders(tmp_path_factory):
    """What the tests and the notebooks they replay would write outside a test's own folder goes to session folders:
    corpus caches (never ~/.cache), the notebooks' run folders (never notebooks/runs) and the code `transformers`
    keeps for `trust_remote_code` (never ~/.cache/huggingface/modules). Kernels inherit these variables."""
    folders = {"BERTLIB_CACHE_DIR": "cache", "BERTLIB_RUNS_DIR": "runs", "HF_MODULES_CACHE": "notebook_hf_modules"}
    previous = {name: os.environ.get(name) for name in folders}
    os.environ.update({name: str(tmp_path_factory.mktemp(folder)) for name, folder in folders.items()})
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def _hf_modules(tmp_path_factory):
    "One folder for the session: the package `transformers_modules` is imported from it once, and then stays."
    return str(tmp_path_factory.mktemp("hf_modules"))


@pytest.fixture
def remote_code(_hf_modules, monkeypatch):
    """`transformers` offline, keeping the code it loads with `trust_remote_code=True` in a session folder instead of
    ~/.cache/huggingface/modules. Both settings are read when `transformers` is imported, so they are patched too."""
    import huggingface_hub
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_MODULES_CACHE", _hf_modules)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", _hf_modules)


@pytest.fixture(scope="session")
def wikitext():
    "The three splits of WikiText-2, as rows."
    return {split: load_wikitext2(split) for split in ("train", "validation", "test")}


@pytest.fixture(scope="session")
def fast_tokenizer():
    "The library's default tokenizer, trained once per session on the train split (about 3 s)."
    return train_wikitext_tokenizer()


@pytest.fixture(scope="session")
def tokenizer_file(fast_tokenizer, tmp_path_factory):
    "`fast_tokenizer` saved as tokenizer.json, for commands that take `--tokenizer`."
    return save_tokenizer(fast_tokenizer, tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def corpus(fast_tokenizer):
    "All of WikiText-2 train (2.4M tokens) encoded with `fast_tokenizer`, once for the session."
    return wikitext_corpus("train", fast_tokenizer)


@pytest.fixture(scope="session")
def task_data():
    "The local data folder with the task files: $BERTLIB_DATA_DIR, else ../shared/data beside the repository."
    root = resolve_data_dir() or ROOT.parent / "shared" / "data"
    if not (root / "glue" / "SST-2" / "train.tsv").is_file():
        missing_tool(f"no task data in {root}: set BERTLIB_DATA_DIR to the folder with glue/, conll2003/, squad/")
    return root
