"""Worked solutions of notebook 04's exercises (the encoder): ReLU against GELU at initialisation, BERT-large's
encoder counted by formula, and how fast Pre-LN's residual stream grows.

`python solutions/s04_encoder.py` runs them all in seconds; nothing is trained.
"""

import math
from functools import partial

import torch
from common import BertEncoder, add_final_norm, cli, header, init_bert_weights, parameters
from torch import nn

from bertlib import BertConfig


def stack_at_initialisation(style: str, std: float, act: str = "gelu") -> tuple[list[float], list[float]]:
    """Notebook 04's experiment: a 12-layer stack of width 128 initialised with `std`, run on fixed random
    inputs; the RMS of each layer's output and the gradient norm reaching each layer's weight matrices."""
    torch.manual_seed(0)
    inputs = nn.functional.layer_norm(torch.randn(8, 64, 128), (128,))
    target = torch.randn(8, 64, 128)
    torch.manual_seed(1)
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


def _profile(rms: list[float], grads: list[float]) -> str:
    "The shape across depth of a stack's stream and gradient, within 10% taken as level."
    stream = "the stream grows with depth" if rms[-1] > 1.1 * rms[0] else "the stream stays level"
    ratio = grads[0] / grads[-1]
    gradient = "smaller than" if ratio < 0.9 else "larger than" if ratio > 1.1 else "about the same as"
    return f"{stream}, the gradient at layer 1 is {gradient} at layer {len(grads)}"


def exercise_1() -> None:
    "The initialisation figure's numbers with GELU and with ReLU."
    header("exercise 1: ReLU instead of GELU, at initialisation")
    print(f"{'':<24}{'stream RMS after layer 1, 12':>32}{'gradient at layer 1, 12':>28}")
    profiles = {}
    for std in (0.02, 0.09):
        for style in ("post", "pre"):
            for act in ("gelu", "relu"):
                rms, grads = stack_at_initialisation(style, std, act)
                profiles[std, style, act] = _profile(rms, grads)
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
        f"{kept} of {len(profiles) // 2} settings keep their profile across depth when ReLU replaces GELU"
        + (
            ": the profile is set by where the LayerNorms sit, not by the activation, which changes only a scale "
            "(ReLU passes its positive inputs whole, GELU shrinks the small ones)"
            if kept == len(profiles) // 2
            else "; in the others the activation changes the profile, not only its scale"
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
        f"{'equal' if formula == counted else 'different'}"
    )


def exercise_3() -> None:
    "RMS(x_l)^2 = RMS(x_0)^2 + l c^2 for a sum of l uncorrelated contributions of size c, against the curve."
    header("exercise 3: how fast Pre-LN's residual stream grows")
    rms, _ = stack_at_initialisation("pre", 0.09)
    start = 1.0  # the inputs are LayerNorm-ed, so their RMS is 1
    step = rms[0] ** 2 - start**2  # c^2: what one layer adds, measured at the first layer
    print(
        "if each layer adds a contribution of size c uncorrelated with the stream, the squares add up: "
        "RMS after l layers = sqrt(1 + l c^2), growing like sqrt(l)"
    )
    print(f"c^2 from layer 1: {step:.3f}")
    for layer in (1, 2, 4, 8, 12):
        print(f"layer {layer:>2}: measured {rms[layer - 1]:.3f}, predicted {math.sqrt(start**2 + layer * step):.3f}")
    ratio = rms[-1] / math.sqrt(start**2 + len(rms) * step)
    print(
        f"measured / predicted at layer {len(rms)}: {ratio:.2f}; "
        + (
            "a little faster than sqrt(l): each contribution is slightly aligned with the stream it is added to"
            if ratio > 1.02
            else "a little slower than sqrt(l): each contribution is slightly opposed to the stream it is added to"
            if ratio < 0.98
            else "the stream grows like sqrt(l), as uncorrelated contributions predict"
        )
    )


if __name__ == "__main__":
    cli(__name__)
