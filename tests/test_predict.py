"""Predicting with a fine-tuned run: the library's `predict` on one input and on a list (batched by length, answers in
the input's order), and the `predict` command on one text, on stdin, and over a file of one example a line (plain
text, TSV, CSV or JSONL), scored when the file holds labels (issues 42 and 43)."""

import io
import json
import sys

import pytest
from test_surfaces import task_run

from bertlib.cli.main import main
from bertlib.recipes.predict import predict
from bertlib.train.factory import load_model

TASKS = ("sst2", "rte", "conll2003", "squad")


@pytest.fixture(scope="module")
def task_runs(fast_tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    return {task: task_run(folder / task, task, fast_tokenizer) for task in TASKS}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


# ---------------------------------------------------------------------------------------------------- one input
class BoundedTokenizer:
    "A tokenizer that refuses to encode more than `limit` characters at once, and otherwise is the one it wraps."

    def __init__(self, tokenizer, limit: int):
        self.tokenizer, self.limit = tokenizer, limit

    def encode(self, text, *args, **kwargs):
        size = sum(map(len, text)) if isinstance(text, list) else len(text)
        if size > self.limit:
            raise AssertionError(f"asked to tokenize {size:,} characters at once")
        return self.tokenizer.encode(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_claim_predict_cuts_a_long_pair_before_tokenizing_it(task_runs):
    """Issue 42, item 10: a pair of two long texts is cut before it is tokenized (on main predict tokenized all of
    both, 10.5 MB in one call), and is read as training cuts it: the longer text keeps the extra piece of an odd
    window, whichever of the two it is."""
    model, tokenizer = load_model(task_runs["rte"])
    sentence = "a gorgeous , witty , seductive movie . "
    huge = sentence * 270_000  # 10.5 MB
    bounded = BoundedTokenizer(tokenizer, 1_000_000)
    for first, second, words in ((huge, huge + sentence, (300, 308)), (huge + sentence, huge, (308, 300))):
        result = predict(model, bounded, "rte", first, pair=second, max_seq_len=64)  # a window of 61 pieces: odd
        start = [" ".join((sentence * 50).split()[:n]) for n in words]  # more pieces than a window holds
        assert result == predict(model, tokenizer, "rte", start[0], pair=start[1], max_seq_len=64)


def test_claim_predict_refuses_a_window_that_reads_nothing(task_runs):
    """Issue 42, item 14: max_seq_len=2 leaves no room for any text (it predicted from [CLS] [SEP] alone) and 0 meant
    the default without a word: each is one line that says what fits."""
    for task, inputs in (("sst2", {}), ("rte", {"pair": "it is"}), ("conll2003", {}), ("squad", {"question": "who ?"})):
        model, tokenizer = load_model(task_runs[task])
        for length in (0, 2, -1, 10_000, *((4,) if task in ("rte", "squad") else ())):
            with pytest.raises(ValueError, match=f"max_seq_len={length}") as refused:
                predict(model, tokenizer, task, "Peter Blackburn lives in Brussels .", max_seq_len=length, **inputs)
            assert "\n" not in str(refused.value)


def test_claim_predict_reads_the_text_from_stdin(task_runs, monkeypatch, capsys):
    "Issue 42, item 14: `predict RUN -` reads the text from stdin (on main it classified the text '-')."
    text = "Peter Blackburn lives in Brussels .\nHe works for the European Commission ."
    for task, inputs in (("sst2", []), ("conll2003", []), ("rte", ["--pair", "he lives in Belgium ."])):
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
        assert main(["predict", str(task_runs[task]), "-", "--json", *inputs]) == 0
        model, tokenizer = load_model(task_runs[task])
        pair = {"pair": inputs[1]} if inputs else {}
        assert json.loads(capsys.readouterr().out) == json.loads(
            json.dumps(predict(model, tokenizer, task, text, **pair))
        )


# ------------------------------------------------------------------------------------------------------- a list
PARAGRAPH = "Peter Blackburn lives in Brussels . He works for the European Commission on Thursdays ."
INPUTS = {
    "sst2": ({}, ["a fine film", "dull", " ".join(["a gorgeous , witty , seductive movie ."] * 20), "it is bad ."]),
    "rte": ({"pair": ["it is", "he lives in Belgium .", "a film", PARAGRAPH * 5]}, ["a", PARAGRAPH, "b c d", "e"]),
    "conll2003": ({}, [PARAGRAPH * 6, ["EU", "rejects", "German", "call"], "Peter", PARAGRAPH]),
    "squad": ({"question": ["who ?", "where does Peter live ?", "what ?", "when ?"]}, [PARAGRAPH * 8, PARAGRAPH] * 2),
}


def close(ours, theirs) -> bool:
    "Two answers alike: labels, tags and spans equal, probabilities within float noise (a batch pads, one does not)."
    if isinstance(ours, dict):
        return ours.keys() == theirs.keys() and all(close(ours[key], theirs[key]) for key in ours)
    return ours == pytest.approx(theirs, abs=1e-5) if isinstance(ours, float) else ours == theirs


def test_claim_predict_on_a_list_answers_in_its_order_as_one_at_a_time(task_runs):
    """Issue 43: `predict` on a list batches its inputs by length (here 2 a batch, so that the batches mix inputs and
    windows) and answers each as it answers that input alone, in the list's order."""
    for task, (seconds, texts) in INPUTS.items():
        model, tokenizer = load_model(task_runs[task])
        many = predict(model, tokenizer, task, texts, max_seq_len=32, batch_size=2, **seconds)
        assert len(many) == len(texts), task
        for i, text in enumerate(texts):
            second = {name: values[i] for name, values in seconds.items()}
            alone = predict(model, tokenizer, task, text if isinstance(text, str) else [text], max_seq_len=32, **second)
            assert close(many[i], alone if isinstance(text, str) else alone[0]), (task, i)


def test_claim_predict_on_a_list_names_the_bad_input(task_runs):
    "Issue 43: in a list, an empty text or a missing pair is one line that names the input by its place."
    model, tokenizer = load_model(task_runs["rte"])
    with pytest.raises(ValueError, match="^input 2: the text is empty"):
        predict(model, tokenizer, "rte", ["a", "b", " "], pair=["c", "d", "e"])
    with pytest.raises(ValueError, match="one pair per text: a list of 3 pairs"):
        predict(model, tokenizer, "rte", ["a", "b", "c"], pair=["c", "d"])
    assert predict(model, tokenizer, "rte", [], pair=[]) == []
