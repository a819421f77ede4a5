"""Shared fixtures. WikiText-2 comes from $BERTLIB_DATA_DIR when set (CI), else from the hub."""
import pytest

from bertlib.data import load_wikitext2, split_documents
from bertlib.tokenizer import train_tokenizer


@pytest.fixture(scope="session")
def wikitext():
    "The three splits of WikiText-2, as rows."
    return {split: load_wikitext2(split) for split in ("train", "validation", "test")}


@pytest.fixture(scope="session")
def fast_tokenizer(wikitext):
    "The library's default tokenizer, trained on the train split (about 3 s)."
    return train_tokenizer([p for doc in split_documents(wikitext["train"], unit="paragraphs") for p in doc])
