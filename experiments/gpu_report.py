"""The GPU pre-training results, as tables: `docs/results/gpu/README.md` (every run, with its command) and the
block between `<!-- gpu-pretraining:start -->` and `<!-- gpu-pretraining:end -->` of the site's page
`docs/gpu-runs.md`, both made from
the runs' own `config.json`, `metrics.jsonl` and logs under `docs/results/gpu/runs/`.

    python experiments/gpu_report.py

Hand-written; not part of the library. The runs were made on a GPU machine by the session scripts
experiments/gpu/session1.sh to session3.sh (`git show 2648870:experiments/gpu/session1.sh`); the GPU work to come is
experiments/gpu/plan.py's.
"""

import argparse
import csv
import os
import re
import statistics

from study import ROOT, output_options, parse, publish_block, read_json, refuse_missing

from bertlib.train.runs import read_metrics

RESULTS = ROOT / "docs" / "results" / "gpu"
SESSIONS = {
    "mini-e40": 1,
    "mini-e100": 1,
    "small-e40": 1,
    "mini-e100-lr1e-3": 2,
    "mini-e100-lr2e-3": 2,
    "notebook07-e100": 3,
}
PRESETS = {256: "mini", 512: "small"}  # hidden size -> preset
CONCURRENT = {1: 3, 2: 2}  # runs sharing the GPU in the sessions that sampled its utilisation


def run_row(name: str) -> dict:
    folder = RESULTS / "runs" / name
    config = read_json(folder / "config.json")
    records = read_metrics(folder / "metrics.jsonl")
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if r.get("split") == "validation"]
    best = min(valid, key=lambda r: r["mlm_loss"])
    log = (folder / "log.txt").read_text()
    minutes = re.search(r"\(([\d.]+) min in this session\)", log)
    m, t = config["model"], config["training"]
    return {
        "name": name,
        "preset": PRESETS[m["hidden_size"]],
        "epochs": t["epochs"],
        "lr": t["lr"],
        "batch": t["batch_size"],
        "session": SESSIONS[name],
        "last_step": train[-1]["step"],
        "minutes": float(minutes[1]) if minutes else None,
        "finished": minutes is not None,
        "best_step": best["step"],
        "perplexity": best["mlm_perplexity"],
        "accuracy": best["mlm_accuracy"],
        "top5": best["mlm_top5_accuracy"],
        "nsp": best["nsp_accuracy"],
        "tokens_per_s": sorted(r["tokens_per_s"] for r in train)[len(train) // 2],
    }


def busy_share(session: int) -> tuple[float, int]:
    """Mean of nvidia-smi's `utilization.gpu` (the share of each one-second sample in which a kernel ran) over
    the samples taken while the runs held GPU memory, and how many samples that is."""
    with open(RESULTS / f"session{session}-gpu-util.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    busy = [int(r[1].split()[0]) for r in rows if int(r[2].split()[0]) > 1000]  # > 1 GiB: a run is on the GPU
    return statistics.mean(busy) / 100, len(busy)


def utilisation(rows: list[dict]) -> str:
    "How busy the GPU was in the sessions that sampled it, beside the tokens/s of the runs that shared it."
    parts = []
    for session, runs in CONCURRENT.items():
        share, samples = busy_share(session)
        total = sum(r["tokens_per_s"] for r in rows if r["session"] == session)
        parts.append(
            f"session {session}, {runs} runs at once: busy {share:.0%} of {samples} s, "
            f"{total / 1e6:.2f}M tokens/s together (the sum of the runs' medians)"
        )
    return (
        "GPU busy (nvidia-smi's `utilization.gpu`, sampled every second while the runs held memory; the runs "
        "were eager, without `--compile`): " + "; ".join(parts) + ". With more runs at once the GPU was busier "
        "and moved more tokens: it had room to spare, and the pace of each run was set on the host (its Python, "
        "kernel launches and host syncs, and its loader), not by the GPU."
    )


def table(rows: list[dict]) -> str:
    lines = [
        "| run | preset | schedule | peak lr | steps done | minutes | best validation: step | perplexity | "
        "top-1 | top-5 | NSP | median train tokens/s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        minutes = f"{r['minutes']:.1f}" if r["finished"] else "stopped"
        lines.append(
            f"| `{r['name']}` | {r['preset']} | {r['epochs']:g} epochs of batch {r['batch']} | {r['lr']:g} | "
            f"{r['last_step']:,} | {minutes} | {r['best_step']:,} | **{r['perplexity']:.1f}** | "
            f"{r['accuracy']:.1%} | {r['top5']:.1%} | {r['nsp']:.1%} | {r['tokens_per_s']:,.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    output_options(p, RESULTS, "gpu-pretraining")
    args = parse(p)
    rows = [run_row(name) for name in SESSIONS]
    body = table(rows)
    machine = "one NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, bf16 autocast, 2026-11-22/23"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "README.md").write_text(f"""# Pre-training on a GPU

Generated by `python experiments/gpu_report.py` from `runs/*/`; do not edit. Machine: {machine}. Runs of the
same session shared the GPU (three in session 1, two in session 2; session 3 ran one, inside notebook 07),
so their speeds are not comparable with each other. "stopped": the run ended before its schedule (session 1:
a 300-second limit per run; session 2: a division by zero at step 8,633 on an epoch's last, mask-free batch,
fixed since; session 3: the 450-second limit of the notebook's execution). Validation is the whole
statically masked validation split, every 184 or 186 steps (every 930 in session 3).

{body}

{utilisation(rows)}

Commands: `experiments/gpu/session1.sh` and `session2.sh` (each run is one `python -m bertlib pretrain`
line there) and `session3.sh` (notebook 07 in full mode, with the library's generic training loop), as of commit
2648870 (`git show 2648870:experiments/gpu/session1.sh`; `experiments/gpu/plan.py` has replaced them); logs:
`session1-log.txt`, `session2-log.txt`, `session3-log.txt`, `runs/*/log.txt`; GPU utilisation sampled every
second: `session*-gpu-util.csv`. The profile of a `base` training step before any optimisation:
`profile-base-before.txt`. The course model (`models/course-mini`) is the best checkpoint of
`mini-e100-lr1e-3`.
""")
    where = os.path.relpath(args.out / "README.md", args.page.parent)
    intro = f"Generated by `python experiments/gpu_report.py`; {machine}; every run in [docs/results/gpu]({where})."
    publish_block("gpu-pretraining", f"{intro}\n\n{body}", args.page, None)
    print(body)


if __name__ == "__main__":
    refuse_missing(main)
