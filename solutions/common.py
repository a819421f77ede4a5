"""What the worked solutions share. Written by hand; no notebook exports it.

Each `solutions/sNN_name.py` holds the worked solutions of notebook NN's exercises, one function per exercise
(`exercise_1`, `exercise_2`, ...) that runs the change with the library and prints its effect, and a `main()` that
runs them all: `python solutions/s07_pretraining.py`. With `BERTLIB_QUICK=1` every exercise runs on small slices,
tiny models and few steps, a minute or two per notebook on a 2-core CPU: its numbers show what the change does,
not how much it does at full size. Without it the exercises train real sizes for longer.

Files a solution writes (run folders) go to `$BERTLIB_SOLUTIONS_DIR`, or to a temporary folder when it is unset,
never into the checkout. WikiText-2 and the tasks come from the hub or from `$BERTLIB_DATA_DIR`, as everywhere.
"""

import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

from bertlib import BertForPreTraining, PretrainingDataset, load_model, pretraining_dataloader, quick_mode
from bertlib.data.batching import set_epoch
from bertlib.data.corpus import TokenizedCorpus, wikitext_corpus
from bertlib.data.packed import PackedDataset
from bertlib.data.pretraining import PaddingCollator
from bertlib.data.tokenizer import load_tokenizer

QUICK = quick_mode()
ROOT = Path(__file__).resolve().parents[1]
COURSE_MODEL = ROOT / "models" / "course-mini"
OUTPUT_ENV = "BERTLIB_SOLUTIONS_DIR"


def output_dir(name: str) -> Path:
    "A fresh folder for `name` under `$BERTLIB_SOLUTIONS_DIR` (or a temporary folder)."
    root = os.environ.get(OUTPUT_ENV) or tempfile.mkdtemp(prefix="bertlib-solutions-")
    folder = Path(root) / name
    if folder.exists():
        raise FileExistsError(f"{folder} exists; point {OUTPUT_ENV} at an empty folder")
    folder.mkdir(parents=True)
    return folder


def header(title: str) -> None:
    "Print the title of an exercise."
    print(f"\n== {title}", flush=True)


@cache
def course_model() -> tuple[BertForPreTraining, object]:
    "The course model (`models/course-mini`) in eval mode, and its tokenizer."
    return load_model(COURSE_MODEL)


@cache
def tokenizer():
    "The course's tokenizer: 8,192 WordPiece pieces trained on WikiText-2's train split (notebook 01)."
    return load_tokenizer(COURSE_MODEL / "tokenizer.json")


@cache
def corpus(split: str) -> TokenizedCorpus:
    "A WikiText-2 split encoded with the course's tokenizer (cached on disk, notebook 06)."
    return wikitext_corpus(split, tokenizer())


def documents(split: str, quick_count: int) -> list:
    "The documents of `split` as lists of sentences of token ids; in quick mode only the first `quick_count`."
    docs = corpus(split).documents()
    return docs[:quick_count] if QUICK else docs


def endless(loader: DataLoader) -> Iterator[dict[str, torch.Tensor]]:
    "The batches of `loader`, epoch after epoch, each epoch with new pairs and masks."
    epoch = 0
    while True:
        set_epoch(loader, epoch)
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
    dataset = PackedDataset(docs, tokenizer(), max_seq_len, seed=seed, mlm_probability=mlm_probability)
    loader = DataLoader(
        dataset,
        batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        collate_fn=PaddingCollator(dataset.pad_id, pad_to_multiple_of=8),
    )
    return endless(loader)


def static_packed(docs, batch_size: int, max_seq_len: int, count: int, mlm_probability: float = 0.15) -> list[dict]:
    "`count` fixed batches of statically masked packed rows of `docs`."
    dataset = PackedDataset(docs, tokenizer(), max_seq_len, seed=12345, mlm_probability=mlm_probability, static=True)
    loader = DataLoader(dataset, batch_size, collate_fn=PaddingCollator(dataset.pad_id, pad_to_multiple_of=8))
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
def mean_mlm_loss(model: nn.Module, batches: list[dict]) -> float:
    "The MLM loss of `model` over fixed `batches`, a mean over all their masked tokens."
    total = count = 0.0
    model.eval()
    for batch in batches:
        out = model(
            batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=batch["labels"],
        )
        n = int((batch["labels"] != -100).sum())
        total, count = total + out.mlm_loss.item() * n, count + n
    return total / count


def run_all(module_name: str) -> None:
    "Run every `exercise_N` of the module `module_name`, in order."
    module = sys.modules[module_name]
    names = sorted((n for n in dir(module) if n.startswith("exercise_")), key=lambda n: int(n.split("_")[1]))
    print(f"{Path(module.__file__).name}: {len(names)} exercises, quick mode {QUICK}", flush=True)
    torch.manual_seed(0)
    seconds = {}
    for name in names:
        start = time.perf_counter()
        getattr(module, name)()
        seconds[name] = time.perf_counter() - start
    print("\ndone: " + ", ".join(f"{name} ({s:.0f} s)" for name, s in seconds.items()))
