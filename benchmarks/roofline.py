"""The roofline of the CPU benchmarks: the fp32 matrix-product peak that this process reaches at a model's own shapes
(the best of the kernels torch offers: its own `torch.mm`, which calls MKL, and oneDNN's), and the floating-point
operations of a step, so that every row can say what fraction of that peak it achieved.

A step's operations are counted the same way for both sides, as the work the step needs ("model FLOPs"): the matrix
products of every layer and attention's two products (scores and weighted sum), over each sequence's real tokens (no
padding); the last layer only at the positions a head reads (`[CLS]` and the masked tokens in pre-training, `[CLS]`
for a classifier, every token for a tagger or a reader); the masked-LM decoder only at the masked tokens; forward, and
for training twice that again for the backward pass (the gradients of a product's two inputs). Embedding lookups,
LayerNorm, softmax, GELU and the optimizer are left out: they are not matrix products, so they are where a step falls
short of the peak.
"""

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from bertlib.model.config import BertConfig

HEADS = ("pretraining", "sequence", "token", "span")


def layer_shapes(config: BertConfig, tokens: int, backward: bool = False) -> list[tuple[int, int, int]]:
    """The `(m, k, n)` of a layer's matrix products over `tokens` positions: the projections (hidden -> hidden), the
    feed-forward's two (hidden -> intermediate -> hidden); with `backward` also their gradients' (the input's
    `(m, n) @ (n, k)`, the weight's `(n, m) @ (m, k)`)."""
    h, i = config.hidden_size, config.intermediate_size
    forward = [(tokens, h, h), (tokens, h, i), (tokens, i, h)]
    if not backward:
        return forward
    gradients = [(m, n, k) for m, k, n in forward] + [(n, m, k) for m, k, n in forward]
    return list(dict.fromkeys(forward + gradients))


def _kernels(a: torch.Tensor, b: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    "The fp32 matrix products torch offers on a CPU for `a @ b`: its own (`torch.mm`, MKL) and oneDNN's."
    kernels = {"torch.mm": lambda: torch.mm(a, b)}
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        b_t = b.t().contiguous()
        kernels["oneDNN"] = lambda: torch.ops.mkldnn._linear_pointwise(a, b_t, None, "none", [], "")
    return kernels


def measure_peak(shapes: Sequence[tuple[int, int, int]], repeats: int = 5, seconds: float = 0.1) -> dict[str, Any]:
    """The fp32 FLOP/s of the matrix-product kernels torch offers (its own `torch.mm`, which calls MKL, and oneDNN's)
    on each of `shapes`, in the CPU time of this process (`time.process_time`, so that other processes' load does not
    count), best of `repeats` timings of enough calls to take about `seconds`, with this process's threads; `flops` is
    the best of them all, the peak the model's products can reach on this machine."""
    per_shape: dict[str, dict[str, float]] = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for name, product in _kernels(a, b).items():
            start = time.process_time()
            product()  # warm-up, and a first guess of the time a call takes
            calls = max(1, round(seconds / max(time.process_time() - start, 1e-4)))
            best = float("inf")
            for _ in range(repeats):
                start = time.process_time()
                for _ in range(calls):
                    product()
                best = min(best, (time.process_time() - start) / calls)
            per_shape.setdefault(f"{m} x {k} x {n}", {})[name] = 2 * m * k * n / best
    shape, kernel = max(((s, k) for s, found in per_shape.items() for k in found), key=lambda p: per_shape[p[0]][p[1]])
    return {"flops": per_shape[shape][kernel], "shape": shape, "kernel": kernel, "per_shape": per_shape}


def forward_flops(
    config: BertConfig,
    lengths: Sequence[int],
    head: str,
    *,
    masked: Sequence[int] | None = None,
    labels: int = 2,
) -> int:
    """FLOPs of one forward pass over sequences of `lengths` real tokens, with the `head` ('pretraining', 'sequence',
    'token' or 'span'; `masked`: the masked tokens of each sequence, for pre-training; `labels`: a head's classes)."""
    if head not in HEADS:
        raise ValueError(f"head={head!r} is not one of {HEADS}")
    h, i, layers, vocab = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    masked = masked or [0] * len(lengths)
    total = 0
    for s, m in zip(lengths, masked, strict=True):
        queries = {"pretraining": 1 + m, "sequence": 1}.get(head, s)  # the positions the last layer computes
        layer = 2 * s * (4 * h * h + 2 * h * i) + 4 * s * s * h  # projections, feed-forward, scores and weighted sum
        last = 2 * s * 2 * h * h + 2 * queries * (2 * h * h + 2 * h * i) + 4 * queries * s * h  # keys, values all
        total += (layers - 1) * layer + last
        if head == "pretraining":
            total += 2 * m * (h * h + h * vocab) + 2 * h * h + 2 * h * 2  # masked-LM transform and decoder; NSP
        elif head == "sequence":
            total += 2 * h * h + 2 * h * labels  # pooler, classifier
        else:
            total += 2 * s * h * (labels if head == "token" else 2)
    return total


def step_flops(config: BertConfig, lengths: Sequence[int], head: str, *, training: bool, **options: Any) -> int:
    "`forward_flops`, and with `training` the backward pass's twice that: a training step is three forward passes."
    return (3 if training else 1) * forward_flops(config, lengths, head, **options)


def roofline(flops: int, seconds: dict[str, float], peaks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each side's achieved FLOP/s in the CPU `seconds` it spent (the median of its repeats, `time.process_time`, as
    the peak is measured, so that the load of other processes on a shared machine counts against neither) and its
    fraction of the measured peak (the best of `peaks`, measured before and after the timings)."""
    peak = max(peaks, key=lambda p: p["flops"])
    achieved = {side: flops / s for side, s in seconds.items()}
    return {
        "flops": flops,
        "peak_flops": peak["flops"],
        "peak_shape": peak["shape"],
        "peak_kernel": peak.get("kernel", "torch.mm"),
        "peak_flops_measured": [p["flops"] for p in peaks],
        "cpu_seconds": seconds,
        "achieved_flops": achieved,
        "fraction_of_peak": {side: value / peak["flops"] for side, value in achieved.items()},
    }
