"""The figures of the evaluation and attention notebooks that are drawing and nothing else: a model's scores
beside a baseline's (notebook 08), and the entropy and the pattern scores of every attention head (notebook
09). They return `matplotlib.figure.Figure`s, which a notebook shows and a script saves, and never touch
pyplot's current figure.

Written by hand; notebooks 08 and 09 use it, so that their cells show the measurements rather than the drawing.
"""

__all__ = ["plot_against_baseline", "plot_head_entropy", "plot_head_scores"]

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure


def plot_against_baseline(
    scores: Mapping[str, float], baseline: Mapping[str, float], metrics: Sequence[str], title: str
) -> Figure:
    "One pair of bars per metric, the model's beside the baseline's, each bar labelled with its value."
    fig = Figure(figsize=(2.75 * len(metrics), 2.6), layout="constrained")
    for ax, metric in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics, strict=True):
        values = [scores[metric], baseline[metric]]
        ax.bar(["model", "baseline"], values, color=["C0", "C7"])
        if "perplexity" in metric:  # 20 against 800: on a linear axis the model's bar would vanish
            ax.set_yscale("log")
        for x, value in enumerate(values):
            ax.annotate(f"{value:.3g}", (x, value), ha="center", va="bottom", fontsize=8)
        ax.set_title(metric, fontsize=9)
    fig.suptitle(title)
    return fig


def plot_head_entropy(entropy: torch.Tensor, uniform: float, title: str) -> Figure:
    "One bar per head of a [layers, heads] tensor of entropies, grouped by layer, against uniform attention's."
    layers, heads = entropy.shape
    fig = Figure(figsize=(8.5, 3), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / heads
    for h in range(heads):
        ax.bar(np.arange(layers) + (h - (heads - 1) / 2) * width, entropy[:, h].numpy(), width, label=f"head {h}")
    ax.axhline(uniform, color="black", ls="--", label="uniform attention")
    ax.set(xticks=range(layers), xlabel="layer", ylabel="entropy (bits)", title=title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the bars, never over them
    return fig


def plot_head_scores(scores: Mapping[str, torch.Tensor], title: str) -> Figure:
    "One small heatmap per pattern of `bertlib.viz.attention.head_scores`: rows = layers, columns = heads."
    fig = Figure(figsize=(2.2 * len(scores), 2.6), layout="constrained")
    axes = fig.subplots(1, len(scores), squeeze=False)[0]
    for ax, (name, values) in zip(axes, scores.items(), strict=True):
        image = ax.imshow(values.numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set(title=name, xlabel="head", ylabel="layer", xticks=range(values.shape[1]), yticks=range(values.shape[0]))
    fig.colorbar(image, ax=axes, shrink=0.8, label="share of attention")
    fig.suptitle(title)
    return fig
