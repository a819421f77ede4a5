"""The learner's overnight run (issue 40): `mini` pre-trained on a CPU for 8 hours with the README's overnight
command, read back into `docs/results/cpu-overnight/`: the run's validations and training log (`metrics.jsonl`), each
validation joined with notebook 07's plateau probes measured on the checkpoint of its step (attention entropy per
layer and the shuffled-order loss rise, on the recipe's first validation batch), how the run was made (`run.json`:
the command, machine, threads, commit, sessions) and its curves (`curves.png`).

    python experiments/cpu_overnight.py RUN            # RUN: the run folder of the overnight command

The probes of a step are measured once and kept in `probes.jsonl`, so the script can follow a run that is still
training. A run shorter than the overnight budget is a trial: it may be read into another folder (`--out`), never
into the published one.

Hand-written; not part of the library.
"""

import argparse
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from study import ROOT, provenance, refuse_missing, write_json  # noqa: E402

from bertlib.evaluation.plateau import plateau_probes  # noqa: E402
from bertlib.evaluation.scores import run_evaluation_loader  # noqa: E402
from bertlib.train.checkpoints import checkpoints, load_weights  # noqa: E402
from bertlib.train.factory import build_model  # noqa: E402
from bertlib.train.runs import load_run, read_metrics  # noqa: E402
from bertlib.utils.files import atomic_write  # noqa: E402

PUBLISHED = ROOT / "docs" / "results" / "cpu-overnight"
BUDGET = 8 * 3600.0  # the overnight command's --time-budget
COMMAND = "python -m bertlib pretrain --time-budget 8h --threads 1 --eval-every 2000 --save-every 2000"
TRAIN_KEYS = ("step", "loss", "mlm_loss", "nsp_loss", "lr", "grad_norm", "tokens_per_s", "tokens", "train_seconds")


class NotARun(Exception):
    "The folder given is not a pre-training run this script can read."


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


def curves(records: list[dict], path: Path) -> None:
    "Validation perplexity, top-1 and NSP accuracy against training tokens and against hours, and the probes."
    valid = [r for r in records if r.get("split") == "validation"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    tokens = [r["tokens"] / 1e6 for r in valid]
    axes[0].plot(tokens, [r["mlm_perplexity"] for r in valid], "o-", ms=3)
    axes[0].set(yscale="log", xlabel="training tokens (millions)", ylabel="validation perplexity")
    hours = [r["train_seconds"] / 3600 for r in valid]
    axes[1].plot(hours, [r["mlm_accuracy"] for r in valid], "o-", ms=3, label="MLM top-1")
    axes[1].plot(hours, [r["nsp_accuracy"] for r in valid], "o-", ms=3, label="NSP accuracy")
    axes[1].set(xlabel="hours of training", ylabel="validation accuracy", ylim=(0, 1))
    axes[1].legend(fontsize=8)
    probed = [r for r in valid if "shuffled_mlm_rise" in r]
    axes[2].plot([r["tokens"] / 1e6 for r in probed], [r["shuffled_mlm_rise"] for r in probed], "o-", ms=3)
    axes[2].set(xlabel="training tokens (millions)", ylabel="MLM loss rise, words shuffled (nats)")
    fig.tight_layout()
    buffer = path.with_suffix(".tmp.png")
    fig.savefig(buffer, dpi=100)
    buffer.replace(path)


def read(run: Path, out: Path, trained_at: str = "unknown") -> None:
    "Read the run into `out`: its records joined with the probes, how it was made, and its curves."
    if not (run / "config.json").is_file() or not (run / "metrics.jsonl").is_file():
        raise NotARun(f"{run} is not a pre-training run folder (no config.json and metrics.jsonl)")
    _, cfg, _ = load_run(run)
    trial = (cfg.time_budget or 0) < BUDGET
    if trial and out.resolve() == PUBLISHED.resolve():
        raise NotARun(f"{run} trained for less than the overnight budget: read it into another folder with --out")
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
    sessions = [r["event"] for r in records if "event" in r]
    made = {
        "command": COMMAND,
        "mode": "trial" if trial else "full",
        "steps": valid[-1]["step"] if valid else 0,
        "max_steps": cfg.max_steps,
        "complete": bool(valid) and valid[-1]["step"] == cfg.max_steps,
        "hours": valid[-1]["train_seconds"] / 3600 if valid else 0.0,
        "sessions": sessions,
        **provenance(),  # of this reading, and its probes
        "trained_at": trained_at,
        "threads": cfg.threads,
        "read": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_json(out / "run.json", made)
    curves(joined, out / "curves.png")
    print(f"{run}: {made['steps']:,} of {cfg.max_steps:,} steps, {made['hours']:.1f} h; written to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the overnight run's folder")
    parser.add_argument("--out", type=Path, default=PUBLISHED, help="where to write (default: %(default)s)")
    parser.add_argument("--trained-at", default="unknown", help="the commit the run was started from")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        read(args.run, args.out, args.trained_at)
    except NotARun as err:
        parser.exit(2, f"error: {err}\n")


if __name__ == "__main__":
    refuse_missing(main)
