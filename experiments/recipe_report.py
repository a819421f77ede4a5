"""The recipe study's report: from its result files (`experiments/recipe_study.py run`), the study's README and
figures (`curves.png`, `plateau.png`), and the block between `<!-- recipe-study:start -->` and
`<!-- recipe-study:end -->` of the site's page `docs/cpu-recipes.md`. Nothing in them is typed by hand; a trial's
results (`--smoke`), or a study without the baseline at both budgets, never reach the page.

Hand-written; not part of the library.

    python experiments/recipe_report.py
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from recipe_study import (
    BASELINE,
    BUDGET_TOKENS,
    BUDGETS,
    CHECK_STEPS,
    DEFAULT_STEPS,
    HERE,
    MEAN_LEN,
    RECIPES,
    SUBSET_BATCHES,
    TARGET_NSP,
    TARGET_PPL,
)
from study import (
    ROOT,
    check_publishable,
    output_options,
    parse,
    publish_block,
    read_json,
    refuse_missing,
    result_files,
    unpublished,
)

from bertlib.train.runs import read_metrics

GPU_RUNS = ROOT / "docs" / "results" / "gpu" / "runs"
ESCAPE_PPL = 300.0  # a GPU run has left the plateau at its first validation below this perplexity


NEEDS = ("recipe", "budget", "evaluations", "tokens", "train_seconds", "tokens_per_s", "commit", "machine")


def load_results(folder: Path) -> dict[Path, dict]:
    "Every result file of `folder/results`, by budget, then in the order of `RECIPES`, by path."
    order = list(RECIPES)
    how = "run `python experiments/recipe_study.py run NAME` first"
    results = {p: read_json(p, NEEDS) for p in result_files(folder / "results", how=how)}
    for e in (e for r in results.values() for e in r["evaluations"] if "attention_entropy_per_layer" in e):
        # results from before the probes moved to bertlib.viz.attention recorded the entropy in nats
        e["attention_entropy_bits_per_layer"] = [v / math.log(2) for v in e.pop("attention_entropy_per_layer")]
    return dict(
        sorted(results.items(), key=lambda i: (list(BUDGETS).index(i[1]["budget"]), order.index(i[1]["recipe"])))
    )


def lacking(results: list[dict]) -> str | None:
    """What the page's block needs and `results` lack: the baseline (`default`) at every budget, which every row is
    read against; None when nothing is lacking."""
    missing = sorted({("default", b) for b in BUDGETS} - {(r["recipe"], r["budget"]) for r in results})
    return f"the study lacks {', '.join(f'{r}@{b}' for r, b in missing)}" if missing else None


def subset_curve(result: dict) -> list[dict]:
    "The validations on the fixed subset (the whole split is scored once, at the end)."
    return [e for e in result["evaluations"] if e["split"] != "validation"]


def at_wall_time(result: dict, seconds: float) -> float:
    "Subset perplexity at `seconds` of training (at most the run's), interpolated in log-perplexity."
    points = [(e["train_seconds"], math.log(e["mlm_perplexity"])) for e in subset_curve(result)]
    for (t0, y0), (t1, y1) in zip(points, points[1:], strict=False):
        if t0 <= seconds <= t1:
            return math.exp(y0 + (y1 - y0) * (seconds - t0) / max(t1 - t0, 1e-9))
    return math.exp(points[-1][1])


def load(result: dict) -> str:
    """The machine's mean 1-minute load average at the run's validations (on 2 cores; the run itself is 1 of it),
    or a dash for the results from before the study recorded it."""
    loads = [e["load_average"] for e in subset_curve(result) if "load_average" in e]
    return f"{sum(loads) / len(loads):.1f}" if loads else "–"


def common_seconds(group: list[dict]) -> float:
    "The training time of a group's fastest run: every run of the group has a curve up to there."
    return min(r["train_seconds"] for r in group)


def gpu_escapes(runs_dir: Path) -> list[dict]:
    """For each GPU run folder (config.json + metrics.jsonl), the first validation below `ESCAPE_PPL`: its step, the
    learning rate then and the NSP accuracy, with the lowest perplexity before it."""
    rows = []
    for folder in sorted(p for p in runs_dir.iterdir() if (p / "metrics.jsonl").exists()):
        config = read_json(folder / "config.json")
        records = read_metrics(folder / "metrics.jsonl")
        valid = [r for r in records if r.get("split") == "validation"]
        escape = next((r for r in valid if r["mlm_perplexity"] < ESCAPE_PPL), None)
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


def provenance_note(results: list[dict]) -> str:
    "Which commits made the rows, that `check` shows today's library repeating them, and the recipes not run."
    commits = sorted({r["commit"] for r in results})
    fit_rows = sorted({r["commit"] for r in results if "load_average" in r["evaluations"][0]})
    not_run = [n for n in RECIPES if not any(r["recipe"] == n for r in results)]
    note = (
        f"Each row names the commit that was the HEAD when the run started ({', '.join(f'`{c}`' for c in commits)}; "
        "`-dirty` marks a library or study with uncommitted edits). The rows made at "
        f"{', '.join(f'`{c}`' for c in fit_rows)} ran on `bertlib.train.loop.fit`; the older ones were made by earlier "
        "versions of this script (on the library's old `bertlib.train`, since removed, or on the trainer's parts), "
        "and the two full-budget rows re-run on `fit` gave every validation of their old rows to the last digit. "
        f"`python experiments/recipe_study.py check` replays the first {CHECK_STEPS} steps of each row with today's "
        "library and says whether they repeat (the same tokens and learning rates, losses and gradient norms within "
        "1e-6)."
    )
    if not_run:
        note += (
            f" Recipes without a row here ({', '.join(f'`{n}`' for n in not_run)}) were screened at a third of the "
            "budget by the study's first script, written for the library's old API (`bertlib.train`, since "
            "removed); those rows were dropped rather than run again. `recipe_study.py run NAME --budget third` "
            "runs one."
        )
    return note


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
        "| recipe | what changes | steps | tokens | tokens/s | train min | load | val ppl | MLM acc | NSP acc | "
        f"ppl @ {common / 60:.1f} min | KL to unigram | top-1 in 10 most frequent | commit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in group:
        final, probe = r["evaluations"][-1], subset_curve(r)[-1]
        lines.append(
            f"| `{r['recipe']}` | {RECIPES[r['recipe']].note} | {r['steps']:,} | {r['tokens'] / 1e6:.2f}M | "
            f"{r['tokens_per_s']:,.0f} | {r['train_seconds'] / 60:.1f} | {load(r)} | "
            f"**{final['mlm_perplexity']:.1f}** | {final['mlm_accuracy']:.3f} | "
            f"{final['nsp_accuracy']:.3f} | {at_wall_time(r, common):.1f} | {probe['kl_to_unigram']:.2f} | "
            f"{probe['top1_in_10_most_frequent']:.2f} | `{r['commit']}` |"
        )
    return [*lines, ""]


def speed_table(measured: dict) -> list[str]:
    "The study README's table of `speed.json`."
    base = measured["tokens_per_s"].get("default")
    if isinstance(measured["machine"], dict):  # speed.json as written before the study shared experiments/study.py
        m = measured["machine"]
        measured = {
            **measured,
            "pairs": measured["sequences"],
            "commit": "before 9020baa",
            "machine": f"{m['processor']}, {m['cpu_count']} cores, torch {m['torch']}; {m['shared']}",
        }
    lines = [
        "## Speed, measured back to back",
        "",
        f"`speed` ({measured['pairs']:,} pairs per sequence length and recipe, {measured['rounds']} interleaved "
        f"rounds, best kept; measured {measured['measured']}, commit `{measured['commit']}`, {measured['machine']}): "
        "training tokens/s at one thread, and the share of the default's tokens each recipe trains in the "
        "default's wall time.",
        "",
        "| recipe | tokens/s | tokens in the default's time |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| `{name}` | {value:,.0f} | {f'{value / base:.2f} x' if base else ''} |"
        for name, value in measured["tokens_per_s"].items()
    ]
    return [*lines, ""]


def gpu_table(gpu: list[dict]) -> list[str]:
    "The study README's table of the GPU runs' escape from the plateau."
    lines = [
        "## The plateau on the GPU runs (evidence of what gets the model out)",
        "",
        "From `docs/results/gpu/runs` (H100, batch 256, seq 128, warm-up 6%, linear decay; `small` = hidden "
        f"512). 'escape' = the first validation below perplexity {ESCAPE_PPL:.0f}; tokens = pairs seen x "
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


def page_block(results: list[dict], gpu: list[dict], links: dict[str, str]) -> str:
    """The page's summary: the full-budget runs beside their runs at a third, whether the target was met, and
    how many tokens the GPU runs needed to leave the plateau; `links`: the study's report and curves, as the page
    reaches them."""
    full = [r for r in results if r["budget"] == "full"]
    confirmed = {r["recipe"] for r in full}
    rows = full + [r for r in results if r["budget"] == "third" and r["recipe"] in confirmed]
    common = {
        b: common_seconds([r for r in results if r["budget"] == b])
        for b in BUDGETS
        if any(r["budget"] == b for r in results)
    }
    lines = [
        "Generated by `python experiments/recipe_report.py` from `experiments/recipe_study/results`; do "
        f"not edit by hand. Each recipe trains `mini` from scratch for a number of training tokens: `full` is "
        f"that of the main command before this study ({DEFAULT_STEPS:,} steps of {BASELINE['batch_size']} pairs, "
        f"{BUDGET_TOKENS / 1e6:.2f}M tokens), `third` a third of it; one thread of the development machine's "
        "CPU, shared with other work (`load`: the machine's mean 1-minute load average at the run's validations, "
        "on 2 cores). `val ppl` and `NSP` are on the whole validation split at the end; the "
        f"last column is the perplexity on a fixed {SUBSET_BATCHES * 64}-pair subset after as much training time as "
        "the fastest run of the same budget had ("
        + ", ".join(f"`{b}`: {s / 60:.1f} min" for b, s in common.items())
        + "). `commit`: the commit the run was made at.",
        "",
        "| recipe | what changes | budget | tokens | minutes | tokens/s | load | val ppl | NSP | ppl at equal wall "
        "time | commit |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        final = r["evaluations"][-1]
        lines.append(
            f"| `{r['recipe']}` | {RECIPES[r['recipe']].note} | {r['budget']} | {r['tokens'] / 1e6:.2f}M | "
            f"{r['train_seconds'] / 60:.1f} | {r['tokens_per_s']:,.0f} | {load(r)} | "
            f"**{final['mlm_perplexity']:.1f}** | "
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
        verdict = f"was met by none of the {len(full)} recipes run at the full budget ({screened} run at a third)."
    else:
        verdict = "has not been tried yet: no recipe has been run at the full budget."
    lines += ["", f"{target} {verdict}"]
    baseline = next((r for r in full if r["recipe"] == "default"), None)
    best = min(full, key=lambda r: r["evaluations"][-1]["mlm_perplexity"], default=None)
    if baseline and best and best is not baseline:
        ours, theirs = best["evaluations"][-1], baseline["evaluations"][-1]
        machines = "; ".join(sorted({r["machine"] for r in full}))
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
            f"On the GPU (`docs/results/gpu/runs`, batch 256) the first validation below perplexity "
            f"{ESCAPE_PPL:.0f} came after {least['tokens'] / 1e6:.0f}M training tokens at the earliest "
            f"(`{least['run']}`, hidden {least['hidden']}, {least['tokens'] / BUDGET_TOKENS:.0f}x the CPU budget)"
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
        f"[the study's report]({links['report']}); the validation curves:",
        "",
        f"![validation curves]({links['curves']})",
    ]
    return "\n".join(lines)


def colour(result: dict) -> tuple:
    "One colour per recipe, the same in every panel and budget."
    import matplotlib.pyplot as plt

    return plt.cm.tab20(list(RECIPES).index(result["recipe"]) % 20)


def curves_figure(results: list[dict], path: Path) -> None:
    "The subset validation curves of every budget, against training tokens and against training time."
    import matplotlib.pyplot as plt

    budgets = [b for b in BUDGETS if any(r["budget"] == b for r in results)]
    titles = {"third": "a third of the default's tokens", "full": "the default's tokens"}
    fig, axes = plt.subplots(len(budgets), 2, figsize=(13, 4.6 * len(budgets)), squeeze=False)
    for row, budget in zip(axes, budgets, strict=True):
        for r in (r for r in results if r["budget"] == budget):
            ev = [e for e in subset_curve(r) if e["step"] > 0]
            width = 2.5 if r["recipe"] == "default" else 1.2
            style = dict(color=colour(r), marker="o", ms=3, label=r["recipe"], lw=width)
            row[0].plot([e["tokens"] / 1e6 for e in ev], [e["mlm_perplexity"] for e in ev], **style)
            row[1].plot([e["train_seconds"] / 60 for e in ev], [e["mlm_perplexity"] for e in ev], **style)
        for ax, xlabel in zip(row, ("training tokens (millions)", "training wall time (min, 1 thread)"), strict=True):
            ax.set(
                xlabel=xlabel,
                ylabel="validation MLM perplexity (subset)",
                yscale="log",
                title=f"budget {budget}: {titles[budget]}",
            )
            ax.axhline(TARGET_PPL, color="gray", ls=":", lw=1)
            ax.text(
                ax.get_xlim()[0], TARGET_PPL * 1.01, f" target {TARGET_PPL:.0f}", color="gray", fontsize=8, va="bottom"
            )
            ax.grid(alpha=0.3, which="both")
        row[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plateau_figure(results: list[dict], gpu: list[dict], path: Path) -> None:
    "The probes of the plateau along the runs of the largest budget, and the GPU runs' curves beside the CPU ones."
    import matplotlib.pyplot as plt

    budget = [b for b in BUDGETS if any(r["budget"] == b for r in results)][-1]
    uniform = MEAN_LEN[128]  # keys a query of a mean validation pair can attend to
    fig, grid = plt.subplots(2, 3, figsize=(18, 9))
    axes = grid.ravel()
    panels = [
        ("kl_to_unigram", "nats per masked token", "KL(model || unigram distribution)"),
        ("top1_in_10_most_frequent", "share", "top-1 predictions among the 10 most frequent tokens"),
        (
            "attention_entropy_bits_per_layer",
            f"bits (uniform over {uniform:.0f} tokens: {math.log2(uniform):.1f})",
            "attention entropy: layer 1 (solid), layer 4 (dashed)",
        ),
        (
            "max_head_prev_token_attention",
            f"attention weight (uniform: {1 / uniform:.3f})",
            "largest mean attention of one head to the previous token",
        ),
        (
            "mean_attention_to_cls_sep_per_layer",
            f"share of attention (uniform: {3 / uniform:.3f})",
            "attention to [CLS] and the two [SEP], mean over heads, layer 4",
        ),
    ]
    last = [r for r in results if r["budget"] == budget]
    for r in last:
        ev = subset_curve(r)
        x = [e["tokens"] / 1e6 for e in ev]
        style = dict(color=colour(r), marker="o", ms=3, label=r["recipe"])
        for ax, (key, _, _) in zip(axes, panels, strict=False):
            values = [e[key] for e in ev]
            if key == "attention_entropy_bits_per_layer":
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
    fig.suptitle(f"The plateau: CPU runs of budget '{budget}' (fixed validation subset), GPU runs beside them")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(out: Path, page: Path, gpu_runs: Path | None) -> None:
    """Write `out`'s README and figures and `page`'s block from the result files in `out/results`; results that lack
    what the page shows or hold a trial's are refused in the study's own folder and, elsewhere, make `out`'s report
    only."""
    import matplotlib

    matplotlib.use("Agg")
    found = load_results(out)
    results = list(found.values())
    why_not = unpublished(found, lacking(results))
    check_publishable(out, page, why_not)
    gpu = gpu_escapes(gpu_runs) if gpu_runs and gpu_runs.is_dir() else []
    baselines = sorted({f"{r['unigram_perplexity']:.1f}" for r in results if "unigram_perplexity" in r})
    # older results did not record the pairs
    pairs = next((f"{r['validation_pairs']:,} pairs, " for r in results if "validation_pairs" in r), "")
    lines = [
        "# Pre-training recipe study (`mini` on the 2-core CPU)",
        "",
        "Generated by `python experiments/recipe_report.py` from `results/*.json`; do not edit.",
        "",
        *([f"**Not published**: {why_not}.", ""] if why_not else []),
        f"Budget `full` = the training tokens of the main command before this study ({DEFAULT_STEPS:,} "
        f"steps x {BASELINE['batch_size']} pairs x {MEAN_LEN[128]:.0f} tokens = {BUDGET_TOKENS / 1e6:.2f}M); "
        f"`third` = a third of it. Validation: the whole split ({pairs}15% masked, "
        f"seq 128, the same masks for every run) at the end; the curves use a fixed subset ({SUBSET_BATCHES * 64} "
        "pairs). One thread; the machine's 2 cores were shared with other sessions' work, so tokens/s (training only, "
        "evaluation excluded) carries that noise. The unigram baseline (every masked token guessed from its "
        "add-one smoothed train-split frequency, `bertlib.evaluation.scores.unigram_baseline`) scores perplexity "
        f"{' / '.join(baselines) or 'unrecorded'} on the same tokens. The attention probes are "
        "`bertlib.viz.attention.head_entropy` (in bits) and `head_scores` over the first validation pairs.",
        "",
        provenance_note(results),
        "",
    ]
    for budget in BUDGETS:
        if any(r["budget"] == budget for r in results):
            lines += study_table(results, budget)
    if (out / "speed.json").exists():
        lines += speed_table(read_json(out / "speed.json"))
    if gpu:
        lines += gpu_table(gpu)
    lines += ["![validation perplexity](curves.png)", "", "![plateau probes](plateau.png)", ""]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    curves_figure(results, out / "curves.png")
    plateau_figure(results, gpu, out / "plateau.png")
    links = {
        name: os.path.relpath(out / file, page.parent)
        for name, file in (("report", "README.md"), ("curves", "curves.png"))
    }
    publish_block("recipe-study", page_block(results, gpu, links), page, why_not)
    print(f"wrote {out / 'README.md'}, curves.png and plateau.png" + ("" if why_not else f", and the block of {page}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    output_options(parser, HERE, "recipe-study")
    parser.add_argument(
        "--gpu-runs", type=Path, default=GPU_RUNS, help="GPU run folders to show beside the study (skipped if absent)"
    )
    args = parse(parser)
    report(args.out, args.page, args.gpu_runs)


if __name__ == "__main__":
    refuse_missing(main)
