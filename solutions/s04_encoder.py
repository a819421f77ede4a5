"""Worked solutions of notebook 04's exercises (the encoder): ReLU against GELU at initialisation, BERT-large's
encoder counted by formula, and how fast Pre-LN's residual stream grows.

`python solutions/s04_encoder.py` runs them all in seconds; nothing is trained.
"""

import math
from functools import partial

import torch
from common import header, parameters, run_all
from torch import nn

from bertlib import BertConfig
from bertlib.model.encoder import BertEncoder, init_bert_weights


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


def exercise_1() -> None:
    "The initialisation figure's numbers with GELU and with ReLU."
    header("exercise 1: ReLU instead of GELU, at initialisation")
    print(f"{'':<24}{'stream RMS after layer 1, 12':>32}{'gradient at layer 1, 12':>28}")
    for std in (0.02, 0.09):
        for style in ("post", "pre"):
            for act in ("gelu", "relu"):
                rms, grads = stack_at_initialisation(style, std, act)
                print(
                    f"{style}-LN, std {std}, {act:<5}{rms[0]:>21.3f}{rms[-1]:>11.3f}{grads[0]:>17.4f}{grads[-1]:>11.4f}"
                )
    print(
        "the curves keep their shape: Post-LN's stream stays at 1 and its gradient is smallest at the first layer, "
        "Pre-LN's stream grows and its gradient shrinks with depth, whichever the activation. What changes is a "
        "scale (ReLU passes its positive inputs whole, GELU shrinks the small ones): the profile across depth is "
        "set by where the LayerNorms sit, not by the activation"
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
        f"measured / predicted at layer {len(rms)}: {ratio:.2f}"
        + (
            "; a little faster than sqrt(l): each contribution is slightly aligned with the stream it is added to"
            if ratio > 1.02
            else ""
        )
    )


def main() -> None:
    "Run every exercise of this notebook, in order."
    run_all(__name__)


if __name__ == "__main__":
    main()
