"""The learner's overnight run (issue 40): `mini` pre-trained on a CPU for 8 hours with `--time-budget 8h`, read back
into a results folder of `docs/results/`: the run's validations and training log (`metrics.jsonl`), each validation
joined with notebook 07's plateau probes measured on the checkpoint of its step (attention entropy per layer and the
shuffled-order loss rise, on the recipe's first validation batch), how the run was made (`run.json`: the command,
machine, threads, commit, and why it ended) and its curves (`curves.png`). `report` writes the site's page from
every such folder.

    python experiments/cpu_overnight.py read RUN --out docs/results/cpu-overnight    # RUN: the run's folder
    python experiments/cpu_overnight.py read RUN --out ... --stopped "why"           # a run stopped before its end
    python experiments/cpu_overnight.py report                                       # docs/cpu-overnight.md

The probes of a step are measured once and kept in `probes.jsonl`, so `read` can follow a run that is still training.
A run with less than the overnight budget is a trial: it may be read into a folder outside `docs/results`, never into
it. The page shows a run only when it finished its steps or says why it was stopped.

Hand-written; not part of the library.
"""

import argparse
import json
import math
import statistics
import time
from dataclasses import fields
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from study import ROOT, publish, refuse_missing, write_json  # noqa: E402

from bertlib.evaluation.plateau import plateau_probes  # noqa: E402
from bertlib.evaluation.scores import run_evaluation_loader  # noqa: E402
from bertlib.train.checkpoints import checkpoints, load_weights  # noqa: E402
from bertlib.train.factory import build_model  # noqa: E402
from bertlib.train.runs import load_run, read_metrics  # noqa: E402
from bertlib.train.settings import PretrainConfig  # noqa: E402
from bertlib.utils.files import atomic_write  # noqa: E402

RESULTS = ROOT / "docs" / "results"
PAGE = publish.PAGES["cpu-overnight"]
BUDGET = 8 * 3600.0  # the overnight command's --time-budget
TARGET = {"mlm_perplexity": 100.0, "nsp_accuracy": 0.75}  # issue 40: within the 8 hours, on the 2-core CPU
TRAIN_KEYS = ("step", "loss", "mlm_loss", "nsp_loss", "lr", "grad_norm", "tokens_per_s", "tokens", "train_seconds")


def command(cfg: PretrainConfig) -> str:
    "The command line that made the run: the options whose values differ from `pretrain`'s defaults."
    defaults = PretrainConfig(time_budget=BUDGET)
    given = [
        f"--{f.name.replace('_', '-')} {getattr(cfg, f.name):g}"
        for f in fields(PretrainConfig)
        if f.name not in ("max_steps", "time_budget") and getattr(cfg, f.name) != getattr(defaults, f.name)
    ]
    return " ".join(["python -m bertlib pretrain --time-budget 8h", *given])


def probes(run: Path, steps: list[int], cache: Path) -> dict[int, dict]:
    """Notebook 07's plateau probes of the run's checkpoints at `steps` (those still on disk), measured once each and
    kept in `cache` (one JSON line per step)."""
    found = {int(r["step"]): r for r in map(json.loads, cache.read_text().splitlines())} if cache.exists() else {}
    on_disk = {int(c.name.split("-")[-1]): c for c in checkpoints(run)}
    todo = [s for s in steps if s not in found and s in on_disk]
    if todo:
        model_config, cfg, tokenizer = load_run(run)
        model = build_model(model_config, cfg)
        loader = run_evaluation_loader("validation", tokenizer, cfg)
        for step in todo:
            load_weights(on_disk[step], model)
            found[step] = {"step": step, **plateau_probes(model, loader)}
            print(f"step {step:,}: shuffled-order rise {found[step]['shuffled_mlm_rise']:+.3f}", flush=True)
        atomic_write(cache, "".join(json.dumps(found[s]) + "\n" for s in sorted(found)))
    return found


def curves(valid: list[dict], path: Path, title: str) -> None:
    "Validation perplexity against hours, accuracies against hours, and each layer's attention entropy."
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    hours = [r["train_seconds"] / 3600 for r in valid]
    axes[0].plot(hours, [r["mlm_perplexity"] for r in valid], "o-", ms=3)
    axes[0].axhline(TARGET["mlm_perplexity"], color="gray", ls=":", label="target")
    axes[0].set(yscale="log", xlabel="hours of training", ylabel="validation perplexity", title=title)
    axes[1].plot(hours, [r["mlm_accuracy"] for r in valid], "o-", ms=3, label="MLM top-1")
    axes[1].plot(hours, [r["nsp_accuracy"] for r in valid], "o-", ms=3, label="NSP accuracy")
    axes[1].axhline(TARGET["nsp_accuracy"], color="gray", ls=":", label="NSP target")
    axes[1].set(xlabel="hours of training", ylabel="validation accuracy", ylim=(0, 1))
    probed = [r for r in valid if "attention_entropy" in r]
    for layer in range(len(probed[0]["attention_entropy"]) if probed else 0):
        axes[2].plot([r["train_seconds"] / 3600 for r in probed], [r["attention_entropy"][layer] for r in probed],
                     "o-", ms=3, label=f"layer {layer}")  # fmt: skip
    axes[2].set(xlabel="hours of training", ylabel="attention entropy (bits)", ylim=(0, 7.2))
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = path.with_name(f".{path.name}")
    fig.savefig(buffer, format="png", dpi=100)
    buffer.replace(path)


def read(run: Path, out: Path, trained_at: str, stopped: str | None) -> None:
    "Read the run into `out`: its records joined with the probes, how it was made, and its curves."
    if not (run / "config.json").is_file() or not (run / "metrics.jsonl").is_file():
        raise publish.MissingResults(f"{run} is not a pre-training run folder (no config.json and metrics.jsonl)")
    _, cfg, _ = load_run(run)
    mode = "full" if (cfg.time_budget or 0) >= BUDGET else "trial"
    if mode == "trial" and publish.is_published(out):
        raise publish.MissingResults(f"{run} trained for less than 8 hours: read it into a folder outside {RESULTS}")
    out.mkdir(parents=True, exist_ok=True)
    records = read_metrics(run / "metrics.jsonl")
    valid = [r for r in records if r.get("split") == "validation"]
    found = probes(run, [r["step"] for r in valid], out / "probes.jsonl")
    joined = [
        {**r, **{k: v for k, v in found.get(r["step"], {}).items() if k != "step"}}
        if r.get("split") == "validation"
        else {k: r[k] for k in TRAIN_KEYS if k in r}
        for r in records
        if r.get("split") == "validation" or "loss" in r
    ]
    atomic_write(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in joined))
    made = {
        "command": command(cfg),
        "steps": valid[-1]["step"] if valid else 0,
        "max_steps": cfg.max_steps,
        "finished": bool(valid) and valid[-1]["step"] == cfg.max_steps,
        "stopped": stopped,
        "hours": valid[-1]["train_seconds"] / 3600 if valid else 0.0,
        "events": [r["event"] for r in records if "event" in r],
        "trained_at": trained_at,
        "threads": cfg.threads,
        "provenance": publish.provenance(mode, probes="measured on the run's checkpoints by this script"),
        "read": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_json(out / "run.json", made)
    curves([r for r in joined if r.get("split") == "validation"], out / "curves.png", out.name)
    print(f"{run}: {made['steps']:,} of {cfg.max_steps:,} steps, {made['hours']:.1f} h; written to {out}")


def projection(valid: list[dict], target: float = TARGET["mlm_perplexity"]) -> dict | None:
    """The training hours at which the perplexity would reach `target` if it went on falling as over the run's later
    half (its validations from half its training hours on): a straight line through log perplexity against log tokens,
    fitted by least squares, read at `target`, at the run's mean speed. None when that half holds fewer than three
    validations or its perplexity does not fall. A run on the plateau may leave it in a sudden drop (the GPU runs
    did), which such a line cannot foresee; and the learning rate, which decays to zero, flattens its end."""
    half = valid[-1]["train_seconds"] / 2
    late = [r for r in valid if r["train_seconds"] >= half]
    if len(late) < 3:
        return None
    line = statistics.linear_regression(
        [math.log(r["tokens"]) for r in late], [math.log(r["mlm_perplexity"]) for r in late]
    )
    if line.slope >= 0:
        return None
    tokens = math.exp((math.log(target) - line.intercept) / line.slope)
    speed = valid[-1]["tokens"] / valid[-1]["train_seconds"]
    return {"exponent": -line.slope, "tokens": tokens, "hours": tokens / speed / 3600, "validations": len(late)}


def verdict(valid: list[dict]) -> str:
    """Whether the run met the target within the 8 hours: the first validation at both; or how far the best one was,
    and the hours its later half's pace projects to a perplexity of 100."""
    met = next((r for r in valid if r["mlm_perplexity"] <= 100 and r["nsp_accuracy"] >= 0.75), None)
    if met:
        return f"met at {met['train_seconds'] / 3600:.1f} h (step {met['step']:,})"
    best = min(valid, key=lambda r: r["mlm_perplexity"])
    said = (
        f"missed: the best validation perplexity was {best['mlm_perplexity']:.1f} (step {best['step']:,}), "
        f"the best NSP accuracy {max(r['nsp_accuracy'] for r in valid):.1%}"
    )
    ahead = projection(valid)
    if ahead is None:
        return said + "; over the run's later half its perplexity did not fall, so no pace projects the hours to 100"
    return said + (
        f"; at the pace of its later half (perplexity falling as tokens to the power -{ahead['exponent']:.3f}, "
        f"fitted to {ahead['validations']} validations), a perplexity of 100 would take {ahead['tokens'] / 1e9:,.1f}G "
        f"tokens, about {ahead['hours']:,.0f} hours of training at its speed: a projection of a plateau's slope, "
        "which a sudden drop off the plateau (as in the GPU runs) would cut short"
    )


def run_block(folder: Path) -> str:
    "One run's part of the page: how it was made, its verdict, its figure and a table of its validations."
    made = publish.check_full(publish.read_result(folder / "run.json", ("command", "steps", "provenance")), folder)
    if not made["finished"] and not made["stopped"]:
        raise publish.MissingResults(f"{folder} holds a run that has not finished: the page is left as it is")
    valid = [r for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines()) if "split" in r]
    ended = "finished its steps" if made["finished"] else f"stopped: {made['stopped']}"
    how = made["provenance"]
    rows = [
        f"| {r['step']:,} | {r['train_seconds'] / 3600:.1f} | {r['tokens'] / 1e6:.1f}M | {r['mlm_perplexity']:.1f} | "
        f"{r['mlm_accuracy']:.1%} | {r['nsp_accuracy']:.1%} | {' '.join(f'{e:.2f}' for e in r['attention_entropy'])} | "
        f"{r['shuffled_mlm_rise']:+.2f} |"
        for r in valid
    ]
    return "\n".join(
        [
            f"### `{folder.name}`",
            "",
            f"`{made['command']}` on {how['machine']}, {made['threads']} thread, "
            f"started at commit `{made['trained_at']}`"
            f" ({made['steps']:,} of {made['max_steps']:,} steps in {made['hours']:.1f} hours of training; {ended}). "
            f"Target (validation perplexity <= 100 and NSP >= 75% within 8 hours): {verdict(valid)}.",
            "",
            f"![{folder.name}: validation curves and attention entropy](results/{folder.name}/curves.png)",
            "",
            "| step | hours | tokens | perplexity | top-1 | NSP | attention entropy per layer (bits) | shuffled rise |",
            "|---:|---:|---:|---:|---:|---:|---|---:|",
            *rows,
        ]
    )


def report(page: Path) -> None:
    "The page's block: every overnight run read into `docs/results/cpu-overnight*`, oldest first."
    folders = sorted(RESULTS.glob("cpu-overnight*"), key=lambda f: publish.read_result(f / "run.json")["read"])
    if not folders:
        raise publish.MissingResults(f"{RESULTS} holds no overnight run (cpu-overnight*): read one first")
    publish.write_block("cpu-overnight", "\n\n".join(run_block(f) for f in folders), page)
    print(f"wrote {page}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    reading = sub.add_parser("read", help="read a run into a results folder")
    reading.add_argument("run", type=Path, help="the overnight run's folder")
    reading.add_argument("--out", type=Path, required=True, help="the results folder, e.g. docs/results/cpu-overnight")
    reading.add_argument("--trained-at", default="unknown", help="the commit the run was started from")
    reading.add_argument("--stopped", help="why the run was stopped before its last step, when it was")
    reporting = sub.add_parser("report", help="write the site's page from the results folders")
    reporting.add_argument("--page", type=Path, default=PAGE, help="the page to rewrite (default: %(default)s)")
    args = parser.parse_args()
    if args.action == "read":
        read(args.run, args.out, args.trained_at, args.stopped)
    else:
        report(args.page)


if __name__ == "__main__":
    refuse_missing(main)
