"""Training on a shared CPU: the README's main command's step (bertlib's `mini`, batches of 8 sequences of 128 tokens,
MLM + NSP, AdamW) timed alone and beside one process that keeps a core busy, for each way of setting the CPU threads.

    python benchmarks/shared_cpu.py                 # writes results/shared_cpu.json; then python benchmarks/report.py
    python benchmarks/shared_cpu.py --rounds 1      # a quicker look
    python benchmarks/shared_cpu.py --partway 0     # without the run that a busy process joins partway

Each timing runs in a fresh process, since OpenMP reads its environment when torch loads; the settings and the two
conditions take turns, round after round, so that load from elsewhere hits them alike, and the median of the rounds
is kept. `bertlib's choice` is what training does when told nothing (`bertlib.utils.devices.cpu_threads`: as many
threads as CPUs are idle when it starts). The report gives it as ratios: against one thread beside the busy process (the
target is 0.85 or more) and against the best setting when the machine is quiet (0.95 or more). The machine's load
average is recorded with every timing, because "quiet" is only as quiet as the machine was.

The thread count is chosen when a run starts, so each round also times a run of two threads that a busy process joins
partway (`--partway` seconds in, 20 by default): its speed before and after is the table's last row, the real size of
the slowdown a run that started on a quiet machine meets (which `bertlib.train.loop.watch_pace` then reports).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

RESULTS = Path(__file__).resolve().parent / "results" / "shared_cpu.json"
CONDITIONS = ("quiet", "beside a busy process")
# name: (threads to set, or "choose" for bertlib's choice, or None for torch's default; extra environment)
SETTINGS: dict[str, tuple[int | str | None, dict[str, str]]] = {
    "one thread": (1, {}),
    "all cores": (None, {}),
    "all cores, passive wait (OMP_WAIT_POLICY=PASSIVE)": (None, {"OMP_WAIT_POLICY": "PASSIVE"}),
    "bertlib's choice": ("choose", {}),
}
OWN = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # the environment each setting decides alone
PARTWAY = "two threads, a busy process started partway (before it, after it)"  # the quiet and busy cells of one run
TOKENS = 8 * 128  # a step's tokens


def main_command_step(threads: int | None) -> Any:
    "The main command's training step on a fresh `mini`, with `threads` set (None: torch's), after 3 of warm-up."
    import torch
    from train_step import make_batch, training_step

    from bertlib.model.bert import BertForPreTraining
    from bertlib.model.config import BertConfig

    if threads is not None:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # as the training loop does
    config = BertConfig.from_preset("mini")
    torch.manual_seed(0)
    step = training_step(
        BertForPreTraining(config).train(), [make_batch(config, 8, 128)], torch.device("cpu"), False, ours=True
    )
    for _ in range(3):
        step()
    return step


def worker(setting: str, steps: int) -> dict[str, Any]:
    "In a fresh process: set the threads as `setting` says, then time `steps` training steps."
    import torch

    from bertlib.utils.devices import cpu_threads

    threads, idle = SETTINGS[setting][0], None
    if threads == "choose":
        threads, idle = cpu_threads()
    step = main_command_step(threads)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return {
        "tokens_per_second": steps * TOKENS / (time.perf_counter() - start),
        "threads": torch.get_num_threads(),
        "idle_cpus": idle,
    }


def partway_worker(seconds: float) -> dict[str, Any]:
    """In a fresh process: train with two threads for `seconds`, start a process that keeps a core busy, and train on
    for as long again (3 steps at least); the tokens/s before and after."""

    step = main_command_step(2)

    def timed(until: float, at_least: int = 1) -> float:
        start, steps = time.perf_counter(), 0
        while steps < at_least or time.perf_counter() - start < until:
            step()
            steps += 1
        return steps * TOKENS / (time.perf_counter() - start)

    before = timed(seconds)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        after = timed(seconds, at_least=3)
    finally:
        busy.kill()
        busy.wait()
    return {"before": before, "after": after, "threads": 2}


def _in_a_fresh_process(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run this script's worker with `args` in a fresh process (the thread settings of the environment replaced by
    `env`); what it prints, with the load average as it started."""
    env = {k: v for k, v in os.environ.items() if k not in OWN} | env
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, check=True).stdout
    return {**json.loads(out.strip().splitlines()[-1]), "load_average": load}


def time_setting(setting: str, steps: int) -> dict[str, Any]:
    return _in_a_fresh_process(["--worker", setting, "--steps", str(steps)], SETTINGS[setting][1])


def time_partway(seconds: float) -> dict[str, Any]:
    return _in_a_fresh_process(["--partway-worker", str(seconds)], {})


def measure(rounds: int, steps: int, partway: float) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every setting in every condition, `rounds` times, taking turns; a busy process is started for its condition.
    With `partway` seconds, each round also times a two-thread run that a busy process joins that far in (`PARTWAY`)."""
    settings = [*SETTINGS, PARTWAY] if partway else list(SETTINGS)
    timings: dict[str, dict[str, list[dict[str, Any]]]] = {c: {s: [] for s in settings} for c in CONDITIONS}
    for round_ in range(rounds):
        for condition in CONDITIONS:
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if condition != "quiet" else None
            try:
                time.sleep(1.0 if busy else 0.0)  # let the busy process settle on its core
                for setting in SETTINGS:
                    timings[condition][setting].append(time_setting(setting, steps))
                    t = timings[condition][setting][-1]
                    print(
                        f"round {round_ + 1} {condition:>22}: {setting:<50} {t['tokens_per_second']:>7,.0f} tokens/s "
                        f"({t['threads']} threads, load {t['load_average']:.1f})",
                        flush=True,
                    )
            finally:
                if busy:
                    busy.kill()
                    busy.wait()
        if partway:
            t = time_partway(partway)
            for condition, when in zip(CONDITIONS, ("before", "after"), strict=True):
                timings[condition][PARTWAY].append(
                    {"tokens_per_second": t[when], "threads": t["threads"], "load_average": t["load_average"]}
                )
            print(
                f"round {round_ + 1} {PARTWAY}: {t['before']:,.0f} tokens/s before, {t['after']:,.0f} after "
                f"({t['before'] / t['after']:.1f}x slower; load {t['load_average']:.1f})",
                flush=True,
            )
    return timings


def summary(timings: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    "Medians per condition and setting, and bertlib's choice as the ratios the targets are stated in."
    medians = {
        c: {s: statistics.median(t["tokens_per_second"] for t in runs) for s, runs in settings.items()}
        for c, settings in timings.items()
    }
    quiet, busy = medians["quiet"], medians["beside a busy process"]
    return {
        "medians": medians,
        "choice_vs_best_quiet": quiet["bertlib's choice"] / max(quiet[s] for s in SETTINGS),
        "choice_vs_one_thread_busy": busy["bertlib's choice"] / busy["one thread"],
        "load_average": {
            c: [t["load_average"] for runs in settings.values() for t in runs] for c, settings in timings.items()
        },
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="times each setting is timed in each condition (3)")
    p.add_argument("--steps", type=int, default=20, help="training steps per timing (20)")
    p.add_argument(
        "--partway", type=float, default=20.0, help="seconds into a two-thread run a busy process joins (20; 0: no run)"
    )
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--worker", choices=tuple(SETTINGS), help=argparse.SUPPRESS)
    p.add_argument("--partway-worker", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps)))
        return
    if args.partway_worker:
        print(json.dumps(partway_worker(args.partway_worker)))
        return
    import torch
    from bench_utils import machine_info, provenance, write_results

    timings = measure(args.rounds, args.steps, args.partway)
    data = {
        "benchmark": "shared_cpu",
        "machine": machine_info(torch.device("cpu")),
        "steps": args.steps,
        "rounds": args.rounds,
        "partway_seconds": args.partway,
        "timings": timings,
        **summary(timings),
        "provenance": provenance(p, args, "rounds", "steps"),
    }
    print(
        f"bertlib's choice: {data['choice_vs_best_quiet']:.2f} of the best setting's speed when quiet, "
        f"{data['choice_vs_one_thread_busy']:.2f} of one thread's beside a busy process"
    )
    print(f"wrote {write_results(args.output, data)}")


if __name__ == "__main__":
    main()
