"""Fine-tuning beside HF `transformers`: one training step (forward, cross-entropy, backward, AdamW step) of bertlib's
`BertForSequenceClassification` against `transformers.BertForSequenceClassification` (SDPA attention) with the same
weights, batches and dtype. (Prediction with the same model is `prediction.py`'s.)

    python benchmarks/finetune_step.py                  # the course model on SST-2, on the CPU
    python benchmarks/finetune_step.py --device cuda    # the same on a GPU, bf16 autocast

The batches are SST-2's training sentences, tokenized with the model's tokenizer and batched by bertlib's fine-tuning
loader: length-grouped batches of 32, each padded to its longest sentence rounded up to 8 (the fine-tuning
collator). Both sides train on the same batches, timed in one process, interleaved (ours, HF, ours, ...) after
warm-up; a repeat is one pass over the batches, and the median of the repeats is reported. Tokens/s counts the
sentences' tokens, not their padding. On a CPU, a step's floating-point operations (`roofline.py`) over the fp32
matrix-product peak measured in this process at the model's shapes, before and after the timings, give each side's
fraction of the peak.
"""

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import torch

# runnable from a checkout: the repository's bertlib and the helpers next to this file come first
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
from bench_utils import (  # noqa: E402
    RESULTS_DIR,
    WITHOUT_ONEDNN,
    configure_process,
    interleaved_times,
    load_average,
    machine_info,
    median,
    provenance,
    repeated,
    training_step,
    without_onednn,
    write_results,
)
from roofline import layer_shapes, measure_peak, roofline, step_flops  # noqa: E402

import bertlib  # noqa: E402
from bertlib.data.batching import make_loader  # noqa: E402
from bertlib.recipes.finetune import TaskObjective  # noqa: E402
from bertlib.tasks.features import encode_task  # noqa: E402

TASK = "sst2"
TARGET_SPEEDUP = 1.5  # bertlib's fine-tuning step against transformers', in tokens/s (issue 33)
SIDES = ("bertlib", "transformers")


def classifier(source: str | Path, device: torch.device) -> tuple[bertlib.BertForSequenceClassification, Any]:
    "SST-2's classifier on the encoder of the run `source` (its newest checkpoint), in training mode; its tokenizer."
    pretrained, tokenizer = bertlib.load_model(source)
    torch.manual_seed(0)  # the head's initial weights
    model = bertlib.BertForSequenceClassification(
        pretrained.config, bertlib.load_task(TASK, "validation")[0].label_names
    )
    model.load_encoder(pretrained.state_dict())
    return model.to(device).train(), tokenizer


def training_batches(
    tokenizer, max_seq_len: int, batch_size: int, count: int, sentences: int | None = None
) -> list[dict[str, torch.Tensor]]:
    """The first `count` batches of an epoch of fine-tuning on SST-2's training sentences (all, or the first
    `sentences`), as bertlib's loop gets them: its loader (length-grouped, seed 0) and its task collator (padding to a
    multiple of 8)."""
    features = encode_task(TASK, bertlib.load_task(TASK, "train")[:sentences], tokenizer, max_seq_len)
    collate = TaskObjective(TASK, tokenizer.token_to_id("[PAD]")).collate
    loader = make_loader(features, batch_size, collate, features.lengths)
    return list(itertools.islice(loader, count))


def time_steps(ours: torch.nn.Module, batches: list[dict], args: argparse.Namespace, device: torch.device) -> dict:
    "Both sides' training steps on `batches`, interleaved; tokens/s of text (padding left out) and the ratio."
    theirs = bertlib.to_transformers(ours)  # the same weights, in training mode too
    theirs.set_attn_implementation("sdpa")
    on_device = [{key: value.to(device) for key, value in b.items()} for b in batches]
    bf16 = args.dtype == "bf16"
    steps = {
        side: training_step(m, on_device, device, bf16, ours=side == "bertlib")
        for side, m in zip(SIDES, (ours, theirs), strict=True)
    }
    steps |= without_onednn(ours, on_device, device, bf16)
    passes = {side: repeated(step, len(batches)) for side, step in steps.items()}
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    cpu = device.type == "cpu"
    shapes = layer_shapes(ours.config, sum(b["input_ids"].numel() for b in batches) // len(batches), backward=True)
    peaks = [measure_peak(shapes)] if cpu else []  # the roofline of a CPU row: this process's matrix-product peak
    cpu_seconds: dict[str, list[float]] = {}
    times = interleaved_times(passes, args.warmup, args.repeats, device, cpu_seconds)
    peaks += [measure_peak(shapes)] if cpu else []
    row: dict[str, Any] = {
        "batch_size": args.batch_size,
        "max_seq_len": args.max_seq_len,
        "batches": len(batches),
        "tokens": tokens,
        "mean_length": tokens / sum(len(b["input_ids"]) for b in batches),
        "padding_share": 1 - tokens / sum(b["input_ids"].numel() for b in batches),
        "dtype": args.dtype,
        "repeats": args.repeats,
        "warmup": args.warmup,
    }
    for side in steps:
        row[side] = {
            "step_seconds": median(times[side]) / len(batches),
            "tokens_per_second": tokens / median(times[side]),
            "seconds_per_repeat": [round(t, 5) for t in times[side]],
        }
    row["speedup"] = row["bertlib"]["tokens_per_second"] / row["transformers"]["tokens_per_second"]
    if WITHOUT_ONEDNN in row:
        row["onednn_speedup"] = row["bertlib"]["tokens_per_second"] / row[WITHOUT_ONEDNN]["tokens_per_second"]
    if cpu:
        lengths = [int(n) for b in batches for n in b["attention_mask"].sum(1)]
        flops = step_flops(ours.config, lengths, "sequence", training=True, labels=len(ours.label_names))
        row["roofline"] = roofline(flops, {side: median(seconds) for side, seconds in cpu_seconds.items()}, peaks)
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "models" / "course-mini", help="a pre-training run folder")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default=None, help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default: torch's)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument("--batches", type=int, default=16, help="training batches in one timed pass")
    p.add_argument("--train-sentences", type=int, default=None, help="batch the first N (default: all of SST-2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed passes first")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--output", type=Path, default=None, help="JSON file (default: results/finetune_step-DEVICE.json)")
    args = p.parse_args(argv)
    for name in ("batch_size", "max_seq_len", "batches", "train_sentences", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be 0 or more, not {args.warmup}")
    if not (args.model / "config.json").is_file():
        p.error(f"{args.model} is not a run folder (no config.json); give --model a pre-training run")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    # fewer batches, repeats or warm-up than the defaults is a trial: never written where results are kept
    args.provenance = provenance(p, args, "batches", "warmup", "repeats", full=args.train_sentences is None)
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    device = torch.device(args.device)
    load_before = load_average()
    settings = configure_process(args.threads)
    model, tokenizer = classifier(args.model, device)
    batches = training_batches(tokenizer, args.max_seq_len, args.batch_size, args.batches, args.train_sentences)
    step = time_steps(model, batches, args, device)
    result = {
        "benchmark": "finetune_step",
        "machine": machine_info(device),
        "settings": settings,
        "model": args.model.name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "task": TASK,
        "train_sentences": args.train_sentences,
        "target_speedup": TARGET_SPEEDUP,
        "step": step,
        "provenance": {**args.provenance, "load_average": {"before": load_before, "after": load_average()}},
    }
    fraction = step.get("roofline", {}).get("fraction_of_peak")
    print(
        f"fine-tuning step: bertlib {step['bertlib']['tokens_per_second']:,.0f} tokens/s, transformers "
        f"{step['transformers']['tokens_per_second']:,.0f} tokens/s (x{step['speedup']:.2f}; target "
        f"x{TARGET_SPEEDUP:g})"
        + (f"; {fraction['bertlib']:.0%} vs {fraction['transformers']:.0%} of the measured peak" if fraction else "")
        + (
            f"; without oneDNN {step[WITHOUT_ONEDNN]['tokens_per_second']:,.0f} tokens/s (lever "
            f"x{step['onednn_speedup']:.2f})"
            if "onednn_speedup" in step
            else ""
        ),
        flush=True,
    )
    output = write_results(args.output or RESULTS_DIR / f"finetune_step-{device.type}.json", result)
    print(f"wrote {output}")
    return output


if __name__ == "__main__":
    main()
