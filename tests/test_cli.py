import subprocess
import sys

import pytest

from bertlib.cli import main
from bertlib.tokenizer import load_tokenizer


def test_prepare_trains_and_saves_a_tokenizer(tmp_path, capsys):
    assert main(["prepare", "--output-dir", str(tmp_path / "tok"), "--vocab-size", "2000"]) == 0
    out = capsys.readouterr().out
    assert "validation" in out and "pieces per word" in out and str(tmp_path / "tok") in out
    assert load_tokenizer(tmp_path / "tok").get_vocab_size() == 2000


def test_prepare_never_overwrites_without_being_asked(tmp_path, capsys):
    (tmp_path / "tokenizer.json").write_text("mine")
    assert main(["prepare", "--output-dir", str(tmp_path)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (tmp_path / "tokenizer.json").read_text() == "mine"


def test_missing_data_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BERTLIB_DATA_DIR", str(tmp_path / "nowhere"))
    assert main(["prepare", "--output-dir", str(tmp_path / "tok")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "BERTLIB_DATA_DIR" in err


def test_bad_arguments_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["prepare", "--vocab-size", "many"])
    assert exit_.value.code == 2
    assert main(["prepare", "--output-dir", str(tmp_path), "--vocab-size", "3"]) == 2


def test_module_entry_point_shows_help():
    result = subprocess.run([sys.executable, "-m", "bertlib", "prepare", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--vocab-size" in result.stdout
