"""Rewrite the README's benchmark section from the JSON files in benchmarks/results/.

    python benchmarks/report.py            # rewrites README.md between the benchmark markers
    python benchmarks/report.py --print    # prints the section instead

The numbers in the README are never typed by hand: run the benchmarks, then this script. A folder without results
is refused (one line, exit code 2) rather than written into the README as "nothing measured"; a result missing from
a folder that holds others is named in the section, with the command that makes it.

This module also holds what every report of the repository shares (the experiments' reports load it through
`experiments/study.py`): the README-block writer and the refusal of missing results.
"""

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
START, END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"
MIB = 2**20


class MissingResults(Exception):
    """The results a report is made of are missing, empty or unreadable. Report scripts turn it into one line on
    stderr and exit code 2 (`refuse_missing`), before they write anything: a README block never trades measured
    numbers for none."""


def result_files(folder: Path, pattern: str = "*.json", *, how: str = "") -> list[Path]:
    """The files of `folder` that match `pattern`, sorted; `MissingResults` naming the folder when it does not exist
    or holds none (`how`: the command that makes them, for the message)."""
    found = sorted(folder.glob(pattern)) if folder.is_dir() else []
    if not found:
        where = f"{folder} holds no result files ({pattern})" if folder.is_dir() else f"{folder} does not exist"
        raise MissingResults(f"{where}: nothing to report, so no README is rewritten" + (f"; {how}" if how else ""))
    return found


def read_result(path: Path) -> dict[str, Any]:
    "A result file; `MissingResults` when it is empty or not JSON (a run stopped while writing it, say)."
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise MissingResults(f"{path} is not a readable result file ({err}): nothing is rewritten") from err


def refuse_missing(main: Callable[[], object]) -> None:
    "Run a report script's `main`; missing results become one line on stderr and exit code 2, the README untouched."
    try:
        main()
    except MissingResults as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _machine(machine: dict[str, Any], settings: dict[str, Any]) -> str:
    where = machine.get("gpu") or f"{machine['cpu']}, {machine['cpu_cores']} cores"
    flush = ", denormals flushed" if settings.get("flush_denormal") else ""
    threads = f"{settings['threads']} thread" + ("s" if settings["threads"] != 1 else "")
    return (
        f"{where}; {threads}{flush}; torch {machine['torch']}, transformers "
        f"{machine.get('transformers', '?')}; {machine['date']}"
    )


def train_step_table(data: dict[str, Any]) -> str:
    "The markdown table of one train_step JSON file."
    gpu = data["machine"]["device"] == "cuda"
    header = [
        "config",
        "parameters",
        "batch x seq",
        "dtype",
        "bertlib tokens/s",
        "transformers tokens/s",
        "speed-up",
        "bertlib peak MiB",
        "transformers peak MiB",
    ]
    if gpu:
        header += ["bertlib MFU", "transformers MFU"]
    lines = [
        f"Training step, {_machine(data['machine'], data['settings'])}:",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for row in data["results"]:
        ours, theirs = row["bertlib"], row["transformers"]
        real = f", WikiText-2 pairs ({row['padding_share']:.0%} padding)" if row.get("data") == "wikitext" else ""
        cells = [
            f"{row['preset']}, vocab {row['vocab_size']:,}{real}",
            f"{row['parameters'] / 1e6:.1f}M",
            f"{row['batch_size']} x {row['seq_len']}",
            row["dtype"] + (" (compiled)" if row.get("compile") else ""),
            f"{ours['tokens_per_second']:,.0f}",
            f"{theirs['tokens_per_second']:,.0f}",
            f"**{row['speedup']:.2f}x**",
        ]
        cells += [
            f"{side['peak_memory_bytes'] / MIB:,.0f}" if "peak_memory_bytes" in side else "not measured"
            for side in (ours, theirs)
        ]
        if gpu:
            cells += [
                f"{side['mfu']:.1%}" if side.get("mfu") is not None else "unknown peak" for side in (ours, theirs)
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if gpu:
        sources = sorted({row.get("peak_flops_source", "") for row in data["results"]})
        lines += [
            f"MFU = (6 x parameters + 12 x layers x seq x hidden) x tokens/s over the card's bf16 dense peak "
            f"({'; '.join(sources)}).",
            "",
        ]
    else:
        lines += [
            "Peak memory on the CPU is the peak RSS of a process that builds one side and runs two steps, or "
            "each real batch once (Python, torch and transformers included, the same for both). Real batches' "
            "tokens/s count their text, not their padding.",
            "",
        ]
    return "\n".join(lines)


def data_pipeline_text(data: dict[str, Any], gpu_rows: list[dict[str, Any]]) -> str:
    "The data-pipeline paragraph and table, set against what the GPU training step consumes when measured."
    tok, enc = data["tokenizer_training"], data["encoding"]
    lines = [
        f"Data, {_machine(data['machine'], data['settings'])}: training the WordPiece tokenizer on the full "
        f"train split ({tok['paragraphs']:,} paragraphs, {tok['vocab_size']:,} pieces) takes "
        f"{tok['seconds']:.1f} s; encoding the split ({enc['tokens']:,} tokens) {enc['seconds']:.1f} s.",
        "",
        "| loader workers | batch x seq | sequences/s | tokens/s | padding |",
        "|---:|---|---:|---:|---:|",
    ]
    for row in data["loader"]:
        lines.append(
            f"| {row['workers']} | {row['batch_size']} x {row['seq_len']} | "
            f"{row['sequences_per_second']:,.0f} | {row['tokens_per_second']:,.0f} | "
            f"{row['padding_share']:.1%} |"
        )
    lines.append("")
    best = max(row["sequences_per_second"] for row in data["loader"])
    if gpu_rows:
        needs = ", ".join(
            f"{r['preset']} {r['bertlib']['tokens_per_second'] / r['seq_len']:,.0f} "
            f"({best * r['seq_len'] / r['bertlib']['tokens_per_second']:.1f}x headroom)"
            for r in gpu_rows
        )
        lines += [f"The GPU training step consumes sequences/s: {needs}.", ""]
    return "\n".join(lines)


def inference_text(data: dict[str, Any]) -> str:
    "The fill-mask latency and evaluation throughput line of one inference JSON file."
    ms, ev = data["fill_mask_ms"], data["evaluation"]
    speed = ev["tokens_per_second"]
    return (
        f"Inference, {_machine(data['machine'], data['settings'])}, {data['model']} "
        f"({data['parameters'] / 1e6:.1f}M parameters): fill-mask on one sentence takes "
        f"{ms['bertlib']:.1f} ms with `bertlib.evaluation.scores.fill_mask` and {ms['transformers']:.1f} ms with "
        f"transformers' fill-mask pipeline ({ms['transformers'] / ms['bertlib']:.2f}x); evaluation (MLM loss, "
        f"top-1/top-5, NSP accuracy) runs at {speed['bertlib']:,.0f} tokens/s against "
        f"{speed['transformers']:,.0f} with transformers' dense logits "
        f"({speed['bertlib'] / speed['transformers']:.2f}x; the scores agree within "
        f"{ev['largest_score_difference']:.0e}).\n"
    )


def shared_cpu_text(data: dict[str, Any]) -> str:
    "The table of training beside a busy process (benchmarks/shared_cpu.py), and bertlib's choice as ratios."
    m = data["machine"]
    conditions = list(data["medians"])
    lines = [
        f"Training on a shared CPU, {m['cpu']}, {m['cpu_cores']} cores; torch {m['torch']}; {m['date']}: the main "
        f"command's step (`mini`, 8 x 128, MLM + NSP, AdamW), tokens/s, median of {data['rounds']} rounds of "
        f"{data['steps']} steps, each in a fresh process (`python benchmarks/shared_cpu.py`):",
        "",
        "| threads | " + " | ".join(conditions) + " |",
        "|---|" + "---:|" * len(conditions),
    ]
    for setting in data["medians"][conditions[0]]:
        cells = []
        for condition in conditions:
            note = ""
            if setting == "bertlib's choice":  # how many threads it chose, round by round
                note = " (" + "/".join(str(t["threads"]) for t in data["timings"][condition][setting]) + " threads)"
            cells.append(f"{data['medians'][condition][setting]:,.0f}{note}")
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    loads = ", ".join(f"{condition} {min(v):.1f}-{max(v):.1f}" for condition, v in data["load_average"].items())
    lines += [
        "",
        f"bertlib's choice (as many threads as CPUs are idle when training starts) trains at "
        f"**{data['choice_vs_best_quiet']:.2f}** of the best setting's speed when the machine is quiet (target "
        f"0.95) and **{data['choice_vs_one_thread_busy']:.2f}** of one thread's beside the busy process (target "
        f"0.85). Load average (1 minute) as the timings started: {loads}; the machine was shared with other "
        f'work, so "quiet" is only as quiet as that.',
        "",
    ]
    return "\n".join(lines)


def finetune_text(data: dict[str, Any]) -> str:
    "The fine-tuning step's table and the prediction paragraph of one finetune_step JSON file."
    step, pred = data["step"], data["predict"]
    target = data["target_speedup"]
    verdict = "met" if step["speedup"] >= target else f"missed by {target - step['speedup']:.2f}"
    ms, batch = pred["one_sentence_ms"], pred["batch"]
    per_second = batch["sentences_per_second"]
    dtypes = pred.get("dtype", {})  # on a GPU, predict computes in bf16 autocast and the pipeline in fp32
    mixed = (
        f" (`bertlib.predict` in {dtypes['bertlib']}, the pipeline in {dtypes['transformers']})"
        if len(set(dtypes.values())) > 1
        else ""
    )
    return "\n".join(
        [
            f"Fine-tuning step, {_machine(data['machine'], data['settings'])}: `BertForSequenceClassification` "
            f"against HF `transformers.BertForSequenceClassification` (SDPA attention, same weights, batches and "
            f"dtype), `{data['model']}` ({data['parameters'] / 1e6:.1f}M parameters) on SST-2's training sentences, "
            f"{step['batches']} batches as bertlib's fine-tuning loader makes them (length-grouped, each padded to its "
            f"longest sentence rounded up to 8); a step is forward, cross-entropy, backward and `torch.optim.AdamW` "
            f"(`python benchmarks/finetune_step.py`):",
            "",
            "| batch x mean length | max len | padding | dtype | bertlib tokens/s | transformers tokens/s | speed-up | "
            "target |",
            "|---|---:|---:|---|---:|---:|---:|---|",
            f"| {step['batch_size']} x {step['mean_length']:.1f} | {step['max_seq_len']} | "
            f"{step['padding_share']:.0%} | {step['dtype']} | {step['bertlib']['tokens_per_second']:,.0f} | "
            f"{step['transformers']['tokens_per_second']:,.0f} | **{step['speedup']:.2f}x** | {target:g}x: "
            f"{verdict} |",
            "",
            f"Prediction with the same model, exported (`bertlib.save_pretrained_hf`): one SST-2 sentence takes "
            f"{ms['bertlib']:.1f} ms with `bertlib.predict` and {ms['transformers']:.1f} ms with transformers' "
            f"text-classification pipeline ({ms['transformers'] / ms['bertlib']:.2f}x). For a list of "
            f"{batch['sentences']:,} sentences the pipeline batches {batch['pipeline_batch_size']} at a time, "
            f"{per_second['transformers']:,.0f} sentences/s, while `bertlib.predict` takes one text per call, "
            f"{per_second['bertlib']:,.0f} sentences/s ({per_second['bertlib'] / per_second['transformers']:.2f}x). "
            f"Their probabilities agree within {pred['largest_probability_difference']:.0e}{mixed}.",
            "",
        ]
    )


# Every result file the section reads, in the order it shows them: what each holds and the command that writes it
# (a folder holding some of them says which others are missing, and how to make them)
PARTS = {
    "train_step-cpu.json": ("CPU training-step numbers", "`python benchmarks/train_step.py --suite cpu`"),
    "train_step-cuda.json": ("GPU numbers", "`python benchmarks/train_step.py --suite cuda` on a machine with a GPU"),
    "finetune_step-cpu.json": ("CPU fine-tuning numbers", "`python benchmarks/finetune_step.py --device cpu`"),
    "finetune_step-cuda.json": (
        "GPU fine-tuning numbers",
        "`python benchmarks/finetune_step.py --device cuda` on a machine with a GPU",
    ),
    "data_pipeline.json": ("data-pipeline numbers", "`python benchmarks/data_pipeline.py`"),
    "inference-cpu.json": ("CPU inference numbers", "`python benchmarks/inference.py`"),
    "inference-cuda.json": (
        "GPU inference numbers",
        "`python benchmarks/inference.py --device cuda` on a machine with a GPU",
    ),
    "shared_cpu.json": ("shared-CPU numbers", "`python benchmarks/shared_cpu.py`"),
}


def render(results_dir: Path = RESULTS_DIR) -> str:
    """The README section (between the markers, markers excluded) for the JSON files in `results_dir`, with a line
    for each result it lacks; `MissingResults` when the folder holds none of them."""
    found = {path.name: read_result(path) for path in result_files(results_dir) if path.name in PARTS}
    if not found:
        raise MissingResults(
            f"{results_dir} holds none of the benchmarks' result files ({', '.join(PARTS)}): nothing to report, so "
            "no README is rewritten; run the benchmarks first"
        )
    cuda = found.get("train_step-cuda.json")
    texts = {
        "train_step-cpu.json": train_step_table,
        "train_step-cuda.json": train_step_table,
        "finetune_step-cpu.json": finetune_text,
        "finetune_step-cuda.json": finetune_text,
        "data_pipeline.json": lambda data: data_pipeline_text(data, cuda["results"] if cuda else []),
        "inference-cpu.json": inference_text,
        "inference-cuda.json": inference_text,
        "shared_cpu.json": shared_cpu_text,
    }
    parts = [
        "Generated by `python benchmarks/report.py` from `benchmarks/results/*.json`; do not edit by hand. "
        "Each row times bertlib and HF `transformers.BertForPreTraining` (SDPA attention, same weights, "
        "batch, masking and dtype) in one process, interleaved, median of the repeats; a step is forward, "
        "MLM + NSP loss, backward and `torch.optim.AdamW`.",
        "",
    ]
    for name, (what, command) in PARTS.items():
        if name in found:
            parts.append(texts[name](found[name]))
        else:
            parts += [f"No {what} have been measured yet: run {command}, then this script.", ""]
    return "\n".join(parts).rstrip("\n")


def update_readme(readme: Path, section: str, start: str = START, end: str = END) -> None:
    "Replace the text between the markers `start` and `end` (the benchmark markers by default) of `readme`."
    text = readme.read_text(encoding="utf-8")
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"{readme} must contain {start} and {end} exactly once each")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    readme.write_text(f"{head}{start}\n{section}\n{end}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--readme", type=Path, default=ROOT / "README.md")
    p.add_argument("--print", action="store_true", help="print the section instead of rewriting the README")
    args = p.parse_args(argv)
    section = render(args.results_dir)  # before the README is opened: missing results leave it as it was
    if args.print:
        print(section)
    else:
        update_readme(args.readme, section)
        print(f"updated {args.readme}")


if __name__ == "__main__":
    refuse_missing(main)
