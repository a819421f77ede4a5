"""Worked solutions of notebook 04's exercises (the encoder): ReLU against GELU at initialisation, BERT-large's
encoder counted by formula, and how fast Pre-LN's residual stream grows.

`python solutions/s04_encoder.py` runs them all in seconds; nothing is trained.
"""

import math
import statistics
from functools import partial

import torch
from common import BertEncoder, add_final_norm, cli, header, init_bert_weights, parameters
from torch import nn
from verdict import placed

from bertlib import BertConfig

SEEDS = (0, 1, 2)  # each draws other inputs and other weights: what one draw finds may be its luck


def stack_at_initialisation(
    style: str, std: float, act: str = "gelu", seed: int = 0
) -> tuple[list[float], list[float]]:
    """Notebook 04's experiment: a 12-layer stack of width 128 initialised with `std`, run on random inputs (`seed`
    draws both); the RMS of each layer's output and the gradient norm reaching each layer's weight matrices."""
    torch.manual_seed(2 * seed)
    inputs = nn.functional.layer_norm(torch.randn(8, 64, 128), (128,))
    target = torch.randn(8, 64, 128)
    torch.manual_seed(2 * seed + 1)
    config = BertConfig(
        hidden_size=128,
        num_attention_heads=2,
        intermediate_size=512,
        num_hidden_layers=12,
        norm_style=style,
        hidden_act=act,
    )
    encoder = BertEncoder(config).eval()
    if style == "pre":  # a Pre-LN stack ends with a LayerNorm (notebook 11's variant part)
        add_final_norm(encoder, config)
    encoder.apply(partial(init_bert_weights, std=std))
    x, rms = inputs, []
    for layer in encoder.layers:
        x, _ = layer(x)
        rms.append(x.pow(2).mean().sqrt().item())
    if encoder.final_norm is not None:
        x = encoder.final_norm(x)
    nn.functional.mse_loss(x, target).backward()
    grads = [
        torch.cat([m.weight.grad.flatten() for m in layer.modules() if isinstance(m, nn.Linear)]).norm().item()
        for layer in encoder.layers
    ]
    return rms, grads


def _profile(runs: list[tuple[list[float], list[float]]]) -> str:
    "The shape across depth of a stack's stream and gradient over the seeds' `runs`, within 10% taken as level."
    stream = placed([rms[-1] / rms[0] for rms, _ in runs], 0.9, 1.1)[0]
    gradient = placed([grads[0] / grads[-1] for _, grads in runs], 0.9, 1.1)[0]
    streams = {
        "above": "the stream grows with depth",
        "below": "the stream shrinks with depth",
        "within": "the stream stays level",
        "unclear": "the seeds cannot tell whether the stream stays level",
    }
    gradients = {
        "above": "the gradient at layer 1 is larger than at layer {}",
        "below": "the gradient at layer 1 is smaller than at layer {}",
        "within": "the gradient at layer 1 is about the same as at layer {}",
        "unclear": "the seeds cannot tell how the gradient at layer 1 stands against layer {}'s",
    }
    return f"{streams[stream]}, {gradients[gradient].format(len(runs[0][1]))}"


def exercise_1() -> None:
    "The initialisation figure's numbers with GELU and with ReLU, over three seeds."
    header("exercise 1: ReLU instead of GELU, at initialisation")
    print(f"means over {len(SEEDS)} seeds (each draws the inputs and the weights)")
    print(f"{'':<24}{'stream RMS after layer 1, 12':>32}{'gradient at layer 1, 12':>28}")
    profiles = {}
    for std in (0.02, 0.09):
        for style in ("post", "pre"):
            for act in ("gelu", "relu"):
                runs = [stack_at_initialisation(style, std, act, seed) for seed in SEEDS]
                profiles[std, style, act] = _profile(runs)
                rms, grads = ([statistics.mean(run[k][i] for run in runs) for i in (0, -1)] for k in (0, 1))
                print(
                    f"{style}-LN, std {std}, {act:<5}{rms[0]:>21.3f}{rms[-1]:>11.3f}{grads[0]:>17.4f}{grads[-1]:>11.4f}"
                )
    kept = 0
    for std, style, act in profiles:
        if act == "gelu":
            gelu, relu = profiles[std, style, "gelu"], profiles[std, style, "relu"]
            kept += gelu == relu
            print(f"{style}-LN, std {std}: with GELU {gelu}; with ReLU {'the same' if relu == gelu else relu}")
    print(
        f"{kept} of {len(profiles) // 2} settings keep their profile across depth when ReLU replaces GELU (a ratio "
        "counts as level when the seeds place it within 10%)"
        + (
            ": the profile is set by where the LayerNorms sit, not by the activation, which changes only a scale "
            "(ReLU passes its positive inputs whole, GELU shrinks the small ones)"
            if kept == len(profiles) // 2  # exact: a count of the profiles above
            else "; in the others the activation changes the profile, or the seeds cannot place it"
        )
    )


def exercise_2() -> None:
    "BERT-large's encoder: L (12 h^2 + 13 h) against the module's count."
    header("exercise 2: the parameters of a 24-layer, 1024-wide encoder")
    config = BertConfig.from_preset("large")
    layers, h = config.num_hidden_layers, config.hidden_size
    formula = layers * (12 * h * h + 13 * h)
    with torch.device("meta"):
        counted = parameters(BertEncoder(config))
    print(
        f"{layers} x (12 x {h}^2 + 13 x {h}) = {formula:,}; BertEncoder(large) has {counted:,}: "
        f"{'equal' if formula == counted else 'different'}"  # exact: two counts
    )


def exercise_3() -> None:
    "RMS(x_l)^2 = RMS(x_0)^2 + l c^2 for a sum of l uncorrelated contributions of size c, against the curve."
    header("exercise 3: how fast Pre-LN's residual stream grows")
    runs = [stack_at_initialisation("pre", 0.09, seed=seed)[0] for seed in SEEDS]
    start = 1.0  # the inputs are LayerNorm-ed, so their RMS is 1
    steps = [rms[0] ** 2 - start**2 for rms in runs]  # c^2: what one layer adds, measured at the first layer
    print(
        "if each layer adds a contribution of size c uncorrelated with the stream, the squares add up: "
        "RMS after l layers = sqrt(1 + l c^2), growing like sqrt(l)"
    )
    print(f"c^2 from layer 1: {statistics.mean(steps):.3f} (means over {len(SEEDS)} seeds)")
    for layer in (1, 2, 4, 8, 12):
        measured = statistics.mean(rms[layer - 1] for rms in runs)
        predicted = statistics.mean(math.sqrt(start**2 + layer * step) for step in steps)
        print(f"layer {layer:>2}: measured {measured:.3f}, predicted {predicted:.3f}")
    ratios = [rms[-1] / math.sqrt(start**2 + len(rms) * step) for rms, step in zip(runs, steps, strict=True)]
    where, numbers = placed(ratios, 0.98, 1.02, fmt=".3f")
    print(
        f"measured / predicted at layer {len(runs[0])}, within 2% counting as sqrt(l): "
        + {
            "above": "a little faster than sqrt(l): each contribution is slightly aligned with the stream it is "
            "added to",
            "below": "a little slower than sqrt(l): each contribution is slightly opposed to the stream it is added to",
            "within": "the stream grows like sqrt(l), as uncorrelated contributions predict",
            "unclear": "the seeds cannot tell whether it grows like sqrt(l)",
        }[where]
        + f" ({numbers})"
    )


if __name__ == "__main__":
    cli(__name__)
