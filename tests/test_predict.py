"""Predicting with a fine-tuned run: the library's `predict` on one input and on a list (batched by length, answers in
the input's order), and the `predict` command on one text, on stdin, and over a file of one example a line (plain
text, TSV, CSV or JSONL), scored when the file holds labels (issues 42 and 43)."""

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas
import pytest
from seqeval.metrics import f1_score
from test_surfaces import task_run

from bertlib.cli.main import main
from bertlib.recipes.predict import predict
from bertlib.tasks.metrics import exact_match
from bertlib.train.factory import load_model
from bertlib.train.runs import load_run
from bertlib.utils import files as files_module

ROOT = Path(__file__).resolve().parents[1]
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


# ------------------------------------------------------------------------------------------------------ a file
SENTENCES = ["a gorgeous , witty , seductive movie .", "dull and lifeless", PARAGRAPH * 6, "it is bad ."]
PAIRS = [("a", "it is"), (PARAGRAPH, "he lives in Belgium ."), ("the film", "it is long ."), (PARAGRAPH * 3, "e")]
TOKENS = [["EU", "rejects", "German", "call"], PARAGRAPH.split() * 6, ["Peter"], PARAGRAPH.split()]
PARAGRAPH_TAGS = ["B-PER", "I-PER", "O", "O", "B-LOC", "O", "O", "O", "O", "O", "B-ORG", "I-ORG", "O", "O", "O"]
TAGS = [["B-ORG", "O", "B-MISC", "O"], PARAGRAPH_TAGS * 6, ["B-PER"], PARAGRAPH_TAGS]
CONTEXTS = [(PARAGRAPH * 8, "who works ?", "Peter Blackburn"), (PARAGRAPH, "where ?", "Brussels")] * 2
RECORDS = {  # each task's inputs as the hub's datasets name their fields, with labels
    "sst2": [{"sentence": s, "label": i % 2} for i, s in enumerate(SENTENCES)],
    "rte": [
        {"sentence1": a, "sentence2": b, "label": ["entailment", "not_entailment"][i % 2]}
        for i, (a, b) in enumerate(PAIRS)
    ],
    "conll2003": [{"tokens": words, "ner_tags": tags} for words, tags in zip(TOKENS, TAGS, strict=True)],
    "squad": [
        {"context": c, "question": q, "answers": {"text": [a], "answer_start": [c.index(a)]}} for c, q, a in CONTEXTS
    ],
}


def write_inputs(folder, task: str, labelled: bool) -> dict[str, Path]:
    "The task's records as users' tools write them: JSONL, CSV (pandas), TSV (GLUE's way) and, for one text, plain."
    records = [
        r if labelled else {k: v for k, v in r.items() if k not in ("label", "ner_tags", "answers")}
        for r in RECORDS[task]
    ]
    flat = [
        {k: " ".join(v) if isinstance(v, list) else v["text"][0] if isinstance(v, dict) else v for k, v in r.items()}
        for r in records
    ]
    files = {name: folder / f"{task}-{labelled}.{name}" for name in ("jsonl", "csv", "tsv")}
    files["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in records))
    pandas.DataFrame(flat).to_csv(files["csv"], index=False)
    columns = list(flat[0])
    files["tsv"].write_text(
        "\t".join(columns) + "\n" + "".join("\t".join(str(r[c]) for c in columns) + "\n" for r in flat)
    )
    if task in ("sst2", "conll2003") and not labelled:
        files["txt"] = folder / f"{task}.txt"
        files["txt"].write_text(
            "".join(r["sentence" if task == "sst2" else "tokens"] + "\n" + "\n" * (i == 1) for i, r in enumerate(flat))
        )
    return files


def alone(run: Path, task: str, record: dict) -> dict:
    "What `predict` says of one record's input alone, as the run reads it, through JSON."
    model, tokenizer = load_model(run)
    cfg = load_run(run)[1]
    options = dict(max_seq_len=cfg.max_seq_len, doc_stride=cfg.doc_stride, max_query_len=cfg.max_query_len)
    if task == "conll2003":
        return json.loads(json.dumps(predict(model, tokenizer, task, [record["tokens"]], **options)[0]))
    second = {"rte": {"pair": record.get("sentence2")}, "squad": {"question": record.get("question")}}.get(task, {})
    text = record.get("sentence") or record.get("sentence1") or record["context"]
    return json.loads(json.dumps(predict(model, tokenizer, task, text, **second, **options)))


def expected_scores(task: str, records: list[dict], answers: list[dict]) -> dict[str, float]:
    "The score of each task, counted from the answers and the records' labels (seqeval's F1 for the tagger)."
    if task in ("sst2", "rte"):
        names = ("negative", "positive") if task == "sst2" else ("entailment", "not_entailment")
        golds = [r["label"] if isinstance(r["label"], str) else names[r["label"]] for r in records]
        return {"accuracy": sum(a["label"] == g for a, g in zip(answers, golds, strict=True)) / len(records)}
    if task == "conll2003":
        return {"f1": f1_score([r["ner_tags"] for r in records], [a["tags"] for a in answers])}
    hits = [exact_match(a["answer"] or "", r["answers"]["text"]) for a, r in zip(answers, records, strict=True)]
    return {"exact_match": sum(hits) / len(records)}


def test_claim_predict_over_a_file_answers_every_line_in_order_and_scores_labels(task_runs, tmp_path, capsys):
    """Issue 43: `predict RUN --input FILE --output FILE` reads JSONL, CSV and TSV with the task's fields (and plain
    text for a task of one text; blank lines left out) and writes one JSON line per input line, in the file's order,
    with its line number and the answer `predict` gives that input alone; a file with labels prints the task's score."""
    for task in TASKS:
        run = task_runs[task]
        answers = [alone(run, task, record) for record in RECORDS[task]]
        for labelled in (False, True):
            for kind, path in write_inputs(tmp_path, task, labelled).items():
                out = tmp_path / f"{path.name}.out.jsonl"
                assert main(["predict", str(run), "--input", str(path), "--output", str(out), "--json"]) == 0
                said = json.loads(capsys.readouterr().out)
                got = [json.loads(line) for line in out.read_text().splitlines()]
                lines = {"jsonl": [1, 2, 3, 4], "csv": [2, 3, 4, 5], "tsv": [2, 3, 4, 5], "txt": [1, 2, 4, 5]}[kind]
                assert [answer.pop("line") for answer in got] == lines, (task, kind)
                assert all(close(g, a) for g, a in zip(got, answers, strict=True)), (task, kind)
                assert said["predictions"] == 4 and said["skipped"] == 0
                if not labelled:
                    assert said["scores"] is None
                    continue
                for key, value in expected_scores(task, RECORDS[task], got).items():
                    assert said["scores"][key] == pytest.approx(value), (task, kind, key)
                assert said["scores"]["labelled"] == 4


def test_claim_a_bad_line_is_one_line_naming_it_or_skipped_and_counted(task_runs, tmp_path, capsys):
    """Issue 43: a bad line (not JSON, a field missing, an empty text, a label the task lacks, a row of the wrong
    width, bytes that are not UTF-8) is one line naming the file and the line, exit 2, and no output; with
    --skip-bad-lines the other lines are answered and the command says how many it skipped."""
    good = json.dumps({"sentence": "a fine film", "label": 1})
    bad_lines = {
        "not JSON": b'{"sentence": "a fine film"',
        "no field": json.dumps({"text": "a fine film"}).encode(),
        "empty": json.dumps({"sentence": "  "}).encode(),
        "label": json.dumps({"sentence": "a fine film", "label": "neutral"}).encode(),
        "not an object": b'["a fine film"]',
        "not UTF-8": '{"sentence": "caf\u00e9"}'.encode("latin-1"),
        "no word pieces": json.dumps({"sentence": "\u200b\u200b"}).encode(),
    }
    run = str(task_runs["sst2"])
    for why, line in bad_lines.items():
        source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
        source.write_bytes(b"\n".join([good.encode(), good.encode(), line, good.encode()]) + b"\n")
        assert main(["predict", run, "--input", str(source), "--output", str(out)]) == 2, why
        assert f"{source}, line 3: " in one_line_error(capsys), why
        assert not out.exists()
        assert main(["predict", run, "--input", str(source), "--output", str(out), "--skip-bad-lines"]) == 0, why
        captured = capsys.readouterr()
        assert f"skipped 1 bad line of {source}: line 3: " in captured.err, why
        assert [json.loads(answer)["line"] for answer in out.read_text().splitlines()] == [1, 2, 4]
        out.unlink()
    source = tmp_path / "in.tsv"  # a row without its tab
    source.write_text("sentence\tlabel\na fine film\t1\na dull film 0\n")
    assert main(["predict", run, "--input", str(source), "--output", str(tmp_path / "out.jsonl")]) == 2
    assert f"{source}, line 3: expected 2 columns as in the header, found 1" in one_line_error(capsys)
    source.write_text("text\tlabel\na fine film\t1\n")  # a header without the task's column: every line is bad
    assert (
        main(["predict", run, "--input", str(source), "--output", str(tmp_path / "out.jsonl"), "--skip-bad-lines"]) == 2
    )
    assert "line 1: the header ['text', 'label'] lacks the column(s) 'sentence'" in one_line_error(capsys)


def test_claim_predict_never_replaces_or_half_writes_a_file(task_runs, tmp_path, capsys, monkeypatch):
    """Issue 43: the output is written whole at the end (a temporary file renamed over it), so a run killed while it
    predicts leaves no file under the output's name, and an earlier output stays as it was; an existing file is
    replaced only with --overwrite, never the input, and never inside a run folder; a write that finds no room (here a
    used-up quota) is one line naming the file."""
    run, source, out = task_runs["sst2"], tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("".join(f"{SENTENCES[i % 4]} {i}\n" for i in range(3000)))
    for earlier in (None, "an earlier output\n"):
        if earlier:
            out.write_text(earlier)
        args = ["predict", str(run), "--input", str(source), "--output", str(out), "--batch-size", "1", "--overwrite"]
        process = subprocess.Popen(
            [sys.executable, "-m", "bertlib", *args],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        seen = b""
        while b"batch/s" not in seen:  # its progress bar: it is predicting
            chunk = os.read(process.stderr.fileno(), 4096)
            assert chunk, seen  # it ended before it predicted
            seen += chunk
        process.kill()
        process.communicate()
        assert (out.read_text() if earlier else out.exists()) == (earlier or False)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.txt", *(["out.jsonl"] if earlier else [])])
    for target, message in (
        (out, "exists; pass --overwrite"),
        (source, "is the input file"),
        (run / "out.jsonl", "bertlib run folder"),
    ):
        assert main(["predict", str(run), "--input", str(source), "--output", str(target)]) == 2
        assert message in one_line_error(capsys)
    source.write_text(SENTENCES[0] + "\n")

    def over_quota(*args, **kwargs):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(files_module, "atomic_write", over_quota)  # predict imports it when it writes
    assert main(["predict", str(run), "--input", str(source), "--output", str(tmp_path / "new.jsonl")]) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after the progress bar
    assert (
        err.startswith("error: ")
        and "the disk quota on " in err
        and f"so {tmp_path / 'new.jsonl'} could not be written" in err
    ), err
    assert err.endswith("then predict again"), err


# ------------------------------------------------------------------------------------------------- the CPU's products
@pytest.mark.parametrize("head", ["pretraining", "sequence", "token", "span"])
def test_claim_cpu_products_run_in_onednn_with_torchs_numbers(head, monkeypatch):
    """Issue 43: on a CPU, `autocast` (under which training, evaluation and prediction compute) runs every linear
    product of the step, forward and backward, in oneDNN instead of torch's MKL products, and gives torch's numbers:
    the loss, the outputs and every gradient within float rounding."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import bertlib
    from bertlib.utils.devices import autocast

    config = bertlib.BertConfig.from_preset("tiny", vocab_size=500)
    torch.manual_seed(0)
    ids = torch.randint(5, 500, (3, 20))
    inputs = {"attention_mask": torch.ones_like(ids)}
    inputs["attention_mask"][1, 12:] = 0
    if head == "pretraining":
        model = bertlib.BertForPreTraining(config)
        labels = torch.full_like(ids, -100)
        labels[:, [3, 7, 9]] = ids[:, [3, 7, 9]]
        inputs.update(labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))
    elif head == "span":
        model = bertlib.BertForQuestionAnswering(config)
        inputs.update(start_positions=torch.tensor([1, 2, 3]), end_positions=torch.tensor([4, 5, 6]))
    else:
        kind = bertlib.BertForSequenceClassification if head == "sequence" else bertlib.BertForTokenClassification
        model = kind(config, ("a", "b", "c"))
        inputs["labels"] = torch.tensor([0, 2, 1]) if head == "sequence" else torch.randint(0, 3, ids.shape)
    model.eval()  # no dropout: both passes compute the same thing

    def step(onednn: bool):
        monkeypatch.setenv("BERTLIB_ONEDNN", "1" if onednn else "0")
        model.zero_grad()
        with profile(activities=[ProfilerActivity.CPU]) as ran:
            with autocast(torch.device("cpu")):
                loss = model(ids, **inputs).loss
            loss.backward()
        kernels = {event.key for event in ran.key_averages()}
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None], kernels

    plain, fast = step(False), step(True)
    assert "mkldnn::_linear_pointwise" in fast[2] and not {"aten::addmm", "aten::mm"} & fast[2]
    assert {"aten::addmm", "aten::mm"} & plain[2] and "mkldnn::_linear_pointwise" not in plain[2]
    assert torch.allclose(fast[0], plain[0], rtol=1e-5, atol=1e-6)
    assert len(fast[1]) == len(plain[1])
    for ours, theirs in zip(fast[1], plain[1], strict=True):
        assert torch.allclose(ours, theirs, rtol=1e-4, atol=1e-6)
