"""Concept diagrams of the course, drawn with matplotlib so that they replay offline and under nbval: the input
embedding sum (notebook 02), one head's attention with the padding mask (03), the encoder block, Post-LN beside
Pre-LN (04), the pre-training model and its two heads (05), the four fine-tuning patterns (10), and ELECTRA's
generator and discriminator (12). Each function returns a `Diagram`, which a notebook shows as a PNG image and
whose `figure` is the matplotlib `Figure`; nothing here computes a model.

Written by hand; the notebooks draw with it.
"""

__all__ = [
    "Diagram",
    "embedding_sum",
    "masked_attention",
    "encoder_blocks",
    "pretraining_model",
    "finetuning_patterns",
    "electra_model",
]

import io
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

# one colour per kind of part, the same in every diagram
COLOURS = {
    "input": "#f4f4f4",
    "embedding": "#dbe9f6",
    "attention": "#fde3c8",
    "ffn": "#d9f0d3",
    "norm": "#ece2f0",
    "head": "#fbd5d5",
    "output": "#fff7cc",
}


@dataclass
class Diagram:
    "A drawn figure that Jupyter shows as a PNG image (a bare `Figure` outside pyplot shows only as text)."

    figure: Figure

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        return buffer.getvalue()


def _canvas(width: float, height: float) -> tuple[Figure, Axes]:
    "A figure of `width` x `height` inches whose data coordinates are inches, axes hidden."
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


def _box(
    ax: Axes, x: float, y: float, text: str, kind: str = "input", w: float = 1.4, h: float = 0.42, size: float = 8.5
) -> tuple[float, float]:
    "A rounded box centred on (x, y) holding `text`, coloured by `kind`; returns its centre."
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.06", fc=COLOURS[kind], ec="#555555"
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=size)
    return x, y


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], style: str = "-|>", **kw) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=9, color="#444444", lw=1, **kw))


def _up(ax: Axes, x: float, y0: float, y1: float, h: float = 0.42) -> None:
    "An arrow from the box centred at (x, y0) up to the box centred at (x, y1)."
    _arrow(ax, (x, y0 + h / 2), (x, y1 - h / 2))


def embedding_sum(tokens: Sequence[str] = ("[CLS]", "my", "dog", "[SEP]", "he", "barks", "[SEP]")) -> Diagram:
    """BERT's input (notebook 02): for every token, its token, position and segment embeddings are added, then
    LayerNorm and dropout give the vector the encoder reads. Segment A runs to the first `[SEP]`."""
    step = 1.05
    fig, ax = _canvas(1.7 + step * len(tokens), 3.5)
    first_sep = list(tokens).index("[SEP]") if "[SEP]" in tokens else len(tokens) - 1
    labels = ("input", "token", "position", "segment")
    for row, label in zip((3.1, 2.4, 1.75, 1.1), labels, strict=True):
        ax.text(0.1, row, label, va="center", fontsize=8.5, style="italic")
    for i, token in enumerate(tokens):
        x = 1.4 + step * i
        segment = "A" if i <= first_sep else "B"
        _box(ax, x, 3.1, token, "input", w=0.95)
        _box(ax, x, 2.4, f"E[{token}]", "embedding", w=0.95, size=7.5)
        _box(ax, x, 1.75, f"P{i}", "embedding", w=0.95)
        _box(ax, x, 1.1, f"S{segment}", "embedding", w=0.95)
        for y in (2.075, 1.425):
            ax.text(x, y, "+", ha="center", va="center", fontsize=10)
        _arrow(ax, (x, 3.1 - 0.21), (x, 2.4 + 0.21))
        _arrow(ax, (x, 1.1 - 0.21), (x, 0.62))
    middle = 1.4 + step * (len(tokens) - 1) / 2
    _box(ax, middle, 0.4, "sum  ->  LayerNorm  ->  dropout  ->  one vector per token", "norm", w=step * len(tokens))
    return Diagram(fig)


def masked_attention(
    tokens: Sequence[str] = ("[CLS]", "the", "cat", "sat", "[SEP]", "[PAD]", "[PAD]"), padding: int = 2
) -> Diagram:
    """One head's attention (notebook 03): each query row spreads weights that sum to 1 over the key columns; the
    padding mask adds the most negative finite float to the scores of padded keys (not minus infinity, which gives
    NaN in a row of padding only), so they get weight 0, whatever the query."""
    n = len(tokens)
    cell = 0.42
    fig, ax = _canvas(2.6 + cell * n, 1.6 + cell * n)
    top = 0.4 + cell * n
    for i, token in enumerate(tokens):
        ax.text(1.7 + cell * i + cell / 2, top + 0.08, token, rotation=60, fontsize=8, ha="left", va="bottom")
        ax.text(1.6, top - cell * i - cell / 2, token, fontsize=8, ha="right", va="center")
        for j in range(n):
            masked = j >= n - padding
            ax.add_patch(
                Rectangle(
                    (1.7 + cell * j, top - cell * (i + 1)),
                    cell,
                    cell,
                    fc="#dddddd" if masked else COLOURS["attention"],
                    ec="white",
                    hatch="///" if masked else None,
                )
            )
    ax.text(0.1, 0.3, "rows: queries; columns: keys", fontsize=7.5)
    ax.text(0.1, 0.08, "hatched: padded keys, weight 0 (score + the most negative finite float)", fontsize=7.5)
    ax.text(0.1, top + 0.3, "query \\ key", fontsize=8, style="italic")
    return Diagram(fig)


def _block(
    ax: Axes, x: float, title: str, parts: Sequence[tuple[str, str]], residuals: Sequence[tuple[int, int]]
) -> None:
    "A column of `parts` (text, kind) bottom up at `x`, with residual arrows from part i to the sum at part j."
    ys = [0.45 + 0.62 * k for k in range(len(parts))]
    for k, (text, kind) in enumerate(parts):
        _box(ax, x, ys[k], text, kind, w=1.7)
        if k:
            _up(ax, x, ys[k - 1], ys[k])
    for i, j in residuals:
        _arrow(ax, (x - 0.87, ys[i]), (x - 0.87, ys[j]), connectionstyle="arc3,rad=-0.45")
    ax.text(x, ys[-1] + 0.45, title, ha="center", fontsize=10, weight="bold")


def encoder_blocks() -> Diagram:
    """One encoder layer twice (notebook 04): Post-LN as in BERT, LayerNorm after each residual sum, beside Pre-LN,
    LayerNorm before each sub-layer (with one more LayerNorm after the last layer of the stack)."""
    fig, ax = _canvas(6.2, 5.0)
    post = [
        ("x", "input"),
        ("self-attention", "attention"),
        ("dropout, + x", "input"),
        ("LayerNorm", "norm"),
        ("feed-forward (GELU)", "ffn"),
        ("dropout, + residual", "input"),
        ("LayerNorm", "norm"),
    ]
    pre = [
        ("x", "input"),
        ("LayerNorm", "norm"),
        ("self-attention", "attention"),
        ("dropout, + x", "input"),
        ("LayerNorm", "norm"),
        ("feed-forward (GELU)", "ffn"),
        ("dropout, + residual", "input"),
    ]
    _block(ax, 1.6, "Post-LN (BERT)", post, [(0, 2), (3, 5)])
    _block(ax, 4.6, "Pre-LN", pre, [(0, 3), (3, 6)])
    ax.text(4.6, 0.05, "final LayerNorm after the last layer", ha="center", fontsize=7.5, style="italic")
    return Diagram(fig)


def pretraining_model() -> Diagram:
    """BERT for pre-training (notebook 05): the body (embeddings, L encoder layers) and two heads, MLM on the
    masked positions (dense, GELU, LayerNorm, then the word embeddings' matrix and a bias) and NSP on the pooled
    `[CLS]` (dense and tanh, then two classes)."""
    fig, ax = _canvas(6.4, 4.9)
    _box(ax, 3.2, 0.35, "[CLS]  the  [MASK]  sat  [SEP]  it  slept  [SEP]", "input", w=4.6)
    _box(ax, 3.2, 1.1, "embeddings: token + position + segment", "embedding", w=4.6)
    _box(ax, 3.2, 1.85, "encoder: L layers of self-attention + feed-forward", "attention", w=4.6)
    _up(ax, 3.2, 0.35, 1.1)
    _up(ax, 3.2, 1.1, 1.85)
    _box(ax, 1.5, 2.8, "pooler: dense + tanh on [CLS]", "head", w=2.5)
    _box(ax, 1.5, 3.55, "NSP: 2 classes", "head", w=2.5)
    _box(ax, 1.5, 4.3, "IsNext / NotNext", "output", w=2.5)
    _box(ax, 4.9, 2.8, "MLM: dense, GELU, LayerNorm", "head", w=2.5)
    _box(ax, 4.9, 3.55, "x word embeddings^T + bias", "head", w=2.5)
    _box(ax, 4.9, 4.3, "scores over the vocabulary", "output", w=2.5)
    _arrow(ax, (2.2, 2.06), (1.5, 2.59))
    _arrow(ax, (4.2, 2.06), (4.9, 2.59))
    for x in (1.5, 4.9):
        _up(ax, x, 2.8, 3.55)
        _up(ax, x, 3.55, 4.3)
    ax.text(3.2, 2.35, "[CLS] vector  |  vectors at the masked positions", ha="center", fontsize=7.5, style="italic")
    _arrow(ax, (5.5, 1.1), (6.15, 3.55), style="-", linestyle=":", connectionstyle="arc3,rad=0.3")
    ax.text(6.2, 2.3, "tied", fontsize=7.5, style="italic")
    return Diagram(fig)


def _pattern(ax: Axes, x0: float, title: str, tokens: Sequence[str], outputs: Sequence[str | None]) -> None:
    "One fine-tuning pattern: tokens in, BERT, an output above each token that has one."
    width = 0.62 * len(tokens)
    ax.text(x0 + width / 2, 2.85, title, ha="center", fontsize=9, weight="bold")
    _box(ax, x0 + width / 2, 1.2, "BERT", "attention", w=width, h=0.5)
    for i, (token, out) in enumerate(zip(tokens, outputs, strict=True)):
        x = x0 + 0.31 + 0.62 * i
        _box(ax, x, 0.35, token, "input", w=0.56, size=7)
        if out is not None:
            _box(ax, x, 2.2, out, "output", w=0.56, size=7)
            _arrow(ax, (x, 1.45), (x, 1.99))


def finetuning_patterns() -> Diagram:
    """The four fine-tuning patterns (notebook 10): a class for one sentence (SST-2) or a pair (RTE) from `[CLS]`,
    a tag for every word's first piece (CoNLL-2003), and the start and end of an answer span in a paragraph
    (SQuAD)."""
    patterns = [
        ("one sentence (SST-2)", ["[CLS]", "a", "fine", "film", "[SEP]"], ["pos", None, None, None, None]),
        ("a pair (RTE)", ["[CLS]", "A", "...", "[SEP]", "B", "...", "[SEP]"], ["entail", *[None] * 6]),
        (
            "a tag per word (CoNLL-2003)",
            ["[CLS]", "Paris", "is", "in", "France", "[SEP]"],
            [None, "B-LOC", "O", "O", "B-LOC", None],
        ),
        (
            "a span (SQuAD)",
            ["[CLS]", "when", "?", "[SEP]", "in", "1905", "[SEP]"],
            [None, None, None, None, "start", "end", None],
        ),
    ]
    gap = 0.35
    fig, ax = _canvas(sum(0.62 * len(tokens) + gap for _, tokens, _ in patterns) + gap, 3.1)
    x0 = gap
    for title, tokens, outputs in patterns:
        _pattern(ax, x0, title, tokens, outputs)
        x0 += 0.62 * len(tokens) + gap
    return Diagram(fig)


def electra_model() -> Diagram:
    """ELECTRA (notebook 12), bottom up: a small generator fills the masked positions with tokens sampled from its
    MLM predictions (no gradient flows through the sampling); the discriminator reads the result and tells, for
    every token, whether it is the original or a replacement. The two share their embeddings; only the
    discriminator is kept for fine-tuning."""
    fig, ax = _canvas(6.8, 4.7)
    xs, middle = (2.1, 3.0, 3.9, 4.8), 3.45
    rows = (
        (0.4, ("the", "[MASK]", "sat", "[MASK]"), "input"),
        (2.1, ("the", "dog", "sat", "down"), "input"),
        (3.8, ("original", "replaced", "original", "replaced"), "output"),
    )
    for y, words, kind in rows:
        for x, word in zip(xs, words, strict=True):
            _box(ax, x, y, word, kind, w=0.82, size=7.5 if kind == "output" else 8.5)
    _box(ax, middle, 1.25, "generator: a small masked LM", "head", w=3.6)
    _box(ax, middle, 2.95, "discriminator: BERT + one score per token", "attention", w=3.6)
    for y0, y1 in ((0.4, 1.25), (1.25, 2.1), (2.1, 2.95), (2.95, 3.8)):
        _up(ax, middle, y0, y1)
    ax.text(middle + 0.08, 1.675, "sampled at the masks (no gradient)", fontsize=7, style="italic", va="center")
    ax.text(middle, 4.4, "the original: the cat sat there", ha="center", fontsize=8.5, style="italic")
    ax.text(0.1, 1.25, "MLM loss on the\nmasked positions;\nthrown away after\npre-training", fontsize=7, va="center")
    ax.text(0.1, 2.95, "binary loss on\nevery real token;\nkept for fine-tuning", fontsize=7, va="center")
    _arrow(ax, (5.3, 1.25), (5.3, 2.95), style="<->", linestyle=":", connectionstyle="arc3,rad=0.5")
    ax.text(5.85, 2.1, "shared\nembeddings", fontsize=7.5, style="italic", va="center")
    return Diagram(fig)
