"""Distillation at work (issue 17): a student of half the course model's layers, distilled from `models/course-mini`
with DistilBERT's loss (`bertlib.recipes.distil`), against its teacher: size, CPU speed, validation perplexity, and
SST-2 accuracy after the fine-tuning study's `sst2-1k` plan (the teacher's comes from that study's result file, made
with the same settings and seed).

Hand-written; not part of the library. `run` writes `distil_study/results/student.json` (the run folders go to
`distil_study/runs/`, not committed); `--report` writes `distil_study/README.md` and the `distil` block of the
site's page `docs/distillation.md` from it (a trial's result, `--smoke`, never reaches the page). ELECTRA, the other
model that learns from a second one, is a row of `experiments/variants_study`.

    OMP_NUM_THREADS=1 BERTLIB_DATA_DIR=... python experiments/distil_study.py run
    python experiments/distil_study.py --report
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict
from itertools import islice
from pathlib import Path

import torch
from study import (
    ROOT,
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

from bertlib.evaluation.scores import evaluate_run, evaluation_loader
from bertlib.recipes.distil import distil, teacher_layers
from bertlib.recipes.finetune import SELECTION_METRIC, finetune
from bertlib.tasks.load import load_sst2
from bertlib.train.factory import load_model
from bertlib.train.runs import load_run
from bertlib.train.settings import DistilConfig, FinetuneConfig
from bertlib.utils.devices import eval_mode

HERE = ROOT / "experiments" / "distil_study"
TEACHER = ROOT / "models" / "course-mini"
TEACHER_SST2 = ROOT / "experiments" / "finetune_study" / "results" / "sst2-1k-pretrained-s0.json"
# 1,500 steps of 8 sequences of 128 tokens (1.5M token slots, the variants study's budget), DistilConfig's
# DistilBERT defaults otherwise (temperature 2, weights 5 / 2 / 1, 15% masking)
BUDGET = dict(
    max_steps=1500, batch_size=8, max_seq_len=128, log_every=50, eval_every=250, eval_batches=20, save_every=500, seed=0
)
SPEED_BATCHES = 20  # validation batches of 64 pairs timed per model
SMOKE = {
    "distil": dict(max_steps=4, eval_every=4, eval_batches=1, save_every=4),
    "sst2": dict(epochs=1.0, train_examples=64, eval_examples=64),
    "batches": 1,
}


def tokens_per_second(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> float:
    "Inference speed: real tokens of `batches` per second of forward passes (after one warm-up pass)."
    with eval_mode(model), torch.no_grad():
        for i, b in enumerate([batches[0], *batches]):
            if i == 1:
                start = time.perf_counter()
            model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
        seconds = time.perf_counter() - start
    return sum(int(b["attention_mask"].sum()) for b in batches) / seconds


def run(out: Path, smoke: bool = False) -> dict:
    "Distil, fine-tune the student on SST-2, time both models and write the result file into `out/results`."
    student, ft_dir = out / "runs" / "student", out / "runs" / "student-sst2"
    for folder in (student, ft_dir):
        shutil.rmtree(folder, ignore_errors=True)
    cfg = DistilConfig(teacher=str(TEACHER), **{**BUDGET, **(SMOKE["distil"] if smoke else {})})
    start = time.perf_counter()
    records = distil(student, cfg, show_progress=sys.stderr.isatty())
    minutes = (time.perf_counter() - start) / 60
    teacher_sst2 = read_json(TEACHER_SST2)
    # the teacher's settings exactly (but for what a smoke run shrinks)
    ft_cfg = FinetuneConfig(**{**teacher_sst2["settings"], "source": str(student), **(SMOKE["sst2"] if smoke else {})})
    ft = finetune(ft_dir, ft_cfg, show_progress=sys.stderr.isatty())
    metric = SELECTION_METRIC["sst2"]
    timed, scored = (SMOKE["batches"], SMOKE["batches"]) if smoke else (SPEED_BATCHES, None)
    loader = evaluation_loader("validation", load_run(student)[2], max_seq_len=cfg.max_seq_len)
    speed_batches = list(islice(loader, timed))
    result = {
        "settings": asdict(cfg),
        "curve": records,
        "minutes": minutes,
        **provenance(smoke),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for name, path in {"teacher": TEACHER, "student": student}.items():
        model = load_model(path)[0]
        result[name] = {
            "layers": model.config.num_hidden_layers,
            "parameters": sum(p.numel() for p in model.parameters()),
            "encoder_parameters": sum(p.numel() for p in model.bert.parameters()),
            "cpu_tokens_per_s": tokens_per_second(model, speed_batches),
            "validation": evaluate_run(path, "validation", device="cpu", max_batches=scored),
        }
    result["teacher"]["sst2"] = teacher_sst2["best"][metric]
    result["student"]["sst2"] = max(r[metric] for r in ft if r.get("split") == "validation")
    write_json(out / "results" / "student.json", result)
    return result


def report(out: Path, page: Path) -> None:
    """Write `out/README.md` and `page`'s `distil` block from `out/results/student.json`; a trial's result (`--smoke`)
    is refused in the study's own folder and, elsewhere, makes `out`'s report only."""
    (path,) = result_files(out / "results", "student.json", how="run `python experiments/distil_study.py run` first")
    r = read_json(path, ("settings", "minutes", "machine", "threads", "teacher", "student"))
    why_not = unpublished({path: r})
    check_publishable(out, page, why_not)
    labels = Counter(example.label for example in load_sst2("validation"))
    majority = 100 * max(labels.values()) / labels.total()
    t, s, c = r["teacher"], r["student"], r["settings"]
    rows = [
        f"| {name} | {m['layers']} | {m['parameters'] / 1e6:.2f}M | {m['encoder_parameters'] / 1e6:.2f}M | "
        f"{m['cpu_tokens_per_s']:,.0f} | {m['validation']['mlm_perplexity']:.1f} | "
        f"{100 * m['validation']['mlm_accuracy']:.1f}% | {100 * m['sst2']:.1f}% |"
        for name, m in (("teacher (`models/course-mini`)", t), ("student", s))
    ]
    body = f"""Generated by `python experiments/distil_study.py --report` from `experiments/distil_study/results`,
written by `OMP_NUM_THREADS=1 python experiments/distil_study.py run` (`python -m bertlib distil` with these
settings). The student takes the teacher's embeddings, heads and layers {teacher_layers(t["layers"], s["layers"])}, then
trains for {c["max_steps"]:,} steps of {c["batch_size"]} packed sequences of {c["max_seq_len"]} tokens on DistilBERT's
loss (temperature {c["temperature"]:g}; weights {c["alpha_ce"]:g} soft targets, {c["alpha_mlm"]:g} MLM,
{c["alpha_cos"]:g} cosine; {100 * c["mlm_probability"]:.0f}% masked), {r["minutes"]:.1f} minutes. Validation: the
whole statically masked split. SST-2: 1,000 sentences, 3 epochs, seed 0, best validation accuracy (the teacher's
from `experiments/finetune_study`, same settings). Speed: inference on {SPEED_BATCHES} validation batches of 64
pairs, one after the other in one process. Machine: {r["machine"]}, {r["threads"]} thread(s), shared with other jobs.

| model | layers | parameters | encoder | CPU tokens/s | perplexity | top-1 | SST-2 |
|---|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

The student keeps {100 * s["encoder_parameters"] / t["encoder_parameters"]:.0f}% of the encoder's parameters and runs
{s["cpu_tokens_per_s"] / t["cpu_tokens_per_s"]:.2f}x as fast; its perplexity is
{s["validation"]["mlm_perplexity"] / t["validation"]["mlm_perplexity"]:.2f}x the teacher's. SST-2 at this budget of
1,000 sentences tells little: the teacher scores {100 * t["sst2"]:.1f}% and the student {100 * s["sst2"]:.1f}%, where
always answering the majority class scores {majority:.1f}% of the validation sentences."""
    trial = f"**Not published**: {why_not}.\n\n" if why_not else ""
    (out / "README.md").write_text("# Distillation study\n\n" + trial + body + "\n")
    publish_block("distil", body, page, why_not)
    print(body)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", choices=["run"], help="distil, fine-tune and time")
    p.add_argument("--report", action="store_true", help="write the tables from the result file")
    output_options(p, HERE, "distil", smoke="distil for 4 steps, fine-tune on 64 sentences, time and score one batch")
    args = parse(p)
    if args.command == "run":
        run(args.out, args.smoke)
    if args.report:
        report(args.out, args.page)


if __name__ == "__main__":
    refuse_missing(main)
