import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertlib.data import wikitext as data
from bertlib.data.wikitext import (
    corpus_stats,
    load_wikitext2,
    parse_heading,
    restore_joiners,
    split_documents,
    split_sentences,
    wikitext_documents,
)
from bertlib.utils.environment import quick_mode
from bertlib.utils.files import atomic_write


def _write_split(root, config, split, rows):
    folder = root / "wikitext" / config
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": rows}), folder / f"{split}-00000-of-00001.parquet")


def test_local_copy_is_read_from_data_dir_argument_and_env(tmp_path, monkeypatch):
    rows = ["", " = Title = \n", "", " Some text . More text .\n"]
    _write_split(tmp_path, "wikitext-2-v1", "validation", rows)
    monkeypatch.delenv("BERTLIB_DATA_DIR", raising=False)
    assert load_wikitext2("validation", data_dir=tmp_path) == rows
    monkeypatch.setenv("BERTLIB_DATA_DIR", str(tmp_path))
    assert load_wikitext2("validation") == rows


def test_missing_local_split_says_where_to_put_files(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_wikitext2("test", data_dir=tmp_path)
    message = str(err.value)
    assert "wikitext/wikitext-2-v1" in message and "BERTLIB_DATA_DIR" in message
    assert "test-00000-of-00001.parquet" in message


@pytest.mark.parametrize("kwargs, field", [({"split": "dev"}, "split"), ({"config": "wikitext-103-v1"}, "config")])
def test_bad_names_list_the_allowed_values(kwargs, field):
    with pytest.raises(ValueError, match=field) as err:
        load_wikitext2(**kwargs)
    assert "'validation'" in str(err.value) or "'wikitext-2-raw-v1'" in str(err.value)


def _fake_datasets(monkeypatch, load_dataset):
    monkeypatch.delenv("BERTLIB_DATA_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))


def test_hub_path_calls_datasets_with_the_hub_name(monkeypatch):
    calls = []

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return {"text": ["", " = A = \n", " x .\n"]}

    _fake_datasets(monkeypatch, load_dataset)
    assert load_wikitext2("train", "wikitext-2-raw-v1") == ["", " = A = \n", " x .\n"]
    assert calls == [(("Salesforce/wikitext", "wikitext-2-raw-v1"), {"split": "train"})]


def test_offline_without_local_copy_gives_a_clear_error(monkeypatch):
    def load_dataset(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'Salesforce/wikitext' on the Hub (LocalEntryNotFoundError)")

    _fake_datasets(monkeypatch, load_dataset)
    with pytest.raises(ConnectionError) as err:
        load_wikitext2("validation")
    message = str(err.value)
    assert "Salesforce/wikitext" in message and "BERTLIB_DATA_DIR" in message
    assert "wikitext/wikitext-2-v1/" in message and "offline" in message


def test_quick_mode_reads_the_environment(monkeypatch):
    for value, expected in [("1", True), ("true", True), ("0", False), ("", False)]:
        monkeypatch.setenv("BERTLIB_QUICK", value)
        assert quick_mode() is expected
    monkeypatch.delenv("BERTLIB_QUICK")
    assert quick_mode() is False


def test_real_split_sizes(wikitext):
    assert [len(wikitext[s]) for s in ("train", "validation", "test")] == [36718, 3760, 4358]


def test_joiners_and_headings():
    assert (
        restore_joiners(" state @-@ of @-@ the @-@ art , 1 @,@ 000 and 3 @.@ 5 m")
        == " state-of-the-art , 1,000 and 3.5 m"
    )
    assert parse_heading(" = Homarus gammarus = \n") == (1, "Homarus gammarus")
    assert parse_heading(" = = Description = = \n") == (2, "Description")
    assert parse_heading(" = = = Early life = = = \n") == (3, "Early life")
    assert parse_heading(" The score was 2 = 2 .\n") is None
    assert parse_heading("") is None


def test_sentences_on_real_wikitext_lines(wikitext):
    # the first paragraph of the validation split (Homarus gammarus)
    paragraph = restore_joiners(wikitext["validation"][3])
    sentences = split_sentences(paragraph)
    assert len(sentences) == 6
    assert sentences[0].startswith("Homarus gammarus , known as the European lobster")
    assert sentences[1] == "It is closely related to the American lobster , H. americanus ."
    assert sentences[3] == 'In life , the lobsters are blue , only becoming " lobster red " on cooking .'
    assert " ".join(sentences) == " ".join(paragraph.split())


def test_sentence_rules():
    assert split_sentences('He said " Go . " Then he left .') == ['He said " Go . "', "Then he left ."]
    assert split_sentences("Apples ( and pears . ) Fine .") == ["Apples ( and pears . )", "Fine ."]
    assert split_sentences("Cats , dogs , etc . and more .") == ["Cats , dogs , etc . and more ."]
    assert split_sentences("The U.S. Army won . It ended") == ["The U.S. Army won .", "It ended"]
    assert split_sentences("Raw text. With Mr. Smith in St. Louis! Yes?") == [
        "Raw text.",
        "With Mr. Smith in St. Louis!",
        "Yes?",
    ]
    assert split_sentences("") == []


def test_documents_of_real_splits(wikitext):
    for split, n_docs in [("validation", 60), ("test", 62)]:
        docs = split_documents(wikitext[split])
        assert len(docs) == n_docs
        sentences = [s for d in docs for s in d]
        assert all(s and "@-@" not in s and "@,@" not in s and not s.startswith(" =") for s in sentences)
        assert any("<unk>" in s for s in sentences)
    first = split_documents(wikitext["validation"], unit="paragraphs")[0]
    assert first[0].startswith("Homarus gammarus , known as the European lobster")


def test_documents_drop_empty_articles_and_headings():
    rows = [" = Empty = \n", "", " = Full = \n", " = = Part = = \n", " One . Two .\n", "", " Three .\n"]
    assert split_documents(rows) == [["One .", "Two .", "Three ."]]
    assert split_documents(rows, unit="paragraphs") == [["One . Two .", "Three ."]]
    with pytest.raises(ValueError, match="unit"):
        split_documents(rows, unit="words")


def test_wikitext_documents_and_stats(wikitext):
    assert wikitext_documents("validation") == split_documents(wikitext["validation"])
    stats = corpus_stats(wikitext["validation"])
    assert stats["documents"] == 60 and stats["paragraphs"] == 1841
    assert stats["words"] > 200_000 and stats["unk_words"] == sum(
        p.split().count("<unk>") for d in split_documents(wikitext["validation"], "paragraphs") for p in d
    )
    assert stats["sentences"] == sum(map(len, split_documents(wikitext["validation"])))


def test_module_has_no_eager_datasets_import():
    # `datasets` is slow to import and absent on some machines: only the hub path may import it
    source = open(data.__file__).read()
    assert "\nimport datasets" not in source and "\nfrom datasets" not in source


def test_atomic_write_replaces_whole_files_only(tmp_path, monkeypatch):
    target = tmp_path / "file.json"
    atomic_write(target, "old")
    atomic_write(target, b"new bytes")
    assert target.read_bytes() == b"new bytes"

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(data.os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, "half-written")
    assert target.read_bytes() == b"new bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["file.json"]  # no temporary file left behind


def test_atomic_write_gives_the_permissions_of_a_normal_file(tmp_path):
    (tmp_path / "plain.txt").write_text("x")
    written = atomic_write(tmp_path / "atomic.txt", "x")
    assert written.stat().st_mode == (tmp_path / "plain.txt").stat().st_mode
