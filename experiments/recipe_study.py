"""The pre-training recipe study: which settings get `mini` off the unigram plateau within the CPU budget of
the README's main command as it was before this study (`python -m bertlib pretrain`: 1,000 steps of 32
sequences of up to 128 tokens, about 3.9M training tokens).

Hand-written; not part of the library. Every run is one recipe (a name in `RECIPES`) at one budget, measured in
training tokens as a share of that command's (`BUDGETS`). Each run writes
`recipe_study/results/<recipe>@<budget>.json`; `--report` turns those files into `recipe_study/README.md`,
`recipe_study/curves.png` and `plateau.png`, and the README's block between `<!-- recipe-study:start -->` and
`<!-- recipe-study:end -->`. Nothing in them is typed by hand.

    export OMP_NUM_THREADS=1 BERTLIB_DATA_DIR=...
    python experiments/recipe_study.py run default b8-lr1e-3-m30 --budget full
    python experiments/recipe_study.py run --all --budget third   # every recipe, skipping finished runs
    python experiments/recipe_study.py check                      # this loop's losses equal bertlib.objectives.train's
    python experiments/recipe_study.py speed default combo-b8      # tokens/s, measured back to back
    python experiments/recipe_study.py --report

Why the study keeps a step loop of its own (`train_phases`): some recipes train the first 90% of their steps on
sequences of 64 tokens and the rest on 128 (BERT's short-first schedule), and `bertlib.trainer.fit` builds one
loader for the whole run, while a second `fit` would start a new optimiser and learning-rate schedule. The loop
is made of the library's parts (`MaskedLMAndNSP`, `make_loader`, `micro_batches`, `reseed`, `step_loss`,
`configure_optimizer`, `lr_schedule`, `validation_metrics`) and leaves out what one CPU process does not need
(several processes, mixed precision, checkpoints, non-finite steps); `check` proves that its losses equal
`bertlib.objectives.train`'s. The other switches the library lacks are small and local: NSP off (`MaskedLMOnly`),
sin/cos initialisation of the position embeddings, and cheap probes of the plateau (agreement with the unigram
distribution, attention entropy, attention to the previous token and to [CLS]/[SEP]).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.report import update_readme  # noqa: E402
from bertlib.batching import (  # noqa: E402
    DataPosition,
    make_loader,  # noqa: E402
    micro_batches,
)
from bertlib.config import BertConfig  # noqa: E402
from bertlib.corpus import wikitext_corpus  # noqa: E402
from bertlib.devices import eval_mode  # noqa: E402
from bertlib.environment import machine  # noqa: E402
from bertlib.evaluate import unigram_baseline, validation_metrics  # noqa: E402
from bertlib.model import BertForPreTraining  # noqa: E402
from bertlib.objectives import MaskedLMAndNSP, train  # noqa: E402
from bertlib.pretraining_data import PretrainingDataset, evaluation_loader  # noqa: E402
from bertlib.tokenizer import CLS_ID, SEP_ID, load_tokenizer, save_tokenizer, train_wikitext_tokenizer  # noqa: E402
from bertlib.train_config import PretrainConfig  # noqa: E402
from bertlib.trainer import configure_optimizer, lr_schedule, reseed, step_loss  # noqa: E402

HERE = Path(__file__).resolve().parent / "recipe_study"
RESULTS = HERE / "results"
TOKENIZERS = HERE / "tokenizers"  # one trained tokenizer per vocabulary size, reused by every run
README_MARKERS = ("<!-- recipe-study:start -->", "<!-- recipe-study:end -->")
# the main command before this study; "default" keeps meaning it whatever the library's defaults become
DEFAULT_STEPS, BASELINE = 1000, {"batch_size": 32, "lr": 5e-4, "mlm_probability": 0.15}
MEAN_LEN = {64: 62.95, 128: 121.97}  # mean real tokens of a training pair (epoch 0, seed 0, vocabulary 8,192)
BUDGET_TOKENS = DEFAULT_STEPS * BASELINE["batch_size"] * MEAN_LEN[128]  # about 3.9M training tokens
BUDGETS = {"third": 1 / 3, "full": 1.0}
TARGET_PPL, TARGET_NSP = 250.0, 0.75  # the goal: off the plateau, and NSP learned
EVAL_POINTS = 6  # validation on a fixed subset at 1/6, 2/6, ... of every run; the whole split at the end
SUBSET_BATCHES = 10  # 640 of the 2,358 validation pairs
PROBE_BATCHES = 2  # attention and unigram probes
LOG_EVERY = 25


@dataclass
class Recipe:
    "One configuration: overrides of the `mini` preset and of the baseline `PretrainConfig`, plus local switches."

    note: str
    model: dict = field(default_factory=dict)  # BertConfig overrides
    train: dict = field(default_factory=dict)  # PretrainConfig overrides
    nsp: bool = True  # False: the NSP loss is not trained (only to measure what NSP costs)
    short_seq_len: int | None = None  # first phase at this max_seq_len ...
    short_fraction: float = 0.0  # ... for this share of the steps (BERT: 90% of steps at 128, then 512)
    pos_init: str = "normal"  # "sinusoidal": position embeddings start as scaled sin/cos waves


NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
SHORT_FIRST = {"short_seq_len": 64, "short_fraction": 0.9}


def combo(note: str, train: dict | None = None, model: dict | None = None) -> Recipe:
    "combo-b8's settings (batch 8, dropout 0, mask 30%, seq 64 first, sin/cos positions); `train`, `model` over them."
    return Recipe(
        note,
        model={**NO_DROPOUT, **(model or {})},
        train={"batch_size": 8, "mlm_probability": 0.30, **(train or {})},
        pos_init="sinusoidal",
        **SHORT_FIRST,
    )


RECIPES: dict[str, Recipe] = {
    "default": Recipe(
        "the main command before this study: lr 5e-4, warm-up 6%, batch 32, seq 128, mask 15%, dropout 0.1, Post-LN"
    ),
    "lr-1e-3": Recipe("lr 1e-3", train={"lr": 1e-3}),
    "lr-2.5e-4": Recipe("lr 2.5e-4", train={"lr": 2.5e-4}),
    "batch-16": Recipe("batch 16 (twice the steps), lr 5e-4", train={"batch_size": 16}),
    "batch-8": Recipe("batch 8 (four times the steps), lr 5e-4", train={"batch_size": 8}),
    "batch-8-lr-1e-3": Recipe("batch 8, lr 1e-3", train={"batch_size": 8, "lr": 1e-3}),
    "batch-4": Recipe("batch 4 (eight times the steps), lr 5e-4", train={"batch_size": 4}),
    "mask-30": Recipe("mask 30%", train={"mlm_probability": 0.30}),
    "mask-40": Recipe("mask 40%", train={"mlm_probability": 0.40}),
    "pre-ln": Recipe("Pre-LN, lr 1e-3", model={"norm_style": "pre"}, train={"lr": 1e-3}),
    "dropout-0": Recipe("dropout 0 (hidden and attention)", model=NO_DROPOUT),
    "seq-64-first": Recipe("90% of steps at seq 64, then 128 (BERT's short-first schedule)", **SHORT_FIRST),
    "no-nsp": Recipe("NSP loss off (measures NSP's cost; not a candidate)", nsp=False),
    "init-sinusoidal-pos": Recipe("position embeddings initialised as sin/cos waves (std 0.02)", pos_init="sinusoidal"),
    # the single factors that helped, together
    "combo-b8": combo("batch 8, dropout 0, mask 30%, 90% of steps at seq 64, sin/cos position init"),
    "combo-b8-lr-1e-3": combo("combo-b8 with lr 1e-3", train={"lr": 1e-3}),
    "combo-b8-pre-ln": combo("combo-b8 with Pre-LN and lr 1e-3", train={"lr": 1e-3}, model={"norm_style": "pre"}),
    "combo-b4": combo("combo-b8 with batch 4", train={"batch_size": 4}),
    # only PretrainConfig fields: a recipe the library's defaults can take over
    "b8-lr1e-3-m30": Recipe(
        "batch 8, lr 1e-3, mask 30% (settings of the library only)",
        train={"batch_size": 8, "lr": 1e-3, "mlm_probability": 0.30},
    ),
    # the same with rotary positions (issue 16's switch), which left the plateau first in the variants study
    "b8-lr1e-3-m30-rope": Recipe(
        "batch 8, lr 1e-3, mask 30%, rotary positions (settings of the library only)",
        model={"position_embedding_type": "rope"},
        train={"batch_size": 8, "lr": 1e-3, "mlm_probability": 0.30},
    ),
}


# ---------------------------------------------------------------------------------------------- settings
def git_commit() -> str:
    "The commit of this script, marked `-dirty` when the script or the library differ from it."

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--", "experiments/recipe_study.py", "bertlib")
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def tokenizer_for(vocab_size: int, data_dir: str | None):
    "The WikiText-2 WordPiece tokenizer of `vocab_size` (trained once, as `pretrain` trains it, then reused)."
    folder = TOKENIZERS / str(vocab_size)
    if (folder / "tokenizer.json").exists():
        return load_tokenizer(folder)
    tokenizer = train_wikitext_tokenizer(vocab_size, data_dir=data_dir)
    save_tokenizer(tokenizer, folder)
    return tokenizer


def configs(recipe: Recipe, tokens: float) -> tuple[BertConfig, PretrainConfig, list[tuple[int, int]]]:
    "The model config, training config and phases [(max_seq_len, steps)] of `recipe` for about `tokens` tokens."
    model_config = BertConfig.from_preset("mini", **recipe.model)
    cfg = PretrainConfig(max_steps=1, device="cpu", seed=0, **{**BASELINE, **recipe.train})
    f = recipe.short_fraction if recipe.short_seq_len else 0.0
    per_step = cfg.batch_size * (f * MEAN_LEN.get(recipe.short_seq_len, MEAN_LEN[128]) + (1 - f) * MEAN_LEN[128])
    steps = max(1, round(tokens / per_step))
    short = round(f * steps)
    phases = ([(recipe.short_seq_len, short)] if short else []) + [(cfg.max_seq_len, steps - short)]
    cfg = replace(
        cfg,
        max_steps=steps,
        save_every=steps,
        eval_every=max(1, steps // EVAL_POINTS),
        eval_batches=SUBSET_BATCHES,
        log_every=LOG_EVERY,
    )
    return model_config, cfg, phases


def sinusoidal(positions: int, width: int) -> torch.Tensor:
    "The Transformer's sin/cos position table [positions, width]."
    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, width, 2, dtype=torch.float32) / width)
    table = torch.zeros(positions, width)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table


def build_model(model_config: BertConfig, recipe: Recipe, seed: int) -> BertForPreTraining:
    "The recipe's model: BERT's initialisation from `seed`, then the recipe's position initialisation."
    torch.manual_seed(seed)
    model = BertForPreTraining(model_config)
    if recipe.pos_init == "sinusoidal":
        table = sinusoidal(model_config.max_position_embeddings, model_config.hidden_size)
        with torch.no_grad():
            model.bert.embeddings.position_embeddings.weight.copy_(
                table * (model_config.initializer_range / table.std())
            )
    return model


class MaskedLMOnly(MaskedLMAndNSP):
    "The MLM loss alone (the `no-nsp` recipe)."

    parts = ("mlm_loss",)

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int]:
        return super().counts(batch)[:1]

    def losses(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor]:
        return super().losses(model, batch)[:1]


# ---------------------------------------------------------------------------------------------- the loop
def training_pairs(corpus, tokenizer, cfg: PretrainConfig, max_seq_len: int) -> PretrainingDataset:
    "The training pairs of `cfg` at `max_seq_len`, as `bertlib.pretraining.pretrain` makes them."
    return PretrainingDataset(
        corpus,
        tokenizer,
        max_seq_len,
        seed=cfg.seed,
        pairing=cfg.pairing,
        mlm_probability=cfg.mlm_probability,
        whole_word_mask=cfg.whole_word_mask,
    )


def train_phases(
    model: BertForPreTraining,
    cfg: PretrainConfig,
    phases: list[tuple[int, int]],
    corpus,
    tokenizer,
    objective: MaskedLMAndNSP,
    evaluate: Callable[[int, int, float], None] | None = None,
    schedule_steps: int | None = None,
) -> dict:
    """Train `model` through `phases` [(max_seq_len, steps)] as `bertlib.objectives.train` trains it in one CPU
    process (same loader, dropout seeds, loss weighting, clipping and schedule over all the phases' steps, or over
    `schedule_steps` to stop early); each phase starts its data at epoch 0. `evaluate(step, tokens, train_seconds)`
    runs every `cfg.eval_every` steps. Returns the logged windows (losses, lr, gradient norm, tokens/s), the
    steps, tokens and training seconds."""
    optimizer = configure_optimizer(model, cfg.lr, cfg.weight_decay)
    steps = sum(n for _, n in phases)
    schedule_steps = schedule_steps or steps
    scheduler = lr_schedule(optimizer, round(cfg.warmup_ratio * schedule_steps), schedule_steps, cfg.schedule)
    micro = cfg.batch_size // cfg.grad_accum
    log, step, tokens, seconds = [], 0, 0, 0.0
    # the logging window: loss x count sums and counts of each part, tokens, seconds
    sums, items = torch.zeros(len(objective.parts), dtype=torch.float64), [0] * len(objective.parts)
    window_tokens, window_seconds = 0, 0.0
    flush = torch.set_flush_denormal(True)  # as `fit` does on a CPU
    model.train()
    try:
        for seq_len, phase_steps in phases:
            dataset = training_pairs(corpus, tokenizer, cfg, seq_len)
            stream = micro_batches(
                make_loader(
                    dataset, micro, objective.collate, dataset.lengths, seed=cfg.seed, batches_per_group=cfg.grad_accum
                ),
                DataPosition(),
            )
            for _ in range(phase_steps):
                started = time.perf_counter()
                reseed(cfg.seed, 0, step)
                group = [next(stream) for _ in range(cfg.grad_accum)]
                counts = [objective.counts(b) for b in group]
                step_items = [sum(part) for part in zip(*counts, strict=True)]
                step_sums = torch.zeros_like(sums)
                for batch, count in zip(group, counts, strict=True):
                    losses = objective.losses(model, batch)
                    step_loss(losses, count, [max(1, n) for n in step_items]).backward()
                    step_sums += torch.stack([part.detach() * n for part, n in zip(losses, count, strict=True)])
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                sums += step_sums
                items = [a + b for a, b in zip(items, step_items, strict=True)]
                step_tokens = sum(int(b["attention_mask"].sum()) for b in group)
                tokens, window_tokens = tokens + step_tokens, window_tokens + step_tokens
                elapsed = time.perf_counter() - started
                seconds, window_seconds = seconds + elapsed, window_seconds + elapsed
                if step % cfg.log_every == 0 or step == steps:
                    means = [total / max(n, 1) for total, n in zip(sums.tolist(), items, strict=True)]
                    log.append(
                        {
                            "step": step,
                            "tokens": tokens,
                            "train_seconds": seconds,
                            "seq_len": seq_len,
                            **dict(zip(objective.parts, means, strict=True)),
                            "lr": scheduler.get_last_lr()[0],
                            "grad_norm": float(grad_norm),
                            "tokens_per_s": window_tokens / window_seconds,
                        }
                    )
                    sums, items = torch.zeros_like(sums), [0] * len(items)
                    window_tokens, window_seconds = 0, 0.0
                if evaluate is not None and (step % cfg.eval_every == 0 or step == steps):
                    evaluate(step, tokens, seconds)
    finally:
        if flush:
            torch.set_flush_denormal(False)
    return {"log": log, "steps": step, "tokens": tokens, "train_seconds": seconds}


# ---------------------------------------------------------------------------------------------- probes
def unigram_log_probs(train_ids, vocab_size: int) -> torch.Tensor:
    "Log-frequencies of the training tokens, add-one smoothed as `bertlib.evaluate.unigram_baseline` does."
    counts = torch.bincount(torch.from_numpy(train_ids.astype("int64")), minlength=vocab_size).double() + 1
    return (counts / counts.sum()).log().float()


def plateau_probes(model: BertForPreTraining, batches: list[dict], unigram: torch.Tensor) -> dict:
    """How much the MLM predictions look like the unigram distribution, and what attention does: KL(model ||
    unigram) per masked token, the share of masked tokens whose top prediction is the corpus's most frequent
    token or one of its 10 most frequent, the attention entropy per layer, the largest mean attention any head
    puts on the previous token, and the mean attention to [CLS]/[SEP] per layer."""
    kl = mode = top10 = n = queries = pairs = 0.0
    entropy = prev = special = 0.0
    frequent = unigram.topk(10).indices
    with eval_mode(model):
        for b in batches:
            inputs = {"token_type_ids": b["token_type_ids"], "attention_mask": b["attention_mask"]}
            logp = model(b["input_ids"], **inputs, labels=b["labels"]).prediction_logits.float().log_softmax(-1)
            kl += float((logp.exp() * (logp - unigram)).sum())
            top = logp.argmax(-1)
            mode, top10 = mode + float((top == frequent[0]).sum()), top10 + float(torch.isin(top, frequent).sum())
            n += len(top)
            att = torch.stack(model.bert(b["input_ids"], **inputs, output_attentions=True).attentions)  # [L,B,H,S,S]
            q = b["attention_mask"].float()  # [B, S]: real query positions
            pair = q[:, 1:] * q[:, :-1]  # [B, S-1]: positions whose previous one is real too
            to_special = (b["input_ids"] == CLS_ID) | (b["input_ids"] == SEP_ID)  # [B, S]: keys
            entropy += (-(att * att.clamp(min=1e-12).log()).sum(-1) * q[:, None]).sum((1, 3))  # [L, H]
            prev += (att.diagonal(offset=-1, dim1=-2, dim2=-1) * pair[:, None]).sum((1, 3))
            special += ((att * to_special[:, None, None, :]).sum(-1) * q[:, None]).sum((1, 3))
            queries, pairs = queries + float(q.sum()), pairs + float(pair.sum())
    return {
        "kl_to_unigram": kl / n,
        "top1_is_most_frequent": mode / n,
        "top1_in_10_most_frequent": top10 / n,
        "attention_entropy_per_layer": (entropy / queries).mean(-1).tolist(),
        "max_head_prev_token_attention": float((prev / pairs).max()),
        "mean_attention_to_cls_sep_per_layer": (special / queries).mean(-1).tolist(),
    }


# ---------------------------------------------------------------------------------------------- runs
def run(name: str, budget: str, data_dir: str | None, log=print) -> dict:
    "Train recipe `name` for `budget`'s tokens, score it as it goes, and write its result file."
    recipe = RECIPES[name]
    model_config, cfg, phases = configs(recipe, BUDGET_TOKENS * BUDGETS[budget])
    tokenizer = tokenizer_for(model_config.vocab_size, data_dir)
    corpus = wikitext_corpus("train", tokenizer, data_dir=data_dir)
    valid = evaluation_loader("validation", tokenizer, max_seq_len=128, data_dir=data_dir)  # every run: 128, 15%
    probe_batches = list(islice(valid, PROBE_BATCHES))
    unigram = unigram_log_probs(corpus.ids, model_config.vocab_size)
    model = build_model(model_config, recipe, cfg.seed)
    result = {
        "recipe": name,
        "budget": budget,
        "note": recipe.note,
        "settings": asdict(recipe),
        "model_config": model_config.to_dict(),
        "train_config": cfg.to_dict(),
        "phases": phases,
        "unigram_perplexity": unigram_baseline(corpus.ids, valid, model_config.vocab_size)["mlm_perplexity"],
        "machine": machine(),
        "threads": torch.get_num_threads(),
        "commit": git_commit(),
        "loop": "train_phases (bertlib.trainer's parts)",
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "evaluations": [],
    }

    def evaluate(step: int, tokens: int, train_seconds: float, full: bool = False) -> None:
        started = time.perf_counter()
        metrics = validation_metrics(model, valid, None if full else SUBSET_BATCHES)
        entry = {
            "step": step,
            "tokens": tokens,
            "train_seconds": train_seconds,
            "split": "validation" if full else f"validation[:{SUBSET_BATCHES * 64}]",
            **metrics,
        }
        if not full:
            entry.update(plateau_probes(model, probe_batches, unigram))
        entry["eval_seconds"] = time.perf_counter() - started
        result["evaluations"].append(entry)
        log(
            f"[{name}@{budget}] step {step} tokens {tokens / 1e6:.2f}M train {train_seconds / 60:.1f} min: "
            f"{entry['split']} ppl {metrics['mlm_perplexity']:.1f} acc {metrics['mlm_accuracy']:.3f} "
            f"nsp {metrics['nsp_accuracy']:.3f}"
            + ("" if full else f" kl_uni {entry['kl_to_unigram']:.2f} top=mode {entry['top1_is_most_frequent']:.2f}")
        )

    evaluate(0, 0, 0.0)
    trained = train_phases(
        model, cfg, phases, corpus, tokenizer, MaskedLMAndNSP() if recipe.nsp else MaskedLMOnly(), evaluate
    )
    evaluate(trained["steps"], trained["tokens"], trained["train_seconds"], full=True)
    result.update(
        trained, tokens_per_s=trained["tokens"] / trained["train_seconds"], finished=time.strftime("%Y-%m-%d %H:%M:%S")
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}@{budget}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    log(
        f"[{name}@{budget}] wrote {path} ({trained['train_seconds'] / 60:.1f} min, "
        f"{result['tokens_per_s']:,.0f} tokens/s)"
    )
    return result


def check(data_dir: str | None, steps: int = 6, old_steps: int = 50) -> None:
    """The first steps of the `default` and `b8-lr1e-3-m30` recipes (batch 8 as 2 x 4 for the first, to cover
    accumulation) through `train_phases` and through `bertlib.objectives.train` give the same losses; and
    `train_phases` repeats the first `old_steps` steps that the script written for the old `bertlib.train` logged
    in `results/default@third.json` (same tokens and gradient norms; losses within 1e-6, a summation order)."""
    tokenizer = tokenizer_for(8192, data_dir)
    corpus = wikitext_corpus("train", tokenizer, data_dir=data_dir)
    for name, extra in (("default", {"batch_size": 8, "grad_accum": 2}), ("b8-lr1e-3-m30", {})):
        recipe = replace(RECIPES[name], train={**RECIPES[name].train, **extra})
        model_config, cfg, phases = configs(recipe, BUDGET_TOKENS)
        cfg = replace(cfg, max_steps=steps, log_every=1, eval_every=steps + 1, save_every=steps + 1)
        dataset = training_pairs(corpus, tokenizer, cfg, cfg.max_seq_len)
        library = train(build_model(model_config, recipe, cfg.seed), dataset, cfg, show_progress=False)
        model = build_model(model_config, recipe, cfg.seed)
        study = train_phases(model, cfg, [(cfg.max_seq_len, steps)], corpus, tokenizer, MaskedLMAndNSP())["log"]
        for part in MaskedLMAndNSP.parts:
            reference, mine = [r[part] for r in library], [r[part] for r in study]
            print(
                f"{name} {part}\n  bertlib.objectives.train: {[f'{x:.6f}' for x in reference]}\n"
                f"  train_phases:           {[f'{x:.6f}' for x in mine]}"
            )
            if len(mine) != steps or reference != mine:
                sys.exit(f"{name}: the study's {part} differs from the library's")
    old = json.loads((RESULTS / "default@third.json").read_text(encoding="utf-8"))
    model_config, cfg, _ = configs(RECIPES["default"], BUDGET_TOKENS * BUDGETS["third"])
    model = build_model(model_config, RECIPES["default"], cfg.seed)
    study = train_phases(
        model, cfg, [(cfg.max_seq_len, old_steps)], corpus, tokenizer, MaskedLMAndNSP(), schedule_steps=old["steps"]
    )["log"]
    logged = [r for r in old["log"] if r["step"] <= old_steps]
    for theirs, mine in zip(logged, study, strict=True):
        same = all(theirs[k] == mine[k] for k in ("step", "tokens", "grad_norm", "lr"))
        close = all(abs(theirs[k] - mine[k]) < 1e-6 for k in MaskedLMAndNSP.parts)
        print(
            f"default@third step {mine['step']}: old script {theirs['mlm_loss']:.9f} / {theirs['nsp_loss']:.9f}, "
            f"train_phases {mine['mlm_loss']:.9f} / {mine['nsp_loss']:.9f}"
        )
        if not (same and close):
            sys.exit(f"train_phases does not repeat the old script's default@third at step {mine['step']}")
    print("same losses")


def speed(names: list[str], data_dir: str | None, sequences: int = 1280, rounds: int = 2) -> dict:
    """Training tokens/s of each recipe at the full budget, measured back to back on `sequences` pairs per
    phase and recipe (`rounds` times, interleaved, best round kept, so that other load on the machine touches
    every recipe alike); the recipes' phases are weighted by their share of the steps. Writes `speed.json`."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name in names:
            recipe = RECIPES[name]
            model_config, cfg, phases = configs(recipe, BUDGET_TOKENS)
            tokenizer = tokenizer_for(model_config.vocab_size, data_dir)
            corpus = wikitext_corpus("train", tokenizer, data_dir=data_dir)
            objective = MaskedLMAndNSP() if recipe.nsp else MaskedLMOnly()
            seconds = tokens = 0.0  # per step of the whole run: each phase's, weighted by its share of the steps
            for seq_len, phase_steps in phases:
                steps = sequences // cfg.batch_size
                log = train_phases(
                    build_model(model_config, recipe, cfg.seed),
                    replace(cfg, log_every=5),
                    [(seq_len, steps + 5)],
                    corpus,
                    tokenizer,
                    objective,
                )["log"]
                first, last = log[0], log[-1]  # the first 5 steps warm the allocator up
                seconds += phase_steps / cfg.max_steps * (last["train_seconds"] - first["train_seconds"]) / steps
                tokens += phase_steps / cfg.max_steps * (last["tokens"] - first["tokens"]) / steps
            best[name] = max(best.get(name, 0.0), tokens / seconds)
            print(f"[speed] {name}: {tokens / seconds:,.0f} tokens/s", flush=True)
    result = {
        "tokens_per_s": best,
        "machine": machine(),
        "threads": torch.get_num_threads(),
        "sequences": sequences,
        "rounds": rounds,
        "commit": git_commit(),
        "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (HERE / "speed.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


# ---------------------------------------------------------------------------------------------- report
def load_results() -> list[dict]:
    "Every result file, by budget, then in the order of `RECIPES`."
    results = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(RESULTS.glob("*.json"))]
    order = list(RECIPES)
    return sorted(
        results,
        key=lambda r: (
            list(BUDGETS).index(r["budget"]),
            order.index(r["recipe"]) if r["recipe"] in order else len(order),
        ),
    )


def ported(result: dict) -> bool:
    "Whether the run came from this script's loop (`train_phases`) rather than the one written for `bertlib.train`."
    return "loop" in result


def subset_curve(result: dict) -> list[dict]:
    "The validations on the fixed subset (the whole split is scored once, at the end)."
    return [e for e in result["evaluations"] if e["split"] != "validation"]


def at_wall_time(result: dict, seconds: float) -> float | None:
    "Subset perplexity at `seconds` of training, interpolated in log-perplexity; None beyond the run's end."
    points = [(e["train_seconds"], math.log(e["mlm_perplexity"])) for e in subset_curve(result)]
    if seconds > points[-1][0] * 1.001:
        return None
    for (t0, y0), (t1, y1) in zip(points, points[1:], strict=False):
        if t0 <= seconds <= t1:
            return math.exp(y0 + (y1 - y0) * (seconds - t0) / max(t1 - t0, 1e-9))
    return math.exp(points[-1][1])


def gpu_escapes(runs_dir: Path, threshold: float = 300.0) -> list[dict]:
    """For each GPU run folder (config.json + metrics.jsonl), the first validation below `threshold` perplexity:
    its step, the learning rate then and the NSP accuracy, with the lowest perplexity before it."""
    rows = []
    for folder in sorted(p for p in runs_dir.iterdir() if (p / "metrics.jsonl").exists()):
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        records = [
            json.loads(line)
            for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        valid = [r for r in records if r.get("split") == "validation"]
        escape = next((r for r in valid if r["mlm_perplexity"] < threshold), None)
        before = [r for r in valid if escape is None or r["step"] < escape["step"]]
        lr_then = next((r["lr"] for r in records if "lr" in r and escape and r["step"] >= escape["step"]), None)
        t = config["training"]
        pairs = escape and escape["step"] * t["batch_size"]
        rows.append(
            {
                "run": folder.name,
                "hidden": config["model"]["hidden_size"],
                "lr": t["lr"],
                "epochs": t["epochs"],
                "batch": t["batch_size"],
                "valid": valid,
                "escape_step": escape and escape["step"],
                "pairs": pairs,
                "tokens": pairs and pairs * MEAN_LEN[128],
                "plateau_ppl": min(r["mlm_perplexity"] for r in before) if before else None,
                "lr_then": lr_then,
                "nsp_then": escape and escape["nsp_accuracy"],
                "final_step": valid[-1]["step"],
                "final_ppl": valid[-1]["mlm_perplexity"],
            }
        )
    return rows


def recipe_note(result: dict) -> str:
    "What the result's recipe changes, in today's words (older files may word it otherwise)."
    return RECIPES[result["recipe"]].note if result["recipe"] in RECIPES else result["note"]


def script_lacks_recipe(result: dict) -> bool:
    "Whether the script at the result's recorded commit (the HEAD when it ran) does not define its recipe yet."
    found = subprocess.run(
        ["git", "show", f"{result['commit']}:experiments/recipe_study.py"], cwd=ROOT, capture_output=True, text=True
    )
    return found.returncode == 0 and f'"{result["recipe"]}": Recipe' not in found.stdout


def commits_note(results: list[dict]) -> str:
    "Which script made which rows: the commits recorded in the result files."
    old = sorted({r["commit"] for r in results if not ported(r)})
    new = sorted({r["commit"] for r in results if ported(r)})
    lines = [
        "Each row names the commit that was the HEAD when the run started "
        "(`git show COMMIT:experiments/recipe_study.py`; `-dirty` marks a script or library with uncommitted "
        "edits)."
    ]
    if old:
        lines.append(
            f"Rows from {', '.join(f'`{c}`' for c in old)} were made by the script written for the "
            "library's old API (`bertlib.train`, since removed), whose loop was a copy of that `train`; they are "
            "kept as they were."
        )
        early = [r for r in results if not ported(r) and script_lacks_recipe(r)]
        if early:
            lines.append(
                "The runs marked * started before their recipe was committed (the script then held it as "
                "an uncommitted edit): "
                + ", ".join(f"`{r['recipe']}@{r['budget']}`" for r in early)
                + "; every result file records the settings it ran with (`settings`, `model_config`, "
                "`train_config`)."
            )
    if new:
        lines.append(
            f"Rows from {', '.join(f'`{c}`' for c in new)} were made by this script, whose loop is built "
            "from `bertlib.trainer` and gives `bertlib.objectives.train`'s losses (`check`)."
        )
    if old and new:
        lines.append(
            "The two scripts draw the same data, masks and dropout: `check` shows this one repeating the first 50 "
            "steps the old one logged for `default@third` (same tokens and gradient norms, losses within 1e-6), so "
            "their rows can be compared."
        )
    return " ".join(lines)


def common_seconds(group: list[dict]) -> float:
    "The training time of a group's fastest run: every run of the group has a curve up to there."
    return min(r["train_seconds"] for r in group)


def study_table(results: list[dict], budget: str) -> list[str]:
    "The study README's table of one budget."
    group = [r for r in results if r["budget"] == budget]
    common = common_seconds(group)
    lines = [
        f"## Budget `{budget}`",
        "",
        f"Equal tokens: the `val ppl` column (whole split, at the end). Equal wall time: `ppl @ "
        f"{common / 60:.1f} min`, each run's subset curve at the training time of the group's fastest run, "
        "interpolated in log-perplexity.",
        "",
        "| recipe | what changes | steps | tokens | tokens/s | train min | val ppl | MLM acc | NSP acc | "
        f"ppl @ {common / 60:.1f} min | KL to unigram | top-1 in 10 most frequent | commit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in group:
        final, probe = r["evaluations"][-1], [e for e in r["evaluations"] if "kl_to_unigram" in e][-1]
        mark = "*" if not ported(r) and script_lacks_recipe(r) else ""
        lines.append(
            f"| `{r['recipe']}` | {recipe_note(r)} | {r['steps']:,} | {r['tokens'] / 1e6:.2f}M | "
            f"{r['tokens_per_s']:,.0f} | "
            f"{r['train_seconds'] / 60:.1f} | **{final['mlm_perplexity']:.1f}** | {final['mlm_accuracy']:.3f} | "
            f"{final['nsp_accuracy']:.3f} | {at_wall_time(r, common):.1f} | {probe['kl_to_unigram']:.2f} | "
            f"{probe['top1_in_10_most_frequent']:.2f} | `{r['commit']}`{mark} |"
        )
    return [*lines, ""]


def gpu_table(gpu: list[dict]) -> list[str]:
    "The study README's table of the GPU runs' escape from the plateau."
    lines = [
        "## The plateau on the GPU runs (evidence of what gets the model out)",
        "",
        "From `docs/results/gpu/runs` (H100, batch 256, seq 128, warm-up 6%, linear decay; `small` = hidden "
        "512). 'escape' = the first validation below perplexity 300; tokens = pairs seen x "
        f"{MEAN_LEN[128]:.0f} (the mean length of a training pair).",
        "",
        "| run | hidden | lr | epochs | lowest ppl before | escape step | pairs seen | tokens seen | x CPU budget | "
        "lr then | NSP then | last step | last ppl |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in gpu:
        escaped = g["escape_step"] is not None
        cells = [
            g["run"],
            g["hidden"],
            f"{g['lr']:g}",
            f"{g['epochs']:g}",
            f"{g['plateau_ppl']:.0f}",
            g["escape_step"] if escaped else "-",
            f"{g['pairs']:,}" if escaped else "-",
            f"{g['tokens'] / 1e6:.0f}M" if escaped else "-",
            f"{g['tokens'] / BUDGET_TOKENS:.0f}" if escaped else "-",
            f"{g['lr_then']:.2e}" if escaped else "-",
            f"{g['nsp_then']:.2f}" if escaped else "-",
            f"{g['final_step']:,}",
            f"{g['final_ppl']:.1f}",
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return [*lines, ""]


def readme_block(results: list[dict], gpu: list[dict]) -> str:
    """The README's summary: the full-budget runs beside their runs at a third, whether the target was met, and
    how many tokens the GPU runs needed to leave the plateau."""
    full = [r for r in results if r["budget"] == "full"]
    confirmed = {r["recipe"] for r in full}
    rows = full + [r for r in results if r["budget"] == "third" and r["recipe"] in confirmed]
    common = {
        b: common_seconds([r for r in results if r["budget"] == b])
        for b in BUDGETS
        if any(r["budget"] == b for r in results)
    }
    lines = [
        "### The CPU recipe study",
        "",
        "Generated by `python experiments/recipe_study.py --report` from `experiments/recipe_study/results`; do "
        f"not edit by hand. Each recipe trains `mini` from scratch for a number of training tokens: `full` is "
        f"that of the main command before this study ({DEFAULT_STEPS:,} steps of {BASELINE['batch_size']} pairs, "
        f"{BUDGET_TOKENS / 1e6:.2f}M tokens), `third` a third of it; one thread of the development machine's "
        "CPU, shared with other work. `val ppl` and `NSP` are on the whole validation split at the end; the "
        "last column is the perplexity on a fixed 640-pair subset after as much training time as the fastest "
        "run of the same budget had (" + ", ".join(f"`{b}`: {s / 60:.1f} min" for b, s in common.items()) + "). "
        "`script` is the commit the run was made at: rows made before the study was ported to `bertlib.trainer` "
        "ran the script written for the old `bertlib.train` (the study's README says which).",
        "",
        "| recipe | what changes | budget | tokens | minutes | tokens/s | val ppl | NSP | ppl at equal wall time "
        "| script |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        final = r["evaluations"][-1]
        lines.append(
            f"| `{r['recipe']}` | {recipe_note(r)} | {r['budget']} | {r['tokens'] / 1e6:.2f}M | "
            f"{r['train_seconds'] / 60:.1f} | {r['tokens_per_s']:,.0f} | **{final['mlm_perplexity']:.1f}** | "
            f"{final['nsp_accuracy']:.1%} | {at_wall_time(r, common[r['budget']]):.1f} | `{r['commit']}` |"
        )
    met = [
        r["recipe"]
        for r in full
        if r["evaluations"][-1]["mlm_perplexity"] <= TARGET_PPL and r["evaluations"][-1]["nsp_accuracy"] >= TARGET_NSP
    ]
    screened = len({r["recipe"] for r in results if r["budget"] == "third"})
    target = (
        f"The target (validation perplexity <= {TARGET_PPL:.0f} and NSP accuracy >= {TARGET_NSP:.0%} at the full "
        "budget)"
    )
    if met:
        verdict = f"was met by {', '.join(f'`{m}`' for m in met)}."
    elif full:
        verdict = f"was met by none of the {len(full)} recipes run at the full budget ({screened} screened at a third)."
    else:
        verdict = "has not been tried yet: no recipe has been run at the full budget."
    lines += ["", f"{target} {verdict}"]
    baseline = next((r for r in full if r["recipe"] == "default"), None)
    best = min(full, key=lambda r: r["evaluations"][-1]["mlm_perplexity"], default=None)
    if baseline and best and best is not baseline:
        ours, theirs = best["evaluations"][-1], baseline["evaluations"][-1]
        machines = "; ".join(sorted({r["machine"] for r in full if ported(r)}))
        lines[-1] += (
            f" At the full budget `{best['recipe']}` did best: validation perplexity {ours['mlm_perplexity']:.1f} "
            f"against {theirs['mlm_perplexity']:.1f} for `default`, NSP {ours['nsp_accuracy']:.1%} against "
            f"{theirs['nsp_accuracy']:.1%} (machine: {machines})."
        )
    escaped = [g for g in gpu if g["escape_step"] is not None]
    if escaped:
        least = min(escaped, key=lambda g: g["tokens"])
        mini = [g for g in escaped if g["hidden"] == 256]
        lines += [
            "",
            f"On the GPU (`docs/results/gpu/runs`, batch 256) the first validation below perplexity 300 "
            f"came after {least['tokens'] / 1e6:.0f}M training tokens at the earliest (`{least['run']}`, hidden "
            f"{least['hidden']}, {least['tokens'] / BUDGET_TOKENS:.0f}x the CPU budget)"
            + (
                f"; the `mini` runs needed {min(g['tokens'] for g in mini) / 1e6:.0f}M to "
                f"{max(g['tokens'] for g in mini) / 1e6:.0f}M ({min(g['tokens'] for g in mini) / BUDGET_TOKENS:.0f}x"
                f" to {max(g['tokens'] for g in mini) / BUDGET_TOKENS:.0f}x)"
                if mini
                else ""
            )
            + " (tokens = pairs seen x the mean pair length).",
        ]
    lines += [
        "",
        "Every recipe, the probes of the plateau and the GPU evidence: "
        "[experiments/recipe_study/README.md](experiments/recipe_study/README.md); the validation curves: "
        "[curves.png](experiments/recipe_study/curves.png).",
    ]
    return "\n".join(lines)


def colour(result: dict) -> tuple:
    "One colour per recipe, the same in every panel and budget."
    import matplotlib.pyplot as plt

    order = list(RECIPES)
    return plt.cm.tab20(order.index(result["recipe"]) % 20 if result["recipe"] in order else 19)


def figures(results: list[dict], gpu: list[dict]) -> None:
    "curves.png (the subset validation curves, by tokens and by time) and plateau.png (the probes, the GPU runs)."
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = [b for b in BUDGETS if any(r["budget"] == b for r in results)]
    titles = {"third": "a third of the default's tokens", "full": "the default's tokens"}
    fig, axes = plt.subplots(len(budgets), 2, figsize=(13, 4.6 * len(budgets)), squeeze=False)
    for row, budget in zip(axes, budgets, strict=True):
        for r in (r for r in results if r["budget"] == budget):
            ev = [e for e in subset_curve(r) if e["step"] > 0]
            style = dict(
                color=colour(r),
                marker="o",
                ms=3,
                label=r["recipe"],
                lw=2.5 if r["recipe"] == "default" else 1.2,
            )
            row[0].plot([e["tokens"] / 1e6 for e in ev], [e["mlm_perplexity"] for e in ev], **style)
            row[1].plot([e["train_seconds"] / 60 for e in ev], [e["mlm_perplexity"] for e in ev], **style)
        for ax, xlabel in zip(row, ("training tokens (millions)", "training wall time (min, 1 thread)"), strict=True):
            ax.set(
                xlabel=xlabel,
                ylabel="validation MLM perplexity (subset)",
                yscale="log",
                ylim=(200, 1000),
                title=f"budget {budget}: {titles[budget]}",
            )
            ax.axhline(TARGET_PPL, color="gray", ls=":", lw=1)
            ax.text(
                ax.get_xlim()[0], TARGET_PPL * 1.01, f" target {TARGET_PPL:.0f}", color="gray", fontsize=8, va="bottom"
            )
            ax.grid(alpha=0.3, which="both")
        row[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=90)
    plt.close(fig)

    fig, grid = plt.subplots(2, 3, figsize=(18, 9))
    axes = grid.ravel()
    panels = [
        ("kl_to_unigram", "nats per masked token", "KL(model || unigram distribution)"),
        ("top1_in_10_most_frequent", "share", "top-1 predictions among the 10 most frequent tokens"),
        (
            "attention_entropy_per_layer",
            "nats (uniform over 122 tokens: 4.8)",
            "attention entropy: layer 1 (solid), layer 4 (dashed)",
        ),
        (
            "max_head_prev_token_attention",
            "attention weight (uniform: 0.008)",
            "largest mean attention of one head to the previous token",
        ),
        (
            "mean_attention_to_cls_sep_per_layer",
            "share of attention (uniform: about 0.025)",
            "attention to [CLS]/[SEP], mean over heads, layer 4 (runs with this probe)",
        ),
    ]
    last = [r for r in results if r["budget"] == budgets[-1]]
    for r in last:
        ev = [e for e in r["evaluations"] if "kl_to_unigram" in e]
        x = [e["tokens"] / 1e6 for e in ev]
        style = dict(color=colour(r), marker="o", ms=3, label=r["recipe"])
        for ax, (key, _, _) in zip(axes, panels, strict=False):
            if not all(key in e for e in ev):
                continue
            values = [e[key] for e in ev]
            if key == "attention_entropy_per_layer":
                ax.plot(x, [v[0] for v in values], **style)
                ax.plot(x, [v[-1] for v in values], **{**style, "ls": "--", "label": None})
            else:
                ax.plot(x, [v[-1] for v in values] if isinstance(values[0], list) else values, **style)
    for ax, (_, ylabel, title) in zip(axes, panels, strict=False):
        ax.set(xlabel="training tokens (millions)", ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    for i, g in enumerate(gpu):
        axes[5].plot(
            [r["step"] * g["batch"] * MEAN_LEN[128] / 1e6 for r in g["valid"]],
            [r["mlm_perplexity"] for r in g["valid"]],
            color=f"C{i}",
            label=g["run"],
        )
    for r in last:
        ev = subset_curve(r)
        axes[5].plot([e["tokens"] / 1e6 for e in ev], [e["mlm_perplexity"] for e in ev], color=colour(r), ls=":", lw=1)
    axes[5].axvline(BUDGET_TOKENS / 1e6, color="k", ls="--", lw=1, label="CPU budget (tokens)")
    axes[5].set(
        xscale="log",
        yscale="log",
        xlabel="training tokens (millions)",
        ylabel="validation perplexity",
        title="GPU runs (batch 256, solid) vs CPU runs (dotted)",
    )
    axes[5].grid(alpha=0.3, which="both")
    axes[5].legend(fontsize=7)
    fig.suptitle(f"The plateau: CPU runs of budget '{budgets[-1]}' (fixed validation subset), GPU runs beside them")
    fig.tight_layout()
    fig.savefig(HERE / "plateau.png", dpi=90)
    plt.close(fig)


def report(gpu_runs: Path | None = None, readme: Path = ROOT / "README.md") -> None:
    "Write recipe_study/README.md, the figures and the README's block from the result files."
    results = load_results()
    if not results:
        sys.exit(f"no results in {RESULTS}")
    gpu = gpu_escapes(gpu_runs) if gpu_runs and gpu_runs.is_dir() else []
    baselines = {ported(r): r["unigram_perplexity"] for r in results}
    lines = [
        "# Pre-training recipe study (`mini` on the 2-core CPU)",
        "",
        "Generated by `python experiments/recipe_study.py --report` from `results/*.json`; do not edit.",
        "",
        f"Budget `full` = the training tokens of the README's main command before this study ({DEFAULT_STEPS:,} "
        f"steps x {BASELINE['batch_size']} pairs x {MEAN_LEN[128]:.0f} tokens = {BUDGET_TOKENS / 1e6:.2f}M); "
        "`third` = a third of it. Validation: the whole split (2,358 pairs, 15% masked, seq 128, the same masks "
        "for every run) at the end; the curves use a fixed subset (640 pairs). One thread; the machine's 2 "
        "cores were shared with another session's work, so tokens/s (training only, evaluation excluded) "
        "carries that noise. The unigram baseline (every masked token guessed from its train-split frequency) "
        "scores perplexity "
        + " and ".join(
            f"{v:.1f} ({'`bertlib.evaluate.unigram_baseline`, add-one' if p else 'the old script, add-0.5'})"
            for p, v in sorted(baselines.items(), reverse=True)
        )
        + " on the same tokens.",
        "",
        commits_note(results),
        "",
    ]
    for budget in BUDGETS:
        if any(r["budget"] == budget for r in results):
            lines += study_table(results, budget)
    speed_file = HERE / "speed.json"
    if speed_file.exists():
        measured = json.loads(speed_file.read_text(encoding="utf-8"))
        base = measured["tokens_per_s"].get("default")
        lines += [
            "## Speed, measured back to back",
            "",
            f"`speed` ({measured['sequences']:,} pairs per sequence length and recipe, {measured['rounds']} "
            f"interleaved rounds, best kept; measured {measured['measured']}"
            + (f", script `{measured['commit']}`" if "commit" in measured else ", by the old script")
            + "): training tokens/s at one thread, and the share of the default's tokens each recipe trains in "
            "the default's wall time.",
            "",
            "| recipe | tokens/s | tokens in the default's time |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| `{name}` | {value:,.0f} | {f'{value / base:.2f} x' if base else ''} |"
            for name, value in measured["tokens_per_s"].items()
        ]
        lines.append("")
    if gpu:
        lines += gpu_table(gpu)
    lines += ["![validation perplexity](curves.png)", "", "![plateau probes](plateau.png)", ""]
    (HERE / "README.md").write_text("\n".join(lines), encoding="utf-8")
    figures(results, gpu)
    update_readme(readme, readme_block(results, gpu), *README_MARKERS)
    print(f"wrote {HERE / 'README.md'}, curves.png, plateau.png and the recipe study's block of {readme}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command",
        nargs="?",
        choices=["run", "check", "speed"],
        help="run recipes, check the loop against the library's, or measure the recipes' speed",
    )
    parser.add_argument("recipes", nargs="*", help=f"recipe names: {', '.join(RECIPES)}")
    parser.add_argument("--all", action="store_true", help="every recipe (finished runs are skipped)")
    parser.add_argument("--budget", choices=list(BUDGETS), default="third")
    parser.add_argument("--force", action="store_true", help="re-run recipes that already have a result")
    parser.add_argument("--report", action="store_true", help="write the study's README, figures and README block")
    parser.add_argument(
        "--gpu-runs",
        type=Path,
        default=ROOT / "docs" / "results" / "gpu" / "runs",
        help="GPU run folders to show beside the study (skipped if absent)",
    )
    args = parser.parse_args()
    unknown = [n for n in args.recipes if n not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
    torch.set_num_threads(1)
    data_dir = os.environ.get("BERTLIB_DATA_DIR")
    if args.command == "check":
        check(data_dir)
    elif args.command == "speed":
        speed(args.recipes or list(RECIPES), data_dir)
    elif args.command == "run":
        for name in list(RECIPES) if args.all else args.recipes:
            if (RESULTS / f"{name}@{args.budget}.json").exists() and not args.force:
                print(f"[{name}@{args.budget}] done already; --force to re-run", flush=True)
                continue
            run(name, args.budget, data_dir, log=lambda *a: print(*a, flush=True))
    if args.report:
        report(args.gpu_runs)
    if not args.command and not args.report:
        parser.print_help()


if __name__ == "__main__":
    main()
