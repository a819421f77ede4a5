"""Pictures of the fine-tuning tasks (notebook 10): a classifier's confusion matrix, bars of scores over seeds beside
reference lines (the majority class, a published model), and a tagger's entities and a reader's answer as HTML. The
plots return a `Figure`, the views an HTML string; nothing here computes a model or a score.

Written by hand; notebook 10 draws with it.
"""

__all__ = ["ENTITY_COLOURS", "confusion_matrix", "score_bars", "entities_html", "answer_html"]

import statistics
from collections.abc import Mapping, Sequence
from html import escape

from matplotlib.figure import Figure

ENTITY_COLOURS = {"PER": "#f4a3a3", "ORG": "#a3c4f4", "LOC": "#a8e0a0", "MISC": "#f0d890"}
_LINE_STYLES = (":", "--", "-.")


def confusion_matrix(gold: Sequence[int], predicted: Sequence[int], names: Sequence[str], title: str) -> Figure:
    "How often each gold class (row) was predicted as each class (column), from class ids."
    counts = [[0] * len(names) for _ in names]
    for g, p in zip(gold, predicted, strict=True):
        counts[g][p] += 1
    fig = Figure(figsize=(3.6, 3.2))
    ax = fig.add_subplot()
    ax.imshow(counts, cmap="Blues")
    for g, row in enumerate(counts):
        for p, n in enumerate(row):
            ax.text(p, g, n, ha="center", va="center", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7})
    ticks = range(len(names))
    ax.set(xticks=ticks, yticks=ticks, xticklabels=names, yticklabels=names, xlabel="predicted", ylabel="gold")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def score_bars(
    groups: Sequence[str],
    series: Mapping[str, Sequence[Sequence[float]]],
    lines: Mapping[str, Sequence[float | None]] | None = None,
    *,
    ylabel: str,
    title: str,
    decimals: int = 3,
) -> Figure:
    """Bars of the mean score of each group, one bar per series side by side (`series[name][i]`: the scores of group
    `i` over seeds), the standard deviation over seeds as an error bar and the mean written on the bar with `decimals`;
    and reference `lines`, label -> one value per group (None: no line there), each drawn across its group's bars."""
    fig = Figure(figsize=(min(10.0, max(4.6, 0.6 * len(groups) * len(series) + 2.4)), 3.2))
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    bars = []  # (x, mean, error) of every bar
    for k, (name, scores) in enumerate(series.items()):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(groups))]
        means = [statistics.mean(s) for s in scores]
        errors = [statistics.stdev(s) if len(s) > 1 else 0.0 for s in scores]
        ax.bar(xs, means, width * 0.9, yerr=errors, capsize=3, label=name)
        bars += zip(xs, means, errors, strict=True)
    for (label, values), style in zip((lines or {}).items(), _LINE_STYLES, strict=False):
        drawn = [(i, v) for i, v in enumerate(values) if v is not None]
        for j, (i, value) in enumerate(drawn):
            ax.plot([i - 0.45, i + 0.45], [value, value], ls=style, color="black", label=None if j else label)
    # the means go at the foot of their bars: reference lines and error bars run near the tops, where a number
    # written above a bar would cross them; a bar too short to hold its number has it above its error bar
    bottom, top = ax.get_ylim()
    room = 0.12 * (top - bottom)
    for x, mean, error in bars:
        inside = mean - max(bottom, 0.0) > room
        y, colour = (max(bottom, 0.0) + room / 6, "white") if inside else (mean + error, "black")
        ax.text(x, y, f"{mean:.{decimals}f}", ha="center", va="bottom", fontsize=7, color=colour)
    ax.set(xticks=range(len(groups)), ylabel=ylabel)
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def entities_html(words: Sequence[str], entities: Sequence[tuple[str, int, int]]) -> str:
    "The words of a sentence with each entity `(type, start word, end word excluded)` coloured by its type."
    html, i = [], 0
    for kind, start, end in sorted(entities, key=lambda e: e[1]):
        html += [escape(w) for w in words[i:start]]
        colour = ENTITY_COLOURS.get(kind, "#dddddd")
        html.append(
            f'<span style="background:{colour};padding:1px 4px;border-radius:3px">'
            f"{escape(' '.join(words[start:end]))} <sub>{escape(kind)}</sub></span>"
        )
        i = end
    html += [escape(w) for w in words[i:]]
    return "<p style='font-size:15px;line-height:2'>" + " ".join(html) + "</p>"


def answer_html(context: str, start: int, end: int, gold: str) -> str:
    "A paragraph with the characters `start:end` (a predicted answer) highlighted, and the gold answer under it."
    return (
        f"<p style='font-size:14px'>{escape(context[:start])}<mark style='background:#f2c59b'>"
        f"{escape(context[start:end])}</mark>{escape(context[end:])}</p><p>gold answer: <b>{escape(gold)}</b></p>"
    )
