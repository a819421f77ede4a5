"""Training on a shared CPU: the README's main command's step (bertlib's `mini`, batches of 8 sequences of 128 tokens,
MLM + NSP, AdamW) timed alone and beside one process that keeps a core busy, for each way of setting the CPU threads.

    python benchmarks/shared_cpu.py                 # writes results/shared_cpu.json; then python benchmarks/report.py
    python benchmarks/shared_cpu.py --rounds 1      # a quicker look

Each timing runs in a fresh process, since OpenMP reads its environment when torch loads; the settings and the two
conditions take turns, round after round, so that load from elsewhere hits them alike, and the median of the rounds
is kept. `bertlib's choice` is what training does when told nothing (`bertlib.utils.devices.cpu_threads`: as many
threads as CPUs are idle when it starts). The report gives it as ratios: against one thread beside the busy process (the
target is 0.85 or more) and against the best setting when the machine is quiet (0.95 or more). The machine's load
average is recorded with every timing, because "quiet" is only as quiet as the machine was.
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


def worker(setting: str, steps: int) -> dict[str, Any]:
    "In a fresh process: set the threads as `setting` says, then time `steps` training steps after 3 of warm-up."
    import torch
    from train_step import make_batch, training_step

    from bertlib.model.bert import BertForPreTraining
    from bertlib.model.config import BertConfig
    from bertlib.utils.devices import cpu_threads

    threads, idle = SETTINGS[setting][0], None
    if threads == "choose":
        threads, idle = cpu_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # as the training loop does
    config = BertConfig.from_preset("mini")
    torch.manual_seed(0)
    step = training_step(BertForPreTraining(config).train(), [make_batch(config, 8, 128)], torch.device("cpu"), False)
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return {
        "tokens_per_second": steps * 8 * 128 / (time.perf_counter() - start),
        "threads": torch.get_num_threads(),
        "idle_cpus": idle,
    }


def time_setting(setting: str, steps: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in OWN} | SETTINGS[setting][1]
    load = os.getloadavg()[0]
    out = subprocess.run(
        [sys.executable, __file__, "--worker", setting, "--steps", str(steps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {**json.loads(out.strip().splitlines()[-1]), "load_average": load}


def measure(rounds: int, steps: int) -> dict[str, dict[str, list[dict[str, Any]]]]:
    "Every setting in every condition, `rounds` times, taking turns; a busy process is started for its condition."
    timings: dict[str, dict[str, list[dict[str, Any]]]] = {c: {s: [] for s in SETTINGS} for c in CONDITIONS}
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
        "choice_vs_best_quiet": quiet["bertlib's choice"] / max(quiet.values()),
        "choice_vs_one_thread_busy": busy["bertlib's choice"] / busy["one thread"],
        "load_average": {
            c: [t["load_average"] for runs in settings.values() for t in runs] for c, settings in timings.items()
        },
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="times each setting is timed in each condition (3)")
    p.add_argument("--steps", type=int, default=20, help="training steps per timing (20)")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--worker", choices=tuple(SETTINGS), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps)))
        return
    import torch
    from bench_utils import machine_info, write_results

    timings = measure(args.rounds, args.steps)
    data = {
        "benchmark": "shared_cpu",
        "machine": machine_info(torch.device("cpu")),
        "steps": args.steps,
        "rounds": args.rounds,
        "timings": timings,
        **summary(timings),
    }
    print(
        f"bertlib's choice: {data['choice_vs_best_quiet']:.2f} of the best setting's speed when quiet, "
        f"{data['choice_vs_one_thread_busy']:.2f} of one thread's beside a busy process"
    )
    print(f"wrote {write_results(args.output, data)}")


if __name__ == "__main__":
    main()
