"""The pre-training recipe study: which settings get `mini` off the unigram plateau within the CPU budget of
the README's main command as it was before this study (`python -m bertlib pretrain`: 1,000 steps of 32
sequences of up to 128 tokens, about 3.9M training tokens).

Hand-written; not part of the library. Every run is one recipe (a name in `RECIPES`) at one budget, measured in
training tokens as a share of that command's (`BUDGETS`), trained by the library's loop (`bertlib.train.loop.fit`,
BERT's short-first schedule as its `Phase`s) with the plateau's probes as a hook. Each run writes
`recipe_study/results/<recipe>@<budget>.json`; `python experiments/recipe_report.py` turns those files into the
study's README, its figures and the block of the site's page `docs/cpu-recipes.md`.

    export OMP_NUM_THREADS=1 BERTLIB_DATA_DIR=...
    python experiments/recipe_study.py run default b8-lr1e-3-m30 --budget full
    python experiments/recipe_study.py run --all --budget third   # every recipe, skipping finished runs
    python experiments/recipe_study.py check                      # the library still repeats every result's start
    python experiments/recipe_study.py speed default combo-b8      # tokens/s, measured back to back

The switches the library lacks are small and local: NSP off (the library's MLM-only objective on sentence
pairs), sin/cos initialisation of the position embeddings, and cheap probes of the plateau (agreement with the
unigram distribution; attention entropy, attention to the previous token and to [CLS]/[SEP], from
`bertlib.viz.attention.head_entropy` and `head_scores`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from study import ROOT, output_options, parse, provenance, read_json, write_json
from tokenizers import Tokenizer

from bertlib.data.batching import Phase
from bertlib.data.corpus import wikitext_corpus
from bertlib.data.tokenizer import CLS, SEP, SPECIAL_TOKENS, load_tokenizer, save_tokenizer, train_wikitext_tokenizer
from bertlib.evaluation.scores import evaluation_loader, unigram_baseline, validation_metrics
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig
from bertlib.recipes.objectives import MaskedLM, MaskedLMAndNSP
from bertlib.recipes.pretrain import pretraining_data
from bertlib.train.loop import Loop, fit
from bertlib.train.settings import PretrainConfig
from bertlib.utils.devices import eval_mode
from bertlib.viz.attention import AttentionMaps, head_entropy, head_scores

HERE = ROOT / "experiments" / "recipe_study"
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
CHECK_STEPS = 50  # `check` repeats this many steps of each result
SPEED_PAIRS = 1280  # pairs per phase and recipe timed by `speed`, a multiple of 5 batches of every recipe
SMOKE_TOKENS = 4 * BASELINE["batch_size"] * MEAN_LEN[128]  # --smoke: four of the default's steps, one batch scored


@dataclass
class Recipe:
    "One configuration: overrides of the `mini` preset and of the baseline `PretrainConfig`, plus local switches."

    note: str
    model: dict = field(default_factory=dict)  # BertConfig overrides
    train: dict = field(default_factory=dict)  # PretrainConfig overrides
    nsp: bool = True  # False: the NSP loss is not trained (only to measure what NSP costs)
    pos_init: str = "normal"  # "sinusoidal": position embeddings start as scaled sin/cos waves


NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
# BERT's short-first schedule (90% of the steps at 128 tokens, then 512), here at 64, then 128
SHORT_FIRST = {"max_seq_len": 64, "long_seq_len": 128, "long_share": 0.1}


def combo(note: str, train: dict | None = None, model: dict | None = None) -> Recipe:
    "combo-b8's settings (batch 8, dropout 0, mask 30%, seq 64 first, sin/cos positions); `train`, `model` over them."
    return Recipe(
        note,
        model={**NO_DROPOUT, **(model or {})},
        train={"batch_size": 8, "mlm_probability": 0.30, **SHORT_FIRST, **(train or {})},
        pos_init="sinusoidal",
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
    "seq-64-first": Recipe("90% of steps at seq 64, then 128 (BERT's short-first schedule)", train=SHORT_FIRST),
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
def tokenizer_for(vocab_size: int, folder: Path) -> Tokenizer:
    "The WikiText-2 WordPiece tokenizer of `vocab_size` (trained once into `folder`, as `pretrain` trains it)."
    folder = folder / str(vocab_size)
    if (folder / "tokenizer.json").exists():
        return load_tokenizer(folder)
    tokenizer = train_wikitext_tokenizer(vocab_size)
    save_tokenizer(tokenizer, folder)
    return tokenizer


def configs(recipe: Recipe, tokens: float) -> tuple[BertConfig, PretrainConfig]:
    "The model and training configs of `recipe` for about `tokens` training tokens."
    model_config = BertConfig.from_preset("mini", **recipe.model)
    cfg = PretrainConfig(max_steps=1, device="cpu", seed=0, **{**BASELINE, **recipe.train})
    long = cfg.long_share if cfg.long_seq_len else 0.0
    per_step = cfg.batch_size * ((1 - long) * MEAN_LEN[cfg.max_seq_len] + long * MEAN_LEN.get(cfg.long_seq_len, 0.0))
    steps = max(1, round(tokens / per_step))
    return model_config, replace(
        cfg,
        max_steps=steps,
        save_every=steps,
        eval_every=max(1, steps // EVAL_POINTS),
        eval_batches=SUBSET_BATCHES,
        log_every=LOG_EVERY,
    )


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


def objective(recipe: Recipe) -> MaskedLMAndNSP | MaskedLM:
    "BERT's MLM + NSP, or the MLM loss alone on the same sentence pairs (`nsp=False`)."
    return MaskedLMAndNSP() if recipe.nsp else MaskedLM()


def phases(data) -> list[Phase]:
    "The training data of `bertlib.recipes.pretrain.pretraining_data` as phases (one, unless short-first)."
    return data if isinstance(data, list) else [Phase(data)]


# ---------------------------------------------------------------------------------------------- probes
def unigram_log_probs(train_ids: np.ndarray, vocab_size: int) -> torch.Tensor:
    """Log-frequencies of the training tokens, add-one smoothed: the distribution of the guesser whose scores
    `bertlib.evaluation.scores.unigram_baseline` returns (that function returns the scores only)."""
    counts = torch.from_numpy(np.bincount(train_ids, minlength=vocab_size)).double() + 1
    return (counts / counts.sum()).log().float()


def word_ids(tokens: list[str]) -> list[int | None]:
    "The word each WordPiece token belongs to (a `##` piece continues the one before); None for special tokens."
    ids, word = [], -1
    for token in tokens:
        if token in SPECIAL_TOKENS:
            ids.append(None)
            continue
        if not token.startswith("##") or word < 0:
            word += 1
        ids.append(word)
    return ids


def plateau_probes(model: BertForPreTraining, batches: list[dict], tokenizer: Tokenizer, unigram: torch.Tensor) -> dict:
    """How much the MLM predictions look like the unigram distribution, and what attention does: KL(model ||
    unigram) per masked token, the share of masked tokens whose top prediction is the corpus's most frequent
    token or one of its 10 most frequent, the attention entropy per layer in bits
    (`bertlib.viz.attention.head_entropy`, a mean over heads), the largest mean attention any head puts on the
    previous token and the mean attention to [CLS] and [SEP] per layer (`bertlib.viz.attention.head_scores`)."""
    kl = mode = top10 = n = 0.0
    frequent = unigram.topk(10).indices
    maps = []
    with eval_mode(model), torch.no_grad():
        for b in batches:
            out = model(
                b["input_ids"],
                token_type_ids=b["token_type_ids"],
                attention_mask=b["attention_mask"],
                labels=b["labels"],
                output_attentions=True,
            )
            logp = out.prediction_logits.float().log_softmax(-1)
            kl += float((logp.exp() * (logp - unigram)).sum())
            top = logp.argmax(-1)
            mode, top10 = mode + float((top == frequent[0]).sum()), top10 + float(torch.isin(top, frequent).sum())
            n += len(top)
            attentions = torch.stack(out.attentions, 1)  # [batch, layers, heads, seq, seq]
            for row, length in enumerate(b["attention_mask"].sum(-1).tolist()):  # padding comes last
                tokens = [tokenizer.id_to_token(i) for i in b["input_ids"][row, :length].tolist()]
                maps.append(
                    AttentionMaps(
                        attentions[row, :, :, :length, :length].float(),
                        tokens,
                        b["token_type_ids"][row, :length].tolist(),
                        word_ids(tokens),
                    )
                )
    scores = head_scores(maps)
    return {
        "kl_to_unigram": kl / n,
        "top1_is_most_frequent": mode / n,
        "top1_in_10_most_frequent": top10 / n,
        "attention_entropy_bits_per_layer": head_entropy(maps).mean(-1).tolist(),
        "max_head_prev_token_attention": float(scores["previous token"].max()),
        "mean_attention_to_cls_sep_per_layer": (scores[CLS] + scores[SEP]).mean(-1).tolist(),
    }


# ---------------------------------------------------------------------------------------------- runs
def run(name: str, budget: str, out: Path, smoke: bool = False) -> dict:
    "Train recipe `name` for `budget`'s tokens, score it as it goes, and write its result file into `out/results`."
    recipe = RECIPES[name]
    model_config, cfg = configs(recipe, SMOKE_TOKENS if smoke else BUDGET_TOKENS * BUDGETS[budget])
    subset, probed, final = (1, 1, 1) if smoke else (SUBSET_BATCHES, PROBE_BATCHES, None)
    cfg = replace(cfg, eval_batches=subset)
    tokenizer = tokenizer_for(model_config.vocab_size, out / "tokenizers")
    data, _ = pretraining_data(cfg, tokenizer)  # validation is the same for every run: below
    corpus = wikitext_corpus("train", tokenizer)
    valid = evaluation_loader("validation", tokenizer, max_seq_len=128)  # every run: 128 tokens, 15% masked
    probe = partial(
        plateau_probes,
        batches=list(islice(valid, probed)),
        tokenizer=tokenizer,
        unigram=unigram_log_probs(corpus.ids, model_config.vocab_size),
    )
    unigram = unigram_baseline(corpus.ids, islice(valid, final), model_config.vocab_size)
    model = build_model(model_config, recipe, cfg.seed)
    result = {
        "recipe": name,
        "budget": budget,
        "note": recipe.note,
        "settings": asdict(recipe),
        "model_config": model_config.to_dict(),
        "train_config": cfg.to_dict(),
        "validation_pairs": len(valid.dataset),
        "unigram_perplexity": unigram["mlm_perplexity"],
        **provenance(smoke),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    split = f"validation[:{subset * valid.batch_size}]"

    def measure(model: BertForPreTraining) -> dict:
        # the load average says how much of a core the run had: the machine is shared
        return {**probe(model), "load_average": os.getloadavg()[0]}

    measured = {0: measure(model)}

    def measure_at_validation(loop: Loop) -> None:
        if loop.step % cfg.eval_every == 0 or loop.step == loop.steps:
            measured[loop.step] = measure(loop.model)

    def show(record: dict) -> None:
        if record.get("split") == "validation":
            print(
                f"[{name}@{budget}] step {record['step']} tokens {record['tokens'] / 1e6:.2f}M train "
                f"{record['train_seconds'] / 60:.1f} min: {split} ppl {record['mlm_perplexity']:.1f} acc "
                f"{record['mlm_accuracy']:.3f} nsp {record['nsp_accuracy']:.3f}",
                flush=True,
            )

    start = {"step": 0, "tokens": 0, "train_seconds": 0.0, **validation_metrics(model, valid, subset)}
    records = fit(
        model,
        phases(data),
        objective(recipe),
        cfg,
        evaluate=partial(validation_metrics, loader=valid, max_batches=subset),
        on_log=show,
        hooks=[measure_at_validation],
        show_progress=False,
    )
    log = [r for r in records if "loss" in r]
    end = {k: log[-1][k] for k in ("step", "tokens", "train_seconds")}
    evaluations = [
        {**r, "split": split, **measured[r["step"]]}
        for r in [start, *(r for r in records if r.get("split") == "validation")]
    ]
    evaluations.append({**end, "split": "validation", **validation_metrics(model, valid, final)})
    result.update(
        evaluations=evaluations,
        log=log,
        steps=end["step"],
        tokens=end["tokens"],
        train_seconds=end["train_seconds"],
        tokens_per_s=end["tokens"] / end["train_seconds"],
        finished=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    path = write_json(out / "results" / f"{name}@{budget}.json", result)
    print(
        f"[{name}@{budget}] whole validation split: ppl {evaluations[-1]['mlm_perplexity']:.1f}, NSP "
        f"{evaluations[-1]['nsp_accuracy']:.3f}; wrote {path} ({end['train_seconds'] / 60:.1f} min, "
        f"{result['tokens_per_s']:,.0f} tokens/s)",
        flush=True,
    )
    return result


def first_steps(name: str, steps: int, total_steps: int, out: Path) -> list[dict]:
    """The training log of recipe `name`'s first `steps` steps by the library's loop, with the learning-rate schedule
    of a run of `total_steps`."""
    recipe = RECIPES[name]
    model_config, cfg = configs(recipe, BUDGET_TOKENS)
    cfg = replace(cfg, max_steps=total_steps, save_every=total_steps)
    tokenizer = tokenizer_for(model_config.vocab_size, out / "tokenizers")
    data, _ = pretraining_data(cfg, tokenizer)
    records = fit(
        build_model(model_config, recipe, cfg.seed),
        phases(data),
        objective(recipe),
        cfg,
        hooks=[lambda loop: loop.step >= steps],
        show_progress=False,
    )
    return [r for r in records if "loss" in r]


def repeats(logged: list[dict], mine: list[dict]) -> bool:
    "Whether two training logs agree: the same steps, tokens and learning rates, losses and gradient norms within 1e-6."
    parts = [k for k in ("mlm_loss", "nsp_loss", "grad_norm") if k in logged[0]]
    return len(logged) == len(mine) and all(
        all(a[k] == b[k] for k in ("step", "tokens", "lr")) and all(abs(a[k] - b[k]) <= 1e-6 for k in parts)
        for a, b in zip(logged, mine, strict=True)
    )


def check(names: list[str], out: Path) -> None:
    """Today's library repeats the first `CHECK_STEPS` steps of each result in `out/results` (or of `names`, given
    as `recipe@budget`) with the result's recipe; a result that it does not repeat was made by another loop or
    another recipe, and should be run again."""
    paths = [out / "results" / f"{n}.json" for n in names] or sorted((out / "results").glob("*.json"))
    failed = []
    for path in paths:
        result = read_json(path)
        logged = [r for r in result["log"] if r["step"] <= CHECK_STEPS]
        mine = first_steps(result["recipe"], logged[-1]["step"], result["steps"], out)
        for a, b in zip(logged, mine, strict=False):
            print(
                f"{path.stem} step {a['step']}: result MLM loss {a['mlm_loss']:.9f}, gradient norm "
                f"{a['grad_norm']:.6f}; today {b['mlm_loss']:.9f}, {b['grad_norm']:.6f}",
                flush=True,
            )
        if not repeats(logged, mine):
            failed.append(path.stem)
    if failed:
        sys.exit(f"today's library does not repeat {', '.join(failed)}")
    print(f"today's library repeats all {len(paths)} results")


def speed(names: list[str], out: Path, smoke: bool = False, rounds: int = 2) -> dict:
    """Training tokens/s of each recipe at the full budget, measured back to back on `SPEED_PAIRS` pairs (`--smoke`:
    160) per phase and recipe (`rounds` times, interleaved, best round kept, so that other load on the machine
    touches every recipe alike); the recipes' phases are weighted by their share of the steps. Writes
    `out/speed.json`."""
    best: dict[str, float] = {}
    pairs = 160 if smoke else SPEED_PAIRS
    for _ in range(rounds):
        for name in names:
            recipe = RECIPES[name]
            model_config, cfg = configs(recipe, BUDGET_TOKENS)
            steps = pairs // cfg.batch_size
            tokenizer = tokenizer_for(model_config.vocab_size, out / "tokenizers")
            seconds = tokens = 0.0  # per step of the whole run: each phase's, weighted by its share of the steps
            for phase in phases(pretraining_data(cfg, tokenizer)[0]):
                log = fit(
                    build_model(model_config, recipe, cfg.seed),
                    phase.dataset,
                    objective(recipe),
                    replace(cfg, log_every=5),
                    hooks=[lambda loop, n=steps + 5: loop.step >= n],
                    show_progress=False,
                )
                first, last = log[0], log[-1]  # the first 5 steps warm the allocator up
                seconds += phase.share * (last["train_seconds"] - first["train_seconds"]) / steps
                tokens += phase.share * (last["tokens"] - first["tokens"]) / steps
            best[name] = max(best.get(name, 0.0), tokens / seconds)
            print(f"[speed] {name}: {tokens / seconds:,.0f} tokens/s", flush=True)
    result = {
        "tokens_per_s": best,
        **provenance(smoke),
        "pairs": pairs,
        "rounds": rounds,
        "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_json(out / "speed.json", result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "command",
        choices=["run", "check", "speed"],
        help="run recipes, check that the library repeats the results, or measure their speed",
    )
    parser.add_argument("names", nargs="*", help=f"recipes ({', '.join(RECIPES)}); for check, recipe@budget")
    parser.add_argument("--all", action="store_true", help="every recipe (finished runs are skipped)")
    parser.add_argument("--budget", choices=list(BUDGETS), default="third")
    parser.add_argument("--force", action="store_true", help="re-run recipes that already have a result")
    output_options(
        parser, HERE, "recipe-study", smoke="a few steps and one validation batch per score, to try the study out"
    )
    args = parse(parser)
    recipes = list(RECIPES) if args.all else args.names
    unknown = [n for n in (recipes if args.command != "check" else []) if n not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
    torch.set_num_threads(1)
    if args.command == "check":
        check(args.names, args.out)
    elif args.command == "speed":
        speed(recipes or list(RECIPES), args.out, args.smoke)
    else:
        for name in recipes:
            if (args.out / "results" / f"{name}@{args.budget}.json").exists() and not args.force:
                print(f"[{name}@{args.budget}] done already; --force to re-run", flush=True)
                continue
            run(name, args.budget, args.out, args.smoke)


if __name__ == "__main__":
    main()
