"""The fine-tuning tasks (bertlib.tasks.load) and their scores (bertlib.tasks.metrics).

The real task files come from the local data folder ($BERTLIB_DATA_DIR, or ../shared/data beside the
repository); nothing is downloaded: the hub branch is tested with `datasets.load_dataset` replaced by a function
that returns small in-memory datasets with the hub's columns and features."""

import json
from pathlib import Path

import pytest
from conftest import missing_tool

from bertlib.tasks.load import (
    CONLL_TAGS,
    QUICK_SIZES,
    RTE_LABELS,
    SQUAD_OFFLINE_EVAL_ARTICLES,
    SST2_LABELS,
    TASK_NAMES,
    TASKS,
    Answer,
    ClassificationExample,
    SquadExample,
    TaggedSentence,
    TaskDataError,
    TaskFileMissing,
    iob2_entities,
    iob2_problem,
    load_conll2003,
    load_rte,
    load_squad,
    load_sst2,
    load_task,
    quick_slice,
)

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------- the real files offline
def test_the_tasks_describe_themselves():
    assert TASK_NAMES == tuple(TASKS) == ("sst2", "rte", "conll2003", "squad")
    assert TASKS["sst2"].label_names == SST2_LABELS == ("negative", "positive")
    assert TASKS["rte"].label_names == RTE_LABELS == ("entailment", "not_entailment")
    assert TASKS["conll2003"].label_names == CONLL_TAGS
    assert CONLL_TAGS == ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
    assert {n: t.metric for n, t in TASKS.items()} == {
        "sst2": "accuracy",
        "rte": "accuracy",
        "conll2003": "entity_f1",
        "squad": "squad",
    }
    assert {n: t.kind for n, t in TASKS.items()} == {
        "sst2": "sequence",
        "rte": "pair",
        "conll2003": "token",
        "squad": "span",
    }
    assert TASKS["conll2003"].splits == ("train", "validation", "test")
    assert all(TASKS[n].splits == ("train", "validation") for n in ("sst2", "rte", "squad"))


def test_sst2_offline(task_data):
    train, dev = load_sst2("train", task_data), load_sst2("validation", task_data)
    assert (len(train), len(dev)) == (67_349, 872)
    assert sum(e.label for e in train) == 37_569 and sum(e.label for e in dev) == 444  # positives, as in SOURCE.md
    first = train[0]
    assert first == ClassificationExample("hide new secretions from the parental units", 0, SST2_LABELS)
    assert first.label_name == "negative" and first.text_pair is None
    assert dev[0].text == "it 's a charming and often affecting journey ." and dev[0].label_name == "positive"


def test_rte_offline(task_data):
    train, dev = load_rte("train", task_data), load_rte("validation", task_data)
    assert (len(train), len(dev)) == (2_490, 277)
    assert train[0].text == "No Weapons of Mass Destruction Found in Iraq Yet."
    assert train[0].text_pair == "Weapons of Mass Destruction Found in Iraq."
    assert (train[0].label, train[0].label_name) == (1, "not_entailment")
    assert (train[1].label, train[1].label_name) == (0, "entailment")  # label 0 = entailment, as in GLUE
    assert {e.label for e in dev} == {0, 1}


def test_conll2003_offline(task_data):
    splits = {s: load_conll2003(s, task_data) for s in ("train", "validation", "test")}
    assert {s: len(v) for s, v in splits.items()} == {"train": 14_041, "validation": 3_250, "test": 3_453}
    assert sum(len(s.words) for s in splits["train"]) == 203_621
    first = splits["train"][0]
    assert first.words == ("EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", ".")
    assert first.tags == ("B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O")
    assert first.tag_ids == (3, 0, 7, 0, 0, 0, 7, 0, 0)
    assert first.entities == [("ORG", 0, 1), ("MISC", 2, 3), ("MISC", 6, 7)]
    assert not any("-DOCSTART-" in s.words for v in splits.values() for s in v)
    # entity mentions per type (SOURCE.md; the published CoNLL-2003 counts)
    counts = {t: sum(e[0] == t for s in splits["train"] for e in s.entities) for t in ("LOC", "MISC", "ORG", "PER")}
    assert counts == {"LOC": 7_140, "MISC": 3_438, "ORG": 6_321, "PER": 6_600}


def test_squad_dev_file_is_split_by_article_offline(task_data):
    train, dev = load_squad("train", task_data), load_squad("validation", task_data)
    assert (len(train), len(dev)) == (8_981, 1_589) and len(train) + len(dev) == 10_570
    train_titles, dev_titles = list(dict.fromkeys(e.title for e in train)), list(dict.fromkeys(e.title for e in dev))
    assert len(train_titles) == 40 and len(dev_titles) == SQUAD_OFFLINE_EVAL_ARTICLES == 8
    assert train_titles[0] == "Super_Bowl_50" and dev_titles == [
        "Prime_number",
        "Rhine",
        "Scottish_Parliament",
        "Islamism",
        "Imperialism",
        "United_Methodist_Church",
        "French_and_Indian_War",
        "Force",
    ]
    assert not set(train_titles) & set(dev_titles)
    assert not {e.context for e in train} & {e.context for e in dev}  # no paragraph in both parts
    assert len({e.context for e in train}) + len({e.context for e in dev}) == 2_067
    assert len({e.id for e in train} | {e.id for e in dev}) == 10_570
    first = train[0]
    assert first.id == "56be4db0acb8001400a502ec" and first.question.startswith("Which NFL team represented the AFC")
    assert first.answers[0] == Answer("Denver Broncos", 177)
    assert all(e.context[a.start : a.end] == a.text for e in train + dev for a in e.answers)


def test_load_task_dispatches_and_checks_names(task_data):
    assert load_task("rte", "validation", task_data) == load_rte("validation", task_data)
    with pytest.raises(ValueError, match="task='mnli' is not valid"):
        load_task("mnli", "train", task_data)
    with pytest.raises(ValueError, match="split='test' is not valid; choose one of 'train', 'validation'"):
        load_task("sst2", "test", task_data)
    with pytest.raises(ValueError, match="split='dev'"):
        load_conll2003("dev", task_data)


def test_the_environment_variable_chooses_the_local_folder(task_data, monkeypatch):
    monkeypatch.setenv("BERTLIB_DATA_DIR", str(task_data))
    assert len(load_rte("validation")) == 277


# ------------------------------------------------------------------------------------------------ quick mode
def test_quick_slice_is_small_fixed_and_spread_over_the_split():
    assert quick_slice(list(range(10)), 4) == [0, 2, 5, 7]
    assert quick_slice(list(range(3)), 8) == [0, 1, 2]
    assert quick_slice(list(range(1000)), 5) == [0, 200, 400, 600, 800]
    with pytest.raises(ValueError, match="at least 1"):
        quick_slice([1, 2], 0)


def test_quick_task_slices(task_data):
    for name in TASK_NAMES:
        for split in TASKS[name].splits:
            full = load_task(name, split, task_data)
            quick = load_task(name, split, task_data, quick=True)
            assert len(quick) == min(QUICK_SIZES[split], len(full)) and quick == quick_slice(full, len(quick))
            assert quick == load_task(name, split, task_data, quick=True)  # the same every time
    sst2 = load_task("sst2", "train", task_data, quick=True)
    assert len(sst2) == 512 and {e.label for e in sst2} == {0, 1}
    assert len({e.title for e in load_task("squad", "train", task_data, quick=True)}) == 40  # every article
    assert len(load_task("rte", "validation", task_data, quick=True)) == 128


# --------------------------------------------------------------------------------------------- IOB2 helpers
def test_iob2_checks_and_entities():
    assert iob2_problem(["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC"]) is None
    assert iob2_problem(["O", "I-PER"]) == (
        1,
        "tag 'I-PER' follows 'O': in IOB2 an entity starts with B-PER (IOB1 data? convert it to IOB2)",
    )
    assert iob2_problem(["B-ORG", "I-PER"])[0] == 1
    assert iob2_problem(["I-LOC"])[0] == 0
    assert iob2_problem(["O", "B-DATE"]) == (
        1,
        "tag 'B-DATE' is not one of O, B-PER, I-PER, B-ORG, I-ORG, B-LOC, I-LOC, B-MISC, I-MISC",
    )
    assert iob2_entities(["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC"]) == [
        ("PER", 0, 2),
        ("LOC", 3, 4),
        ("LOC", 4, 6),
    ]
    with pytest.raises(ValueError, match="2 words but 1 tags"):
        TaggedSentence(("a", "b"), ("O",))


# ------------------------------------------------------------------------------------------------ bad files
def _write(root: Path, relative: str, text: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def _one_line_error(load, path: Path, row: str, *fragments: str) -> str:
    with pytest.raises(TaskDataError) as err:
        load()
    message = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in message
    assert message.startswith(f"{path}, {row}:"), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_files_say_where_to_put_them(tmp_path):
    for name, split, relative in [
        ("sst2", "validation", "glue/SST-2/dev.tsv"),
        ("rte", "train", "glue/RTE/train.tsv"),
        ("conll2003", "test", "conll2003/test.txt"),
        ("squad", "train", "squad/dev-v1.1.json"),
    ]:
        with pytest.raises(TaskFileMissing) as err:
            load_task(name, split, tmp_path)
        assert isinstance(err.value, ValueError) and isinstance(err.value, FileNotFoundError)
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"{tmp_path / relative}: no such file")
        assert "BERTLIB_DATA_DIR" in message and TASKS[name].hub_path in message


SST2_OK = "sentence\tlabel\nfine film \t1\nbad film \t0\n"
RTE_OK = "index\tsentence1\tsentence2\tlabel\n0\tA man sleeps.\tA person sleeps.\tentailment\n"


@pytest.mark.parametrize(
    "text, row, fragments",
    [
        ("", "line 1", ["the file is empty"]),
        ("sentence\tlabl\nfine\t1\n", "line 1", ["lacks the column(s) 'label'"]),
        ("text\tlabel\nfine\t1\n", "line 1", ["lacks the column(s) 'sentence'"]),
        (SST2_OK + "too\tmany\tcells\n", "line 4", ["expected 2 tab-separated columns", "found 3"]),
        (SST2_OK + "no label at all\n", "line 4", ["found 1"]),
        (SST2_OK + "great\t2\n", "line 4", ["label '2' is not one of '0', '1'", "0=negative, 1=positive"]),
        (SST2_OK + "great\tpositive\n", "line 4", ["label 'positive' is not one of"]),
        ("sentence\tlabel\n   \t1\n", "line 2", ["sentence is empty"]),
    ],
)
def test_bad_sst2_files(tmp_path, text, row, fragments):
    path = _write(tmp_path, "glue/SST-2/train.tsv", text)
    _one_line_error(lambda: load_sst2("train", tmp_path), path, row, *fragments)


@pytest.mark.parametrize(
    "text, row, fragments",
    [
        ("index\tsentence1\tlabel\n0\tA\tentailment\n", "line 1", ["lacks the column(s) 'sentence2'"]),
        (
            RTE_OK + "1\tA.\tB.\tneutral\n",
            "line 3",
            ["label 'neutral' is not one of 'entailment', 'not_entailment'", "entailment=entailment"],
        ),
        (RTE_OK + "1\tA.\t \tentailment\n", "line 3", ["sentence2 is empty"]),
        (RTE_OK + "1\t\tB.\tentailment\n", "line 3", ["sentence1 is empty"]),
        (RTE_OK + "1\tA.\tB.\n", "line 3", ["expected 4 tab-separated columns", "found 3"]),
    ],
)
def test_bad_rte_files(tmp_path, text, row, fragments):
    path = _write(tmp_path, "glue/RTE/dev.tsv", text)
    _one_line_error(lambda: load_rte("validation", tmp_path), path, row, *fragments)


def test_text_that_is_not_utf8_names_its_line(tmp_path):
    path = _write(tmp_path, "glue/SST-2/dev.tsv", b"sentence\tlabel\nfine\t1\ncaf\xe9\t1\n")
    _one_line_error(lambda: load_sst2("validation", tmp_path), path, "line 3", "not UTF-8")


def test_good_small_files_load(tmp_path):
    _write(tmp_path, "glue/SST-2/train.tsv", SST2_OK)
    _write(tmp_path, "glue/RTE/train.tsv", RTE_OK.replace("\n", "\r\n"))  # Windows line ends are fine
    assert load_sst2("train", tmp_path) == [
        ClassificationExample("fine film", 1, SST2_LABELS),
        ClassificationExample("bad film", 0, SST2_LABELS),
    ]
    assert load_rte("train", tmp_path) == [ClassificationExample("A man sleeps.", 0, RTE_LABELS, "A person sleeps.")]


CONLL_OK = (
    "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n"
)


def test_conll_reads_sentences_and_drops_docstart(tmp_path):
    _write(tmp_path, "conll2003/valid.txt", CONLL_OK + "\n-DOCSTART- -X- -X- O\n\nBonn NNP B-NP B-LOC\n")
    assert load_conll2003("validation", tmp_path) == [
        TaggedSentence(("EU", "rejects"), ("B-ORG", "O")),
        TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER")),
        TaggedSentence(("Bonn",), ("B-LOC",)),
    ]


@pytest.mark.parametrize(
    "extra, row, fragments",
    [
        ("\nSome DT B-NP\n", "line 9", ["expected 4 space-separated columns (word POS chunk NER), found 3"]),
        ("\nSome DT B-NP O extra\n", "line 9", ["found 5"]),
        ("\nJune NNP B-NP B-DATE\n", "line 9", ["tag 'B-DATE' is not one of O, B-PER"]),
        ("\nthe DT B-NP O\nHague NNP I-NP I-LOC\n", "line 10", ["tag 'I-LOC' follows 'O'", "IOB1"]),
        ("\nNew NNP B-NP B-ORG\nYork NNP I-NP I-LOC\n", "line 10", ["tag 'I-LOC' follows 'B-ORG'"]),
        ("\nLondon NNP B-NP i-loc\n", "line 9", ["tag 'i-loc' is not one of"]),
    ],
)
def test_bad_conll_files(tmp_path, extra, row, fragments):
    path = _write(tmp_path, "conll2003/train.txt", CONLL_OK + extra)
    _one_line_error(lambda: load_conll2003("train", tmp_path), path, row, *fragments)


def _squad_file(root: Path, articles: list[dict]) -> Path:
    return _write(root, "squad/dev-v1.1.json", json.dumps({"version": "1.1", "data": articles}))


def _article(title: str, context: str, *qas: dict) -> dict:
    return {"title": title, "paragraphs": [{"context": context, "qas": list(qas)}]}


def _qa(qid: str, question: str, *answers: tuple[str, int]) -> dict:
    return {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}


def _articles(n: int) -> list[dict]:
    contexts = [f"Article {i} is about cats." for i in range(n)]
    return [
        _article(f"T{i}", c, _qa(f"q{i}", f"What is article {i} about?", ("cats", c.index("cats"))))
        for i, c in enumerate(contexts)
    ]


def test_squad_split_keeps_the_last_articles_for_validation(tmp_path):
    _squad_file(tmp_path, _articles(10))
    train, dev = load_squad("train", tmp_path), load_squad("validation", tmp_path)
    assert [e.id for e in train] == ["q0", "q1"] and [e.id for e in dev] == [f"q{i}" for i in range(2, 10)]
    assert train[0] == SquadExample(
        "q0", "T0", "Article 0 is about cats.", "What is article 0 about?", (Answer("cats", 19),)
    )


@pytest.mark.parametrize(
    "change, qid, fragments",
    [
        (
            lambda a: a[3]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=3),
            "q3",
            ["answer 'cats' does not occur at its start offset 3", "the context has 'icle' there"],
        ),
        (
            lambda a: a[3]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=500),
            "q3",
            ["does not occur at its start offset 500", "the context has '' there"],
        ),
        (lambda a: a[3]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=-2), "q3", ["start offset -2"]),
        (lambda a: a[4]["paragraphs"][0].update(context="  "), "q4", ["the context is empty"]),
        (lambda a: a[5]["paragraphs"][0]["qas"][0].update(question=""), "q5", ["the question is empty"]),
        (lambda a: a[6]["paragraphs"][0]["qas"][0].update(answers=[]), "q6", ["has no answer", "v2.0"]),
        (lambda a: a[7]["paragraphs"][0]["qas"][0]["answers"][0].update(text=""), "q7", ["answer text '' is empty"]),
        (lambda a: a[8]["paragraphs"][0]["qas"][0].update(id="q1"), "q1", ["the id is used twice"]),
        (lambda a: a[2]["paragraphs"][0]["qas"][0].pop("answers"), "q2", ["'answers' must be a list"]),
    ],
)
def test_bad_squad_questions_name_the_question_id(tmp_path, change, qid, fragments):
    articles = _articles(10)
    change(articles)
    path = _squad_file(tmp_path, articles)
    _one_line_error(lambda: load_squad("validation", tmp_path), path, f"question id {qid}", *fragments)


def test_bad_squad_files(tmp_path):
    path = _write(tmp_path, "squad/dev-v1.1.json", '{"data": [\n  {"title": "x",\n')
    _one_line_error(lambda: load_squad("train", tmp_path), path, "line 3", "not valid JSON")
    path = _write(tmp_path, "squad/dev-v1.1.json", '{"version": "1.1"}')
    with pytest.raises(TaskDataError, match="expected an object with a 'data' list"):
        load_squad("train", tmp_path)
    _squad_file(tmp_path, _articles(SQUAD_OFFLINE_EVAL_ARTICLES))
    with pytest.raises(TaskDataError, match="8 articles; the offline train/validation split keeps the last 8"):
        load_squad("train", tmp_path)


# ------------------------------------------------------------------------- the hub branch, datasets mocked
@pytest.fixture
def fake_hub(monkeypatch):
    """Replace `datasets.load_dataset` by a function that serves in-memory datasets and records its calls."""
    try:
        import datasets
    except ImportError:
        missing_tool("the datasets package is not installed (pip install -r requirements.txt)")
    monkeypatch.delenv("BERTLIB_DATA_DIR", raising=False)
    served: dict = {}
    calls: list = []

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        answer = served[(args, kwargs.get("revision"))]
        if isinstance(answer, Exception):
            raise answer
        return answer[kwargs["split"]]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return datasets, served, calls


def _glue(datasets, columns: dict, label_names=None):
    from datasets import ClassLabel, Dataset, Features, Value

    names = label_names or ["negative", "positive"]
    features = Features(
        {
            **{c: Value("string") for c in columns if c != "label"},
            "label": ClassLabel(names=names),
            "idx": Value("int32"),
        }
    )
    return Dataset.from_dict({**columns, "idx": list(range(len(columns["label"])))}, features=features)


def test_hub_glue_columns_and_labels(fake_hub):
    datasets, served, calls = fake_hub
    served[(("nyu-mll/glue", "sst2"), None)] = {
        "train": _glue(
            datasets, {"sentence": ["hide new secretions from the parental units ", "a gem "], "label": [0, 1]}
        )
    }
    served[(("nyu-mll/glue", "rte"), None)] = {
        "validation": _glue(
            datasets,
            {"sentence1": ["Dana Reeve died."], "sentence2": ["Reeve had an accident."], "label": [1]},
            ["entailment", "not_entailment"],
        )
    }
    assert load_sst2("train") == [
        ClassificationExample("hide new secretions from the parental units", 0, SST2_LABELS),
        ClassificationExample("a gem", 1, SST2_LABELS),
    ]
    assert load_task("rte", "validation") == [
        ClassificationExample("Dana Reeve died.", 1, RTE_LABELS, "Reeve had an accident.")
    ]
    assert calls == [(("nyu-mll/glue", "sst2"), {"split": "train"}), (("nyu-mll/glue", "rte"), {"split": "validation"})]


def test_hub_glue_refuses_unlabelled_rows_and_other_label_names(fake_hub):
    datasets, served, _ = fake_hub
    served[(("nyu-mll/glue", "sst2"), None)] = {
        "train": _glue(datasets, {"sentence": ["fine", "hidden label"], "label": [1, -1]})
    }
    with pytest.raises(
        TaskDataError,
        match=r"^nyu-mll/glue \(sst2, train\) row 1: label -1 is outside the sst2 "
        r"labels \(0=negative, 1=positive\)$",
    ):
        load_sst2("train")
    served[(("nyu-mll/glue", "sst2"), None)] = {
        "train": _glue(datasets, {"sentence": ["fine"], "label": [1]}, ["positive", "negative"])
    }
    with pytest.raises(TaskDataError, match="label names .* differ from the expected"):
        load_sst2("train")
    served[(("nyu-mll/glue", "sst2"), None)] = {"train": _glue(datasets, {"text": ["fine"], "label": [1]})}
    with pytest.raises(TaskDataError, match="lacks the column.s. 'sentence'"):
        load_sst2("train")


def _conll(tags: list[list[int]], words: list[list[str]], names=CONLL_TAGS):
    from datasets import ClassLabel, Dataset, Features, List, Value

    features = Features(
        {
            "id": Value("string"),
            "tokens": List(Value("string")),
            "pos_tags": List(ClassLabel(names=["NNP", "VBZ", "."])),
            "ner_tags": List(ClassLabel(names=list(names))),
        }
    )
    return Dataset.from_dict(
        {
            "id": [str(i) for i in range(len(words))],
            "tokens": words,
            "pos_tags": [[0] * len(w) for w in words],
            "ner_tags": tags,
        },
        features=features,
    )


def test_hub_conll_maps_tag_ids_to_names(fake_hub):
    _, served, calls = fake_hub
    words = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
    served[(("eriktks/conll2003",), None)] = {"test": _conll([[3, 0, 7, 0], [1, 2]], words)}
    assert load_conll2003("test") == [
        TaggedSentence(("EU", "rejects", "German", "call"), ("B-ORG", "O", "B-MISC", "O")),
        TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER")),
    ]
    assert calls == [(("eriktks/conll2003",), {"split": "test"})]
    # the mapping goes through the dataset's own names, whatever their order
    shuffled = ("B-PER", "I-PER", "O", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
    served[(("eriktks/conll2003",), None)] = {"test": _conll([[0, 1]], [["Peter", "Blackburn"]], shuffled)}
    assert load_conll2003("test")[0].tags == ("B-PER", "I-PER")


def test_hub_conll_falls_back_to_the_parquet_export_of_a_script_dataset(fake_hub):
    _, served, calls = fake_hub
    served[(("eriktks/conll2003",), None)] = RuntimeError(
        "Dataset scripts are no longer supported, but found conll2003.py"
    )
    served[(("eriktks/conll2003",), "refs/convert/parquet")] = {"train": _conll([[5]], [["Bonn"]])}
    assert load_conll2003("train") == [TaggedSentence(("Bonn",), ("B-LOC",))]
    assert calls == [
        (("eriktks/conll2003",), {"split": "train"}),
        (("eriktks/conll2003",), {"split": "train", "revision": "refs/convert/parquet"}),
    ]


def test_hub_conll_refuses_bad_tags(fake_hub):
    _, served, _ = fake_hub
    served[(("eriktks/conll2003",), None)] = {"train": _conll([[0], [0, 6]], [["a"], ["the", "Hague"]])}
    with pytest.raises(
        TaskDataError,
        match=r"^eriktks/conll2003 \(train\) row 1: word 1 \('Hague'\): tag 'I-LOC' "
        r"follows 'O'",
    ):
        load_conll2003("train")
    served[(("eriktks/conll2003",), None)] = {"train": _conll([[0]], [["a"]], ["O", "B-DATE"])}
    with pytest.raises(TaskDataError, match=r"tag names \['B-DATE'\] are not CoNLL-2003 IOB2 tags"):
        load_conll2003("train")


def _squad_hub(rows: list[dict]):
    from datasets import Dataset, Features, List, Value

    features = Features(
        {
            "id": Value("string"),
            "title": Value("string"),
            "context": Value("string"),
            "question": Value("string"),
            "answers": {"text": List(Value("string")), "answer_start": List(Value("int32"))},
        }
    )
    return Dataset.from_list(rows, features=features)


def test_hub_squad_uses_the_real_train_and_validation_splits(fake_hub):
    _, served, calls = fake_hub
    row = {
        "id": "5733be284776f41900661182",
        "title": "University_of_Notre_Dame",
        "context": "Architecturally, the school has a Catholic character.",
        "question": "What character does the school have?",
        "answers": {"text": ["Catholic"], "answer_start": [34]},
    }
    served[(("rajpurkar/squad", "plain_text"), None)] = {
        "train": _squad_hub([row]),
        "validation": _squad_hub([{**row, "id": "v1"}]),
    }
    assert load_squad("train") == [
        SquadExample(row["id"], row["title"], row["context"], row["question"], (Answer("Catholic", 34),))
    ]
    assert [e.id for e in load_squad("validation")] == ["v1"]
    assert calls == [
        (("rajpurkar/squad", "plain_text"), {"split": "train"}),
        (("rajpurkar/squad", "plain_text"), {"split": "validation"}),
    ]
    served[(("rajpurkar/squad", "plain_text"), None)] = {
        "train": _squad_hub([{**row, "answers": {"text": ["Catholic"], "answer_start": [33]}}])
    }
    with pytest.raises(
        TaskDataError,
        match=r"^rajpurkar/squad \(train\) row 0, question id 5733be284776f41900661182: "
        r"answer 'Catholic' does not occur at its start offset 33",
    ):
        load_squad("train")


def test_hub_failure_says_how_to_work_offline(fake_hub):
    _, served, _ = fake_hub
    served[(("nyu-mll/glue", "rte"), None)] = ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub")
    with pytest.raises(ConnectionError) as err:
        load_rte("train")
    message = str(err.value)
    assert "'nyu-mll/glue' (rte, train)" in message and "glue/RTE/" in message and "BERTLIB_DATA_DIR" in message


# ====================================================================================== scores (task_metrics)
def test_accuracy():
    from bertlib.tasks.metrics import accuracy

    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    with pytest.raises(ValueError, match="3 predictions for 2 labels"):
        accuracy([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="no examples"):
        accuracy([], [])


# Two sentences of ten words; the tagger gets 18 of 20 tags right but cuts both multi-word entities short,
# so it finds no entity exactly: 90% token accuracy, entity F1 0.
GOLD = [
    ["B-ORG", "I-ORG", "I-ORG", "O", "O", "O", "O", "O", "O", "O"],
    ["O", "O", "B-PER", "I-PER", "O", "O", "O", "O", "O", "O"],
]
CUT = [
    ["B-ORG", "I-ORG", "O", "O", "O", "O", "O", "O", "O", "O"],
    ["O", "O", "B-PER", "O", "O", "O", "O", "O", "O", "O"],
]


def test_entity_f1_is_low_where_token_accuracy_is_high():
    from bertlib.tasks.metrics import entity_scores

    scores = entity_scores(GOLD, CUT)
    assert scores["token_accuracy"] == pytest.approx(0.9)
    assert (scores["precision"], scores["recall"], scores["f1"]) == (0.0, 0.0, 0.0)
    assert entity_scores(GOLD, GOLD)["f1"] == 1.0


def test_entity_scores_per_type():
    from bertlib.tasks.metrics import entity_report, entity_scores

    gold = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["B-ORG", "O", "B-LOC", "O", "B-PER"]]
    pred = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["B-ORG", "O", "B-ORG", "O", "O"]]
    # gold: PER 2, LOC 2, ORG 1; predicted: PER 1 (right), LOC 1 (right), ORG 2 (1 right) -> 3 of 4 right, 3 of 5 found
    scores = entity_scores(gold, pred)
    assert scores["precision"] == pytest.approx(3 / 4) and scores["recall"] == pytest.approx(3 / 5)
    assert scores["f1"] == pytest.approx(2 * 0.75 * 0.6 / 1.35)
    assert scores["per_type"] == {
        "LOC": {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2},
        "ORG": {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1},
        "PER": {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2},
    }
    report = entity_report(gold, pred)
    assert report.split("\n")[2].split() == ["LOC", "1.0000", "0.5000", "0.6667", "2"]
    assert "micro avg" in report


def test_ner_modes_differ_only_on_ill_formed_predictions():
    from bertlib.tasks.metrics import entity_scores

    gold = [["O", "B-PER", "I-PER", "O"]]
    starts_with_i = [["O", "I-PER", "I-PER", "O"]]  # not IOB2: conlleval still reads one PER entity
    assert entity_scores(gold, starts_with_i)["f1"] == 1.0
    assert entity_scores(gold, starts_with_i, mode="strict")["f1"] == 0.0
    assert entity_scores(GOLD, CUT, mode="strict") == entity_scores(GOLD, CUT)  # valid IOB2: the same
    with pytest.raises(ValueError, match="mode='lenient' is not valid"):
        entity_scores(gold, gold, mode="lenient")


def test_entity_scores_check_their_input():
    from bertlib.tasks.metrics import entity_scores

    with pytest.raises(ValueError, match="sentence 1: 3 predicted tags for 2 gold tags"):
        entity_scores([["O"], ["O", "O"]], [["O"], ["O", "O", "O"]])
    with pytest.raises(ValueError, match="1 predicted sentences for 2 gold sentences"):
        entity_scores([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="one list of tags per sentence"):
        entity_scores(["O"], ["O"])


@pytest.mark.parametrize(
    "text, normal",
    [
        ("The Cat!", "cat"),
        ("  An   apple a day ", "apple day"),
        ("the Denver Broncos.", "denver broncos"),
        ("Theater and anthem", "theater and anthem"),  # articles only as whole words
        ("a.m.", "am"),  # punctuation goes before articles: "a.m." is not the article "a"
        ("The U.S.!", "us"),
        ("Levi's Stadium", "levis stadium"),
        ("the the THE", ""),
        ("1,000 (approx.)", "1000 approx"),
        ("1990–91 season", "1990–91 season"),  # only ASCII punctuation is removed, as in the official script
        ("tab\tand\nnewline", "tab and newline"),
    ],
)
def test_squad_normalisation(text, normal):
    from bertlib.tasks.metrics import normalize_answer

    assert normalize_answer(text) == normal


def test_squad_exact_match_and_f1_on_known_cases():
    from bertlib.tasks.metrics import answer_f1, exact_match

    assert exact_match("the Denver Broncos", ["Denver Broncos"]) == 1.0
    assert exact_match("Denver Broncos!", "denver broncos") == 1.0
    assert exact_match("Broncos", ["Denver Broncos"]) == 0.0
    assert answer_f1("Denver Broncos won", ["Denver Broncos"]) == pytest.approx(0.8)  # P 2/3, R 1
    # SQuAD dev: "Where did Super Bowl 50 take place?"; prediction against the longest gold answer: P 1, R 3/11
    gold = "Levi's Stadium in the San Francisco Bay Area at Santa Clara, California."
    assert answer_f1("Santa Clara, California", gold) == pytest.approx(6 / 14)
    assert answer_f1("Santa Clara, California", [gold, "Santa Clara, California"]) == 1.0  # best gold answer
    assert answer_f1("the cat cat", ["cat"]) == pytest.approx(2 / 3)  # a token matches as often as the gold has it
    assert answer_f1("", ["cat"]) == 0.0 and exact_match("", ["cat"]) == 0.0
    assert answer_f1("the", ["a"]) == 0.0 and exact_match("the", ["a"]) == 1.0  # both normalise to ""
    with pytest.raises(ValueError, match="at least one gold answer"):
        answer_f1("x", [])


def test_squad_scores_average_over_questions():
    from bertlib.tasks.metrics import squad_scores

    def example(qid, *answers):
        return SquadExample(qid, "T", "ctx", "q?", tuple(Answer(a, 0) for a in answers))

    examples = [
        example("a", "Denver Broncos"),
        example("b", "Santa Clara", "Santa Clara, California"),
        example("c", "1000"),
    ]
    scores = squad_scores({"a": "The Denver Broncos", "b": "Clara"}, examples)  # "c" unanswered: 0
    assert scores["exact_match"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx((1 + 2 / 3) / 3)  # "Clara" vs "santa clara": P 1, R 1/2
    assert (scores["count"], scores["answered"]) == (3, 2)
    with pytest.raises(ValueError, match="1 predictions are for questions not among the examples, e.g. 'z'"):
        squad_scores({"z": "x"}, examples)


def test_task_scores_dispatch_on_the_task(task_data):
    from bertlib.tasks.metrics import task_scores

    dev = load_rte("validation", task_data)
    assert task_scores("rte", [e.label for e in dev], dev) == {"accuracy": 1.0}
    assert task_scores("rte", [0] * len(dev), dev)["accuracy"] == pytest.approx(
        sum(e.label == 0 for e in dev) / len(dev)
    )
    sentences = [TaggedSentence(tuple("abcdefghij"), tuple(t)) for t in GOLD]
    by_ids = [[CONLL_TAGS.index(t) for t in tags] for tags in CUT]  # a head predicts tag ids
    assert task_scores("conll2003", by_ids, sentences)["f1"] == 0.0
    assert task_scores("conll2003", GOLD, sentences)["f1"] == 1.0
    squad = load_squad("validation", task_data)[:10]
    assert task_scores("squad", {e.id: e.answers[0].text for e in squad}, squad)["exact_match"] == 1.0
    with pytest.raises(ValueError, match="sst2 scores ClassificationExamples, but example 0 is TaggedSentence"):
        task_scores("sst2", [0, 1], sentences)
