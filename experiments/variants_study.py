"""What came after BERT, measured at equal compute: each variant of the `mini` model pre-trained on WikiText-2 with
the same step budget (same batch, same sequence length, same schedule), then scored on the same statically masked
validation split, at the training length and at twice it, and fine-tuned on SST-2.

Each variant is one switch (or one named bundle of switches) of `BertConfig` / `PretrainConfig` away from the
library's default recipe, so the table reads as "what this change is worth here". Each run goes to
`experiments/variants_study/runs/<name>` (ignored by git); its result to `variants_study/results/<name>.json`.
`--report` writes `variants_study/README.md`, the loss-curve figure and the `variants` block of the site's page
`docs/variants.md`; no number in them is typed by hand, and a trial's results (`--smoke`) or a study that lacks
variants never reach the page.

    OMP_NUM_THREADS=1 BERTLIB_DATA_DIR=... python experiments/variants_study.py run bert rope
    OMP_NUM_THREADS=1 BERTLIB_DATA_DIR=... python experiments/variants_study.py rte bert roberta electra
    python experiments/variants_study.py --report
"""

import argparse
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from study import (
    ROOT,
    MissingResults,
    check_publishable,
    output_options,
    parse,
    provenance,
    publish_block,
    read_json,
    refuse_missing,
    result_files,
    unpublished,
    write_json,
)

from bertlib.evaluation.electra import rtd_metrics
from bertlib.evaluation.scores import evaluation_loader, validation_metrics
from bertlib.model.config import BertConfig
from bertlib.recipes.finetune import SELECTION_METRIC, finetune
from bertlib.recipes.pretrain import pretrain
from bertlib.tasks.load import load_task
from bertlib.train.factory import load_model
from bertlib.train.settings import FinetuneConfig, PretrainConfig

HERE = ROOT / "experiments" / "variants_study"
# The shared budget: 1,500 steps of 16 sequences of 64 tokens (1.5M token slots; the README command's 4,000
# steps of 8 x 128 hold 4.1M), about 12 minutes per variant on one busy CPU thread. Training at 64 tokens leaves
# 128 free for the length-generalisation test.
BUDGET = dict(
    max_steps=1500,
    batch_size=16,
    max_seq_len=64,
    lr=1e-3,
    log_every=50,
    eval_every=250,
    eval_batches=20,
    save_every=500,
    seed=0,
)
# SST-2 after pre-training: the fine-tuning study's `sst2-1k` plan (1,000 sentences, 3 epochs), one seed; RTE (all
# 2,490 pairs, 3 epochs) for the runs that ELECTRA is compared with; both at the training length
SST2 = dict(task="sst2", epochs=3.0, batch_size=32, lr=1e-4, train_examples=1000, max_seq_len=64, seed=0)
RTE = dict(task="rte", epochs=3.0, batch_size=32, lr=1e-4, max_seq_len=64, seed=0)
# --smoke: 4 steps, one validation batch per score, fine-tuning on 64 examples for one epoch
SMOKE = {
    "pretrain": dict(max_steps=4, log_every=2, eval_every=4, eval_batches=1, save_every=4),
    "batches": 1,
    "finetune": dict(epochs=1.0, train_examples=64, eval_examples=64),
}
# name: (what changes, BertConfig switches, PretrainConfig switches); `bert` is the library's default recipe
VARIANTS = {
    "bert": ("BERT as the course builds it: learned absolute positions, Post-LN, MLM + NSP, 30% masking", {}, {}),
    "rope": ("rotary position embeddings instead of the position table", {"position_embedding_type": "rope"}, {}),
    "pre-ln": ("Pre-LN with a final LayerNorm", {"norm_style": "pre"}, {}),
    "roberta": (
        "RoBERTa's data: packed full-length sequences, MLM only, dynamic masks (30%)",
        {},
        {"objective": "mlm"},
    ),
    "roberta-15": ("the same at BERT's 15% masking rate", {}, {"objective": "mlm", "mlm_probability": 0.15}),
    "albert": (
        "ALBERT: 128-wide factorised embeddings, one layer shared by all four, SOP instead of NSP",
        {"embedding_size": 128, "share_layers": True},
        {"pairing": "sop"},
    ),
    "modern": (
        "the published small RoPE BERT's recipe: RoPE + Pre-LN + packed MLM only at 30%",
        {"position_embedding_type": "rope", "norm_style": "pre"},
        {"objective": "mlm"},
    ),
    "electra": (
        "ELECTRA: a quarter-width generator fills the masks of the packed data (30%), the discriminator "
        "learns which tokens were replaced (weight 50)",
        {},
        {"objective": "electra"},
    ),
}


def run(name: str, out: Path, smoke: bool = False) -> dict:
    """Pre-train, score at 1x and 2x the length, fine-tune on SST-2, and write the result file into `out/results`
    (skipped if it exists)."""
    path = out / "results" / f"{name}.json"
    if path.exists():
        return read_json(path)
    _, model_switches, train_switches = VARIANTS[name]
    model_config = replace(BertConfig.from_preset("mini"), **model_switches)
    cfg = PretrainConfig(**{**BUDGET, **(SMOKE["pretrain"] if smoke else {})}, **train_switches)
    run_dir = out / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)  # a run that did not finish starts again
    start = time.perf_counter()
    records = pretrain(run_dir, model_config, cfg, show_progress=sys.stderr.isatty())
    minutes = (time.perf_counter() - start) / 60
    model, tokenizer = load_model(run_dir)
    scores = {}
    # every variant on the same pairs and masks; ELECTRA's MLM scores are its small generator's, beside the
    # discriminator's replaced-token detection
    score = rtd_metrics if cfg.objective == "electra" else validation_metrics
    for length in (cfg.max_seq_len, 2 * cfg.max_seq_len):
        loader = evaluation_loader("validation", tokenizer, max_seq_len=length)
        scores[str(length)] = score(model, loader, max_batches=SMOKE["batches"] if smoke else None)
        print(f"{name} at {length} tokens: perplexity {scores[str(length)]['mlm_perplexity']:.1f}", flush=True)
    sst2 = {**SST2, **(SMOKE["finetune"] if smoke else {})}
    ft_dir = out / "runs" / f"{name}-sst2"
    shutil.rmtree(ft_dir, ignore_errors=True)
    ft_start = time.perf_counter()
    ft = finetune(ft_dir, FinetuneConfig(source=str(run_dir), log_every=50, **sst2), show_progress=sys.stderr.isatty())
    metric = SELECTION_METRIC["sst2"]
    best = max((r for r in ft if r.get("split") == "validation"), key=lambda r: r[metric])
    speeds = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    result = {
        "name": name,
        "change": VARIANTS[name][0],
        "model_config": asdict(model_config),
        "settings": asdict(cfg),
        "parameters": sum(p.numel() for p in model.parameters()),
        "encoder_parameters": sum(p.numel() for p in model.bert.parameters()),  # what fine-tuning keeps
        "minutes": minutes,
        "tokens_per_s": sorted(speeds)[len(speeds) // 2],
        "curve": [r for r in records if r.get("split") == "validation" or "mlm_loss" in r],
        "scores": scores,
        "sst2": {"settings": sst2, "best": best, "minutes": (time.perf_counter() - ft_start) / 60},
        **provenance(smoke),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_json(path, result)
    print(
        f"{name}: validation perplexity {scores['64']['mlm_perplexity']:.1f}, SST-2 {100 * best[metric]:.1f}% "
        f"({minutes:.1f} min)",
        flush=True,
    )
    return result


def rte(name: str, out: Path, smoke: bool = False) -> dict:
    "Fine-tune a finished variant on RTE and add the best validation accuracy to its result file."
    path = out / "results" / f"{name}.json"
    result = read_json(path)
    if "rte" not in result:
        ft_dir = out / "runs" / f"{name}-rte"
        shutil.rmtree(ft_dir, ignore_errors=True)
        settings = {**RTE, **(SMOKE["finetune"] if smoke else {})}
        start = time.perf_counter()
        records = finetune(
            ft_dir,
            FinetuneConfig(source=str(out / "runs" / name), log_every=50, **settings),
            show_progress=sys.stderr.isatty(),
        )
        metric = SELECTION_METRIC["rte"]
        best = max((r for r in records if r.get("split") == "validation"), key=lambda r: r[metric])
        result["rte"] = {"settings": settings, "best": best, "minutes": (time.perf_counter() - start) / 60}
        write_json(path, result)
        print(f"{name}: RTE {100 * best[metric]:.1f}%", flush=True)
    return result


def _smooth(values: list[float], window: int = 5) -> list[float]:
    "The mean of each value and the `window - 1` before it."
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def plot(results: list[dict], path: Path) -> None:
    """Training MLM loss (smoothed) and validation perplexity of every variant against the step, and each one's
    perplexity at twice the training length over that at the training length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (train_ax, valid_ax, length_ax) = plt.subplots(1, 3, figsize=(15, 3.8))
    for i, r in enumerate(results):
        train = [x for x in r["curve"] if x.get("split") != "validation"]
        (line,) = train_ax.plot(
            [x["step"] for x in train], _smooth([x["mlm_loss"] for x in train]), label=r["name"], lw=1.2
        )
        valid = [x for x in r["curve"] if x.get("split") == "validation"]
        valid_ax.plot(
            [x["step"] for x in valid], [x["mlm_perplexity"] for x in valid], marker=".", color=line.get_color()
        )
        ratio = r["scores"]["128"]["mlm_perplexity"] / r["scores"]["64"]["mlm_perplexity"]
        length_ax.bar(i, ratio, color=line.get_color())
    b = BUDGET
    train_ax.set(
        xlabel=f"step (batch {b['batch_size']} x {b['max_seq_len']} tokens)",
        ylabel="training MLM loss (mean of 5 logs)",
        title="training loss (ELECTRA: its generator's)",
    )
    valid_ax.set(
        xlabel="step", ylabel=f"perplexity ({b['eval_batches']} validation batches)", yscale="log", title="validation"
    )
    length_ax.axhline(1, color="gray", lw=0.8)
    length_ax.set(
        xticks=range(len(results)),
        xticklabels=[r["name"] for r in results],
        ylabel=f"perplexity @{2 * b['max_seq_len']} / @{b['max_seq_len']}",
        title="at twice the training length",
    )
    length_ax.tick_params(axis="x", rotation=45)
    train_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(out: Path, page: Path) -> None:
    """Write `out/README.md`, `out/curves.png` and `page`'s `variants` block from the result files in `out/results`;
    results that lack variants or hold a trial's are refused in the study's own folder and, elsewhere, make `out`'s
    report only."""
    how = "run `python experiments/variants_study.py run NAME...` first"
    found = {p.stem: p for p in result_files(out / "results", how=how)}
    needs = ("name", "change", "scores", "sst2", "minutes", "tokens_per_s", "parameters", "machine", "threads")
    read = {found[n]: read_json(found[n], needs) for n in VARIANTS if n in found}
    results = list(read.values())
    if not results:
        raise MissingResults(f"{out / 'results'} holds no variant's result ({', '.join(VARIANTS)}); {how}")
    not_run = [n for n in VARIANTS if n not in found]
    why_not = unpublished(read, f"variants not run yet: {', '.join(not_run)}" if not_run else None)
    check_publishable(out, page, why_not)
    base = next((r for r in results if r["name"] == "bert"), None)
    rows = []
    notes = []
    for r in results:
        s64, s128 = r["scores"]["64"], r["scores"]["128"]
        electra = "rtd_accuracy" in s64
        gain = (
            "–"
            if base is None or r is base or electra
            else f"{100 * (s64['mlm_perplexity'] / base['scores']['64']['mlm_perplexity'] - 1):+.0f}%"
        )
        size = f"{r['parameters'] / 1e6:.2f}M" + (f" (encoder {r['encoder_parameters'] / 1e6:.2f}M)" if electra else "")
        if electra:
            notes.append(
                f"`{r['name']}`: the MLM scores (marked †) are its generator's, a model a quarter of the "
                f"width; its discriminator, the encoder that is fine-tuned, tells replaced from original "
                f"tokens with {100 * s64['rtd_accuracy']:.1f}% accuracy on the validation pairs, where "
                f"{100 * s64['replaced_share']:.1f}% of the tokens were replaced (always answering "
                f"'original' scores {100 * (1 - s64['replaced_share']):.1f}%)."
            )
        mark = "†" if electra else ""
        rows.append(
            f"| `{r['name']}` | {r['change']} | {size} | {s64['mlm_perplexity']:.1f}{mark} | "
            f"{gain} | {100 * s64['mlm_accuracy']:.1f}% | {s128['mlm_perplexity']:.1f} | "
            f"{s128['mlm_perplexity'] / s64['mlm_perplexity']:.2f} | "
            f"{100 * r['sst2']['best'][SELECTION_METRIC['sst2']]:.1f}% | {r['minutes']:.1f} | "
            f"{r['tokens_per_s']:,.0f} |"
        )
    with_rte = [r for r in results if "rte" in r]
    if with_rte:
        labels = Counter(e.label for e in load_task("rte", "validation"))
        scores = ", ".join(f"`{r['name']}` {100 * r['rte']['best'][SELECTION_METRIC['rte']]:.1f}%" for r in with_rte)
        notes.append(
            f"RTE (all 2,490 training pairs, 3 epochs, 64 tokens, best validation accuracy, one seed; always "
            f"answering the majority class scores {100 * max(labels.values()) / labels.total():.1f}%): "
            f"{scores}."
        )
    if not_run:
        notes.append(
            f"Not run yet, so not in the table: {', '.join(f'`{n}`' for n in not_run)} "
            "(`python experiments/variants_study.py run NAME`)."
        )
    plot(results, out / "curves.png")
    machines = sorted({f"{r['machine']}, {r['threads']} thread(s)" for r in results})
    b = BUDGET
    body = f"""Generated by `python experiments/variants_study.py --report` from `experiments/variants_study/results`,
written by `OMP_NUM_THREADS=1 python experiments/variants_study.py run NAME...` (two such processes side by side).
Every variant: the `mini` size (4 layers, hidden 256, vocabulary 8,192), {b["max_steps"]:,} steps of {b["batch_size"]}
sequences of {b["max_seq_len"]} tokens, peak learning rate {b["lr"]:g} with the default warm-up and linear decay, seed
{b["seed"]}. Scored on the whole validation split with the same static pairs and 15% masks for every variant (an
MLM-only model's NSP head is untrained, so only MLM is compared): at the training length and at twice it, then
fine-tuned on 1,000 SST-2 sentences for 3 epochs (best validation accuracy of the epochs, one seed). Machine:
{"; ".join(machines)}, two runs at a time beside other jobs, so minutes and tokens/s are rough.

| variant | what changes | parameters | perplexity @64 | vs `bert` | top-1 @64 | perplexity @128 | @128 / @64 | \
SST-2 | minutes | tokens/s |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

{chr(10).join(notes)}

![loss curves]({os.path.relpath(out / "curves.png", page.parent)})"""
    trial = f"**Not published**: {why_not}.\n\n" if why_not else ""
    own = body.replace(os.path.relpath(out / "curves.png", page.parent), "curves.png")
    (out / "README.md").write_text("# Variants at equal compute\n\n" + trial + own + "\n")
    publish_block("variants", body, page, why_not)
    print(body)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "command", nargs="?", choices=["run", "rte"], help="run the named variants, or fine-tune finished ones on RTE"
    )
    p.add_argument("names", nargs="*", metavar="NAME", help=f"of {list(VARIANTS)} (default: all)")
    p.add_argument("--report", action="store_true", help="write the tables and the figure from the results")
    output_options(
        p, HERE, "variants", smoke="pre-train for 4 steps, score one batch, fine-tune on 64 examples for one epoch"
    )
    args = parse(p)
    unknown = set(args.names) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variant(s) {sorted(unknown)}; choose from {list(VARIANTS)}")
    for name in args.names or (VARIANTS if args.command else []):
        (run if args.command == "run" else rte)(name, args.out, args.smoke)
    if args.report:
        report(args.out, args.page)


if __name__ == "__main__":
    refuse_missing(main)
