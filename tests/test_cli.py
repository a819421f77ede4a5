import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
import transformers

from bertlib.cli.main import main
from bertlib.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from bertlib.train.runs import read_metrics


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


# --- the run commands: one tiny run shared by the tests below ---

TINY = [
    "--preset",
    "tiny",
    "--batch-size",
    "8",
    "--max-seq-len",
    "64",
    "--log-every",
    "2",
    "--eval-every",
    "3",
    "--eval-batches",
    "2",
    "--save-every",
    "3",
]


@pytest.fixture(scope="module")
def tiny(tokenizer_file):
    "The options of a tiny run, with the session's WikiText tokenizer (so no run trains its own)."
    return [*TINY, "--tokenizer", str(tokenizer_file)]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny):
    "A tiny run of 6 steps, made through the command line."
    folder = tmp_path_factory.mktemp("cli") / "run"
    assert main(["pretrain", *tiny, "--max-steps", "6", "--output-dir", str(folder)]) == 0
    return folder


def test_pretrain_writes_a_complete_run(run, capsys):
    assert {"config.json", "tokenizer.json", "vocab.txt", "metrics.jsonl", "loss_curve.png", "checkpoints"} <= {
        p.name for p in run.iterdir()
    }
    assert main(["info", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["checkpoints"] == ["step-0000003", "step-0000006"] and info["last_train"]["step"] == 6
    assert info["model"]["num_hidden_layers"] == 2 and info["training"]["batch_size"] == 8


def test_evaluate_prints_json_scores(run, capsys):
    assert main(["evaluate", str(run), "--split", "test", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert set(scores) >= {"mlm_loss", "mlm_perplexity", "mlm_accuracy", "mlm_top5_accuracy", "nsp_accuracy"}
    assert scores["mlm_perplexity"] == pytest.approx(math.exp(scores["mlm_loss"]))
    assert 0 <= scores["mlm_accuracy"] <= scores["mlm_top5_accuracy"] <= 1


def test_fill_mask_and_export_hf_load_in_transformers(run, tmp_path, capsys):
    assert main(["fill-mask", str(run), "the [MASK] of the [MASK] .", "--json", "--top-k", "3"]) == 0
    guesses = json.loads(capsys.readouterr().out)
    assert len(guesses) == 2 and all(len(g) == 3 for g in guesses)
    out = tmp_path / "hf"
    assert main(["export-hf", str(run), str(out)]) == 0
    hf_model = transformers.AutoModelForMaskedLM.from_pretrained(out)
    fill = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out), top_k=3)
    top = [r["token_str"].replace(" ", "") for r in fill("the [MASK] of the river .")]
    assert hf_model.config.vocab_size == 8192 and top[0] == fill_mask_top(run, "the [MASK] of the river .")


def fill_mask_top(run, text):
    from bertlib.evaluation.scores import fill_mask
    from bertlib.train.factory import load_model

    model, tokenizer = load_model(run)
    return fill_mask(model, tokenizer, text)[0][0][0]


def test_resume_continues_to_more_steps(run, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert main(["pretrain", "--output-dir", str(copy), "--resume", "--max-steps", "8"]) == 0
    assert [r["step"] for r in read_metrics(copy / "metrics.jsonl") if "loss" in r] == [2, 4, 6, 8]
    assert main(["pretrain", "--output-dir", str(copy), "--resume", "--lr", "1.0"]) == 2
    assert "lr" in capsys.readouterr().err


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_pretrain_refuses_an_existing_run(run, tiny, capsys):
    before = (run / "metrics.jsonl").read_bytes()
    assert main(["pretrain", *tiny, "--max-steps", "2", "--output-dir", str(run)]) == 2
    assert "--resume" in one_line_error(capsys)
    assert (run / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    "args",
    [
        ["--max-steps", "0"],
        ["--batch-size", "6", "--grad-accum", "4"],
        ["--max-steps", "3", "--epochs", "1"],
        ["--device", "cuda:7"],
    ],
)
def test_pretrain_bad_values_are_one_line_errors(tmp_path, tiny, capsys, args):
    if args == ["--device", "cuda:7"] and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["pretrain", *tiny, *args, "--output-dir", str(tmp_path / "new")]) == 2
    one_line_error(capsys)


def test_missing_or_foreign_run_folders(tmp_path, capsys):
    for command in (["evaluate"], ["info"], ["fill-mask"], ["export-hf"]):
        extra = {"fill-mask": ["a [MASK] ."], "export-hf": [str(tmp_path / "out")]}.get(command[0], [])
        assert main([*command, str(tmp_path / "nowhere"), *extra]) == 2
        assert "no run folder" in one_line_error(capsys)
    assert main(["info", str(tmp_path)]) == 2
    assert "not a bertlib run" in one_line_error(capsys)
    assert main(["pretrain", "--output-dir", str(tmp_path / "nowhere"), "--resume"]) == 2
    one_line_error(capsys)


def test_corrupt_checkpoint_and_vocabulary_mismatch(run, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(run, broken)
    (broken / "checkpoints" / "step-0000006" / "model.safetensors").write_bytes(b"\0" * 100)
    assert main(["fill-mask", str(broken), "a [MASK] ."]) == 2
    assert "restore it from a backup, or move it out of" in one_line_error(capsys)
    mismatch = tmp_path / "mismatch"
    shutil.copytree(run, mismatch)
    save_tokenizer(train_tokenizer(["a small text of a few words"] * 10, vocab_size=60), mismatch)
    assert main(["evaluate", str(mismatch)]) == 2
    assert "vocab_size" in one_line_error(capsys)


def test_fill_mask_without_a_mask_and_export_into_a_used_folder(run, tmp_path, capsys):
    assert main(["fill-mask", str(run), "no mask here"]) == 2
    assert "[MASK]" in one_line_error(capsys)
    (tmp_path / "mine.txt").write_text("keep me")
    assert main(["export-hf", str(run), str(tmp_path)]) == 2
    assert "--overwrite" in one_line_error(capsys)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("command", ["pretrain", "evaluate", "fill-mask", "export-hf", "info"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0 and "usage:" in capsys.readouterr().out


def test_pretrain_leaves_denormal_arithmetic_as_it_found_it(run):
    "The command flushes denormals while it trains (speed), and must not change the process for good."
    tiny = torch.tensor([1e-39])  # below float32's smallest normal number
    assert (tiny * 1.0).item() != 0.0


@pytest.mark.slow
def test_time_budget_becomes_a_recorded_number_of_steps(tiny, tmp_path, capsys):
    "--time-budget times a few steps, then trains a fixed number of steps that the run folder records."
    run = tmp_path / "budget"
    assert main(["pretrain", *tiny, "--time-budget", "40s", "--eval-every", "1000", "--output-dir", str(run)]) == 0
    assert "time budget of 40 s" in capsys.readouterr().err
    training = json.loads((run / "config.json").read_text())["training"]
    assert training["time_budget"] == 40 and training["max_steps"] >= 1
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl") if "loss" in r][-1] == training["max_steps"]
    for bad in ("soon", "-5m", "0s"):
        with pytest.raises(SystemExit):
            main(["pretrain", *tiny, "--time-budget", bad, "--output-dir", str(tmp_path / "bad")])


def test_model_options_override_the_preset_and_resume_refuses_them(tiny, tmp_path, capsys):
    run = tmp_path / "pre-ln"
    assert (
        main(
            [
                "pretrain",
                *tiny,
                "--max-steps",
                "2",
                "--hidden-dropout-prob",
                "0",
                "--norm-style",
                "pre",
                "--output-dir",
                str(run),
            ]
        )
        == 0
    )
    model = json.loads((run / "config.json").read_text())["model"]
    assert (model["hidden_dropout_prob"], model["norm_style"], model["num_hidden_layers"]) == (0.0, "pre", 2)
    capsys.readouterr()
    assert main(["pretrain", "--output-dir", str(run), "--resume", "--norm-style", "post"]) == 2
    assert "--norm-style" in one_line_error(capsys)
    assert (
        main(
            [
                "pretrain",
                *tiny,
                "--max-steps",
                "2",
                "--hidden-dropout-prob",
                "1.5",
                "--output-dir",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
    assert "hidden_dropout_prob" in one_line_error(capsys)
