"""Prediction over a data set beside HF `transformers`' pipelines: `bertlib.predict` on a list against the
text-classification pipeline on SST-2's 872 validation sentences and against the token-classification pipeline on
CoNLL-2003's 3,453 test sentences, 32 inputs a batch on both sides, the same model exported with `save_pretrained_hf`;
and one SST-2 sentence per call.

    python benchmarks/prediction.py --threads 1       # the published run: results/prediction-cpu.json
    python benchmarks/prediction.py --threads 1 --sentences 64 --repeats 1   # a trial, written to a temporary folder

The model is the course model's encoder (`models/course-mini`) under a classifier and a tagger whose heads are drawn
with seed 0: the speed of a head does not depend on what it learned, and both sides compute the same weights. Both
sides are timed in one process, interleaved (ours, theirs, ours, ...) after warm-up; a repeat is one pass over the
whole data set, and the median of the repeats is reported. The predictions are compared one by one: the class of
every sentence, and the tag of every word (the pipeline's tag of a word is that of its first piece, as bertlib's).
Each pass's floating-point operations (`roofline.py`) over the fp32 matrix-product peak measured in this process at
the model's shapes, before and after the timings, give each side's fraction of the peak.
"""

import argparse
import itertools
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
from bench_utils import (  # noqa: E402
    RESULTS_DIR,
    configure_process,
    interleaved_times,
    load_average,
    machine_info,
    median,
    provenance,
    write_results,
)
from roofline import forward_flops, layer_shapes, measure_peak, roofline  # noqa: E402

import bertlib  # noqa: E402
from bertlib.tasks.examples import CONLL_TAGS, SST2_LABELS, ClassificationExample  # noqa: E402
from bertlib.tasks.features import encode_task  # noqa: E402

SIDES = ("bertlib", "transformers")
TARGET_SPEEDUP = 2.0  # bertlib.predict on a list against the pipelines, in examples/s (issue 43)
DATASETS = {"sst2": "validation", "conll2003": "test"}  # the published run reads all of each
PIPELINES = {"sst2": "text-classification", "conll2003": "token-classification"}


def task_model(source: Path, task: str) -> tuple[torch.nn.Module, Any]:
    "The task's head, drawn with seed 0, on the encoder of the run `source` (its newest checkpoint); its tokenizer."
    pretrained, tokenizer = bertlib.load_model(source)
    torch.manual_seed(0)
    head = bertlib.BertForSequenceClassification if task == "sst2" else bertlib.BertForTokenClassification
    model = head(pretrained.config, SST2_LABELS if task == "sst2" else CONLL_TAGS)
    model.load_encoder(pretrained.state_dict())
    return model.eval(), tokenizer


def inputs(task: str, limit: int | None) -> list:
    "The data set's sentences (all, or the first `limit`): SST-2's texts, CoNLL-2003's lists of words."
    examples = bertlib.load_task(task, DATASETS[task])[:limit]
    return [e.text for e in examples] if task == "sst2" else [list(e.words) for e in examples]


def pipeline_tags(pipe, sentences: list[list[str]], answers: list[list[dict]]) -> list[list[str]]:
    "The pipeline's tag of each word: that of the word's first piece (words it never read, cut off, are O)."
    tagged = []
    for words, entities in zip(sentences, answers, strict=True):
        word_ids = pipe.tokenizer(words, is_split_into_words=True, truncation=True).word_ids()
        tags = ["O"] * len(words)
        for entity in entities:
            i = entity["index"]
            if word_ids[i] is not None and word_ids[i - 1] != word_ids[i]:
                tags[word_ids[i]] = entity["entity"]
        tagged.append(tags)
    return tagged


def compare(task: str, ours: list[dict], theirs: list, pipe, fits: list[bool]) -> dict[str, Any]:
    """How many predictions agree among the sentences that fit the window (`fits`; bertlib reads a longer one in
    windows, the pipeline cuts it), and for the classifier the largest difference between the probabilities."""
    if task == "sst2":
        mine = [answer["label"] for answer in ours]
        other = [max(labels, key=lambda x: x["score"])["label"] for labels in theirs]
        gap = max(
            abs(answer["probabilities"][x["label"]] - x["score"])
            for answer, labels in zip(ours, theirs, strict=True)
            for x in labels
        )
    else:
        mine, other = [answer["tags"] for answer in ours], pipeline_tags(pipe, [a["words"] for a in ours], theirs)
        gap = None
    same = [a == b for a, b, fit in zip(mine, other, fits, strict=True) if fit]
    return {"fitting": len(same), "identical": sum(same), "longer": fits.count(False), "largest_difference": gap}


def lengths_read(task: str, tokenizer, sentences: list, max_seq_len: int) -> list[int]:
    "The tokens of every sentence, specials included (a classifier's cut to the window, as both sides cut it)."
    if task == "sst2":
        examples = [ClassificationExample(s, 0, SST2_LABELS) for s in sentences]
        return encode_task(task, examples, tokenizer, max_seq_len).lengths()
    return [len(tokenizer.encode(words, is_pretokenized=True).ids) for words in sentences]


def time_dataset(task: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    "`bertlib.predict` on the whole data set against the task's pipeline, interleaved; speeds, agreement, roofline."
    model, tokenizer = task_model(args.model, task)
    sentences = inputs(task, args.sentences)
    with tempfile.TemporaryDirectory() as folder:
        bertlib.save_pretrained_hf(model, tokenizer, folder, model_max_length=args.max_seq_len)
        pipe = transformers.pipeline(PIPELINES[task], model=folder, tokenizer=folder, device=device)
    options = {"top_k": None, "truncation": True} if task == "sst2" else {"is_split_into_words": True}

    answers: dict[str, list] = {}  # each side's answers of its last pass, compared after the timings

    def ours() -> None:
        answers["bertlib"] = bertlib.predict(
            model, tokenizer, task, sentences, max_seq_len=args.max_seq_len, batch_size=args.batch_size
        )

    def theirs() -> None:
        answers["transformers"] = pipe(sentences, batch_size=args.batch_size, **options)

    lengths = lengths_read(task, tokenizer, sentences, args.max_seq_len)
    fits = [n <= args.max_seq_len for n in lengths]
    lengths = [min(n, args.max_seq_len) for n in lengths]  # what the pipeline reads (bertlib reads a little more)
    shapes = layer_shapes(model.config, args.batch_size * round(sum(lengths) / len(lengths)))
    before = measure_peak(shapes)
    cpu_seconds: dict[str, list[float]] = {}
    times = interleaved_times({"bertlib": ours, "transformers": theirs}, args.warmup, args.repeats, device, cpu_seconds)
    after = measure_peak(shapes)
    seconds = {side: median(times[side]) for side in SIDES}
    flops = forward_flops(
        model.config, lengths, "sequence" if task == "sst2" else "token", labels=len(model.label_names)
    )
    return {
        "task": task,
        "split": DATASETS[task],
        "examples": len(sentences),
        "tokens": sum(lengths),
        "pipeline": PIPELINES[task],
        "batch_size": args.batch_size,
        "max_seq_len": args.max_seq_len,
        "seconds": seconds,
        "seconds_per_repeat": {side: [round(t, 4) for t in times[side]] for side in SIDES},
        "examples_per_second": {side: len(sentences) / seconds[side] for side in SIDES},
        "speedup": seconds["transformers"] / seconds["bertlib"],
        "agreement": compare(task, answers["bertlib"], answers["transformers"], pipe, fits),
        "roofline": roofline(flops, {side: median(cpu_seconds[side]) for side in SIDES}, [before, after]),
    }


def time_one_sentence(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    "One SST-2 sentence per call, cycling through the first `--one-sentences`: milliseconds a call on each side."
    model, tokenizer = task_model(args.model, "sst2")
    sentences = inputs("sst2", args.one_sentences)
    with tempfile.TemporaryDirectory() as folder:
        bertlib.save_pretrained_hf(model, tokenizer, folder, model_max_length=args.max_seq_len)
        pipe = transformers.pipeline("text-classification", model=folder, tokenizer=folder, device=device)
    cycles = {side: itertools.cycle(sentences) for side in SIDES}
    calls = {
        "bertlib": lambda: bertlib.predict(
            model, tokenizer, "sst2", next(cycles["bertlib"]), max_seq_len=args.max_seq_len
        ),
        "transformers": lambda: pipe(next(cycles["transformers"]), top_k=None, truncation=True),
    }
    lengths = lengths_read("sst2", tokenizer, sentences, args.max_seq_len)
    peaks = [measure_peak(layer_shapes(model.config, round(sum(lengths) / len(lengths))))]
    cpu_seconds: dict[str, list[float]] = {}
    times = interleaved_times(calls, len(sentences), args.repeats * len(sentences), device, cpu_seconds)
    peaks.append(measure_peak(layer_shapes(model.config, round(sum(lengths) / len(lengths)))))
    seconds = {side: median(times[side]) for side in SIDES}
    flops = forward_flops(model.config, [round(sum(lengths) / len(lengths))], "sequence")
    return {
        "sentences": len(sentences),
        "ms": {side: 1000 * seconds[side] for side in SIDES},
        "roofline": roofline(flops, {side: median(cpu_seconds[side]) for side in SIDES}, peaks),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models" / "course-mini", help="a pre-training run folder")
    p.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default: torch's)")
    p.add_argument("--batch-size", type=int, default=32, help="inputs a batch, both sides (32)")
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument("--sentences", type=int, default=None, help="the first N of each data set (default: all)")
    p.add_argument("--one-sentences", type=int, default=64, help="SST-2 sentences cycled one per call (64)")
    p.add_argument("--warmup", type=int, default=1, help="untimed passes first (1)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--output", type=Path, default=None, help="JSON file (default: results/prediction-cpu.json)")
    args = p.parse_args(argv)
    for name in ("batch_size", "max_seq_len", "sentences", "one_sentences", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be 0 or more, not {args.warmup}")
    if not (args.model / "config.json").is_file():
        p.error(f"{args.model} is not a run folder (no config.json); give --model a pre-training run")
    # part of a data set, or fewer repeats or warm-up than the defaults, is a trial: not written where results are kept
    args.provenance = provenance(p, args, "warmup", "repeats", "one_sentences", full=args.sentences is None)
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    device = torch.device("cpu")  # the pipelines' and predict's CPU paths; a GPU run would need bf16 on both sides
    load_before = load_average()
    settings = configure_process(args.threads)
    rows = []
    for task in DATASETS:
        rows.append(time_dataset(task, args, device))
        row = rows[-1]
        print(
            f"{task}: bertlib {row['examples_per_second']['bertlib']:,.0f} examples/s, transformers "
            f"{row['examples_per_second']['transformers']:,.0f} ({row['speedup']:.2f}x); identical "
            f"{row['agreement']['identical']:,} of the {row['agreement']['fitting']:,} that fit the window; "
            f"{row['roofline']['fraction_of_peak']['bertlib']:.0%} vs "
            f"{row['roofline']['fraction_of_peak']['transformers']:.0%} of the peak",
            flush=True,
        )
    one = time_one_sentence(args, device)
    model = task_model(args.model, "sst2")[0]
    result = {
        "benchmark": "prediction",
        "provenance": {**args.provenance, "load_average": {"before": load_before, "after": load_average()}},
        "machine": machine_info(device),
        "settings": settings,
        "model": f"{args.model.name} encoder, heads drawn with seed 0",
        "parameters": sum(p.numel() for p in model.parameters()),
        "target_speedup": TARGET_SPEEDUP,
        "datasets": rows,
        "one_sentence": one,
    }
    print(f"one sentence: bertlib {one['ms']['bertlib']:.1f} ms, transformers {one['ms']['transformers']:.1f} ms")
    output = write_results(args.output or RESULTS_DIR / f"prediction-{device.type}.json", result)
    print(f"wrote {output}")
    return output


if __name__ == "__main__":
    main()
