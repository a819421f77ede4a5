"""Inference side by side with HF transformers: fill-mask latency for one sentence, and evaluation throughput
(MLM loss, top-1/top-5 accuracy and NSP accuracy over the statically masked validation split).

    python benchmarks/inference.py                       # a random `mini` model, on the CPU
    python benchmarks/inference.py --run runs/mini       # a trained run
    python benchmarks/inference.py --device cuda         # bf16 autocast on both sides

Both sides get the same weights (`bertlib.hf.interop.to_transformers`), inputs and process settings. The HF
fill-mask side is `transformers.pipeline("fill-mask")` on the exported model, as a user would call it; the
HF evaluation side runs `BertForPreTraining` on the same batches and computes the same scores from its
(dense) logits.
"""

import argparse
import sys
import tempfile
from itertools import islice
from pathlib import Path
from typing import Any

import torch

# runnable from a checkout: the repository's bertlib and the helpers next to this file come first
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_utils import (  # noqa: E402
    RESULTS_DIR,
    configure_process,
    interleaved_times,
    load_average,
    machine_info,
    median,
    provenance,
    write_results,
)
from roofline import forward_flops, layer_shapes, measure_peak, roofline  # noqa: E402

from bertlib.data.tokenizer import train_wikitext_tokenizer  # noqa: E402
from bertlib.evaluation.scores import (  # noqa: E402
    evaluation_loader,  # noqa: E402
    fill_mask,
    validation_metrics,
)
from bertlib.hf.folders import save_pretrained_hf  # noqa: E402
from bertlib.hf.interop import to_transformers  # noqa: E402
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining  # noqa: E402
from bertlib.model.config import BertConfig  # noqa: E402
from bertlib.train.factory import load_model  # noqa: E402
from bertlib.utils.devices import autocast, resolve_device  # noqa: E402

SENTENCE = "the [MASK] of the river was covered with trees and grass ."


def hf_scores(hf_model, batches: list[dict[str, torch.Tensor]], device: torch.device) -> dict[str, float]:
    "The evaluation scores computed from HF's dense outputs, as a user of transformers would."
    masked = hits1 = hits5 = nsp_hits = sequences = 0
    loss_sum = 0.0
    with torch.no_grad():
        for batch in batches:
            b = {k: v.to(device) for k, v in batch.items()}
            with autocast(device):
                out = hf_model(
                    input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"]
                )
            selected = b["labels"] != IGNORE_INDEX
            logits, target = out.prediction_logits[selected].float(), b["labels"][selected]
            loss_sum += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
            best = logits.topk(5, dim=-1).indices
            hits1 += (best[:, 0] == target).sum().item()
            hits5 += (best == target[:, None]).any(-1).sum().item()
            nsp_hits += (out.seq_relationship_logits.argmax(-1) == b["next_sentence_label"]).sum().item()
            masked += len(target)
            sequences += len(b["input_ids"])
    return {
        "mlm_loss": loss_sum / masked,
        "mlm_accuracy": hits1 / masked,
        "mlm_top5_accuracy": hits5 / masked,
        "nsp_accuracy": nsp_hits / sequences,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="a run folder (default: a random model of --preset with a fresh tokenizer)")
    p.add_argument("--preset", default="mini")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--eval-batches", type=int, default=8, help="validation batches per timed evaluation")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)
    load_before = load_average()
    settings = configure_process(args.threads)
    device = resolve_device(args.device)
    if args.run:
        model, tokenizer = load_model(args.run, device)
    else:
        tokenizer = train_wikitext_tokenizer()
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig.from_preset(args.preset, vocab_size=tokenizer.get_vocab_size()))
        model = model.to(device).eval()
    hf_model = to_transformers(model).to(device).eval()
    batches = list(islice(evaluation_loader("validation", tokenizer, batch_size=args.batch_size), args.eval_batches))
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)

    ours_scores = validation_metrics(model, batches)
    theirs_scores = hf_scores(hf_model, batches, device)
    agree = max(abs(ours_scores[k] - v) for k, v in theirs_scores.items())
    cpu = device.type == "cpu"
    shapes = layer_shapes(model.config, max(b["input_ids"].numel() for b in batches))
    peaks = [measure_peak(shapes)] if cpu else []  # the roofline of the CPU rows: this process's matrix-product peak
    fill_cpu: dict[str, list[float]] = {}
    evaluation_cpu: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        import transformers

        save_pretrained_hf(model, tokenizer, folder)
        pipe = transformers.pipeline("fill-mask", model=folder, tokenizer=folder, top_k=5, device=device)
        fill = interleaved_times(
            {"bertlib": lambda: fill_mask(model, tokenizer, SENTENCE), "transformers": lambda: pipe(SENTENCE)},
            3,
            args.repeats * 4,
            device,
            fill_cpu,
        )
    evaluation = interleaved_times(
        {
            "bertlib": lambda: validation_metrics(model, batches),
            "transformers": lambda: hf_scores(hf_model, batches, device),
        },
        1,
        args.repeats,
        device,
        evaluation_cpu,
    )
    peaks += [measure_peak(shapes)] if cpu else []
    result: dict[str, Any] = {
        "benchmark": "inference",
        "provenance": {
            **provenance(p, args, "eval_batches", "repeats"),
            "load_average": {"before": load_before, "after": load_average()},
        },
        "machine": machine_info(device),
        "settings": settings,
        "model": "run " + Path(args.run).name if args.run else f"random {args.preset}",
        "parameters": sum(p.numel() for p in model.parameters()),
        "sentence": SENTENCE,
        "fill_mask_ms": {side: 1000 * median(t) for side, t in fill.items()},
        "evaluation": {
            "batches": len(batches),
            "batch_size": args.batch_size,
            "tokens": tokens,
            "tokens_per_second": {side: tokens / median(t) for side, t in evaluation.items()},
            "largest_score_difference": agree,
        },
    }
    if cpu:
        lengths = [int(n) for b in batches for n in b["attention_mask"].sum(1)]
        masked = [int(n) for b in batches for n in (b["labels"] != IGNORE_INDEX).sum(1)]
        flops = forward_flops(model.config, lengths, "pretraining", masked=masked)
        result["evaluation"]["roofline"] = roofline(
            flops, {side: median(t) for side, t in evaluation_cpu.items()}, peaks
        )
        words = len(tokenizer.encode(SENTENCE).ids)
        flops = forward_flops(model.config, [words], "pretraining", masked=[1])
        result["fill_mask_roofline"] = roofline(flops, {side: median(t) for side, t in fill_cpu.items()}, peaks)
    ms, ev = result["fill_mask_ms"], result["evaluation"]["tokens_per_second"]
    print(
        f"fill-mask, one sentence: bertlib {ms['bertlib']:.1f} ms, transformers pipeline "
        f"{ms['transformers']:.1f} ms ({ms['transformers'] / ms['bertlib']:.2f}x)"
    )
    print(
        f"evaluation: bertlib {ev['bertlib']:,.0f} tokens/s, transformers {ev['transformers']:,.0f} tokens/s "
        f"({ev['bertlib'] / ev['transformers']:.2f}x); scores agree within {agree:.1e}"
    )
    output = args.output or RESULTS_DIR / f"inference-{device.type}.json"
    print(f"wrote {write_results(output, result)}")


if __name__ == "__main__":
    main()
