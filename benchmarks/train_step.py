"""One full pre-training step (forward, MLM + NSP loss, backward, AdamW step) of bertlib's BERT against HF
`transformers.BertForPreTraining` (SDPA attention) with the same config, weights, batch, masking and dtype.

    python benchmarks/train_step.py --preset mini --vocab-size 30522 --device cpu
    python benchmarks/train_step.py --suite cpu     # the CPU targets of the README, written to results/
    python benchmarks/train_step.py --suite cuda    # the same on a GPU, bf16
    python benchmarks/train_step.py --data wikitext  # real batches: length-grouped sentence pairs, padded

The two sides are timed in one process, interleaved (ours, HF, ours, HF, ...) after warm-up, and the median
of the repeats is reported. Peak memory is measured in a fresh process per side, so that one model's
allocations never count against the other. bertlib is given the head index its training loop gets from the
collator (`bertlib.model.bert.head_index`, found on the CPU), so its timed step reads nothing back from a GPU.
"""

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
import transformers

# runnable from a checkout: the repository's bertlib and the helpers next to this file come first
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_utils import (  # noqa: E402
    RESULTS_DIR,
    WITHOUT_ONEDNN,
    configure_process,
    interleaved_times,
    load_average,
    machine_info,
    median,
    peak_memory,
    provenance,
    repeated,
    reset_peak_memory,
    synchronize,
    training_step,
    without_onednn,
    write_results,
)
from roofline import layer_shapes, measure_peak, roofline, step_flops  # noqa: E402

from bertlib.data.batching import make_loader  # noqa: E402
from bertlib.data.corpus import wikitext_corpus  # noqa: E402
from bertlib.data.pretraining import PretrainingDataset, mask_tokens  # noqa: E402
from bertlib.data.tokenizer import (  # noqa: E402
    CLS_ID,
    DEFAULT_VOCAB_SIZE,
    MASK_ID,
    SEP_ID,
    SPECIAL_IDS,
    train_wikitext_tokenizer,
)
from bertlib.hf import interop  # noqa: E402
from bertlib.model.bert import BertForPreTraining, head_index  # noqa: E402
from bertlib.model.config import BertConfig  # noqa: E402
from bertlib.recipes.objectives import MaskedLMAndNSP  # noqa: E402
from bertlib.train.settings import PretrainConfig  # noqa: E402

SIDES = ("bertlib", "transformers")
# Dense bf16 tensor-core peaks (no sparsity), in FLOP/s, from the vendors' data sheets; the first name that
# occurs in torch.cuda.get_device_name() wins, so the more specific names come first.
GPU_BF16_PEAK = {
    "H100 PCIe": 756e12,
    "H100": 989e12,
    "H200": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10G": 70e12,
    "A10": 125e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
}
# (preset, vocab size, batch, sequence length, data) of the README's targets
SUITES = {
    "cpu": [
        ("mini", 30522, 32, 128, "random"),
        ("mini", 8192, 32, 128, "random"),
        ("mini", 30522, 32, 128, "wikitext"),
        ("base", 30522, 32, 128, "random"),
    ],
    "cuda": [
        ("mini", 30522, 128, 128, "random"),
        ("base", 30522, 64, 128, "random"),
        ("mini", 30522, 128, 128, "wikitext"),
        ("base", 30522, 64, 128, "wikitext"),
    ],
}


BATCH_KEYS = ("input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label")
WIKITEXT_BATCHES = 8  # real batches cycled through, so that both sides see every length the sampler groups


def make_batch(
    config: BertConfig, batch: int, seq: int, device: torch.device | str = "cpu", seed: int = 0
) -> dict[str, torch.Tensor]:
    """`[CLS] A [SEP] B [SEP]` rows of random ordinary tokens, no padding, masked by BERT's rule (15% of the
    non-special positions labelled; 80/10/10), with NSP labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIAL_IDS), config.vocab_size, (batch, seq), generator=g)
    middle = seq // 2
    ids[:, 0], ids[:, middle], ids[:, -1] = CLS_ID, SEP_ID, SEP_ID
    special = torch.zeros(batch, seq, dtype=torch.bool)
    special[:, [0, middle, seq - 1]] = True
    input_ids, labels = mask_tokens(ids, special, mask_token_id=MASK_ID, vocab_size=config.vocab_size, generator=g)
    token_type_ids = (torch.arange(seq) > middle).long().expand(batch, seq).contiguous()
    batch_ = {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": torch.ones(batch, seq, dtype=torch.long),
        "labels": labels,
        "next_sentence_label": torch.randint(0, 2, (batch,), generator=g),
    }
    return {k: v.to(device) for k, v in batch_.items()}


def wikitext_batches(batch: int, seq: int, count: int = WIKITEXT_BATCHES) -> list[dict[str, torch.Tensor]]:
    """The first `count` batches of an epoch of pre-training on WikiText-2's train split, as the training loop
    gets them: sentence pairs grouped by length, padded to a multiple of 8, masked with the default settings.
    The ids come from the course's 8,192-piece tokenizer, whatever the model's vocabulary (the step's cost does
    not depend on which ids it reads)."""
    tokenizer = train_wikitext_tokenizer()
    dataset = PretrainingDataset(
        wikitext_corpus("train", tokenizer), tokenizer, seq, mlm_probability=PretrainConfig(max_steps=1).mlm_probability
    )
    loader = make_loader(dataset, batch, MaskedLMAndNSP().collate, dataset.lengths)
    return [{key: b[key] for key in BATCH_KEYS} for b in itertools.islice(loader, count)]


def side_inputs(side: str, batch: dict[str, torch.Tensor], device: torch.device) -> dict:
    "A CPU batch on `device` as one side's training loop gives it: bertlib's with the head index found on the CPU."
    inputs: dict = {key: value.to(device) for key, value in batch.items()}
    if side == "bertlib":
        inputs["head_index"] = tuple(t.to(device) for t in head_index(batch["labels"]))
    return inputs


def build(side: str, config: BertConfig, device: torch.device, seed: int = 0) -> torch.nn.Module:
    "A freshly initialised model of one side, in training mode (HF's with SDPA attention)."
    torch.manual_seed(seed)
    if side == "bertlib":
        return BertForPreTraining(config).to(device).train()
    model = transformers.BertForPreTraining(interop.to_hf_config(config))
    model.set_attn_implementation("sdpa")
    return model.to(device).train()


def model_flops_per_token(config: BertConfig, seq: int, parameters: int) -> int:
    """Model FLOPs of one training token, the same for both sides: 6 per parameter (forward and backward
    matrix products) plus attention's scores and weighted sum, 2 products of 2*seq*hidden FLOPs per layer, x3."""
    return 6 * parameters + 12 * config.num_hidden_layers * seq * config.hidden_size


def gpu_peak_flops(device: torch.device, override_tflops: float | None) -> tuple[float | None, str]:
    "The card's dense bf16 peak in FLOP/s and where the number comes from."
    if override_tflops:
        return override_tflops * 1e12, "--peak-tflops"
    name = torch.cuda.get_device_name(device)
    for key, flops in GPU_BF16_PEAK.items():
        if key in name:
            return flops, f"data sheet of {key}: {flops / 1e12:g} TFLOP/s bf16 dense"
    return None, f"unknown GPU {name!r}: pass --peak-tflops"


def measure_memory(args: argparse.Namespace, side: str) -> int:
    "Peak memory of a training step of one side, in a fresh process that builds only that side."
    command = [
        sys.executable,
        __file__,
        "--memory-of",
        side,
        "--preset",
        args.preset,
        "--vocab-size",
        str(args.vocab_size),
        "--batch-size",
        str(args.batch_size),
        "--seq-len",
        str(args.seq_len),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--data",
        args.data,
    ]
    if args.threads is not None:
        command += ["--threads", str(args.threads)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_memory_bytes"]


def memory_of(args: argparse.Namespace, config: BertConfig, device: torch.device) -> None:
    "Child process: two steps of one side, then print the peak memory as JSON."
    model = build(args.memory_of, config, device)
    batches = [side_inputs(args.memory_of, b, device) for b in cpu_batches(args, config)]
    step = training_step(model, batches, device, args.dtype == "bf16", ours=args.memory_of == "bertlib")
    reset_peak_memory(device)  # the window covers the model, its optimizer state and the steps' activations
    for _ in range(max(2, len(batches))):  # every batch once: the longest sets the peak
        step()
    synchronize(device)
    print(json.dumps({"peak_memory_bytes": peak_memory(device)}))


def cpu_batches(args: argparse.Namespace, config: BertConfig) -> list[dict[str, torch.Tensor]]:
    "The batches both sides train on, on the CPU: one random batch, or real ones (`--data wikitext`)."
    if args.data == "wikitext":
        return wikitext_batches(args.batch_size, args.seq_len)
    return [make_batch(config, args.batch_size, args.seq_len)]


def compare(args: argparse.Namespace, config: BertConfig, device: torch.device) -> dict[str, Any]:
    "Time both sides interleaved; return one result row."
    ours = build("bertlib", config, device)
    theirs = interop.to_transformers(ours)  # the same weights
    theirs.set_attn_implementation("sdpa")
    bf16 = args.dtype == "bf16"
    batches = cpu_batches(args, config)
    if args.data == "wikitext":  # a repeat is one pass over the real batches, so every repeat holds the same work
        args.steps_per_repeat = len(batches)
    ours_inputs = [side_inputs("bertlib", b, device) for b in batches]
    ours_step = training_step(torch.compile(ours) if args.compile else ours, ours_inputs, device, bf16, ours=True)
    steps = {
        "bertlib": ours_step,
        "transformers": training_step(theirs, [side_inputs("transformers", b, device) for b in batches], device, bf16),
    }
    steps |= without_onednn(ours, ours_inputs, device, bf16)

    timed = {side: repeated(step, args.steps_per_repeat) for side, step in steps.items()}
    cpu = device.type == "cpu"
    shapes = layer_shapes(config, args.batch_size * args.seq_len, backward=True)
    peaks = [measure_peak(shapes)] if cpu else []  # the roofline of a CPU row: this process's matrix-product peak
    cpu_seconds: dict[str, list[float]] = {}
    times = interleaved_times(timed, args.warmup, args.repeats, device, cpu_seconds)
    peaks += [measure_peak(shapes)] if cpu else []
    # tokens that are text, not padding: what the step is for
    per_cycle = sum(int(b["attention_mask"].sum()) for b in batches)
    tokens = per_cycle * args.steps_per_repeat // len(batches)
    parameters = sum(p.numel() for p in ours.parameters())
    row: dict[str, Any] = {
        "preset": args.preset,
        "vocab_size": config.vocab_size,
        "parameters": parameters,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "dtype": args.dtype,
        "compile": args.compile,
        "data": args.data,
        "padding_share": 1 - per_cycle / sum(b["input_ids"].numel() for b in batches),
        "masked_positions": sum(int((b["labels"] != -100).sum()) for b in batches) / len(batches),
        "repeats": args.repeats,
        "warmup": args.warmup,
        "steps_per_repeat": args.steps_per_repeat,
    }
    for side in steps:
        row[side] = {
            "step_seconds": median(times[side]) / args.steps_per_repeat,
            "tokens_per_second": tokens / median(times[side]),
            "seconds_per_repeat": [round(t, 5) for t in times[side]],
        }
    row["speedup"] = row["bertlib"]["tokens_per_second"] / row["transformers"]["tokens_per_second"]
    if WITHOUT_ONEDNN in row:
        row["onednn_speedup"] = row["bertlib"]["tokens_per_second"] / row[WITHOUT_ONEDNN]["tokens_per_second"]
    if cpu:
        lengths = [int(n) for b in batches for n in b["attention_mask"].sum(1)]
        masked = [int(n) for b in batches for n in (b["labels"] != -100).sum(1)]
        per_cycle = step_flops(config, lengths, "pretraining", training=True, masked=masked)
        flops = per_cycle * args.steps_per_repeat // len(batches)
        row["roofline"] = roofline(flops, {side: median(seconds) for side, seconds in cpu_seconds.items()}, peaks)
    if device.type == "cuda":
        peak, source = gpu_peak_flops(device, args.peak_tflops)
        row["peak_flops"], row["peak_flops_source"] = peak, source
        per_token = model_flops_per_token(config, args.seq_len, parameters)
        for side in SIDES:
            row[side]["mfu"] = per_token * row[side]["tokens_per_second"] / peak if peak else None
    del ours, theirs, steps, ours_step
    if not args.no_memory:
        for side in SIDES:
            row[side]["peak_memory_bytes"] = measure_memory(args, side)
        row["memory_ratio"] = row["bertlib"]["peak_memory_bytes"] / row["transformers"]["peak_memory_bytes"]
    return row


def print_row(row: dict[str, Any]) -> None:
    mib = 2**20
    memory = (
        f"  peak MiB {row['bertlib']['peak_memory_bytes'] / mib:,.0f} vs "
        f"{row['transformers']['peak_memory_bytes'] / mib:,.0f}"
        if "memory_ratio" in row
        else ""
    )
    mfu = (
        f"  MFU {row['bertlib']['mfu']:.1%} vs {row['transformers']['mfu']:.1%}"
        if row["bertlib"].get("mfu") is not None
        else ""
    )
    if "roofline" in row:
        fraction = row["roofline"]["fraction_of_peak"]
        mfu = f"  {fraction['bertlib']:.0%} vs {fraction['transformers']:.0%} of the measured peak"
    if "onednn_speedup" in row:
        before = row[WITHOUT_ONEDNN]["tokens_per_second"]
        mfu += f"; without oneDNN {before:,.0f} tok/s (lever x{row['onednn_speedup']:.2f})"
    print(
        f"{row['preset']:>5} vocab {row['vocab_size']:>6,} batch {row['batch_size']:>3} seq {row['seq_len']:>4} "
        f"{row['data']:>8} "
        f"{row['dtype']}: bertlib {row['bertlib']['tokens_per_second']:>9,.0f} tok/s, transformers "
        f"{row['transformers']['tokens_per_second']:>9,.0f} tok/s, x{row['speedup']:.2f}{memory}{mfu}",
        flush=True,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=tuple(SUITES), help="run the README's set of shapes for this device")
    p.add_argument("--preset", default="mini", help="BertConfig preset (tiny, mini, small, base, large)")
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument(
        "--dtype",
        choices=("fp32", "bf16"),
        default=None,
        help="fp32, or bf16 autocast (default: bf16 on cuda, fp32 on cpu)",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile bertlib's model (default: on for cuda)",
    )
    p.add_argument(
        "--data",
        choices=("random", "wikitext"),
        default="random",
        help="one random unpadded batch, or real WikiText-2 pre-training batches (padded, length-grouped)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default: torch's)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps-per-repeat", type=int, default=None, help="steps timed together (default: cpu 1, cuda 10)")
    p.add_argument("--peak-tflops", type=float, default=None, help="the GPU's bf16 dense peak, if not in the table")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    p.add_argument("--output", default=None, help="JSON file (default with --suite: results/train_step-DEVICE.json)")
    p.add_argument("--memory-of", choices=SIDES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.data == "wikitext" and args.vocab_size < DEFAULT_VOCAB_SIZE:
        p.error(
            f"--data wikitext reads ids of the {DEFAULT_VOCAB_SIZE:,}-piece tokenizer: give --vocab-size "
            f"{DEFAULT_VOCAB_SIZE} or more"
        )
    if args.suite:
        args.device = args.suite
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = args.device.startswith("cuda")
    args.dtype = args.dtype or ("bf16" if cuda else "fp32")
    args.compile = cuda if args.compile is None else args.compile
    args.steps_per_repeat = args.steps_per_repeat or (10 if cuda else 1)
    if args.suite and args.output is None:
        args.output = RESULTS_DIR / f"train_step-{torch.device(args.device).type}.json"
    # one shape, or fewer repeats or warm-up than the defaults, is a trial: never written where results are kept
    args.provenance = provenance(p, args, "warmup", "repeats", full=bool(args.suite))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    settings = configure_process(args.threads)
    if args.memory_of:
        memory_of(args, BertConfig.from_preset(args.preset, vocab_size=args.vocab_size), device)
        return
    shapes = (
        SUITES[args.suite] if args.suite else [(args.preset, args.vocab_size, args.batch_size, args.seq_len, args.data)]
    )
    steps_per_repeat = args.steps_per_repeat
    rows, machine, load_before = [], machine_info(device), load_average()
    for preset, vocab_size, batch_size, seq_len, data in shapes:
        args.preset, args.vocab_size, args.batch_size, args.seq_len = preset, vocab_size, batch_size, seq_len
        args.data = data
        args.steps_per_repeat = steps_per_repeat  # a wikitext row sets its own
        rows.append(compare(args, BertConfig.from_preset(preset, vocab_size=vocab_size), device))
        print_row(rows[-1])
        if args.output:  # after every row, so that a suite stopped by a time limit keeps the rows it finished
            found = {"benchmark": "train_step", "machine": machine, "settings": settings, "results": rows}
            load = {"load_average": {"before": load_before, "after": load_average()}}
            found |= {"provenance": args.provenance | load, "complete": len(rows) == len(shapes)}
            written = write_results(args.output, found)
    if args.output:
        print(f"wrote {written}")


if __name__ == "__main__":
    main()
