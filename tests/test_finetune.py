"""Fine-tuning (bertlib.tasks.features, bertlib.recipes.finetune, the `finetune` and `predict` commands): inputs equal
to what HF's tokenizer makes (pair truncation, word alignment, QA windows with a stride), span search and window
stitching on hand-made cases, a fine-tuned run that keeps its best checkpoint and resumes, and an exported
model that predicts the same through transformers' pipelines as through bertlib."""

import json
import random
from dataclasses import replace

import pytest
import torch
import transformers
from bert_testing import small_config, wordpiece_tokenizer

from bertlib.cli.main import main
from bertlib.data.pretraining import PaddingCollator
from bertlib.data.tokenizer import add_bert_post_processor
from bertlib.hf import folders as hf_folders
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining
from bertlib.model.heads import BertForQuestionAnswering, BertForSequenceClassification
from bertlib.recipes.finetune import TaskObjective, finetune
from bertlib.recipes.predict import predict
from bertlib.tasks.examples import CONLL_TAGS, RTE_LABELS, Answer, ClassificationExample, SquadExample, TaggedSentence
from bertlib.tasks.features import (
    best_spans,
    encode_classification,
    encode_tagging,
    encode_task,
    squad_windows,
    truncate_pair,
    word_predictions,
)
from bertlib.train.checkpoints import best_checkpoint, checkpoints, load_training_state, save_checkpoint
from bertlib.train.factory import load_model
from bertlib.train.runs import create_run, load_run, read_metrics, trained_length
from bertlib.train.settings import FinetuneConfig, PretrainConfig

WORDS = "the cat sat on a mat while dogs barked loudly at strangers passing by , and then".split()


@pytest.fixture(scope="module")
def hf_tokenizer(fast_tokenizer):
    return hf_folders.to_hf_tokenizer(fast_tokenizer, 512)


def random_text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(low, high)))


# -------------------------------------------------------------------------------------------------- inputs
def test_pairs_and_single_sentences_are_cut_as_hf_cuts_them(fast_tokenizer, hf_tokenizer):
    rng = random.Random(0)
    for _ in range(300):
        a, b, length = random_text(rng, 1, 30), random_text(rng, 1, 30), rng.randint(5, 40)
        for pair in (b, None):
            ours = encode_classification(ClassificationExample(a, 1, RTE_LABELS, pair), fast_tokenizer, length)
            theirs = hf_tokenizer(a, pair, truncation=True, max_length=length)
            assert ours["input_ids"] == theirs["input_ids"]
            assert ours["token_type_ids"] == theirs["token_type_ids"]
            assert ours["labels"] == 1


def test_truncate_pair_cases():
    assert truncate_pair([1, 2], [3], 5) == ([1, 2], [3])
    assert truncate_pair([1, 2], [3, 4, 5, 6, 7], 4) == ([1, 2], [3, 4])  # the longer gives way
    assert truncate_pair([1, 2, 3, 4], [5, 6, 7, 8, 9], 5) == ([1, 2], [5, 6, 7])  # both cut: the shorter keeps half
    assert truncate_pair([1, 2, 3], [4, 5, 6], 4) == ([1, 2], [4, 5])


def test_ner_labels_sit_on_the_first_piece_of_each_word(fast_tokenizer, hf_tokenizer):
    words = ("Hyperparameterisation", "of", "Kaczmarczyk", "'s", "model", "in", "Zurich")
    tags = ("B-MISC", "O", "B-PER", "O", "O", "O", "B-LOC")
    item, word_ids = encode_tagging(TaggedSentence(words, tags), fast_tokenizer, 128)
    hf = hf_tokenizer(list(words), is_split_into_words=True)
    assert item["input_ids"] == hf["input_ids"] and word_ids == hf.word_ids()
    assert sum(w == 0 for w in word_ids) > 2, "the test needs a word split into many pieces"
    expected, previous = [], None
    for w in hf.word_ids():  # HF's recipe (run_ner): label the first piece, -100 on the rest and on specials
        expected.append(IGNORE_INDEX if w is None or w == previous else CONLL_TAGS.index(tags[w]))
        previous = w
    assert item["labels"] == expected
    # predictions back to words: each word takes its first piece's tag; pieces cut off leave their words O
    cut, cut_words = encode_tagging(TaggedSentence(words, tags), fast_tokenizer, 6)
    assert len(cut["input_ids"]) == 6
    predicted = word_predictions(
        [t if t != IGNORE_INDEX else 0 for t in cut["labels"]], cut_words, len(words), CONLL_TAGS
    )
    kept = max(w for w in cut_words if w is not None)
    assert predicted[kept + 1 :] == ["O"] * (len(words) - kept - 1)
    assert predicted[0] == "B-MISC"


def test_squad_windows_are_hf_overflow_windows(fast_tokenizer, hf_tokenizer):
    rng = random.Random(1)
    question = "where did the cat sit ?"
    n_question = len(fast_tokenizer.encode(question, add_special_tokens=False).ids)
    for _ in range(150):
        context = random_text(rng, 5, 120)
        length = rng.randint(20, 60)
        room = length - n_question - 3
        stride = rng.randint(1, room)
        answer = (Answer("cat", context.find("cat")),) if "cat" in context else ()
        items, meta = squad_windows(SquadExample("q", "t", context, question, answer), fast_tokenizer, length, stride)
        # HF's `stride` is the overlap of two windows; ours is the step between their starts, as in BERT
        theirs = hf_tokenizer(
            question,
            context,
            truncation="only_second",
            max_length=length,
            stride=room - stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        assert [i["input_ids"] for i in items] == theirs["input_ids"]
        assert [i["token_type_ids"] for i in items] == theirs["token_type_ids"]
        for i, window in enumerate(meta):
            sequence = theirs.sequence_ids(i)
            assert window["offsets"] == [
                tuple(o) if s == 1 else None for o, s in zip(theirs["offset_mapping"][i], sequence, strict=True)
            ]
        for item, window in zip(items, meta, strict=True):
            if item["start_positions"]:
                start, end = window["offsets"][item["start_positions"]][0], window["offsets"][item["end_positions"]][1]
                assert context[start:end] == "cat"


def test_answers_across_a_window_boundary_and_at_the_very_end(fast_tokenizer):
    context = " ".join(f"w{i}" for i in range(40)) + " golden gate bridge"
    pieces = fast_tokenizer.encode(context, add_special_tokens=False)
    start = context.index("golden gate")
    example = SquadExample("q", "t", context, "what ?", (Answer("golden gate bridge", start),))
    items, meta = squad_windows(example, fast_tokenizer, max_seq_len=24, doc_stride=8)
    inside = [i for i, item in enumerate(items) if item["start_positions"]]
    assert inside and len(inside) < len(items)  # some windows hold the whole answer, the others point at [CLS]
    for i in inside:
        offsets = meta[i]["offsets"]
        s, e = items[i]["start_positions"], items[i]["end_positions"]
        assert context[offsets[s][0] : offsets[e][1]] == "golden gate bridge"
    # a window that cuts the answer in two marks it as absent
    cutting = [
        i
        for i, m in enumerate(meta)
        if any(o and o[0] >= start for o in m["offsets"])
        and any(o and o[0] < start + 5 and o[1] > start for o in m["offsets"])
        and i not in inside
    ]
    assert all(items[i]["start_positions"] == items[i]["end_positions"] == 0 for i in cutting)
    assert meta[-1]["offsets"][-2][1] == len(context) and len(pieces.ids) > 24  # the last window reaches the end


def test_span_search_stitches_windows_and_keeps_to_the_rules():
    meta = [
        {"example_id": "q", "offsets": [None, None, (0, 3), (4, 7), (8, 11), None]},
        {"example_id": "q", "offsets": [None, None, (8, 11), (12, 15), (16, 19), None]},
    ]
    starts = [torch.tensor([9.0, 9.0, 1.0, 0.0, 0.0, 9.0]), torch.tensor([0.0, 0.0, 0.0, 3.0, 0.0, 0.0])]
    ends = [torch.tensor([9.0, 9.0, 0.0, 1.5, 0.0, 9.0]), torch.tensor([0.0, 0.0, 0.0, 0.0, 2.0, 0.0])]
    # [CLS], the question and [SEP] never answer; the second window's span scores 5 > 2.5
    assert best_spans(starts, ends, meta) == {"q": (12, 19)}
    # one piece at most: (12, 15) scores 3 + 0, more than (4, 7), 0 + 1.5
    assert best_spans(starts, ends, meta, max_answer_len=1) == {"q": (12, 15)}
    backwards = [torch.tensor([0.0, 0.0, 0.0, 0.0, 5.0, 0.0])], [torch.tensor([0.0, 0.0, 5.0, 0.0, 0.0, 0.0])]
    span = best_spans(*backwards, meta[:1])["q"]
    assert span != (8, 3) and span[0] <= span[1]  # an end before its start is never proposed


def test_collator_pads_each_kind_of_target():
    features = encode_task(
        "conll2003",
        [TaggedSentence(("EU", "rejects"), ("B-ORG", "O")), TaggedSentence(("Peter",), ("B-PER",))],
        wordpiece_tokenizer(),
        32,
    )
    batch = PaddingCollator(pad_token_id=0, pad_to_multiple_of=8)([features[0], features[1]])
    assert batch["input_ids"].shape == (2, 8) and batch["labels"].shape == (2, 8)
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    assert TaskObjective("conll2003", 0).counts(batch) == (3,)  # three labelled words
    assert TaskObjective("rte", 0).counts(batch) == (2,)


# ------------------------------------------------------------------------------------- training and runs
@pytest.fixture(scope="module")
def hf_source(tmp_path_factory, fast_tokenizer):
    "A small random BERT saved as an HF checkpoint folder, with the session's WikiText tokenizer."
    folder = tmp_path_factory.mktemp("source")
    torch.manual_seed(0)
    config = small_config(vocab_size=fast_tokenizer.get_vocab_size(), max_position_embeddings=256)
    hf_folders.save_pretrained_hf(BertForPreTraining(config), fast_tokenizer, folder)
    return folder


def test_finetune_keeps_the_best_validation_and_resumes(tmp_path, hf_source, task_data):
    cfg = FinetuneConfig(
        task="rte",
        source=str(hf_source),
        train_examples=32,
        eval_examples=16,
        epochs=2,
        batch_size=8,
        log_every=2,
        device="cpu",
    )
    events = []
    records = finetune(tmp_path / "run", cfg, data_dir=task_data, on_log=events.append, show_progress=False)
    assert "classifier.weight" in events[0]["event"]  # the new weights are announced
    valid = [r for r in records if r.get("split") == "validation"]
    assert [r["step"] for r in valid] == [4, 8]  # one validation per epoch
    best = max(valid, key=lambda r: r["accuracy"])
    assert load_training_state(best_checkpoint(tmp_path / "run"))["scores"]["accuracy"] == best["accuracy"]
    model_config, saved, _ = load_run(tmp_path / "run")
    assert saved.task == "rte" and saved.eval_every == 4 and saved.max_seq_len == 128
    model, tokenizer = load_model(tmp_path / "run")
    assert isinstance(model, BertForSequenceClassification) and model.label_names == RTE_LABELS
    # resuming a longer run with the settings it began with (its length unset, now resolved and saved) continues from
    # the newest checkpoint and records the new length
    more = finetune(
        tmp_path / "run",
        replace(cfg, epochs=3),
        data_dir=task_data,
        resume=True,
        show_progress=False,
    )
    assert [r["step"] for r in more if r.get("split") == "validation"] == [4, 8, 12]
    assert load_run(tmp_path / "run")[1].epochs == 3 and checkpoints(tmp_path / "run")[-1].name.endswith("12")
    assert len(read_metrics(tmp_path / "run" / "metrics.jsonl")) == len(more)


def test_random_init_keeps_nothing_of_the_source(tmp_path, hf_source, task_data):
    cfg = FinetuneConfig(
        task="sst2",
        source=str(hf_source),
        init="random",
        train_examples=8,
        eval_examples=8,
        max_steps=1,
        epochs=None,
        batch_size=8,
        device="cpu",
    )
    events = []
    finetune(tmp_path / "run", cfg, data_dir=task_data, on_log=events.append, show_progress=False)
    assert not any("event" in e for e in events)
    trained = load_model(tmp_path / "run")[0]
    encoder = hf_folders.load_hf_encoder(hf_source)[1]
    assert not torch.equal(
        trained.state_dict()["bert.embeddings.word_embeddings.weight"],
        encoder["bert.embeddings.word_embeddings.weight"],
    )


def test_every_task_trains_a_step_and_predicts(tmp_path, hf_source, task_data):
    for task, kwargs in (("conll2003", {}), ("squad", {"question": "who is it ?"})):
        cfg = FinetuneConfig(
            task=task,
            source=str(hf_source),
            train_examples=8,
            eval_examples=4,
            max_steps=2,
            epochs=None,
            batch_size=4,
            max_seq_len=64,
            doc_stride=32,
            device="cpu",
        )
        records = finetune(tmp_path / task, cfg, data_dir=task_data, show_progress=False)
        assert records[-1]["split"] == "validation"
        model, tokenizer = load_model(tmp_path / task)
        result = predict(model, tokenizer, task, "Peter Blackburn lives in Brussels .", **kwargs)
        if task == "squad":
            assert "Peter Blackburn lives in Brussels ."[result["start"] : result["end"]] == result["answer"]
        else:
            assert result["words"][0] == "Peter" and len(result["tags"]) == 6


# ---------------------------------------------------------------------------------- transformers' pipelines
def test_exported_pair_classifier_and_reader_predict_as_bertlib_does(tmp_path):
    tokenizer = add_bert_post_processor(wordpiece_tokenizer())
    config = small_config(vocab_size=tokenizer.get_vocab_size())
    torch.manual_seed(3)
    classifier = BertForSequenceClassification(config, RTE_LABELS).eval()
    folder = hf_folders.save_pretrained_hf(classifier, tokenizer, tmp_path / "rte")
    pipe = transformers.pipeline("text-classification", model=str(folder), tokenizer=str(folder))
    for premise, hypothesis in (("the cat sat on the mat", "a dog ran"), ("a big red dog", "the dog is big")):
        ours = predict(classifier, tokenizer, "rte", premise, pair=hypothesis)
        theirs = pipe({"text": premise, "text_pair": hypothesis}, top_k=None)
        assert {r["label"]: r["score"] for r in theirs} == pytest.approx(ours["probabilities"], abs=1e-5)

    # transformers 5 has no question-answering pipeline: its model class and tokenizer, and a brute-force search
    reader = BertForQuestionAnswering(config).eval()
    context, question = "the cat sat on the mat while a big red dog ran over the log", "where did the cat sit ?"
    for seed in range(4):
        torch.manual_seed(seed)
        torch.nn.init.normal_(reader.qa_outputs.weight, std=0.5)
        folder = hf_folders.save_pretrained_hf(reader, tokenizer, tmp_path / f"squad{seed}")
        hf_model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
        inputs = transformers.AutoTokenizer.from_pretrained(folder)(
            question, context, return_offsets_mapping=True, return_tensors="pt"
        )
        offsets, context_piece = inputs.pop("offset_mapping")[0].tolist(), inputs.sequence_ids(0)
        with torch.no_grad():
            out = hf_model(**inputs)
        start, end = out.start_logits[0], out.end_logits[0]
        score, s, e = max(
            (float(start[s] + end[e]), s, e)
            for s in range(len(start))
            for e in range(s, s + 30)
            if e < len(end) and context_piece[s] == context_piece[e] == 1
        )
        ours = predict(reader, tokenizer, "squad", context, question=question)
        assert (ours["start"], ours["end"]) == (offsets[s][0], offsets[e][1])
        assert ours["answer"] == context[offsets[s][0] : offsets[e][1]]


# -------------------------------------------------------------------------------------------- command line
def test_finetune_and_predict_commands(tmp_path, hf_source, task_data, capsys, monkeypatch):
    monkeypatch.setenv("BERTLIB_DATA_DIR", str(task_data))
    out = tmp_path / "sst2"
    assert (
        main(
            [
                "finetune",
                "sst2",
                "--from",
                str(hf_source),
                "--output-dir",
                str(out),
                "--train-examples",
                "8",
                "--eval-examples",
                "8",
                "--max-steps",
                "1",
                "--batch-size",
                "8",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert "best validation accuracy" in capsys.readouterr().out
    assert main(["predict", str(out), "a fine film", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["probabilities"]) == {"negative", "positive"}
    # the best checkpoint exports as HF's classifier, which says the same through a pipeline
    assert main(["export-hf", str(out), str(tmp_path / "hf")]) == 0
    assert "AutoModelForSequenceClassification" in capsys.readouterr().out
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), tokenizer=str(tmp_path / "hf"))
    theirs = {r["label"]: r["score"] for r in pipe("a fine film", top_k=None)}
    assert theirs == pytest.approx(result["probabilities"], abs=1e-5)
    capsys.readouterr()  # transformers' loading bars
    for argv, message in (
        (["finetune", "sst2", "--output-dir", str(tmp_path / "x")], "--from"),
        (["finetune", "sst2", "--from", str(hf_source), "--output-dir", str(out)], "not an empty folder"),
        (
            ["finetune", "sst2", "--from", str(tmp_path / "nothing"), "--output-dir", str(tmp_path / "y")],
            "neither a bertlib run folder",
        ),
        (["finetune", "sst2", "--from", str(hf_source), "--output-dir", str(tmp_path / "z"), "--lr", "-1"], "lr"),
        (["predict", str(out), "a film", "--pair", "another"], "one text"),
        (["fill-mask", str(out), "a [MASK] film"], "fine-tuning run"),
        (["evaluate", str(out)], "fine-tuning run"),
    ):
        assert main(argv) == 2, argv
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1, (argv, error)
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune", "mnli", "--from", str(hf_source)])
    assert exit_info.value.code == 2


def test_fine_tuning_never_reads_positions_the_encoder_was_not_pre_trained_on(tmp_path, fast_tokenizer, task_data):
    "A run pre-trained on 32 tokens fine-tunes at 32 by default, and refuses more unless told to."
    config = small_config(vocab_size=fast_tokenizer.get_vocab_size(), max_position_embeddings=128)
    create_run(tmp_path / "short", config, PretrainConfig(max_seq_len=32), fast_tokenizer)
    save_checkpoint(tmp_path / "short", BertForPreTraining(config), {"step": 0}, 0)
    assert trained_length(tmp_path / "short", config) == 32
    cfg = FinetuneConfig(
        task="sst2",
        source=str(tmp_path / "short"),
        train_examples=8,
        eval_examples=8,
        max_steps=1,
        batch_size=8,
        device="cpu",
    )
    finetune(tmp_path / "default", cfg, data_dir=task_data, show_progress=False)
    assert load_run(tmp_path / "default")[1].max_seq_len == 32
    with pytest.raises(ValueError, match="max_seq_len=64 is longer than the 32 tokens .* was pre-trained on"):
        finetune(tmp_path / "longer", replace(cfg, max_seq_len=64), data_dir=task_data, show_progress=False)
    finetune(
        tmp_path / "asked",
        replace(cfg, max_seq_len=64, untrained_positions=True),
        data_dir=task_data,
        show_progress=False,
    )
    assert load_run(tmp_path / "asked")[1].max_seq_len == 64
