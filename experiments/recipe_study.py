"""The pre-training recipe study: which settings get `mini` off the unigram plateau within the CPU budget of
the README's main command (`python -m bertlib pretrain`: 1,000 steps of 32 sequences of up to 128 tokens).

Hand-written; not part of the library. Every run is one recipe (a name in `RECIPES`) at one budget, measured in
training tokens as a share of the default command's (`BUDGETS`). Each run writes
`recipe_study/results/<recipe>@<budget>.json`; `--report` turns those files into `recipe_study/README.md` (the
table) and `recipe_study/curves.png` / `plateau.png` (the curves). Nothing in the table is typed by hand.

    OMP_NUM_THREADS=1 BERTLIB_DATA_DIR=... python experiments/recipe_study.py run default lr-1e-3 --budget third
    python experiments/recipe_study.py run --all --budget third   # every screening recipe, skipping finished runs
    python experiments/recipe_study.py --report
    python experiments/recipe_study.py check                      # the loop below equals bertlib.train.train

The training loop is a copy of `bertlib.train.train` (same sampler, dropout seeds, loss weighting, clipping and
schedule; `check` proves the losses agree) with switches the library lacks: NSP off, a short-sequence first
phase, sinusoidal initialisation of the position embeddings, a scaled initialisation of the residual outputs,
AdamW's beta2, a warm-up-stable-decay schedule, and cheap probes of the plateau (agreement with the unigram
distribution, attention entropy, attention to the neighbouring tokens).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path

import torch

from bertlib.config import BertConfig
from bertlib.model import IGNORE_INDEX, BertForPreTraining
from bertlib.pretraining_data import CLS_ID, SEP_ID, PretrainingDataset, PretrainingSampler, wikitext_corpus
from bertlib.tokenizer import load_tokenizer, save_tokenizer
from bertlib.train import (
    DataPosition,
    ResumableSampler,
    TrainConfig,
    _wikitext_tokenizer,
    configure_optimizer,
    evaluation_loader,
    lr_schedule,
    make_loader,
    micro_batches,
    reseed,
    step_counts,
    validation_metrics,
)

HERE = Path(__file__).resolve().parent / "recipe_study"
RESULTS = HERE / "results"
TOKENIZERS = HERE / "tokenizers"  # one trained tokenizer per vocabulary size, reused by every run
DEFAULT_STEPS, DEFAULT_BATCH = 1000, 32  # the README's main command
MEAN_LEN_128 = 121.97  # mean real tokens of a training pair at max_seq_len 128 (epoch 0, seed 0, vocab 8,192)
BUDGET_TOKENS = DEFAULT_STEPS * DEFAULT_BATCH * MEAN_LEN_128  # about 3.9M training tokens
# "wall": the default's wall time, i.e. the full budget's tokens times the recipe's speed over the default's, both
# measured back to back by `speed` (speed.json), as `pretrain --time-budget` fixes its step count from a calibration
BUDGETS = {"third": 1 / 3, "full": 1.0, "wall": 1.0}
EVAL_POINTS = 6  # validation on a fixed subset at 1/6, 2/6, ... of every run; the whole split at the end
SUBSET_BATCHES = 10  # 640 of the 2,358 validation pairs
PROBE_BATCHES = 2  # attention and unigram probes


@dataclass
class Recipe:
    "One configuration: overrides of the `mini` preset and of the default `TrainConfig`, plus local switches."

    note: str
    model: dict = field(default_factory=dict)  # BertConfig overrides
    train: dict = field(default_factory=dict)  # TrainConfig overrides
    nsp: bool = True  # False: the NSP loss is not trained (only to measure what NSP costs)
    short_seq_len: int | None = None  # first phase at this max_seq_len ...
    short_fraction: float = 0.0  # ... for this share of the steps (BERT: 90% of steps at 128, then 512)
    pos_init: str = "normal"  # "sinusoidal": position embeddings start as scaled sin/cos waves
    scaled_residual_init: bool = False  # GPT-2: output projections of each sub-layer get std / sqrt(2 x layers)
    beta2: float = 0.999
    decay_fraction: float | None = None  # warm-up, constant, then linear decay over this last share of the steps
    tokens_scale: float = 1.0  # a multiple of the budget's tokens (to equalise wall time with the default's)


RECIPES: dict[str, Recipe] = {
    "default": Recipe("today's main command: lr 5e-4, warm-up 6%, batch 32, seq 128, mask 15%, dropout 0.1, Post-LN"),
    # learning rate and warm-up
    "lr-1e-3": Recipe("lr 1e-3", train={"lr": 1e-3}),
    "lr-2.5e-4": Recipe("lr 2.5e-4", train={"lr": 2.5e-4}),
    "lr-wsd-20": Recipe("lr 5e-4 held constant after warm-up, linear decay over the last 20% only",
                        decay_fraction=0.2),
    "beta2-0.98": Recipe("AdamW beta2 0.98 (RoBERTa) instead of BERT's 0.999", beta2=0.98),
    # batch size and accumulation
    "batch-16": Recipe("batch 16 (twice the steps), lr 5e-4", train={"batch_size": 16}),
    "batch-8": Recipe("batch 8 (four times the steps), lr 5e-4", train={"batch_size": 8}),
    "batch-8-lr-1e-3": Recipe("batch 8, lr 1e-3", train={"batch_size": 8, "lr": 1e-3}),
    "batch-4": Recipe("batch 4 (eight times the steps), lr 5e-4", train={"batch_size": 4}),
    "batch-64-accum-2": Recipe("batch 64 as 2 x 32 accumulated (half the steps), lr 1e-3",
                               train={"batch_size": 64, "grad_accum": 2, "lr": 1e-3}),
    # masking rate
    "mask-30": Recipe("mask 30%", train={"mlm_probability": 0.30}),
    "mask-40": Recipe("mask 40%", train={"mlm_probability": 0.40}),
    # normalisation
    "pre-ln": Recipe("Pre-LN, lr 1e-3", model={"norm_style": "pre"}, train={"lr": 1e-3}),
    # dropout
    "dropout-0": Recipe("dropout 0 (hidden and attention)",
                        model={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
    # sequence length
    "seq-64-first": Recipe("90% of steps at seq 64, then 128 (BERT's short-first schedule)",
                           short_seq_len=64, short_fraction=0.9),
    # vocabulary
    "vocab-4096": Recipe("vocabulary 4,096 (perplexity not comparable: other tokens)", model={"vocab_size": 4096}),
    "vocab-16384": Recipe("vocabulary 16,384 (perplexity not comparable: other tokens)",
                          model={"vocab_size": 16384}),
    # NSP
    "no-nsp": Recipe("NSP loss off (measures NSP's cost; not a candidate)", nsp=False),
    # initialisation
    "init-sinusoidal-pos": Recipe("position embeddings initialised as sin/cos waves (std 0.02)",
                                  pos_init="sinusoidal"),
    "init-std-0.05": Recipe("initializer_range 0.05 (sharper initial attention)", model={"initializer_range": 0.05}),
    "init-scaled-residual": Recipe("GPT-2 init: sub-layer output projections std 0.02/sqrt(8)",
                                   scaled_residual_init=True),
    # combinations of the single factors that helped
    "combo-b8": Recipe("batch 8, dropout 0, mask 30%, 90% of steps at seq 64, sin/cos position init",
                       model={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
                       train={"batch_size": 8, "mlm_probability": 0.30}, short_seq_len=64, short_fraction=0.9,
                       pos_init="sinusoidal"),
    "combo-b8-lr-1e-3": Recipe("combo-b8 with lr 1e-3",
                               model={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
                               train={"batch_size": 8, "mlm_probability": 0.30, "lr": 1e-3}, short_seq_len=64,
                               short_fraction=0.9, pos_init="sinusoidal"),
    "combo-b8-pre-ln": Recipe("combo-b8 with Pre-LN and lr 1e-3",
                              model={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                                     "norm_style": "pre"},
                              train={"batch_size": 8, "mlm_probability": 0.30, "lr": 1e-3}, short_seq_len=64,
                              short_fraction=0.9, pos_init="sinusoidal"),
    "combo-b4": Recipe("combo-b8 with batch 4",
                       model={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
                       train={"batch_size": 4, "mlm_probability": 0.30}, short_seq_len=64, short_fraction=0.9,
                       pos_init="sinusoidal"),
}


# ---------------------------------------------------------------------------------------------- settings
def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def tokenizer_for(vocab_size: int, data_dir: str | None):
    "The WikiText-2 WordPiece tokenizer of `vocab_size` (trained once, as `pretrain` trains it, then reused)."
    folder = TOKENIZERS / str(vocab_size)
    if (folder / "tokenizer.json").exists():
        return load_tokenizer(folder)
    tokenizer = _wikitext_tokenizer("wikitext-2-v1", vocab_size, data_dir)
    save_tokenizer(tokenizer, folder)
    return tokenizer


def configs(recipe: Recipe, tokens: float, log_every: int = 25
            ) -> tuple[BertConfig, TrainConfig, list[tuple[int, int]]]:
    "The model config, training config and phases [(max_seq_len, steps)] of `recipe` for about `tokens` tokens."
    model_config = BertConfig.from_preset("mini", **recipe.model)
    base = TrainConfig(max_steps=DEFAULT_STEPS, batch_size=DEFAULT_BATCH, device="cpu", seed=0)
    cfg = replace(base, **recipe.train)
    tokens = tokens * recipe.tokens_scale
    # mean tokens of a pair at max_seq_len 64 and 128 (measured on epoch 0), to give every recipe equal tokens
    mean_len = {64: 62.95, 128: MEAN_LEN_128}
    f = recipe.short_fraction if recipe.short_seq_len else 0.0
    per_step = cfg.batch_size * (f * mean_len.get(recipe.short_seq_len, MEAN_LEN_128) + (1 - f) * MEAN_LEN_128)
    steps = max(1, round(tokens / per_step))
    short = round(f * steps)
    phases = ([(recipe.short_seq_len, short)] if short else []) + [(cfg.max_seq_len, steps - short)]
    cfg = replace(cfg, max_steps=steps, save_every=steps, eval_every=max(1, steps // EVAL_POINTS),
                  eval_batches=SUBSET_BATCHES, log_every=log_every)
    return model_config, cfg, phases


# ---------------------------------------------------------------------------------------------- initialisation
def sinusoidal(positions: int, width: int) -> torch.Tensor:
    "The Transformer's sin/cos position table [positions, width]."
    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, width, 2, dtype=torch.float32) / width)
    table = torch.zeros(positions, width)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table


@torch.no_grad()
def initialise(model: BertForPreTraining, recipe: Recipe) -> None:
    "Apply the recipe's local initialisation switches after BERT's own initialisation."
    config = model.config
    if recipe.pos_init == "sinusoidal":
        table = sinusoidal(config.max_position_embeddings, config.hidden_size)
        model.bert.embeddings.position_embeddings.weight.copy_(table * (config.initializer_range / table.std()))
    if recipe.scaled_residual_init:
        std = config.initializer_range / math.sqrt(2 * config.num_hidden_layers)
        for layer in model.bert.encoder.layers:
            layer.attention.output.weight.normal_(0.0, std)
            layer.feed_forward.output.weight.normal_(0.0, std)


# ---------------------------------------------------------------------------------------------- probes
def unigram_log_probs(corpus, vocab_size: int) -> torch.Tensor:
    "Log-frequencies of the training tokens, add-0.5 smoothed (the corpus holds no [CLS], [SEP], [MASK], [PAD])."
    counts = torch.bincount(torch.from_numpy(corpus.ids.astype("int64")), minlength=vocab_size).double() + 0.5
    return (counts / counts.sum()).log().float()


@torch.no_grad()
def plateau_probes(model: BertForPreTraining, batches: list[dict], unigram: torch.Tensor) -> dict:
    """How much the MLM predictions look like the unigram distribution, and what attention does:
    KL(model || unigram) per masked token, the share of masked tokens whose top prediction is the corpus's most
    frequent token, the entropy of the predictions, the attention entropy per layer, and the largest mean
    attention any head puts on the previous / next token."""
    was_training = model.training
    model.eval()
    kl = ent = top_is_mode = n = 0.0
    top_frequent = unigram.topk(10).indices
    in_top10 = 0.0
    pairs = 0.0
    att_entropy, prev_att, next_att, self_att, special_att, queries = None, None, None, None, None, 0.0
    for b in batches:
        out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], labels=b["labels"])
        logp = out.prediction_logits.float().log_softmax(-1)
        p = logp.exp()
        kl += float((p * (logp - unigram)).sum(-1).sum())
        ent += float(-(p * logp).sum(-1).sum())
        top = logp.argmax(-1)
        top_is_mode += float((top == unigram.argmax()).sum())
        in_top10 += float(torch.isin(top, top_frequent).sum())
        n += len(top)
        # attention maps of the whole sequence (no labels: every position is computed)
        att = model.bert(b["input_ids"], b["token_type_ids"], b["attention_mask"], output_attentions=True).attentions
        mask = b["attention_mask"].bool()  # [B, S]
        q = mask.float()
        h = torch.stack([-(a * a.clamp(min=1e-12).log()).sum(-1) for a in att])  # [L, B, H, S]
        prev = torch.stack([a.diagonal(offset=-1, dim1=-2, dim2=-1) for a in att])  # [L, B, H, S-1]: i -> i-1
        nxt = torch.stack([a.diagonal(offset=1, dim1=-2, dim2=-1) for a in att])  # [L, B, H, S-1]: i -> i+1
        itself = torch.stack([a.diagonal(dim1=-2, dim2=-1) for a in att])  # [L, B, H, S]: i -> i
        special = (b["input_ids"] == CLS_ID) | (b["input_ids"] == SEP_ID)  # [B, S] keys that are [CLS] or [SEP]
        to_special = torch.stack([(a * special[:, None, None, :]).sum(-1) for a in att])  # [L, B, H, S]
        pair = (mask[:, 1:] & mask[:, :-1]).float()
        sums = ((h * q[None, :, None]).sum((1, 3)), (prev * pair[None, :, None]).sum((1, 3)),
                (nxt * pair[None, :, None]).sum((1, 3)), (itself * q[None, :, None]).sum((1, 3)),
                (to_special * q[None, :, None]).sum((1, 3)))
        att_entropy = sums[0] if att_entropy is None else att_entropy + sums[0]
        prev_att = sums[1] if prev_att is None else prev_att + sums[1]
        next_att = sums[2] if next_att is None else next_att + sums[2]
        self_att = sums[3] if self_att is None else self_att + sums[3]
        special_att = sums[4] if special_att is None else special_att + sums[4]
        queries += float(q.sum())
        pairs += float(pair.sum())
    model.train(was_training)
    per_head_entropy = att_entropy / queries  # [L, H]
    return {"kl_to_unigram": kl / n, "prediction_entropy": ent / n, "top1_is_most_frequent": top_is_mode / n,
            "top1_in_10_most_frequent": in_top10 / n,
            "attention_entropy_per_layer": per_head_entropy.mean(-1).tolist(),
            "max_head_prev_token_attention": float((prev_att / pairs).max()),
            "max_head_next_token_attention": float((next_att / pairs).max()),
            "max_head_self_attention": float((self_att / queries).max()),
            "max_head_attention_to_cls_sep": float((special_att / queries).max()),
            "mean_attention_to_cls_sep_per_layer": (special_att / queries).mean(-1).tolist()}


# ---------------------------------------------------------------------------------------------- training
def machine() -> dict:
    return {"processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "shared": "the 2 cores were shared with another session's tests; throughput is each run's own"}


def run(name: str, budget: str, data_dir: str | None, log=print, *, recipe: Recipe | None = None,
        tokens: float | None = None, log_every: int = 25, write: bool = True) -> dict:
    "Train recipe `name` at `budget` (or `recipe` for `tokens`) and write its result file."
    recipe = recipe or RECIPES[name]
    speed_ratio = None
    if tokens is None:
        tokens = BUDGET_TOKENS * BUDGETS[budget]
        if budget == "wall":
            measured = json.loads((HERE / "speed.json").read_text(encoding="utf-8"))["tokens_per_s"]
            speed_ratio = measured[name] / measured["default"]
            tokens *= speed_ratio
    model_config, cfg, phases = configs(recipe, tokens, log_every)
    tokenizer = tokenizer_for(model_config.vocab_size, data_dir)
    corpus = wikitext_corpus("train", tokenizer, data_dir=data_dir)
    unigram = unigram_log_probs(corpus, model_config.vocab_size)
    valid = evaluation_loader("validation", tokenizer, max_seq_len=128, data_dir=data_dir)  # every run: 128, 15%
    probe_batches = list(islice(valid, PROBE_BATCHES))
    # the unigram baseline on the same masked tokens: perplexity of predicting frequencies alone
    nll = masked = 0.0
    for b in valid:
        target = b["labels"][b["labels"] != IGNORE_INDEX]
        nll, masked = nll - float(unigram[target].sum()), masked + len(target)
    unigram_ppl = math.exp(nll / masked)

    torch.manual_seed(cfg.seed)
    model = BertForPreTraining(model_config)
    initialise(model, recipe)
    model.train()
    optimizer = configure_optimizer(model, cfg.lr, cfg.weight_decay)
    for group in optimizer.param_groups:
        group["betas"] = (group["betas"][0], recipe.beta2)
    steps = cfg.max_steps
    warmup = round(cfg.warmup_ratio * steps)
    if recipe.decay_fraction is None:
        scheduler = lr_schedule(optimizer, warmup, steps, cfg.schedule)
    else:  # warm-up, stable, decay
        decay_start = steps - round(recipe.decay_fraction * steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (
            s / warmup if s < warmup else min(1.0, (steps - s) / max(1, steps - decay_start))))
    micro = cfg.batch_size // cfg.grad_accum
    result = {"recipe": name, "budget": budget, "note": recipe.note, "settings": asdict(recipe),
              "model_config": model_config.to_dict(), "train_config": asdict(cfg), "phases": phases,
              "unigram_perplexity": unigram_ppl, "speed_ratio_to_default": speed_ratio, "machine": machine(),
              "commit": git_commit(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "evaluations": [], "log": []}
    step = tokens = 0
    train_seconds = 0.0
    window = {"mlm": 0.0, "nsp": 0.0, "masked": 0, "seqs": 0, "tokens": 0, "t": 0.0}

    def evaluate(full: bool) -> None:
        started = time.perf_counter()
        metrics = validation_metrics(model, valid, None if full else SUBSET_BATCHES)
        entry = {"step": step, "tokens": tokens, "train_seconds": train_seconds,
                 "split": "validation" if full else f"validation[:{SUBSET_BATCHES * 64}]", **metrics}
        if not full:
            entry.update(plateau_probes(model, probe_batches, unigram))
        entry["eval_seconds"] = time.perf_counter() - started
        result["evaluations"].append(entry)
        log(f"[{name}@{budget}] step {step} tokens {tokens / 1e6:.2f}M train {train_seconds / 60:.1f} min: "
            f"{entry['split']} ppl {metrics['mlm_perplexity']:.1f} acc {metrics['mlm_accuracy']:.3f} "
            f"nsp {metrics['nsp_accuracy']:.3f}"
            + ("" if full else f" kl_uni {entry['kl_to_unigram']:.2f} top=mode {entry['top1_is_most_frequent']:.2f} "
                               f"prev {entry['max_head_prev_token_attention']:.2f}"))

    evaluate(False)  # step 0
    for seq_len, phase_steps in phases:
        dataset = PretrainingDataset(corpus, tokenizer, seq_len, seed=cfg.seed, pairing=cfg.pairing,
                                     mlm_probability=cfg.mlm_probability, whole_word_mask=cfg.whole_word_mask)
        sampler = ResumableSampler(PretrainingSampler(dataset.lengths, micro * cfg.grad_accum, seed=cfg.seed))
        stream = micro_batches(make_loader(dataset, sampler, micro), DataPosition())
        for _ in range(phase_steps):
            started = time.perf_counter()
            reseed(cfg.seed, 0, step)
            group = [next(stream) for _ in range(cfg.grad_accum)]
            counts = step_counts(group)
            total_masked, total_seqs = max(1, sum(c[0] for c in counts)), sum(c[1] for c in counts)
            for b, count in zip(group, counts, strict=True):
                out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], labels=b["labels"],
                            next_sentence_label=b["next_sentence_label"])
                loss = out.mlm_loss * (count[0] / total_masked)
                if recipe.nsp:
                    loss = loss + out.nsp_loss * (count[1] / total_seqs)
                loss.backward()
                window["mlm"] += float(out.mlm_loss.detach()) * count[0]
                window["nsp"] += float(out.nsp_loss.detach()) * count[1]
                window["masked"] += count[0]
                window["seqs"] += count[1]
                window["tokens"] += count[2]
                tokens += count[2]
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            elapsed = time.perf_counter() - started
            train_seconds += elapsed
            window["t"] += elapsed
            if step % cfg.log_every == 0 or step == steps:
                result["log"].append({"step": step, "tokens": tokens, "train_seconds": train_seconds,
                                      "seq_len": seq_len,
                                      "mlm_loss": window["mlm"] / max(1, window["masked"]),
                                      "nsp_loss": window["nsp"] / window["seqs"], "lr": scheduler.get_last_lr()[0],
                                      "grad_norm": float(grad_norm), "tokens_per_s": window["tokens"] / window["t"]})
                window = dict.fromkeys(window, 0)
            if step % cfg.eval_every == 0 or step == steps:
                evaluate(False)
    evaluate(True)
    result.update({"steps": step, "tokens": tokens, "train_seconds": train_seconds,
                   "tokens_per_s": tokens / train_seconds, "finished": time.strftime("%Y-%m-%d %H:%M:%S")})
    if not write:
        return result
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}@{budget}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    log(f"[{name}@{budget}] wrote {path} ({train_seconds / 60:.1f} min, {tokens / train_seconds:,.0f} tokens/s)")
    return result


def check(data_dir: str | None) -> None:
    "The default recipe's first steps through this loop and through `bertlib.train.train` give the same losses."
    from bertlib.train import train
    tokenizer = tokenizer_for(8192, data_dir)
    corpus = wikitext_corpus("train", tokenizer, data_dir=data_dir)
    cfg = TrainConfig(max_steps=6, batch_size=8, grad_accum=2, log_every=1, eval_every=1000, save_every=1000,
                      device="cpu", seed=0)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("mini"))
    reference = [r["mlm_loss"] for r in train(model, PretrainingDataset(corpus, tokenizer, 128, seed=0), cfg,
                                              show_progress=False)]
    recipe = Recipe("check", train={"batch_size": 8, "grad_accum": 2})
    result = run("check", "full", data_dir, log=lambda *_: None, recipe=recipe, tokens=6 * 8 * MEAN_LEN_128,
                 log_every=1, write=False)
    mine = [r["mlm_loss"] for r in result["log"]]
    print("library:", [f"{x:.6f}" for x in reference])
    print("study:  ", [f"{x:.6f}" for x in mine])
    assert len(mine) == len(reference) == 6 and all(abs(a - b) < 1e-5 for a, b in zip(reference, mine, strict=True))
    print("same losses")


def speed(names: list[str], data_dir: str | None, sequences: int = 1280, rounds: int = 2) -> dict:
    """Seconds per training token of each recipe at the full budget, measured on `sequences` pairs per sequence
    length and recipe, back to back (`rounds` times,
    interleaved, best round kept, so that the other session's load touches every recipe alike). Writes
    `results/speed.json`; the recipes with `tokens_scale` use it to train as long as the default does."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name in names:
            recipe = RECIPES[name]
            model_config, cfg, phases = configs(recipe, BUDGET_TOKENS)
            tokenizer = tokenizer_for(model_config.vocab_size, data_dir)
            corpus = wikitext_corpus("train", tokenizer, data_dir=data_dir)
            torch.manual_seed(0)
            model = BertForPreTraining(model_config)
            optimizer = configure_optimizer(model, cfg.lr, cfg.weight_decay)
            micro = cfg.batch_size // cfg.grad_accum
            steps = sequences // cfg.batch_size
            seconds = tokens = 0.0
            for seq_len, phase_steps in phases:
                dataset = PretrainingDataset(corpus, tokenizer, seq_len, seed=0, mlm_probability=cfg.mlm_probability)
                sampler = ResumableSampler(PretrainingSampler(dataset.lengths, micro * cfg.grad_accum, seed=0))
                stream = micro_batches(make_loader(dataset, sampler, micro), DataPosition())
                phase_seconds = phase_tokens = 0.0
                for i in range(steps + 5):
                    started = time.perf_counter()
                    group = [next(stream) for _ in range(cfg.grad_accum)]
                    counts = step_counts(group)
                    for b in group:
                        out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], labels=b["labels"],
                                    next_sentence_label=b["next_sentence_label"])
                        (out.mlm_loss + out.nsp_loss).backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    if i >= 5:  # the first steps warm up the allocator
                        phase_seconds += time.perf_counter() - started
                        phase_tokens += sum(c[2] for c in counts)
                # the whole run's share of this phase, at this phase's speed
                share = phase_steps / cfg.max_steps
                seconds += share * phase_seconds / steps
                tokens += share * phase_tokens / steps
            per_token = seconds / tokens
            best[name] = min(best.get(name, math.inf), per_token)
            print(f"[speed] {name}: {1 / per_token:,.0f} tokens/s", flush=True)
    result = {"tokens_per_s": {n: 1 / t for n, t in best.items()}, "machine": machine(), "sequences": sequences,
              "rounds": rounds, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS.parent / "speed.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


# ---------------------------------------------------------------------------------------------- report
def load_results() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(RESULTS.glob("*.json"))]


def at_wall_time(result: dict, seconds: float) -> float | None:
    "Subset perplexity at `seconds` of training, interpolated in log-perplexity; None beyond the run's end."
    points = [(e["train_seconds"], math.log(e["mlm_perplexity"])) for e in result["evaluations"]
              if e["split"] != "validation"]
    if seconds > points[-1][0] * 1.001:
        return None
    for (t0, y0), (t1, y1) in zip(points, points[1:], strict=False):
        if t0 <= seconds <= t1:
            return math.exp(y0 + (y1 - y0) * (seconds - t0) / max(t1 - t0, 1e-9))
    return math.exp(points[-1][1])


def gpu_escapes(runs_dir: Path, threshold: float = 300.0) -> list[dict]:
    """For each GPU run folder (config.json + metrics.jsonl), the first validation below `threshold` perplexity:
    its step, the pairs and tokens seen by then, the learning rate then, and the NSP accuracy."""
    rows = []
    for folder in sorted(p for p in runs_dir.iterdir() if (p / "metrics.jsonl").exists()):
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
                   if line.strip()]
        train_log = [r for r in records if "lr" in r]
        valid = [r for r in records if r.get("split") == "validation"]
        escape = next((r for r in valid if r["mlm_perplexity"] < threshold), None)
        before = [r for r in valid if escape is None or r["step"] < escape["step"]]
        lr_then = next((r["lr"] for r in train_log if escape and r["step"] >= escape["step"]), None)
        t = config["training"]
        rows.append({"run": folder.name, "model": config["model"]["hidden_size"], "lr": t["lr"], "epochs": t["epochs"],
                     "batch": t["batch_size"], "valid": valid, "escape_step": escape and escape["step"],
                     "plateau_ppl": min(r["mlm_perplexity"] for r in before) if before else None,
                     "lr_then": lr_then, "nsp_then": escape and escape["nsp_accuracy"],
                     "final_step": valid[-1]["step"], "final_ppl": valid[-1]["mlm_perplexity"]})
    return rows


def budget_group(results: list[dict], budget: str) -> list[dict]:
    "The runs of one budget; the 'wall' group starts with the default's full run (its own wall time)."
    group = [r for r in results if r["budget"] == budget]
    if budget == "wall" and group:
        group = [r for r in results if r["budget"] == "full" and r["recipe"] == "default"] + group
    return group


def report(gpu_runs: Path | None = None) -> None:
    "Write README.md (the table) and the figures from the result files."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = load_results()
    if not results:
        sys.exit(f"no results in {RESULTS}")
    order = list(RECIPES)
    results.sort(key=lambda r: (list(BUDGETS).index(r["budget"]), order.index(r["recipe"])
                                if r["recipe"] in order else 99))
    lines = ["# Pre-training recipe study (`mini` on the 2-core CPU)", "",
             "Generated by `python experiments/recipe_study.py --report` from `results/*.json`; do not edit.", "",
             f"Budget `full` = the training tokens of the README's main command ({DEFAULT_STEPS:,} steps x "
             f"{DEFAULT_BATCH} pairs x {MEAN_LEN_128:.0f} tokens = {BUDGET_TOKENS / 1e6:.2f}M); `third` = a third of "
             "it. Validation: the whole split (2,358 pairs, 15% masked, seq 128, the same masks for every run) at "
             "the end; the curves use a fixed subset (640 pairs). One thread (`torch.set_num_threads(1)`); the "
             "machine's 2 cores were shared with another session's tests, so tokens/s (training only, evaluation "
             "excluded) carries that noise.", ""]
    for budget in BUDGETS:
        group = budget_group(results, budget)
        if not group:
            continue
        common = min(r["train_seconds"] for r in group)  # every run of the group has a curve up to here
        lines += [f"## Budget `{budget}`", "",
                  f"Equal tokens: the `val ppl` column (whole split, at the end). Equal wall time: `ppl @ "
                  f"{common / 60:.1f} min`, each run's subset curve at the training time of the group's fastest "
                  f"run, interpolated in log-perplexity.", "",
                  "| recipe | what changes | steps | tokens | tokens/s | train min | val ppl | unigram ppl | "
                  f"MLM acc | NSP acc | ppl @ {common / 60:.1f} min | KL to unigram | top-1 in 10 most frequent |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in group:
            final = r["evaluations"][-1]
            probe = [e for e in r["evaluations"] if "kl_to_unigram" in e][-1]
            at_common = at_wall_time(r, common)
            lines.append(
                f"| `{r['recipe']}`{' (full run)' if r['budget'] != budget else ''} | {r['note']} |"
                f" {r['steps']:,} | {r['tokens'] / 1e6:.2f}M | "
                f"{r['tokens_per_s']:,.0f} | {r['train_seconds'] / 60:.1f} | **{final['mlm_perplexity']:.1f}** | "
                f"{r['unigram_perplexity']:.0f} | {final['mlm_accuracy']:.3f} | {final['nsp_accuracy']:.3f} | "
                f"{at_common:.1f} | {probe['kl_to_unigram']:.2f} | {probe['top1_in_10_most_frequent']:.2f} |")
        lines.append("")
    speed_file = HERE / "speed.json"
    if speed_file.exists():
        measured = json.loads(speed_file.read_text(encoding="utf-8"))
        base = measured["tokens_per_s"].get("default")
        lines += ["## Speed, measured back to back", "",
                  f"`speed` ({measured['sequences']:,} pairs per sequence length and recipe, {measured['rounds']} "
                  "interleaved rounds, best kept; measured " + measured["measured"] + "): training tokens/s at one "
                  "thread, and the share of the default's tokens each recipe trains in the default's wall time.", "",
                  "| recipe | tokens/s | tokens in the default's time |", "|---|---:|---:|"]
        for name, value in measured["tokens_per_s"].items():
            share = f"{value / base:.2f} x" if base else ""
            lines.append(f"| `{name}` | {value:,.0f} | {share} |")
        lines.append("")
    gpu = gpu_escapes(gpu_runs) if gpu_runs and gpu_runs.is_dir() else []
    if gpu:
        lines += ["## The plateau on the GPU runs (evidence of what gets the model out)", "",
                  "From `docs/results/gpu/runs` (H100, batch 256, seq 128, warm-up 6%, linear decay; `small` = "
                  "hidden 512). "
                  "'escape' = the first validation below perplexity 300.", "",
                  "| run | hidden | lr | epochs | lowest ppl before | escape step | pairs seen | "
                  "tokens seen | lr then | NSP then | last step | last ppl |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for g in gpu:
            pairs = g["escape_step"] * g["batch"] if g["escape_step"] else None
            cells = [g["run"], g["model"], f"{g['lr']:g}", f"{g['epochs']:g}", f"{g['plateau_ppl']:.0f}",
                     g["escape_step"] or "-", f"{pairs:,}" if pairs else "-",
                     f"{pairs * MEAN_LEN_128 / 1e6:.0f}M" if pairs else "-",
                     f"{g['lr_then']:.2e}" if g["lr_then"] else "-", f"{g['nsp_then']:.2f}" if g["nsp_then"] else "-",
                     f"{g['final_step']:,}", f"{g['final_ppl']:.1f}"]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
        lines.append("")
    lines += ["![validation perplexity](curves.png)", "", "![plateau probes](plateau.png)", ""]
    (HERE / "README.md").write_text("\n".join(lines), encoding="utf-8")

    budgets = [b for b in BUDGETS if any(r["budget"] == b for r in results)]
    titles = {"third": "a third of the default's tokens", "full": "the default's tokens",
              "wall": "the default's wall time (default: its full run)"}
    fig, axes = plt.subplots(len(budgets), 2, figsize=(13, 4.6 * len(budgets)), squeeze=False)
    for row, budget in zip(axes, budgets, strict=True):
        for i, r in enumerate(budget_group(results, budget)):
            ev = [e for e in r["evaluations"] if e["split"] != "validation" and e["step"] > 0]
            style = dict(color=plt.cm.tab20(i % 20), ls="-" if i < 20 else "--", marker="o", ms=3,
                         label=r["recipe"], lw=2.5 if r["recipe"] == "default" else 1.2)
            row[0].plot([e["tokens"] / 1e6 for e in ev], [e["mlm_perplexity"] for e in ev], **style)
            row[1].plot([e["train_seconds"] / 60 for e in ev], [e["mlm_perplexity"] for e in ev], **style)
        for ax, xlabel in zip(row, ("training tokens (millions)", "training wall time (min, 1 thread)"), strict=True):
            ax.set(xlabel=xlabel, ylabel="validation MLM perplexity (subset)", yscale="log", ylim=(200, 1000),
                   title=f"budget {budget}: {titles[budget]}")
            ax.axhline(250, color="gray", ls=":", lw=1)
            ax.text(ax.get_xlim()[0], 252, " target 250", color="gray", fontsize=8, va="bottom")
            ax.grid(alpha=0.3, which="both")
        row[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=90)

    fig, grid = plt.subplots(2, 3, figsize=(18, 9))
    axes = grid.ravel()
    panels = [("kl_to_unigram", "nats per masked token", "KL(model || unigram distribution)"),
              ("top1_in_10_most_frequent", "share", "top-1 predictions among the 10 most frequent tokens"),
              ("attention_entropy_per_layer", "nats (uniform over 122 tokens: 4.8)",
               "attention entropy: layer 1 (solid), layer 4 (dashed)"),
              ("max_head_prev_token_attention", "attention weight (uniform: 0.008)",
               "largest mean attention of one head to the previous token"),
              ("mean_attention_to_cls_sep_per_layer", "share of attention (uniform: about 0.025)",
               "attention to [CLS]/[SEP], mean over heads, layer 4 (runs with this probe)")]
    for i, r in enumerate(budget_group(results, budgets[-1])):
        ev = [e for e in r["evaluations"] if "kl_to_unigram" in e]
        x = [e["tokens"] / 1e6 for e in ev]
        style = dict(color=plt.cm.tab20(i % 20), marker="o", ms=3, label=r["recipe"])
        for ax, (key, _, _) in zip(axes, panels, strict=False):
            if not all(key in e for e in ev):
                continue
            values = [e[key] for e in ev]
            if key == "attention_entropy_per_layer":
                ax.plot(x, [v[0] for v in values], **style)
                ax.plot(x, [v[-1] for v in values], **{**style, "ls": "--", "label": None})
            elif key == "mean_attention_to_cls_sep_per_layer":
                ax.plot(x, [v[-1] for v in values], **style)
            else:
                ax.plot(x, values, **style)
    for ax, (_, ylabel, title) in zip(axes, panels, strict=False):
        ax.set(xlabel="training tokens (millions)", ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    for i, g in enumerate(gpu):
        axes[5].plot([r["step"] * g["batch"] * MEAN_LEN_128 / 1e6 for r in g["valid"]],
                     [r["mlm_perplexity"] for r in g["valid"]], color=f"C{i}", label=g["run"])
    cpu_full = budget_group(results, budgets[-1])
    for i, r in enumerate(cpu_full):
        ev = [e for e in r["evaluations"] if e["split"] != "validation"]
        axes[5].plot([e["tokens"] / 1e6 for e in ev], [e["mlm_perplexity"] for e in ev],
                     color=plt.cm.tab20(i % 20), ls=":", lw=1)
    axes[5].axvline(BUDGET_TOKENS / 1e6, color="k", ls="--", lw=1, label="CPU budget (tokens)")
    axes[5].set(xscale="log", yscale="log", xlabel="training tokens (millions)", ylabel="validation perplexity",
                title="GPU runs (batch 256, solid) vs CPU runs (dotted)")
    axes[5].grid(alpha=0.3, which="both")
    axes[5].legend(fontsize=7)
    fig.suptitle(f"The plateau: CPU runs of budget '{budgets[-1]}' (fixed validation subset), GPU runs beside them")
    fig.tight_layout()
    fig.savefig(HERE / "plateau.png", dpi=90)
    print(f"wrote {HERE / 'README.md'}, curves.png, plateau.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["run", "check", "speed"],
                        help="run recipes, check the loop, or measure the recipes' speed")
    parser.add_argument("recipes", nargs="*", help=f"recipe names: {', '.join(RECIPES)}")
    parser.add_argument("--all", action="store_true", help="every recipe (finished runs are skipped)")
    parser.add_argument("--budget", choices=list(BUDGETS), default="third")
    parser.add_argument("--force", action="store_true", help="re-run recipes that already have a result")
    parser.add_argument("--report", action="store_true", help="write README.md and the figures from results/")
    parser.add_argument("--gpu-runs", type=Path, default=HERE.parents[1] / "docs" / "results" / "gpu" / "runs",
                        help="GPU run folders to show beside the study (skipped if absent)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data_dir = os.environ.get("BERTLIB_DATA_DIR")
    if args.command == "check":
        check(data_dir)
    elif args.command == "speed":
        speed(args.recipes or list(RECIPES), data_dir)
    elif args.command == "run":
        names = list(RECIPES) if args.all else args.recipes
        unknown = [n for n in names if n not in RECIPES]
        if unknown:
            parser.error(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
        for name in names:
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
