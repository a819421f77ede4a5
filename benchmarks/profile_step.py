"""Profile training steps of bertlib and HF `transformers` (the step of `train_step.py`) with `torch.profiler`:
the kernels that take the time, and the host-device synchronisations that stall the step.

    python benchmarks/profile_step.py --preset base --batch-size 64 --output profile-base.txt
    python benchmarks/profile_step.py --preset mini --compile        # bertlib under torch.compile
    python benchmarks/profile_step.py --finetune --threads 1         # finetune_step.py's step: SST-2 on course-mini

Each side is warmed up, then `--steps` steps are recorded (with `--finetune`, the steps cycle through SST-2 batches
as `finetune_step.py` makes them). The report lists, per side, the top operators by
device time (CPU time on a CPU), and the count of calls that make the host wait for the device
(`cudaStreamSynchronize`, `cudaDeviceSynchronize`, device-to-host copies, `aten::item`, `aten::nonzero`).
"""

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_utils import configure_process, synchronize  # noqa: E402
from finetune_step import ROOT, classifier, training_batches  # noqa: E402
from train_step import build, make_batch, side_inputs, training_step  # noqa: E402

from bertlib.hf import interop  # noqa: E402
from bertlib.model.config import BertConfig  # noqa: E402

# operators whose presence means the host waited for the device inside a step
SYNC_EVENTS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "Memcpy DtoH",
)


def profile_side(name: str, step, steps: int, device: torch.device, rows: int) -> str:
    "The profiler's report of `steps` calls of `step`."
    for _ in range(3):
        step()
    synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        synchronize(device)
    events = prof.key_averages()
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    syncs = {e.key: e.count // steps for e in events if any(s in e.key for s in SYNC_EVENTS)}
    lines = [
        f"== {name}: {steps} steps ==",
        "host-device synchronisations per step: "
        + (", ".join(f"{k} x{v}" for k, v in sorted(syncs.items())) or "none"),
        events.table(sort_by=sort, row_limit=rows, max_name_column_width=60),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="base")
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--compile", action="store_true", help="torch.compile bertlib's model")
    p.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default: torch's)")
    p.add_argument("--finetune", action="store_true", help="the fine-tuning step of finetune_step.py instead")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rows", type=int, default=25, help="operators listed per side")
    p.add_argument("--output", default=None, help="also write the report to this file")
    args = p.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    configure_process(args.threads)
    bf16 = device.type == "cuda"
    if args.finetune:
        ours, tokenizer = classifier(ROOT / "models" / "course-mini", device)
        batches = {
            side: training_batches(tokenizer, args.seq_len, args.batch_size, 8) for side in ("bertlib", "transformers")
        }
        batches = {side: [{k: v.to(device) for k, v in b.items()} for b in found] for side, found in batches.items()}
        what = f"fine-tuning on SST-2 (course-mini), batch {args.batch_size}, length-grouped"
    else:
        config = BertConfig.from_preset(args.preset, vocab_size=args.vocab_size)
        batch = make_batch(config, args.batch_size, args.seq_len)
        ours = build("bertlib", config, device)
        batches = {side: [side_inputs(side, batch, device)] for side in ("bertlib", "transformers")}
        what = f"{args.preset}, vocab {args.vocab_size:,}, batch {args.batch_size} x {args.seq_len}"
    theirs = interop.to_transformers(ours)
    theirs.set_attn_implementation("sdpa")
    models = {
        "bertlib" + (" (compiled)" if args.compile else ""): torch.compile(ours) if args.compile else ours,
        "transformers": theirs,
    }
    header = (
        f"{what}, {'bf16 autocast' if bf16 else 'fp32'}, {device.type}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f", torch {torch.__version__}, {torch.get_num_threads()} thread(s)"
    )
    reports = [header] + [
        profile_side(
            name,
            training_step(model, batches[name.split()[0]], device, bf16, ours=name.startswith("bertlib")),
            args.steps,
            device,
            args.rows,
        )
        for name, model in models.items()
    ]
    text = "\n\n".join(reports)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
