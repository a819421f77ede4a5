"""Copy a run folder without its optimiser states, keeping only the checkpoint with the best validation MLM
loss (or, with --newest, the newest one), its weights cast to float16: small enough to bring back from a GPU machine
or ship with the course.

    python experiments/gpu/pack_run.py runs/gpu/mini-e40 packed/mini-e40
    python experiments/gpu/pack_run.py runs/course-full packed/course-mini --newest
"""

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bertlib.train.checkpoints import checkpoints, write_checksums
from bertlib.train.runs import read_metrics


def best_checkpoint(run: Path) -> Path:
    "The checkpoint whose step has the lowest validation MLM loss (the newest one if none was validated)."
    found = {int(c.name.split("-")[1]): c for c in checkpoints(run)}
    scored = [r for r in read_metrics(run / "metrics.jsonl") if r.get("split") == "validation" and r["step"] in found]
    if not scored:
        return found[max(found)]
    return found[min(scored, key=lambda r: r["mlm_loss"])["step"]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("run")
    p.add_argument("output")
    p.add_argument(
        "--newest",
        action="store_true",
        help="keep the newest checkpoint: a run whose last steps are on longer sequences than it is validated on",
    )
    args = p.parse_args()
    run, out = Path(args.run), Path(args.output)
    out.mkdir(parents=True, exist_ok=False)
    for name in ("config.json", "tokenizer.json", "vocab.txt", "metrics.jsonl", "loss_curve.png"):
        if (run / name).exists():
            shutil.copy2(run / name, out / name)
    kept = checkpoints(run)[-1] if args.newest else best_checkpoint(run)
    target = out / "checkpoints" / kept.name
    target.mkdir(parents=True)
    weights = load_file(kept / "model.safetensors")
    save_file(
        {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in weights.items()},
        target / "model.safetensors",
    )
    write_checksums(target)
    (out / "best.json").write_text(
        json.dumps(
            {
                "checkpoint": kept.name,
                "rule": "newest" if args.newest else "lowest validation MLM loss",
                "all_checkpoints": [c.name for c in checkpoints(run)],
            }
        )
        + "\n"
    )
    print(f"packed {run} -> {out} (kept {kept.name})")


if __name__ == "__main__":
    main()
