"""Attention maps rendered for files and browsers: a figure as PNG bytes (`figure_png`), a map as a small PNG
(`thumbnail_png`), the head view as self-contained SVG whose hover is plain CSS (`head_view_svg`), and the attention
explorer (`explorer_html`): every layer, head and view of one input drawn beforehand into one HTML fragment, switched
by a few lines of plain JavaScript, so that it works in a saved notebook and on the course's website, where no kernel
runs and nothing may be fetched.

Written by hand: this is machinery around notebook 09's ideas (the heatmap, the head view and the model view of
`bertlib.viz.attention`), not one of them. Everything here gives the same bytes for the same input: matplotlib's
software name is left out of the PNGs, and the explorer's id is a hash of what it shows.
"""

__all__ = ["HEAD_VIEW_STYLE", "figure_png", "thumbnail_png", "head_view_svg", "png_img", "explorer_html"]

import base64
import hashlib
import io
from collections.abc import Sequence
from html import escape

import matplotlib.image
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from ..data.tokenizer import SEP
from .attention import (
    CMAP,
    AttentionMaps,
    _check_map,
    _row_positions,
    head_view_lines,
    plot_attention,
    select_attention,
)

HEAD_VIEW_STYLE = """
.bertlib-head-view text { font: 12px sans-serif; cursor: pointer; }
.bertlib-head-view text.token:hover { font-weight: bold; fill: #d62728; }
.bertlib-head-view line { stroke: #1f77b4; }
"""


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    "The figure as PNG bytes (nothing in them changes from run to run)."
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def thumbnail_png(attn: torch.Tensor, size: int = 64) -> bytes:
    "A small PNG of one map (averaged down, or enlarged by whole pixels, to about `size` pixels a side)."
    matrix = attn.detach().float().cpu()[None, None]
    if matrix.shape[-1] > size:
        matrix = F.adaptive_avg_pool2d(matrix, size)
    else:
        matrix = matrix.repeat_interleave(size // matrix.shape[-1], -1).repeat_interleave(size // matrix.shape[-1], -2)
    matrix = matrix[0, 0].numpy()
    buffer = io.BytesIO()
    top = max(float(matrix.max()), 1e-9)
    matplotlib.image.imsave(buffer, matrix, cmap=CMAP, vmin=0, vmax=top, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _hover_css(n: int) -> str:
    "The head view's style: while token i is hovered, every line that does not start (left) or end (right) at it hides."
    isolate = ",\n".join(
        rule
        for i in range(n)
        for rule in (
            f".bertlib-head-view:has(.q{i}:hover) line:not(.f{i})",
            f".bertlib-head-view:has(.k{i}:hover) line:not(.t{i})",
        )
    )
    return f"{HEAD_VIEW_STYLE}{isolate} {{ visibility: hidden; }}"


def head_view_svg(
    attn: torch.Tensor | np.ndarray, tokens: Sequence[str], min_weight: float = 0.01, sep_token: str = SEP
) -> str:
    """The head view as self-contained SVG: the tokens twice, queries on the left and keys on the right, joined by
    a line per weight >= `min_weight` (thicker and darker = more attention). Hovering a token leaves only its
    lines; plain CSS does it (`:has(... :hover)`, one rule per token and side), so the SVG works in a notebook, a
    saved HTML file or a browser, without scripts or network access."""
    matrix = _check_map(attn, tokens)
    row, top, label, gap = 18, 24, 110, 130
    ys = [top + row * p + row * 0.7 for p in _row_positions(tokens, sep_token)]
    width, height = 2 * label + gap, int(ys[-1] + row * 0.6)
    parts = [
        f'<svg class="bertlib-head-view" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f"<style>{_hover_css(len(tokens))}</style>",
        f'<text x="{label}" y="14" text-anchor="end" fill="#555">query</text>',
        f'<text x="{label + gap}" y="14" fill="#555">key</text>',
    ]
    for i, j, w in head_view_lines(matrix, min_weight):
        parts.append(
            f'<line class="f{i} t{j}" x1="{label + 5}" y1="{ys[i] - 4:.1f}" x2="{label + gap - 5}" '
            f'y2="{ys[j] - 4:.1f}" stroke-width="{0.5 + 4 * w:.2f}" stroke-opacity="{0.2 + 0.8 * w:.2f}"/>'
        )
    for i, (token, y) in enumerate(zip(tokens, ys, strict=True)):
        parts.append(f'<text class="token q{i}" x="{label}" y="{y:.1f}" text-anchor="end">{escape(token)}</text>')
        parts.append(f'<text class="token k{i}" x="{label + gap}" y="{y:.1f}">{escape(token)}</text>')
    return "\n".join([*parts, "</svg>"])


def png_img(png: bytes, alt: str, **attributes: str) -> str:
    "An <img> that carries its PNG inline (a data URI), so the page needs no other file."
    extra = "".join(f' {name}="{escape(value)}"' for name, value in attributes.items())
    return f'<img alt="{escape(alt)}"{extra} src="data:image/png;base64,{base64.b64encode(png).decode()}">'


# Switches the explorer's views: a button names what it sets (layer, head or view), a thumbnail of the model view
# opens its head as a heatmap. Plain JavaScript, scoped to one explorer, so several on a page do not interfere.
_SWITCH = """(function () {
  const root = document.getElementById("%s");
  const state = {layer: "0", head: "mean", view: "heatmap"};
  function show() {
    const key = state.view === "model view" ? "model view" : state.view + "/" + state.layer + "/" + state.head;
    root.querySelectorAll(".bx-view").forEach(function (v) { v.hidden = v.dataset.key !== key; });
    root.querySelectorAll("button[data-set]").forEach(function (b) {
      b.classList.toggle("bx-on", state[b.dataset.set] === b.dataset.value);
    });
  }
  root.addEventListener("click", function (event) {
    const b = event.target.closest("button");
    if (!b || !root.contains(b)) return;
    if (b.dataset.set) { state[b.dataset.set] = b.dataset.value; }
    else { state.layer = b.dataset.layer; state.head = b.dataset.head; state.view = "heatmap"; }
    show();
  });
  show();
})();"""
_STYLE = """#%s button { margin: 1px; padding: 2px 8px; border: 1px solid #999; background: #f4f4f4; cursor: pointer; }
#%s button.bx-on { background: #1f77b4; color: white; }
#%s .bx-grid { display: grid; grid-template-columns: repeat(%d, 84px); gap: 4px; }
#%s .bx-grid button { padding: 2px; background: white; }"""


def _buttons(name: str, values: Sequence[tuple[str, str]]) -> str:
    return (
        f"<div>{name}: "
        + " ".join(
            f'<button data-set="{name}" data-value="{escape(value)}">{escape(label)}</button>'
            for value, label in values
        )
        + "</div>"
    )


def explorer_html(maps: AttentionMaps, title: str = "", min_weight: float = 0.01, dpi: int = 72) -> str:
    """The attention explorer of one input as a self-contained HTML fragment: every layer and head (and the mean of
    each layer's heads) drawn beforehand as a heatmap (PNG) and a head view (SVG), and the model view's thumbnails,
    each opening its head as a heatmap; a few lines of plain JavaScript show the one the buttons select. Without
    scripts (an untrusted notebook) the first view still shows."""
    tokens, attentions = maps.tokens, maps.attentions
    uid = "bx-" + hashlib.sha256(repr(tokens).encode() + attentions.numpy().tobytes()).hexdigest()[:12]
    heads = [("mean", "mean of heads"), *((str(h), f"head {h}") for h in range(maps.num_heads))]
    views = []
    for layer in range(maps.num_layers):
        for head, name in heads:
            matrix = select_attention(attentions, layer, "mean" if head == "mean" else int(head))
            caption = f"layer {layer}, {name}"
            heatmap = png_img(figure_png(plot_attention(matrix, tokens, caption), dpi), f"heatmap: {caption}")
            views.append((f"heatmap/{layer}/{head}", heatmap))
            views.append((f"head view/{layer}/{head}", head_view_svg(matrix, tokens, min_weight)))
    cells = [
        f'<button data-layer="{layer}" data-head="{head}" title="open as a heatmap">'
        f"{png_img(thumbnail_png(attentions[layer, head]), f'L{layer} H{head}', width='72', height='72')}"
        f"<br>L{layer} H{head}</button>"
        for layer in range(maps.num_layers)
        for head in range(maps.num_heads)
    ]
    views.append(("model view", f'<div class="bx-grid">{"".join(cells)}</div>'))
    panels = "\n".join(
        f'<div class="bx-view" data-key="{key}"{" hidden" if i else ""}>{body}</div>'
        for i, (key, body) in enumerate(views)  # the first view shows where scripts do not run
    )
    controls = "\n".join(
        [
            _buttons("layer", [(str(layer), str(layer)) for layer in range(maps.num_layers)]),
            _buttons("head", heads),
            _buttons("view", [(view, view) for view in ("heatmap", "head view", "model view")]),
        ]
    )
    style = _STYLE % (uid, uid, uid, maps.num_heads, uid)
    heading = f"<p><b>{escape(title)}</b></p>\n" if title else ""
    return (
        f'<div class="bertlib-explorer" id="{uid}">\n<style>{style}</style>\n{heading}{controls}\n{panels}\n'
        f"<script>{_SWITCH % uid}</script>\n</div>"
    )
