"""What the worked solutions share. Written by hand; no notebook exports it.

Each `solutions/sNN_name.py` holds the worked solutions of notebook NN's exercises, one function per exercise
(`exercise_1`, `exercise_2`, ...) that runs the change with the library, prints what it measured and a conclusion
drawn from those numbers, and the same command line (`cli`): `python solutions/s07_pretraining.py` runs every
exercise, `python solutions/s07_pretraining.py 2` only the second, `--help` lists them. With `BERTLIB_QUICK=1` every
exercise runs on small slices, tiny models and few steps, a minute or a few per notebook on a 2-core CPU: its
numbers show what the change does, not how much it does at full size. Without it the exercises train real sizes for
longer; `solutions/run_all.py` runs them so and saves what they print in `solutions/outputs/`.

Files a solution writes (run folders) go to `$BERTLIB_SOLUTIONS_DIR`, or to a temporary folder when it is unset,
never into the checkout. WikiText-2 and the tasks come from the hub or from `$BERTLIB_DATA_DIR`, as everywhere.
"""

import argparse
import math
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from bertlib import (
    BertForPreTraining,
    PretrainingDataset,
    load_model,
    load_run,
    load_tokenizer,
    pretraining_dataloader,
    quick_mode,
)

QUICK = quick_mode()
ROOT = Path(__file__).resolve().parents[1]
COURSE_MODEL = ROOT / "models" / "course-mini"
OUTPUT_ENV = "BERTLIB_SOLUTIONS_DIR"

# The names of bertlib's modules that the solutions use beyond the public ones on `bertlib` itself (those are
# imported from `bertlib`), as `name: "module.path.attribute"` under `bertlib`. This table is the one place to change
# when the library moves one of them. Each is imported on first use (`from common import set_epoch`), so that a
# move breaks only the exercises that use the name; tests/test_solutions.py resolves them all.
INTERNALS = {
    # data
    "set_epoch": "data.batching.set_epoch",
    "child_seed": "data.batching.child_seed",
    "LengthGroupedSampler": "data.batching.LengthGroupedSampler",
    "padding_waste": "data.batching.padding_waste",
    "wikitext_corpus": "data.corpus.wikitext_corpus",
    "PackedDataset": "data.packed.PackedDataset",
    "PaddingCollator": "data.pretraining.PaddingCollator",
    "mask_tokens": "data.pretraining.mask_tokens",
    "CONTINUATION": "data.tokenizer.CONTINUATION",
    "SPECIAL_TOKENS": "data.tokenizer.SPECIAL_TOKENS",
    "SPECIAL_IDS": "data.tokenizer.SPECIAL_IDS",
    "MASK_ID": "data.tokenizer.MASK_ID",
    "WordPieceTokenizer": "data.tokenizer.WordPieceTokenizer",
    "train_wordpiece": "data.tokenizer.train_wordpiece",
    "word_frequencies": "data.tokenizer.word_frequencies",
    "parse_heading": "data.wikitext.parse_heading",
    "restore_joiners": "data.wikitext.restore_joiners",
    "split_documents": "data.wikitext.split_documents",
    "split_sentences": "data.wikitext.split_sentences",
    # model
    "BertEmbeddings": "model.embeddings.BertEmbeddings",
    "MultiHeadSelfAttention": "model.attention.MultiHeadSelfAttention",
    "attention_bias": "model.attention.attention_bias",
    "explicit_attention": "model.attention.explicit_attention",
    "BertEncoder": "model.encoder.BertEncoder",
    "init_bert_weights": "model.encoder.init_bert_weights",
    "add_final_norm": "model.variants.add_final_norm",
    # tasks
    "TASKS": "tasks.examples.TASKS",
    "encode_task": "tasks.features.encode_task",
    "quick_slice": "tasks.load.quick_slice",
    # utils, training, evaluation, viz, recipes
    "atomic_write": "utils.files.atomic_write",
    "machine": "utils.environment.machine",
    "TrainingInterrupted": "utils.processes.TrainingInterrupted",
    "library_train": "recipes.objectives.train",
    "EVAL_SEED": "evaluation.scores.EVAL_SEED",
    "unigram_baseline": "evaluation.scores.unigram_baseline",
    "rtd_metrics": "evaluation.electra.rtd_metrics",
    "PATTERNS": "viz.attention.PATTERNS",
    "AttentionMaps": "viz.attention.AttentionMaps",
    "attention_maps": "viz.attention.attention_maps",
    "head_entropy": "viz.attention.head_entropy",
    "head_scores": "viz.attention.head_scores",
    "distillation_losses": "recipes.distil.distillation_losses",
    "student_from_teacher": "recipes.distil.student_from_teacher",
}


def internal(name: str) -> Any:
    "The bertlib name that `INTERNALS` lists as `name`, imported now."
    if name not in INTERNALS:
        raise AttributeError(f"module 'common' has no attribute {name!r}")
    module, _, attribute = INTERNALS[name].rpartition(".")
    return getattr(import_module(f"bertlib.{module}"), attribute)


def __getattr__(name: str) -> Any:  # PEP 562: `from common import set_epoch` ends here
    return internal(name)


@cache
def _scratch() -> tempfile.TemporaryDirectory:
    "A temporary folder for this process's runs, removed when it exits: a full-mode module writes gigabytes."
    return tempfile.TemporaryDirectory(prefix="bertlib-solutions-")


def output_dir(name: str) -> Path:
    "A fresh folder for `name` under `$BERTLIB_SOLUTIONS_DIR`, or under a temporary folder removed at exit."
    root = os.environ.get(OUTPUT_ENV) or _scratch().name
    folder = Path(root) / name
    if folder.exists():
        raise FileExistsError(f"{folder} exists; point {OUTPUT_ENV} at an empty folder")
    folder.mkdir(parents=True)
    return folder


def header(title: str) -> None:
    "Print the title of an exercise."
    print(f"\n== {title}", flush=True)


def compared(a: float, b: float, tolerance: float) -> str:
    "How `a` stands against `b`: 'lower', 'higher', or 'about the same' when they differ by less than `tolerance`."
    return "about the same" if abs(a - b) < tolerance else "lower" if a < b else "higher"


@cache
def course_model() -> tuple[BertForPreTraining, object]:
    "The course model (`models/course-mini`) in eval mode, and its tokenizer."
    return load_model(COURSE_MODEL)


def course_trained_length() -> int:
    "The longest sequences the course model saw in training (positions past it were never trained)."
    _, training, _ = load_run(COURSE_MODEL)
    return max(training.max_seq_len, getattr(training, "long_seq_len", None) or 0)


@cache
def tokenizer():
    "The course's tokenizer: 8,192 WordPiece pieces trained on WikiText-2's train split (notebook 01)."
    return load_tokenizer(COURSE_MODEL / "tokenizer.json")


@cache
def corpus(split: str):
    "A WikiText-2 split encoded with the course's tokenizer (a `TokenizedCorpus`, cached on disk, notebook 06)."
    return internal("wikitext_corpus")(split, tokenizer())


def documents(split: str, quick_count: int) -> list:
    "The documents of `split` as lists of sentences of token ids; in quick mode only the first `quick_count`."
    docs = corpus(split).documents()
    return docs[:quick_count] if QUICK else docs


def endless(loader: DataLoader) -> Iterator[dict[str, torch.Tensor]]:
    "The batches of `loader`, epoch after epoch, each epoch with new pairs and masks."
    epoch = 0
    while True:
        internal("set_epoch")(loader, epoch)
        yield from loader
        epoch += 1


def pair_batches(docs, batch_size: int, max_seq_len: int, *, seed: int = 0, **dataset_options) -> Iterator[dict]:
    "Endless pre-training batches (NSP pairs, masked) of `docs`."
    dataset = PretrainingDataset(docs, tokenizer(), max_seq_len, seed=seed, **dataset_options)
    return endless(pretraining_dataloader(dataset, batch_size, seed=seed))


def static_batches(docs, batch_size: int, max_seq_len: int, count: int, **dataset_options) -> list[dict]:
    "`count` fixed batches of statically masked pairs of `docs`, the same for every model they score."
    dataset = PretrainingDataset(docs, tokenizer(), max_seq_len, seed=12345, static=True, **dataset_options)
    loader = pretraining_dataloader(dataset, batch_size, shuffle=False)
    return [batch for batch, _ in zip(loader, range(count), strict=False)]


def packed_batches(
    docs, batch_size: int, max_seq_len: int, *, seed: int = 0, mlm_probability: float = 0.15
) -> Iterator[dict]:
    "Endless MLM batches of full-length packed rows of `docs` (RoBERTa's data, notebook 11), masked afresh each epoch."
    dataset = internal("PackedDataset")(docs, tokenizer(), max_seq_len, seed=seed, mlm_probability=mlm_probability)
    loader = DataLoader(
        dataset,
        batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        collate_fn=internal("PaddingCollator")(dataset.pad_id, pad_to_multiple_of=8),
    )
    return endless(loader)


def static_packed(docs, batch_size: int, max_seq_len: int, count: int, mlm_probability: float = 0.15) -> list[dict]:
    "`count` fixed batches of statically masked packed rows of `docs`."
    dataset = internal("PackedDataset")(
        docs, tokenizer(), max_seq_len, seed=12345, mlm_probability=mlm_probability, static=True
    )
    loader = DataLoader(
        dataset, batch_size, collate_fn=internal("PaddingCollator")(dataset.pad_id, pad_to_multiple_of=8)
    )
    return [batch for batch, _ in zip(loader, range(count), strict=False)]


def parameters(module: nn.Module) -> int:
    "How many numbers `module` holds."
    return sum(p.numel() for p in module.parameters())


def pretraining_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    "BERT's loss, MLM + NSP, of one batch."
    return model(
        batch["input_ids"],
        token_type_ids=batch["token_type_ids"],
        attention_mask=batch["attention_mask"],
        labels=batch["labels"],
        next_sentence_label=batch["next_sentence_label"],
    ).loss


def decay_groups(model: nn.Module, weight_decay: float, decay_everything: bool = False) -> list[dict]:
    "AdamW's parameter groups: matrices decayed, vectors (biases, LayerNorm gains) not, unless `decay_everything`."
    params = [p for p in model.parameters() if p.requires_grad]
    if decay_everything:
        return [{"params": params, "weight_decay": weight_decay}]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def train(
    model: nn.Module,
    batches: Iterable[dict],
    steps: int,
    *,
    lr: float,
    warmup_ratio: float = 0.06,
    weight_decay: float = 0.01,
    decay_everything: bool = False,
    schedule: str = "linear",
    loss: Callable[[nn.Module, dict], torch.Tensor] = pretraining_loss,
) -> list[float]:
    """A plain training loop (notebook 07, section 1, with its warm-up, decay and clipping): `steps` AdamW steps
    on `batches`; returns the loss of every step."""
    model.train()
    optimizer = torch.optim.AdamW(decay_groups(model, weight_decay, decay_everything), lr=lr)
    warmup = round(warmup_ratio * steps)

    def factor(step: int) -> float:
        if step < warmup:
            return step / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    losses = []
    for _, batch in zip(range(steps), batches, strict=False):
        value = loss(model, batch)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(value.item())
    model.eval()
    return losses


@torch.no_grad()
def masked_token_losses(model: nn.Module, batches: Iterable[dict]) -> list[float]:
    """The MLM loss of every masked token of `batches` (in the order of the batches, then row by row): the values
    behind `mean_mlm_loss`, which give a verdict (`verdict.py`) its spread."""
    model.eval()
    found = []
    for batch in batches:
        out = model(
            batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=batch["labels"],
        )
        target = batch["labels"][batch["labels"] != -100]
        found += torch.nn.functional.cross_entropy(out.prediction_logits.float(), target, reduction="none").tolist()
    return found


def mean_mlm_loss(model: nn.Module, batches: list[dict]) -> float:
    "The MLM loss of `model` over fixed `batches`, a mean over all their masked tokens."
    losses = masked_token_losses(model, batches)
    return math.fsum(losses) / len(losses)


def exercises(module_name: str) -> dict[int, Callable[[], None]]:
    "The `exercise_N` functions of the module `module_name`, by N."
    module = sys.modules[module_name]
    found = (re.fullmatch(r"exercise_(\d+)", name) for name in vars(module))
    return {int(m.group(1)): getattr(module, m.group(0)) for m in sorted(filter(None, found), key=lambda m: int(m[1]))}


def cli(module_name: str, argv: Sequence[str] | None = None) -> None:
    """The command line of every solution module: `python solutions/sNN_name.py [N ...]` runs the exercises named
    by number, or all of them, each from the same seed, and ends with the time each took; `--help` lists them."""
    module = sys.modules[module_name]
    found = exercises(module_name)
    script = Path(module.__file__).name
    listing = "\n".join(f"  {n:<3}{(f.__doc__ or '').strip().splitlines()[0]}" for n, f in found.items())
    parser = argparse.ArgumentParser(
        prog=f"python solutions/{script}",
        description=module.__doc__,
        epilog=f"exercises:\n{listing}\n\nBERTLIB_QUICK=1 runs them on small slices (what CI runs); the output of a "
        f"full run is saved in solutions/outputs/{Path(script).stem}.txt by python solutions/run_all.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("numbers", nargs="*", type=int, metavar="N", help="exercises to run (default: all)")
    chosen = parser.parse_args(argv).numbers or list(found)
    unknown = sorted(set(chosen) - set(found))
    if unknown:
        parser.error(f"no exercise {', '.join(map(str, unknown))} in {script}; it has {', '.join(map(str, found))}")
    print(f"{script}: exercises {', '.join(map(str, chosen))} of {len(found)}, quick mode {QUICK}", flush=True)
    seconds = {}
    for number in chosen:
        torch.manual_seed(0)  # the same start whether an exercise runs alone or after others
        start = time.perf_counter()
        try:
            found[number]()
        except (KeyboardInterrupt, internal("TrainingInterrupted")) as stop:
            signum = getattr(stop, "signum", signal.SIGINT)
            sys.exit(_stopped(script, number, signum))
        seconds[f"exercise_{number}"] = time.perf_counter() - start
    print("\ndone: " + ", ".join(f"{name} ({s:.0f} s)" for name, s in seconds.items()), flush=True)


def _stopped(script: str, number: int, signum: int) -> int:
    """Say in one line that Ctrl-C or SIGTERM stopped exercise `number`, and return the exit status (128 + the signal's
    number). A solution starts its runs afresh, so what it trained is not to be resumed (without
    `$BERTLIB_SOLUTIONS_DIR` it lies in a temporary folder, removed at exit): the way on is to run it again."""
    where = f" (its runs are in {os.environ[OUTPUT_ENV]})" if os.environ.get(OUTPUT_ENV) else ""
    print(
        f"{script}: exercise {number} stopped by {signal.Signals(signum).name}{where}; run it again with "
        f"python solutions/{script} {number}",
        file=sys.stderr,
        flush=True,
    )
    return 128 + signum
