"""Rewrite the speed page's benchmark block (`docs/speed.md`) from the JSON files in benchmarks/results/.

    python benchmarks/report.py            # rewrites the block between the benchmark markers of docs/speed.md
    python benchmarks/report.py --print    # prints the block instead, from whatever the folder holds

The numbers on the page are never typed by hand: run the benchmarks, then this script. It publishes only complete,
full-mode results (`docs/publish.py`): a folder without results, one that lacks one of the CPU benchmarks, a file
that is not a whole result, a trial's result (fewer repeats, batches or warm-up than a benchmark's defaults) or GPU
numbers measured elsewhere than on a GPU leave the page as it is, said in one line (exit code 2). A GPU benchmark
not measured yet is named on the page, with the command that makes it.
"""

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))  # docs/publish.py: what every report shares, studies and benchmarks alike
import publish  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MIB = 2**20


def _machine(machine: dict[str, Any], settings: dict[str, Any]) -> str:
    where = machine.get("gpu") or f"{machine['cpu']}, {machine['cpu_cores']} cores"
    flush = ", denormals flushed" if settings.get("flush_denormal") else ""
    threads = f"{settings['threads']} thread" + ("s" if settings["threads"] != 1 else "")
    return (
        f"{where}; {threads}{flush}; torch {machine['torch']}, transformers "
        f"{machine.get('transformers', '?')}; {machine['date']}"
    )


def _made(data: dict[str, Any]) -> str:
    "How a result was made, in a few words: its mode and settings, threads, commit and date, and the machine's load."
    made = data.get("provenance")
    if made is None:
        return "How it was made (mode, commit, load) was not recorded."
    told = ("mode", "machine", "threads", "commit", "date", "load_average", "recorded")
    settings = ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in made.items() if key not in told)
    if "recorded" in made:  # a result made before files said how: when and from what that was written down
        settings += f"; {made['recorded']}"
    threads = f"{made['threads']} thread" + ("s" if made["threads"] != 1 else "")
    text = f"Made in {made['mode']} mode ({settings}), {threads}, commit {made['commit']}, {made.get('date', '')}"
    load = made.get("load_average")
    if load:
        text += (
            f"; load average {load['before'][0]:.1f} before and {load['after'][0]:.1f} after, on "
            f"{data['machine']['cpu_cores']} cores"
        )
    return text + "."


def _fractions(entry: dict[str, Any]) -> list[str]:
    "A row's fraction of the measured peak for each side, or 'not measured' (results made before the roofline)."
    fraction = entry.get("roofline", {}).get("fraction_of_peak")
    return [f"{fraction[side]:.0%}" if fraction else "not measured" for side in ("bertlib", "transformers")]


def _lever(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The oneDNN lever's before and after (issue 43), side by side: bertlib's step with torch's own fp32 products
    (MKL, as with BERTLIB_ONEDNN=0) and with oneDNN's, timed in the same run; nothing for results made without it."""
    measured = [(label, row) for label, row in rows if "onednn_speedup" in row]
    if not measured:
        return []
    lines = [
        "The oneDNN lever: bertlib's step with torch's own fp32 matrix products (MKL, as with `BERTLIB_ONEDNN=0`) "
        "and with oneDNN's (the default on a CPU, `bertlib.utils.devices.autocast`), interleaved in the same run:",
        "",
        "| config | torch's products tokens/s | oneDNN tokens/s | speed-up | torch's products % of peak | "
        "oneDNN % of peak |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, row in measured:
        before, after = row["bertlib_without_onednn"], row["bertlib"]
        fraction = row["roofline"]["fraction_of_peak"]
        lines.append(
            f"| {label} | {before['tokens_per_second']:,.0f} | {after['tokens_per_second']:,.0f} | "
            f"**{row['onednn_speedup']:.2f}x** | {fraction['bertlib_without_onednn']:.0%} | {fraction['bertlib']:.0%} |"
        )
    return lines + [""]


def _config(row: dict[str, Any]) -> str:
    "A training-step row's model and data, in words."
    real = f", WikiText-2 pairs ({row['padding_share']:.0%} padding)" if row.get("data") == "wikitext" else ""
    return f"{row['preset']}, vocab {row['vocab_size']:,}{real}"


def _peaks(entries: list[dict[str, Any]]) -> str:
    "The sentence that says what a fraction of the peak is, and the peaks these rows were measured against."
    measured = [e["roofline"] for e in entries if "roofline" in e]
    if not measured:
        return ""
    peaks = ", ".join(
        f"{r['peak_flops'] / 1e9:.0f} GFLOP/s ({r.get('peak_kernel', 'torch.mm')}, {r['peak_shape']})" for r in measured
    )
    return (
        "% of peak: each side's floating-point operations (the matrix products and attention, forward and backward, "
        "over the real tokens; the last layer only where a head reads it, the masked-LM decoder only at the masked "
        "tokens: the same count for both sides, `benchmarks/roofline.py`) per second of the CPU time it used, over the "
        "fp32 matrix-product peak measured in the same process, in CPU time too, at the model's own shapes, the best "
        "of torch's `torch.mm` (MKL) and oneDNN's kernel, before and after the timings: "
        f"{peaks}. CPU time leaves out the moments other "
        "processes held the core, which the tokens/s (wall-clock) include."
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
    header += ["bertlib MFU", "transformers MFU"] if gpu else ["bertlib % of peak", "transformers % of peak"]
    lines = [
        f"Training step, {_machine(data['machine'], data['settings'])}:",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for row in data["results"]:
        ours, theirs = row["bertlib"], row["transformers"]
        cells = [
            _config(row),
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
        else:
            cells += _fractions(row)
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
            "tokens/s count their text, not their padding. " + _peaks(data["results"]),
            "",
        ]
        lines += _lever([(_config(row), row) for row in data["results"]])
    lines += [_made(data), ""]
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

    def share(entry: dict[str, Any]) -> str:
        fraction = entry.get("roofline", {}).get("fraction_of_peak")
        return f"; {fraction['bertlib']:.0%} and {fraction['transformers']:.0%} of the peak" if fraction else ""

    return (
        f"Inference, {_machine(data['machine'], data['settings'])}, {data['model']} "
        f"({data['parameters'] / 1e6:.1f}M parameters): fill-mask on one sentence takes "
        f"{ms['bertlib']:.1f} ms with `bertlib.evaluation.scores.fill_mask` and {ms['transformers']:.1f} ms with "
        f"transformers' fill-mask pipeline ({ms['transformers'] / ms['bertlib']:.2f}x"
        f"{share({'roofline': data.get('fill_mask_roofline', {})})}); evaluation (MLM loss, top-1/top-5, NSP "
        f"accuracy) runs at {speed['bertlib']:,.0f} tokens/s against {speed['transformers']:,.0f} with transformers' "
        f"dense logits ({speed['bertlib'] / speed['transformers']:.2f}x{share(ev)}; the scores agree within "
        f"{ev['largest_score_difference']:.0e}). "
        + " ".join(filter(None, [_peaks([e for e in (ev,) if "roofline" in e]), _made(data)]))
        + "\n"
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
    "The fine-tuning step's table of one finetune_step JSON file."
    step = data["step"]
    target = data["target_speedup"]
    verdict = "met" if step["speedup"] >= target else f"missed by {target - step['speedup']:.2f}"
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
            "target | bertlib % of peak | transformers % of peak |",
            "|---|---:|---:|---|---:|---:|---:|---|---:|---:|",
            f"| {step['batch_size']} x {step['mean_length']:.1f} | {step['max_seq_len']} | "
            f"{step['padding_share']:.0%} | {step['dtype']} | {step['bertlib']['tokens_per_second']:,.0f} | "
            f"{step['transformers']['tokens_per_second']:,.0f} | **{step['speedup']:.2f}x** | {target:g}x: "
            f"{verdict} | " + " | ".join(_fractions(step)) + " |",
            "",
            *_lever([(f"SST-2, {step['batch_size']} x {step['mean_length']:.1f}", step)]),
            " ".join(filter(None, [_peaks([step]), _made(data)])),
            "",
        ]
    )


def prediction_text(data: dict[str, Any]) -> str:
    "The table of `bertlib.predict` on whole data sets against transformers' pipelines (prediction JSON file)."
    target, rows = data["target_speedup"], data["datasets"]
    names = {"sst2": "SST-2", "conll2003": "CoNLL-2003"}
    lines = [
        f"Prediction, {_machine(data['machine'], data['settings'])}: `bertlib.predict` on a list against "
        f"transformers' pipelines, {rows[0]['batch_size']} inputs a batch on both sides, the same model exported "
        f"(`bertlib.save_pretrained_hf`), {data['model']} ({data['parameters'] / 1e6:.1f}M parameters); a repeat is "
        f"one pass over the data set (`python benchmarks/prediction.py`):",
        "",
        "| data set | pipeline | examples | bertlib examples/s | transformers examples/s | speed-up | target | "
        "identical predictions | bertlib % of peak | transformers % of peak |",
        "|---|---|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for row in rows:
        agree, speed = row["agreement"], row["examples_per_second"]
        verdict = "met" if row["speedup"] >= target else f"missed by {target - row['speedup']:.2f}"
        same = f"{agree['identical']:,} of {agree['fitting']:,}"
        if agree["largest_difference"] is not None:
            same += f" (probabilities within {agree['largest_difference']:.0e})"
        if agree["longer"]:
            same += f"; {agree['longer']} longer than the window left out (bertlib reads them in windows, the "
            same += "pipeline cuts them)"
        lines.append(
            f"| {names.get(row['task'], row['task'])} {row['split']} | {row['pipeline']} | {row['examples']:,} | "
            f"{speed['bertlib']:,.0f} | {speed['transformers']:,.0f} | **{row['speedup']:.2f}x** | {target:g}x: "
            f"{verdict} | {same} | " + " | ".join(_fractions(row)) + " |"
        )
    one = data["one_sentence"]
    ms = one["ms"]
    fraction = one["roofline"]["fraction_of_peak"]
    lines += [
        "",
        f"One SST-2 sentence per call takes {ms['bertlib']:.1f} ms with `bertlib.predict` and {ms['transformers']:.1f} "
        f"ms with the pipeline ({ms['transformers'] / ms['bertlib']:.2f}x; {fraction['bertlib']:.1%} and "
        f"{fraction['transformers']:.1%} of the peak: one short sentence is overhead, not arithmetic).",
        "",
        " ".join(filter(None, [_peaks(rows), _made(data)])),
        "",
    ]
    return "\n".join(lines)


# Every result file the section reads, in the order it shows them: what each holds, the command that writes it, and
# whether the page needs it (the CPU benchmarks) or names it as not measured yet (the GPU ones)
PARTS = {
    "train_step-cpu.json": ("CPU training-step numbers", "`python benchmarks/train_step.py --suite cpu`", True),
    "train_step-cuda.json": (
        "GPU numbers",
        "`python benchmarks/train_step.py --suite cuda` on a machine with a GPU",
        False,
    ),
    "finetune_step-cpu.json": ("CPU fine-tuning numbers", "`python benchmarks/finetune_step.py --device cpu`", True),
    "finetune_step-cuda.json": (
        "GPU fine-tuning numbers",
        "`python benchmarks/finetune_step.py --device cuda` on a machine with a GPU",
        False,
    ),
    "prediction-cpu.json": ("CPU prediction numbers", "`python benchmarks/prediction.py --threads 1`", True),
    "data_pipeline.json": ("data-pipeline numbers", "`python benchmarks/data_pipeline.py`", True),
    "inference-cpu.json": ("CPU inference numbers", "`python benchmarks/inference.py`", True),
    "inference-cuda.json": (
        "GPU inference numbers",
        "`python benchmarks/inference.py --device cuda` on a machine with a GPU",
        False,
    ),
    "shared_cpu.json": ("shared-CPU numbers", "`python benchmarks/shared_cpu.py`", True),
}
# what each part's text reads of its file
NEEDS = {
    "train_step": ("machine", "settings", "results"),
    "finetune_step": ("machine", "settings", "step", "target_speedup", "model", "parameters"),
    "prediction": ("machine", "settings", "datasets", "one_sentence", "target_speedup", "model", "parameters"),
    "data_pipeline": ("machine", "settings", "tokenizer_training", "encoding", "loader"),
    "inference": ("machine", "settings", "fill_mask_ms", "evaluation", "model", "parameters"),
    "shared_cpu": ("machine", "medians", "timings", "rounds", "steps", "load_average"),
}


def read_part(path: Path, published: bool) -> dict[str, Any]:
    """One benchmark's result file, whole (`NEEDS`); when it is to be `published`, also made in full mode and, for a
    GPU benchmark, on a GPU, by what the file says. `publish.MissingResults` otherwise."""
    data = publish.read_result(path, NEEDS[path.stem.split("-")[0]])
    if published:
        publish.check_full(data, path)
        if data.get("complete") is False:
            raise publish.MissingResults(f"{path} holds part of its suite (it was stopped): the page is left as it is")
        device = (data["machine"] or {}).get("device")
        if path.stem.endswith("-cuda") and device != "cuda":
            raise publish.MissingResults(f"{path} was measured on {device}, not on a GPU: the page is left as it is")
    return data


def render(results_dir: Path = RESULTS_DIR, published: bool = True) -> str:
    """The page's block (between the markers, markers excluded) for the JSON files in `results_dir`, with a line
    for each GPU result it lacks; `publish.MissingResults` when the folder holds none of them or, for a block to be
    `published`, lacks a CPU benchmark or holds a result that is not whole, full-mode and measured where it says."""
    present = [path for path in publish.result_files(results_dir) if path.name in PARTS]
    if not present:
        raise publish.MissingResults(
            f"{results_dir} holds none of the benchmarks' result files ({', '.join(PARTS)}): nothing to report, so "
            "no page is rewritten; run the benchmarks first"
        )
    found = {path.name: read_part(path, published) for path in present}
    needed = [name for name, (*_, required) in PARTS.items() if required and name not in found]
    if published and needed:
        raise publish.MissingResults(
            f"{results_dir} lacks {', '.join(needed)}: a block made of part of the benchmarks would drop measured "
            "numbers, so the page is left as it is"
        )
    cuda = found.get("train_step-cuda.json")
    texts = {
        "train_step-cpu.json": train_step_table,
        "train_step-cuda.json": train_step_table,
        "finetune_step-cpu.json": finetune_text,
        "finetune_step-cuda.json": finetune_text,
        "prediction-cpu.json": prediction_text,
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
    for name, (what, command, _) in PARTS.items():
        if name in found:
            parts.append(texts[name](found[name]))
        else:
            parts += [f"No {what} have been measured yet: run {command}, then this script.", ""]
    return "\n".join(parts).rstrip("\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    publish.page_option(p, "benchmarks")
    p.add_argument("--print", action="store_true", help="print the block instead of rewriting the page")
    args = p.parse_args(argv)
    section = render(args.results_dir, published=not args.print)  # before the page is opened: it stays as it was
    if args.print:
        print(section)
    else:
        publish.write_block("benchmarks", section, args.page)
        print(f"updated {args.page}")


if __name__ == "__main__":
    publish.refuse_missing(main)
