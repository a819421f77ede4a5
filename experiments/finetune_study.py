"""What pre-training is worth: every task fine-tuned from the course model (`models/course-mini`) and from the
same architecture with random weights, under the same budget, with several seeds where runs are cheap.

Hand-written; not part of the library. Each run is one `bertlib.recipes.finetune.finetune` call into
`experiments/finetune_study/runs/<name>` (ignored by git); its result (the best validation over the epochs,
minutes, machine, the training curve) goes to `finetune_study/results/<name>.json`. `--report` turns the results of
the full-data plans (`FULL_PLANS`) into the `finetune` block of the site's page `docs/finetuning.md` and
`finetune_study/README.md` (with the learning rates tried and the earlier slices, `PLANS`) and
`finetune_study/curves.png`; the published small models beside them come from `docs/literature_numbers.toml`, and
the targets (`TARGETS`) are judged from the numbers. No number in either is typed by hand. Only complete, full-mode
results are published: a results folder without a full-data result, or one that lacks runs or holds a trial's
(`--smoke`), leaves the page as it is and says so in one line (exit code 2 in the study's own folder).

    OMP_NUM_THREADS=1 BERTLIB_DATA_DIR=... python experiments/finetune_study.py run [PLAN...] [--extra]
    python experiments/finetune_study.py --report
"""

import argparse
import os
import shutil
import statistics
import sys
import time
import tomllib
from dataclasses import asdict
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

from bertlib import load_run
from bertlib.recipes.finetune import SELECTION_METRIC, finetune
from bertlib.tasks.load import SQUAD_OFFLINE_EVAL_ARTICLES
from bertlib.train.checkpoints import checkpoint_step, checkpoints
from bertlib.train.runs import read_metrics
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
# validation for each start from `LRS` (seed 0), then the other seeds run at the chosen rate; more random-init seeds
# run only after every plan's required runs (`--extra`), as time allows. A plan that `extends` another runs only its
# `inits`, at the rate that plan chose for each; it is optional, reported once it has results, then whole or lacking.
FULL_PLANS = {
    "rte-full": dict(task="rte", settings=dict(epochs=3.0, batch_size=32)),
    "conll2003-full": dict(task="conll2003", settings=dict(epochs=4.0, batch_size=32)),
    # four validations an epoch: 67,349 sentences make 2,105 steps of 32
    "sst2-full": dict(task="sst2", settings=dict(epochs=2.0, batch_size=32, eval_every=500)),
    "squad-full": dict(task="squad", settings=dict(epochs=2.0, batch_size=32, max_seq_len=128)),
    # every seed's F1 was still rising when squad-full's 2-epoch schedule ended (issue 40): twice the epochs from the
    # course model; checkpoints every quarter epoch, so a stopped run resumes
    "squad-full-e4": dict(
        task="squad",
        extends="squad-full",
        inits=("pretrained",),
        settings=dict(epochs=4.0, batch_size=32, max_seq_len=128, save_every=240),
    ),
}
LRS = (1e-4, 3e-4)
SEEDS = (0, 1, 2)
EXTRA_RANDOM_SEEDS = (1, 2)
INITS = ("pretrained", "random")
START_NAMES = {"pretrained": "pre-trained", "random": "random init"}
COLOURS = {"pretrained": "tab:blue", "random": "tab:orange"}  # of the learning curves
SMOKE = dict(epochs=1.0, train_examples=64, eval_examples=64)  # --smoke: every plan this small
TITLES = {
    "sst2": "SST-2 accuracy",
    "rte": "RTE accuracy",
    "conll2003": "CoNLL-2003 entity F1",
    "squad": "SQuAD v1.1 F1",
}
# Published scores of small models, with their sources: the entries of this file that name a `task`
LITERATURE = ROOT / "docs" / "literature_numbers.toml"
# What the full-data study should reach (issue 33), on the pre-trained mean over seeds, in points: a number, or the
# name of a model whose published score on the task (in LITERATURE) is the target
TARGETS = {"sst2": "BERT-Tiny", "conll2003": 82.0, "squad": 30.0}
TARGET_GAIN = 3.0  # points that pre-training should be worth over random weights, on every task


def trained_seconds(run_dir: Path) -> float:
    """The training time a stopped run recorded up to its newest checkpoint, where its resumption continues: a resumed
    run's minutes add it to the wall time of the process that finished it (the stopped processes' validations and
    start-up left out)."""
    newest = checkpoint_step(checkpoints(run_dir)[-1])
    records = read_metrics(run_dir / "metrics.jsonl")
    done = [r["train_seconds"] for r in records if "train_seconds" in r and r["step"] <= newest]
    return max(done, default=0.0)


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
    resume = bool(checkpoints(run_dir))  # a run that stopped continues from its newest checkpoint
    if not resume:
        shutil.rmtree(run_dir, ignore_errors=True)
    before = trained_seconds(run_dir) if resume else 0.0
    settings = {**spec["settings"], **({} if lr is None else {"lr": lr}), **(SMOKE if smoke else {})}
    if smoke:
        settings.pop("eval_every", None)
    cfg = FinetuneConfig(task=task, source=str(SOURCE), init=init, seed=seed, log_every=50, **settings)
    start = time.perf_counter()
    records = finetune(run_dir, cfg, resume=resume, show_progress=sys.stderr.isatty())
    minutes = (before + time.perf_counter() - start) / 60
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
        **provenance(smoke),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    write_json(path, result)
    print(f"{name}: best {metric} {best[metric]:.4f} at step {best['step']} ({minutes:.1f} min)", flush=True)
    return result


def chosen_lr(plan: str, init: str, out: Path, smoke: bool = False) -> float:
    """The learning rate of `LRS` whose seed-0 run of `plan` from `init` validates best (running what is missing);
    for a plan that extends another, the rate that plan chose."""
    if parent := FULL_PLANS[plan].get("extends"):
        return chosen_lr(parent, init, out, smoke)
    task = FULL_PLANS[plan]["task"]
    return pick_lr({lr: run(plan, init, 0, out, smoke, lr)["best"][SELECTION_METRIC[task]] for lr in LRS})


def plan_inits(plan: str) -> tuple[str, ...]:
    "The starts (`INITS`) that the full-data `plan` runs."
    return FULL_PLANS[plan].get("inits", INITS)


def run_full(plans: list[str], out: Path, smoke: bool = False, extra: bool = False) -> None:
    """Every full-data plan: the learning rate chosen per start, then the seeds; `extra` adds random seeds after
    all required runs, so that a stopped study spends its time on what the table needs first."""
    for plan in plans:
        for init in plan_inits(plan):
            lr = chosen_lr(plan, init, out, smoke)
            for seed in SEEDS if init == "pretrained" else (0,):
                run(plan, init, seed, out, smoke, lr)
    for plan in (p for p in plans if extra and "random" in plan_inits(p)):
        lr = chosen_lr(plan, "random", out, smoke)
        for seed in EXTRA_RANDOM_SEEDS:
            run(plan, "random", seed, out, smoke, lr)


def pick_lr(scores: dict[float, float]) -> float:
    "The learning rate whose seed-0 run validates best (the first of `LRS` on a tie)."
    return max(scores, key=scores.get)


def percent(results: list[dict], key: str) -> list[float]:
    "The best validation's `key` of each result, in points."
    return [100 * r["best"][key] for r in results]


def mean_score(results: list[dict], task: str) -> float:
    "The mean over seeds of the best validation score, in points."
    return statistics.mean(percent(results, SELECTION_METRIC[task]))


def cell(results: list[dict], task: str, with_count: bool = False) -> str:
    """Mean and spread (sample standard deviation) of the best validation score over seeds, in points; SQuAD's
    exact match in brackets; with `with_count`, the number of seeds."""
    scores = percent(results, SELECTION_METRIC[task])
    text = f"{statistics.mean(scores):.1f}" + (f" ± {statistics.stdev(scores):.1f}" if len(scores) > 1 else "")
    if task == "squad":
        text += f" ({statistics.mean(percent(results, 'exact_match')):.1f})"
    return text + (f" (n={len(scores)})" if with_count else "")


def summarise(plan: str, results: list[dict]) -> dict:
    """What the results of the full-data `plan` hold: for each start, the seed-0 run at each learning rate tried,
    the rate chosen (`pick_lr`; for a plan that extends another, the rate that plan chose) and the runs at that rate
    (the seeds); and the runs the plan needs that are missing (none for an extension without results)."""
    task, parent = FULL_PLANS[plan]["task"], FULL_PLANS[plan].get("extends")
    mine = [r for r in results if r.get("plan") == plan]
    found, lacking = {}, []
    for init in plan_inits(plan):
        rates = LRS
        if parent:
            chose = summarise(parent, results)["starts"].get(init)
            rates = (chose["lr"],) if chose else ()
            if not chose:
                lacking.append(f"{START_NAMES[init]} runs of `{parent}`, to choose the rate")
        tried = {
            r["settings"]["lr"]: r
            for r in mine
            if r["init"] == init and r["seed"] == 0 and r["settings"]["lr"] in rates
        }
        lacking += [f"{START_NAMES[init]} seed 0 at lr {lr:g}" for lr in rates if lr not in tried]
        if not tried:
            continue
        lr = pick_lr({lr: tried[lr]["best"][SELECTION_METRIC[task]] for lr in sorted(tried)})
        runs = sorted((r for r in mine if r["init"] == init and r["settings"]["lr"] == lr), key=lambda r: r["seed"])
        needed = SEEDS if init == "pretrained" else (0,)
        lacking += [f"{START_NAMES[init]} seed {seed}" for seed in needed if seed not in {r["seed"] for r in runs}]
        # the choice holds once every rate has run; until then it is the best so far
        found[init] = {"lr": lr, "tried": tried, "runs": runs, "settled": len(tried) == len(rates)}
    if parent and not mine:
        lacking = []
    return {"plan": plan, "task": task, "starts": found, "lacking": lacking}


def published_scores(path: Path = LITERATURE) -> list[dict]:
    "The published scores of small models on the study's tasks: the entries of `path` that name a `task`."
    return [e for e in tomllib.loads(path.read_text(encoding="utf-8"))["number"] if "task" in e]


def targets(published: list[dict]) -> dict[str, tuple[float, str]]:
    "Each task's target for the pre-trained mean, in points, and whose it is (a published model's, or the study's)."
    found = {}
    for task, target in TARGETS.items():
        if isinstance(target, str):  # that model's published score on the task
            entry = next(e for e in published if e["model"] == target and e["task"] == task)
            found[task] = (float(entry["value"]), f"{target}'s {entry['split']}-set score")
        else:
            found[task] = (target, "the study's")
    return found


def spread(summary: dict) -> float | None:
    """Twice the larger standard deviation over seeds of the two starts of a plan, in points: a gain within it could
    be the seeds' noise (notebook 10's rule); None when a start has one seed."""
    scores = [percent(start["runs"], SELECTION_METRIC[summary["task"]]) for start in summary["starts"].values()]
    return 2 * max(statistics.stdev(s) for s in scores) if min(map(len, scores)) > 1 else None


def judgement(summaries: list[dict], published: list[dict]) -> str:
    """The targets, each judged from the numbers (met, or missed by how much; "so far" where the plan lacks runs):
    a target that is a published test-set score is set beside our dev-set score without a verdict, and a gain is met
    only where it is also larger than twice the seeds' spread. A score is the task's last plan with pre-trained runs
    (an extension, once it has them, named), a gain its last plan with both starts. Those that cannot be judged for
    lack of results from both starts are named."""
    complete = {s["task"]: s for s in summaries if len(s["starts"]) == len(INITS)}
    latest = {s["task"]: s for s in summaries if s["task"] in complete and "pretrained" in s["starts"]}
    pre = {task: mean_score(s["starts"]["pretrained"]["runs"], task) for task, s in latest.items()}
    gain = {
        task: mean_score(s["starts"]["pretrained"]["runs"], task) - mean_score(s["starts"]["random"]["runs"], task)
        for task, s in complete.items()
    }

    def verdict(summary: dict, value: float, target: float) -> str:
        met = "met" if value >= target else f"missed by {target - value:.1f} points"
        return met + (" so far" if summary["lacking"] else "")

    def score(task: str, target: float, whose: str) -> str:
        plan = f" (`{latest[task]['plan']}`)" if latest[task] is not complete[task] else ""
        if "test-set" in whose:  # a dev score against a test score is two measurements, not a verdict
            return f": {pre[task]:.1f}{plan} on the dev set, a different measurement, so no verdict"
        return f": {pre[task]:.1f}{plan}, {verdict(latest[task], pre[task], target)}"

    def worth(task: str, value: float) -> str:
        noise = spread(complete[task])
        plan = f" (`{complete[task]['plan']}`)" if latest[task] is not complete[task] else ""
        if value >= TARGET_GAIN and noise is not None and abs(value) <= noise:
            return f"{TITLES[task]} {value:+.1f}{plan}, within twice the seeds' spread ({noise:.1f}), so not shown"
        return f"{TITLES[task]} {value:+.1f}{plan}, {verdict(complete[task], value, TARGET_GAIN)}"

    scores = [
        f"{TITLES[task]} ≥ {target:g} ({whose})" + (score(task, target, whose) if task in pre else "")
        for task, (target, whose) in targets(published).items()
    ]
    gains = [worth(task, value) for task, value in gain.items()]
    text = (
        "**Targets**, on the pre-trained mean: " + "; ".join(scores) + f". Pre-training worth at least "
        f"{TARGET_GAIN:g} points over random weights on every task, and more than twice the larger standard "
        "deviation over seeds of the two starts" + (": " + "; ".join(gains) if gains else "") + "."
    )
    unjudged = [TITLES[s["task"]] for s in summaries if s["task"] not in complete]
    if unjudged:
        text += f" Not judged yet, for want of results from both starts: {', '.join(unjudged)}."
    return text


def missing_runs(summaries: list[dict]) -> list[str]:
    "What the full-data results lack, plan by plan: nothing when they are whole."
    return [
        f"`{s['plan']}`: " + (", ".join(s["lacking"]) if s["starts"] else "no results yet")
        for s in summaries
        if s["lacking"]
    ]


def lacking(summaries: list[dict]) -> str:
    "The sentence of a report made of partial results: what it lacks, or nothing when they are whole."
    if not (missing := missing_runs(summaries)):
        return ""
    return (
        "**Not in the table yet**, so it is partial: " + "; ".join(missing) + " (`python experiments/finetune_study.py "
        "run PLAN` runs what a plan lacks)."
    )


def extensions(summaries: list[dict]) -> str:
    """A sentence, and a space after it, on each plan with results that extends another: the starts it runs and the
    settings it changes."""
    said = []
    for s in (s for s in summaries if s["starts"] and FULL_PLANS[s["plan"]].get("extends")):
        parent = FULL_PLANS[s["plan"]]["extends"]
        mine, theirs = FULL_PLANS[s["plan"]]["settings"], FULL_PLANS[parent]["settings"]
        changed = [f"{k} {v:g} instead of {theirs[k]:g}" for k, v in mine.items() if k in theirs and theirs[k] != v]
        said.append(
            f"`{s['plan']}` runs `{parent}` again, fresh, with {', '.join(changed)} (a schedule of its own), from the "
            f"{' and '.join(START_NAMES[i] for i in plan_inits(s['plan']))} start only, at the rate `{parent}` chose. "
        )
    return "".join(said)


def examples(settings: dict) -> str:
    "How many training examples a run used: all, or its slice."
    return f"{settings['train_examples']:,}" if settings["train_examples"] else "all"


def full_table(summaries: list[dict]) -> list[str]:
    "The page's table: one row per task with results from either start."
    lines = [
        "| task | pre-trained `mini` | random init | gain | lr: pre-trained, random | train examples | epochs | "
        "batch | max len | steps | min per run |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    shown = [s for s in summaries if s["starts"]]
    every = [r for s in shown for start in s["starts"].values() for r in start["runs"]]
    mixed = len({machine_kind(r) for r in every}) > 1
    for s in shown:
        task, starts = s["task"], s["starts"]
        runs = [r for start in starts.values() for r in start["runs"]]
        settings = runs[0]["settings"]
        cells = [cell(starts[init]["runs"], task, with_count=True) if init in starts else "–" for init in INITS]
        gain = "–"
        if len(starts) == len(INITS):
            gain = f"{mean_score(starts['pretrained']['runs'], task) - mean_score(starts['random']['runs'], task):+.1f}"
        lrs = ", ".join(
            f"{starts[init]['lr']:g}{'' if starts[init]['settled'] else ' so far'}" if init in starts else "–"
            for init in INITS
        )
        lines.append(
            f"| {TITLES[task]}{' (EM)' if task == 'squad' else ''} (`{s['plan']}`) | {' | '.join(cells)} | {gain} | "
            f"{lrs} | {examples(settings)} | {settings['epochs']:g} | {settings['batch_size']} | "
            f"{settings['max_seq_len']} | {runs[0]['train'][-1]['step']:,} | {minutes_by_machine(runs, mixed)} |"
        )
    return lines


def machine_kind(result: dict) -> str:
    "A short name for the machine that made `result`: its GPU, else its CPU (from `bertlib.utils.environment.machine`)."
    parts = (result.get("machine") or "unrecorded").split("; ")
    gpu = next((p for p in parts if p.startswith("NVIDIA")), None)
    return gpu.removeprefix("NVIDIA ") if gpu else parts[0]


def minutes_by_machine(runs: list[dict], named: bool) -> str:
    """The mean minutes of `runs`, one figure per machine, since a GPU run and a CPU run of the same plan differ
    20-fold; each named when `runs` or `named` (the table mixes machines) calls for it."""
    kinds = sorted({machine_kind(r) for r in runs})
    means = {k: statistics.mean(r["minutes"] for r in runs if machine_kind(r) == k) for k in kinds}
    return ", ".join(f"{m:.1f}" + (f" ({k})" if named or len(kinds) > 1 else "") for k, m in means.items())


def published_table(summaries: list[dict], published: list[dict]) -> list[str]:
    "Our pre-trained and random-init means beside the published small models', each row marked dev or test."
    tasks = list(TITLES)
    model_config = load_run(SOURCE)[0]
    lines = [
        "| model | shape | " + " | ".join(TITLES[t] for t in tasks) + " | set | source |",
        "|---|---|" + "---:|" * len(tasks) + "---|---|",
    ]
    ours = {}  # a task's first plan with results (squad-full before squad-full-e4)
    for s in summaries:
        if s["starts"]:
            ours.setdefault(s["task"], s["starts"])
    for init in INITS:
        cells = []
        for task in tasks:
            runs = ours.get(task, {}).get(init, {}).get("runs")
            squad = task == "squad" and runs
            em = f", EM {statistics.mean(percent(runs, 'exact_match')):.1f}" if squad else ""
            cells.append(f"{'F1 ' if squad else ''}{mean_score(runs, task):.1f}{em}" if runs else "–")
        lines.append(
            f"| course `mini`, {START_NAMES[init]} (this study) | {model_config.num_hidden_layers} layers, hidden "
            f"{model_config.hidden_size} | {' | '.join(cells)} | dev | this study, mean over seeds |"
        )
    rows: dict[tuple[str, str, str], dict[str, dict]] = {}
    for entry in published:
        rows.setdefault((entry["model"], entry["split"], entry["source"]), {})[entry["task"]] = entry
    for (model, split, source), entries in rows.items():
        cells = [
            ("EM " if e["metric"] == "exact_match" else "") + e["value"] if (e := entries.get(task)) else "–"
            for task in tasks
        ]
        shape = next(iter(entries.values()))["shape"]
        lines.append(f"| {model} | {shape} | {' | '.join(cells)} | {split} | {source} |")
    return lines


def _curve(axes: tuple, metric: str, result: dict, colour: str, chosen: bool, label: str | None) -> None:
    "One run's training loss (on `axes[0]`) and validations (`axes[1]`): solid at the chosen rate, else dashed."
    style = dict(color=colour, lw=1.2 if chosen else 0.9, ls="-" if chosen else "--", alpha=0.9)
    train, valid = result["train"], result["validations"]
    axes[0].plot([x["step"] for x in train], [x["loss"] for x in train], **style)
    axes[1].plot([x["step"] for x in valid], [100 * x[metric] for x in valid], marker=".", label=label, **style)


def learning_curves(summaries: list[dict], path: Path) -> None:
    """Training loss and validation score against the step, one column per task: each start's runs at its chosen
    learning rate (one line per seed), and its seed-0 run at the rate not chosen, dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in summaries if s["starts"]]
    fig, axes = plt.subplots(2, len(shown), figsize=(4.2 * len(shown), 6.4), squeeze=False)
    for (loss_ax, valid_ax), s in zip(axes.T, shown, strict=True):
        metric = SELECTION_METRIC[s["task"]]
        for init, start in s["starts"].items():
            for seed, result in enumerate(start["runs"]):  # one label for all the seeds
                label = f"{START_NAMES[init]}, lr {start['lr']:g}" if seed == 0 else None
                _curve((loss_ax, valid_ax), metric, result, COLOURS[init], True, label)
            for lr, result in start["tried"].items():
                if lr != start["lr"]:
                    label = f"{START_NAMES[init]}, lr {lr:g} (not chosen)"
                    _curve((loss_ax, valid_ax), metric, result, COLOURS[init], False, label)
        loss_ax.set(title=f"{s['plan']}: {TITLES[s['task']]}", ylabel="training loss")
        valid_ax.set(xlabel="step", ylabel=f"validation {metric} (points)")
        valid_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def lr_table(summaries: list[dict]) -> list[str]:
    "The study README's table of the learning rates tried: each start's seed-0 score at each, and the one chosen."
    lines = [
        "| task | start | " + " | ".join(f"lr {lr:g}" for lr in LRS) + " | chosen |",
        "|---|---|" + "---:|" * len(LRS) + "---:|",
    ]
    for s in summaries:
        for init, start in s["starts"].items():
            scores = [cell([start["tried"][lr]], s["task"]) if lr in start["tried"] else "not run" for lr in LRS]
            chose = f" (`{parent}`'s)" if (parent := FULL_PLANS[s["plan"]].get("extends")) else ""
            lines.append(
                f"| {TITLES[s['task']]} (`{s['plan']}`) | {START_NAMES[init]} | {' | '.join(scores)} | "
                f"{start['lr']:g}{'' if start['settled'] else ' so far'}{chose} |"
            )
    return lines


def slice_table(results: list[dict]) -> list[str]:
    "The earlier plans on slices of the data (`PLANS`), as they were measured; nothing when none is in `results`."
    trained = load_run(SOURCE)[1].max_seq_len
    lines = [
        "| task | pre-trained `mini` | random init | gain | seeds | train examples | epochs | batch | lr | max len | "
        "min per run |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for plan, spec in PLANS.items():
        task = spec.get("task", plan)
        mine = {init: [r for r in results if r.get("plan", r["task"]) == plan and r["init"] == init] for init in INITS}
        if not all(mine.values()):
            continue
        s = mine["pretrained"][0]["settings"]
        length = s["max_seq_len"] or default_seq_len(task)  # older results kept the settings as given
        past = f" (past the {trained} positions the course model was trained on)" if length > trained else ""
        gain = mean_score(mine["pretrained"], task) - mean_score(mine["random"], task)
        lines.append(
            f"| {TITLES[task]}{' (EM)' if task == 'squad' else ''} (`{plan}`) | {cell(mine['pretrained'], task)} | "
            f"{cell(mine['random'], task)} | {gain:+.1f} | {len(mine['pretrained'])} | "
            f"{examples(s)} | {s['epochs']:g} | {s['batch_size']} | "
            f"{s['lr']:g} | {length}{past} | "
            f"{statistics.mean(r['minutes'] for r in mine['pretrained'] + mine['random']):.1f} |"
        )
    return lines if len(lines) > 2 else []


def machines(results: list[dict]) -> str:
    "The machines and threads that made `results`, as they recorded them."
    made = {(r.get("machine") or "a machine it did not record", r.get("threads")) for r in results}
    return " and ".join(
        sorted(f"{m} ({'threads unrecorded' if n is None else f'{n} thread' + 's' * (n != 1)})" for m, n in made)
    )


def block(summaries: list[dict], published: list[dict], where: str, figure: str, rates: str) -> str:
    """The page's `finetune` block (the study report's head) from the results in `where`: the full-data table, the
    targets judged, what is lacking, the published models beside ours and the learning curves (`figure`); `rates`:
    where the learning rates tried are."""
    runs = [r for s in summaries for start in s["starts"].values() for r in start["runs"]]
    squad = next((r["settings"] for r in runs if r["task"] == "squad"), None)
    windows = f" (SQuAD in windows of {squad['max_seq_len']} tokens, {squad['doc_stride']} apart)" if squad else ""
    trained = load_run(SOURCE)[1].max_seq_len
    parts = [
        f"Generated by `python experiments/finetune_study.py --report` from `{where}`. Every training example of "
        f"each task (unless the table says otherwise), at the {trained} tokens the course model was pre-trained "
        f"on{windows}. "
        "Each cell: the best validation score over the epochs, mean ± standard deviation over the n seeds. "
        "*pre-trained* starts from the course model (`models/course-mini`), *random* from the same architecture "
        "with random weights, with the same budget; each start's learning rate was chosen on validation from "
        f"{' and '.join(f'{lr:g}' for lr in LRS)} with seed 0, and its other seeds ran at it ({rates}). "
        f"{extensions(summaries)}*gain* is pre-trained minus random, in points. Validation: the task's own (GLUE's "
        "and CoNLL's dev files); offline, "
        f"SQuAD has only its dev file, whose last {SQUAD_OFFLINE_EVAL_ARTICLES} articles validate and the others "
        f"train. Machines: {machines(runs)}; each run's machine is in its result file. The runs shared their machine "
        f"with other jobs{', several at a time on one GPU' if any('NVIDIA' in r['machine'] for r in runs) else ''}, "
        "so the minutes are upper bounds.",
        "",
        *full_table(summaries),
        "",
        judgement(summaries, published),
        "",
    ]
    if missing := lacking(summaries):
        parts += [missing, ""]
    parts += [
        "Beside published small models (pre-trained on far more text than WikiText-2; a GLUE *test* score and a "
        "*dev* score are different measurements, and offline SQuAD trains on part of the dev file only, so its "
        "scores are not comparable with published ones; the numbers and their sources: "
        "`docs/literature_numbers.toml`):",
        "",
        *published_table(summaries, published),
        "",
        f"![learning curves]({figure}) Every run's training loss and validations against the step, per task "
        "(dashed: the learning rate not chosen).",
    ]
    return "\n".join(parts)


def report(out: Path, page: Path) -> None:
    """Write `out/README.md`, `out/curves.png` and `page`'s `finetune` block from the result files in `out/results`;
    `MissingResults` (before anything is written) when they hold no full-data result, or when `out` is the study's
    own folder and its results are partial or a trial's. Elsewhere such results make `out`'s report only."""
    how = f"run `python experiments/finetune_study.py run {' '.join(FULL_PLANS)}` first"
    needs = ("task", "init", "seed", "settings", "best", "minutes")
    found = {p: read_json(p, needs) for p in result_files(out / "results", how=how)}
    results = list(found.values())
    summaries = sorted((summarise(plan, results) for plan in FULL_PLANS), key=lambda s: list(TITLES).index(s["task"]))
    if not any(s["starts"] for s in summaries):
        raise MissingResults(f"{out / 'results'} holds no full-data result ({', '.join(FULL_PLANS)}); {how}")
    full_data = {p: r for p, r in found.items() if r.get("plan") in FULL_PLANS}
    missing = missing_runs(summaries)
    partial = f"the full-data plans lack runs ({'; '.join(missing)})" if missing else None
    why_not = unpublished(full_data, partial)
    check_publishable(out, page, why_not)
    published = published_scores()
    learning_curves(summaries, out / "curves.png")
    figure = os.path.relpath(out / "curves.png", page.parent)
    study_readme = os.path.relpath(out / "README.md", page.parent)
    where = (out / "results").resolve()
    where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    body = block(summaries, published, where, figure, f"every rate's scores: [the study's report]({study_readme})")
    slices = slice_table(results)
    sst2, small = PLANS["sst2"]["settings"], PLANS["sst2-1k"]["settings"]
    earlier = [
        "## Earlier slices",
        "",
        "The plans before the full-data ones, on slices of the training sets, as measured (*gain* in points, "
        f"pre-trained minus random). `sst2-1k` and `sst2` are two points of one learning curve "
        f"({small['train_examples']:,} and {sst2['train_examples']:,} training sentences); `sst2-lr3e-5` and "
        f"`sst2-lr3e-4` repeat the {sst2['train_examples']:,}-sentence slice at other learning rates. `squad` ran "
        f"before fine-tuning refused lengths past the course model's trained positions, so part of each of its "
        f"windows sat on untrained ones.",
        "",
        *slices,
    ]
    study = [
        "# Fine-tuning study",
        "",
        *([f"**Not published**: {why_not}.", ""] if why_not else []),
        block(summaries, published, where, "curves.png", "every rate's scores: below"),
        "",
        "## Learning rates tried",
        "",
        "Seed 0 of each start at each rate; the rate with the best validation is chosen:",
        "",
        *lr_table(summaries),
        *(["", *earlier] if slices else []),
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text("\n".join(study) + "\n", encoding="utf-8")
    publish_block("finetune", body, page, why_not)
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
    output_options(p, HERE, "finetune", smoke="fine-tune on 64 examples for one epoch and validate on 64")
    args = parse(p)
    unknown = set(args.plans) - set(every)
    if unknown:
        p.error(f"unknown plan(s) {sorted(unknown)}; choose from {every}")
    if args.command == "run" and not args.report:
        for plan in (p for p in args.plans if p in PLANS):
            for seed in PLANS[plan]["seeds"]:
                for init in INITS:
                    run(plan, init, seed, args.out, args.smoke)
        run_full([p for p in args.plans if p in FULL_PLANS], args.out, args.smoke, args.extra)
    report(args.out, args.page)


if __name__ == "__main__":
    refuse_missing(main)
