"""The ELECTRA and distillation study (issue 17): what replaced-token detection and a distilled student give on
WikiText-2, measured with the library's own recipes (`bertlib.pretrain`, `bertlib.distil`).

Hand-written; not part of the library. Each part writes one JSON file into `electra_distil_study/results/` (the
run folders go to `electra_distil_study/runs/`, which is not committed):

- `electra`: an ELECTRA `mini` (discriminator `mini`, generator a quarter of its width) and the MLM-only baseline
  (RoBERTa's objective: the same packed sequences and masks) for the same number of steps; both scored on the
  validation split: the generator's and the baseline's MLM, and the discriminator's replaced-token detection
  accuracy beside the share of replaced tokens (what always guessing "original" would score against).
- `distil`: a student of half the teacher's layers distilled from `models/course-mini` (or `--teacher RUN`); its
  size, its CPU speed against the teacher's (tokens per second of inference, measured back to back on the same
  validation batches) and both models' validation perplexity.

    export OMP_NUM_THREADS=2 BERTLIB_DATA_DIR=...
    python experiments/electra_distil_study.py electra --steps 4000
    python experiments/electra_distil_study.py distil --steps 4000
    python experiments/electra_distil_study.py smoke      # a few steps of each, into a temporary folder
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bertlib.config import BertConfig  # noqa: E402
from bertlib.distil import distil  # noqa: E402
from bertlib.electra_evaluate import evaluate_electra_run  # noqa: E402
from bertlib.evaluate import evaluate_run  # noqa: E402
from bertlib.helpers import eval_mode, machine  # noqa: E402
from bertlib.pretrain import pretrain  # noqa: E402
from bertlib.pretraining_data import evaluation_loader  # noqa: E402
from bertlib.runs import load_model, load_run  # noqa: E402
from bertlib.tokenizer import load_tokenizer  # noqa: E402
from bertlib.train_config import DistilConfig, PretrainConfig  # noqa: E402

HERE = Path(__file__).resolve().parent / "electra_distil_study"
TEACHER = ROOT / "models" / "course-mini"
SPEED_BATCHES = 20  # validation batches of 64 timed per model


def write_result(folder: Path, name: str, result: dict) -> Path:
    "Write one part's result as `folder/results/name.json`."
    path = folder / "results" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def run_electra(folder: Path, steps: int, preset: str, eval_batches: int | None, data_dir: str | None) -> dict:
    "ELECTRA and the MLM-only baseline at equal steps, on the same tokenizer (the course model's), data and seed."
    tokenizer = load_tokenizer(TEACHER)
    model_config = BertConfig.from_preset(preset, vocab_size=tokenizer.get_vocab_size())
    result = {"machine": machine(), "preset": preset, "steps": steps}
    for objective in ("electra", "mlm"):
        run = folder / "runs" / objective
        cfg = PretrainConfig(max_steps=steps, objective=objective, eval_every=max(1, steps // 4),
                             save_every=steps, eval_batches=eval_batches, log_every=max(1, min(50, steps)))
        start = time.perf_counter()
        records = pretrain(run, model_config, cfg, tokenizer=tokenizer, data_dir=data_dir, show_progress=False)
        seconds = time.perf_counter() - start
        evaluate = evaluate_electra_run if objective == "electra" else evaluate_run
        scores = evaluate(run, "validation", device="cpu", data_dir=data_dir, max_batches=eval_batches)
        result[objective] = {"settings": cfg.to_dict(), "train_seconds": seconds, "validation": scores,
                             "last_train": [r for r in records if "loss" in r][-1]}
    return result


def tokens_per_second(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> float:
    "Inference speed on the CPU: real tokens of `batches` per second of forward passes (after one warm-up pass)."
    with eval_mode(model), torch.no_grad():
        first = batches[0]
        model(first["input_ids"], token_type_ids=first["token_type_ids"], attention_mask=first["attention_mask"])
        start = time.perf_counter()
        for b in batches:
            model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
        seconds = time.perf_counter() - start
    return sum(int(b["attention_mask"].sum()) for b in batches) / seconds


def run_distil(folder: Path, steps: int, teacher: Path, eval_batches: int | None, data_dir: str | None) -> dict:
    "A half-depth student of `teacher`: its size, CPU speed and validation perplexity against the teacher's."
    run = folder / "runs" / "student"
    cfg = DistilConfig(teacher=str(teacher), max_steps=steps, eval_every=max(1, steps // 4), save_every=steps,
                       eval_batches=eval_batches, log_every=max(1, min(50, steps)))
    start = time.perf_counter()
    distil(run, cfg, data_dir=data_dir, show_progress=False)
    seconds = time.perf_counter() - start
    models = {"teacher": load_model(teacher)[0], "student": load_model(run)[0]}
    tokenizer = load_run(run)[2]
    loader = evaluation_loader("validation", tokenizer, max_seq_len=cfg.max_seq_len, data_dir=data_dir)
    batches = list(islice(loader, SPEED_BATCHES))
    result = {"machine": machine(), "threads": torch.get_num_threads(), "steps": steps, "teacher": str(teacher),
              "settings": cfg.to_dict(), "train_seconds": seconds}
    for name, path in (("teacher", teacher), ("student", run)):
        model = models[name]
        result[name] = {"layers": model.config.num_hidden_layers,
                        "parameters": sum(p.numel() for p in model.parameters()),
                        "cpu_tokens_per_s": tokens_per_second(model, batches),
                        "validation": evaluate_run(path, "validation", device="cpu", data_dir=data_dir,
                                                   max_batches=eval_batches)}
    result["speedup"] = result["student"]["cpu_tokens_per_s"] / result["teacher"]["cpu_tokens_per_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("electra", "distil", "smoke"))
    parser.add_argument("--steps", type=int, default=4000, help="optimiser steps of every run (4000)")
    parser.add_argument("--teacher", type=Path, default=TEACHER, help="the run to distil (models/course-mini)")
    parser.add_argument("--eval-batches", type=int, default=None, help="validation batches (default: all)")
    parser.add_argument("--data-dir", default=None, help="local data folder (default: $BERTLIB_DATA_DIR)")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.part == "smoke":  # the whole study in miniature: does every step still run?
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_electra(Path(tmp), 3, "tiny", 2, args.data_dir)["electra"]["validation"]))
            print(json.dumps(run_distil(Path(tmp), 3, args.teacher, 2, args.data_dir)["speedup"]))
        return
    if args.part == "electra":
        write_result(HERE, "electra", run_electra(HERE, args.steps, "mini", args.eval_batches, args.data_dir))
    else:
        write_result(HERE, "distil", run_distil(HERE, args.steps, args.teacher, args.eval_batches, args.data_dir))


if __name__ == "__main__":
    main()
