"""What pre-training is worth: every task fine-tuned from the course model (`models/course-mini`) and from the
same architecture with random weights, under the same budget, with several seeds where runs are cheap.

Hand-written; not part of the library. Each run is one `bertlib.recipes.finetune.finetune` call into
`experiments/finetune_study/runs/<name>` (ignored by git); its result (the best validation over the epochs,
minutes, machine) goes to `finetune_study/results/<name>.json`. `--report` turns the results into
`finetune_study/README.md` and the README's `finetune` section; no number in either is typed by hand.

    OMP_NUM_THREADS=1 BERTLIB_DATA_DIR=... python experiments/finetune_study.py run rte sst2
    python experiments/finetune_study.py --report
"""

import argparse
import shutil
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

from study import ROOT, output_options, parse, provenance, read_json, update_readme, write_json

from bertlib.recipes.finetune import SELECTION_METRIC, finetune
from bertlib.train.runs import load_run
from bertlib.train.settings import FinetuneConfig, default_seq_len

HERE = ROOT / "experiments" / "finetune_study"
SOURCE = ROOT / "models" / "course-mini"
# the budget of each plan on a 2-core CPU: all of RTE, fixed slices of the larger training sets; `sst2-1k` and
# `sst2` are two points of one learning curve (how much labelled data it takes to catch up without pre-training)
PLANS = {
    "rte": dict(seeds=(0, 1, 2), settings=dict(epochs=3.0, batch_size=32, lr=1e-4)),
    "sst2-1k": dict(
        task="sst2", seeds=(0, 1, 2), settings=dict(epochs=3.0, batch_size=32, lr=1e-4, train_examples=1000)
    ),
    "sst2": dict(seeds=(0, 1, 2), settings=dict(epochs=2.0, batch_size=32, lr=1e-4, train_examples=8000)),
    # the same slice at two other learning rates: is either start held back by a rate that suits the other?
    "sst2-lr3e-5": dict(
        task="sst2", seeds=(0,), settings=dict(epochs=2.0, batch_size=32, lr=3e-5, train_examples=8000)
    ),
    "sst2-lr3e-4": dict(
        task="sst2", seeds=(0, 1, 2), settings=dict(epochs=2.0, batch_size=32, lr=3e-4, train_examples=8000)
    ),
    "conll2003": dict(seeds=(0,), settings=dict(epochs=3.0, batch_size=32, lr=1e-4)),
    # measured at 256 before finetune refused lengths past the 128 the course model was pre-trained on: half of
    # each window sat on untrained positions (issue 23), which is why this row needs --untrained-positions
    "squad": dict(
        seeds=(0,),
        settings=dict(
            epochs=2.0, batch_size=32, lr=1e-4, train_examples=2000, max_seq_len=256, untrained_positions=True
        ),
    ),
}
# Every training example at the course model's 128 tokens (SQuAD: its windows): the learning rate is chosen on
# validation for each start from `lrs` (seed 0), then the other seeds run at the chosen rate; `random_seeds` run
# only after every plan's required runs (`--extra`), as time allows.
FULL_PLANS = {
    "rte-full": dict(task="rte", settings=dict(epochs=3.0, batch_size=32)),
    "conll2003-full": dict(task="conll2003", settings=dict(epochs=4.0, batch_size=32)),
    # four validations an epoch: 67,349 sentences make 2,105 steps of 32
    "sst2-full": dict(task="sst2", settings=dict(epochs=3.0, batch_size=32, eval_every=500)),
    "squad-full": dict(task="squad", settings=dict(epochs=2.0, batch_size=32, max_seq_len=128)),
}
LRS = (1e-4, 3e-4)
SEEDS = (0, 1, 2)
EXTRA_RANDOM_SEEDS = (1, 2)
# Turc et al. 2019 ("Well-Read Students Learn Better"), BERT-Mini (4 layers, hidden 256), GLUE test set
PUBLISHED = {"sst2": "85.9 (GLUE test)", "rte": "57.9 (GLUE test)"}
SMOKE = dict(epochs=1.0, train_examples=64, eval_examples=64)  # --smoke: every plan this small
TITLES = {
    "sst2": "SST-2 accuracy",
    "rte": "RTE accuracy",
    "conll2003": "CoNLL-2003 entity F1",
    "squad": "SQuAD v1.1 F1 (EM)",
}


def run(plan: str, init: str, seed: int, out: Path, smoke: bool = False, lr: float | None = None) -> dict:
    """Fine-tune once and write the result file into `out/results` (skipped when it exists); `lr` overrides the
    plan's learning rate and is then part of the run's name."""
    spec = PLANS.get(plan) or FULL_PLANS[plan]
    task = spec.get("task", plan)
    name = f"{plan}-{init}-s{seed}" if lr is None else f"{plan}-lr{lr:g}-{init}-s{seed}"
    path = out / "results" / f"{name}.json"
    if path.exists():
        return read_json(path)
    run_dir = out / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)  # a run that did not finish starts again
    settings = {**spec["settings"], **({} if lr is None else {"lr": lr}), **(SMOKE if smoke else {})}
    if smoke:
        settings.pop("eval_every", None)
    cfg = FinetuneConfig(task=task, source=str(SOURCE), init=init, seed=seed, log_every=50, **settings)
    start = time.perf_counter()
    records = finetune(run_dir, cfg, show_progress=sys.stderr.isatty())
    minutes = (time.perf_counter() - start) / 60
    valid = [r for r in records if r.get("split") == "validation"]
    metric = SELECTION_METRIC[task]
    best = max(valid, key=lambda r: r[metric])
    settings = asdict(load_run(run_dir)[1])  # as the run filled them in: its length, stride and periods
    result = {
        "plan": plan,
        "task": task,
        "init": init,
        "seed": seed,
        "settings": settings,
        "metric": metric,
        "best": best,
        "validations": valid,
        "train": [{k: r[k] for k in ("step", "loss", "lr") if k in r} for r in records if "loss" in r],
        "minutes": minutes,
        **provenance(),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_json(path, result)
    print(f"{name}: best {metric} {best[metric]:.4f} at step {best['step']} ({minutes:.1f} min)", flush=True)
    return result


def chosen_lr(plan: str, init: str, out: Path, smoke: bool = False) -> float:
    "The learning rate of `LRS` whose seed-0 run of `plan` from `init` validates best (running what is missing)."
    task = FULL_PLANS[plan]["task"]
    scores = {lr: run(plan, init, 0, out, smoke, lr)["best"][SELECTION_METRIC[task]] for lr in LRS}
    return max(scores, key=scores.get)


def run_full(plans: list[str], out: Path, smoke: bool = False, extra: bool = False) -> None:
    """Every full-data plan: the learning rate chosen per start, then the seeds; `extra` adds random seeds after
    all required runs, so that a stopped study spends its time on what the table needs first."""
    for plan in plans:
        for init in ("pretrained", "random"):
            lr = chosen_lr(plan, init, out, smoke)
            for seed in SEEDS if init == "pretrained" else ():
                run(plan, init, seed, out, smoke, lr)
    for plan in plans if extra else ():
        lr = chosen_lr(plan, "random", out, smoke)
        for seed in EXTRA_RANDOM_SEEDS:
            run(plan, "random", seed, out, smoke, lr)


def cell(results: list[dict], task: str) -> str:
    "Mean and spread (sample standard deviation) of the best validation score over seeds, in percent."
    metric = SELECTION_METRIC[task]
    scores = [100 * r["best"][metric] for r in results]
    text = f"{statistics.mean(scores):.1f}"
    if len(scores) > 1:
        text += f" ± {statistics.stdev(scores):.1f}"
    if task == "squad":
        text += f" ({statistics.mean(100 * r['best']['exact_match'] for r in results):.1f})"
    return text


def report(out: Path, readme: Path) -> None:
    "Write `out/README.md` and `readme`'s `finetune` block from the result files in `out/results`."
    results = [read_json(p) for p in sorted((out / "results").glob("*.json"))]
    rows = []
    for plan in PLANS:
        task = PLANS[plan].get("task", plan)
        mine = {
            init: [r for r in results if r.get("plan", r["task"]) == plan and r["init"] == init]
            for init in ("pretrained", "random")
        }
        if not all(mine.values()):
            continue
        s = mine["pretrained"][0]["settings"]
        examples = f"{s['train_examples']:,}" if s["train_examples"] else "all"
        minutes = statistics.mean(r["minutes"] for r in mine["pretrained"] + mine["random"])
        metric = SELECTION_METRIC[task]
        length = s["max_seq_len"] or default_seq_len(task)  # older results kept the settings as given
        gain = 100 * (
            statistics.mean(r["best"][metric] for r in mine["pretrained"])
            - statistics.mean(r["best"][metric] for r in mine["random"])
        )
        rows.append(
            f"| {TITLES[task]} (`{plan}`) | {cell(mine['pretrained'], task)} | {cell(mine['random'], task)} | "
            f"{gain:+.1f} | {PUBLISHED.get(task, '–')} | {len(mine['pretrained'])} | {examples} | "
            f"{s['epochs']:g} | {s['batch_size']} | {s['lr']:g} | {length} | {minutes:.1f} |"
        )
    machines = sorted({f"{r['machine']}, {r['threads']} thread(s)" for r in results})
    body = f"""Generated by `python experiments/finetune_study.py --report` from `experiments/finetune_study/results`.
Each cell: the best validation score over the epochs (validation set: the task's own; offline SQuAD's is its
last 8 dev articles), mean ± standard deviation over the seeds. *pre-trained* starts from the course model
(`models/course-mini`), *random* from the same architecture with random weights, same budget. Machine:
{"; ".join(machines)}, shared with other jobs (so the minutes are upper bounds).

| task | pre-trained `mini` | random init | gain | published BERT-Mini | seeds | train examples | epochs | batch | \
lr | max len | min per run |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

`sst2-1k` and `sst2` are two points of one learning curve (1,000 and 8,000 training sentences);
`sst2-lr3e-5` and `sst2-lr3e-4` repeat the 8,000-sentence slice at other learning rates, so that neither start
is judged at a rate that suits only the other. *gain* is pre-trained minus random, in points. The published
column (Turc et al. 2019, BERT-Mini, 4 layers x 256, pre-trained on BookCorpus and Wikipedia for far longer)
is on the GLUE test set and is there for scale only; the course model saw WikiText-2's 2M words."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text("# Fine-tuning study\n\n" + body + "\n")
    update_readme(readme, "finetune", body)
    print(body)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("run", "report"), nargs="?", default="report")
    every = [*PLANS, *FULL_PLANS]
    p.add_argument(
        "plans", nargs="*", default=list(FULL_PLANS), help="plans to run (the full-data ones): " + ", ".join(every)
    )
    p.add_argument("--report", action="store_true", help="only write the tables")
    p.add_argument("--extra", action="store_true", help="then 2 more random-init seeds of each full-data plan")
    output_options(p, HERE, smoke="fine-tune on 64 examples for one epoch and validate on 64")
    args = parse(p)
    unknown = set(args.plans) - set(every)
    if unknown:
        p.error(f"unknown plan(s) {sorted(unknown)}; choose from {every}")
    if args.command == "run" and not args.report:
        for plan in (p for p in args.plans if p in PLANS):
            for seed in PLANS[plan]["seeds"]:
                for init in ("pretrained", "random"):
                    run(plan, init, seed, args.out, args.smoke)
        run_full([p for p in args.plans if p in FULL_PLANS], args.out, args.smoke, args.extra)
    report(args.out, args.readme)


if __name__ == "__main__":
    main()
