"""The interactive attention widget of notebook 09: text boxes, a layer slider, a head selector and three views
(heatmap, head view, model view), drawn in Python as PNG or inline SVG so that it works offline, with PNG and
HTML export, and its explorer (`AttentionWidget.explorer`): every view drawn beforehand, for where no kernel runs.

Written by hand; notebook 09 presents it. It needs `ipywidgets` (the `notebooks` extra); the analyses and
static plots of `bertlib.viz.attention` do not.
"""

__all__ = ["VIEWS", "html_page", "AttentionWidget", "attention_widget"]

import base64
import os
from html import escape
from pathlib import Path

import torch
from IPython.display import HTML
from matplotlib.figure import Figure
from tokenizers import Tokenizer
from torch import nn

try:
    import ipywidgets as widgets
except ImportError as err:  # an optional dependency: say how to get it
    raise ImportError(
        "bertlib.viz.widget needs ipywidgets, which comes with the notebooks extra: "
        "pip install 'bertlib[notebooks]' (or pip install ipywidgets)"
    ) from err

from ..utils.checks import check_choice
from ..utils.files import atomic_write
from .attention import (
    attention_maps,
    plot_attention,
    plot_attention_grid,
    plot_head_view,
    select_attention,
)
from .render import explorer_html, figure_png, head_view_svg, png_img, thumbnail_png

VIEWS = ("heatmap", "head view", "model view")


def html_page(title: str, body: str) -> str:
    "A complete HTML document around `body`, with nothing loaded from elsewhere."
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
        f'</head>\n<body style="font-family: sans-serif">\n<h1 style="font-size: 1.2em">{escape(title)}</h1>\n'
        f"{body}\n</body>\n</html>\n"
    )


class AttentionWidget(widgets.VBox):
    """Interactive attention maps of a bertlib model for one text or a pair: text box(es), a layer slider, a head
    selector (or the mean of the heads) and three views (heatmap, head view, model view). Everything is drawn in
    Python, as PNG or inline SVG, so it works offline; `save_png` and `save_html` keep the current view."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer,
        text_a: str,
        text_b: str | None = None,
        layer: int = 0,
        head: int | str = "mean",
        view: str = "heatmap",
        min_weight: float = 0.01,
    ):
        self.model, self.tokenizer, self.min_weight = model, tokenizer, min_weight
        layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
        text = dict(continuous_update=False, layout=widgets.Layout(width="95%"))
        self.text_a = widgets.Text(value=text_a, description="text A" if text_b is not None else "text", **text)
        self.text_b = None if text_b is None else widgets.Text(value=text_b, description="text B", **text)
        self.layer = widgets.IntSlider(value=0, min=0, max=layers - 1, description="layer", continuous_update=False)
        self.head = widgets.Dropdown(
            options=[("mean of heads", "mean")] + [(f"head {h}", h) for h in range(heads)],
            value="mean",
            description="head",
        )
        self.view = widgets.ToggleButtons(options=VIEWS)
        self.image = widgets.Image(format="png")
        self.svg = widgets.HTML()
        self.thumbnails = widgets.GridBox(layout=widgets.Layout(grid_template_columns=f"repeat({heads}, 84px)"))
        self.canvas = widgets.Box()
        self.status = widgets.Label()
        self.file_name = widgets.Text(value="attention", description="save as")
        self.save_button = widgets.Button(
            description="save PNG + HTML", icon="save", layout=widgets.Layout(width="170px")
        )
        texts = [self.text_a] if self.text_b is None else [self.text_a, self.text_b]
        super().__init__(
            [
                *texts,
                widgets.HBox([self.layer, self.head]),
                self.view,
                self.canvas,
                widgets.HBox([self.file_name, self.save_button]),
                self.status,
            ]
        )
        self.add_class("bertlib-attention")  # a stable hook for styling and for the browser test
        self.maps = attention_maps(model, tokenizer, text_a, text_b)
        self._holding = False
        for control in texts:
            control.observe(self._text_changed, "value")
        for control in (self.layer, self.head, self.view):
            control.observe(self._control_changed, "value")
        self.save_button.on_click(self._save_clicked)
        self.show_head(layer, head, view)

    @property
    def matrix(self) -> torch.Tensor:
        "The [seq, seq] map of the selected layer and head (or mean of heads): what the heatmap and head view show."
        return select_attention(self.maps.attentions, self.layer.value, self.head.value)

    @property
    def title(self) -> str:
        head = "mean of heads" if self.head.value == "mean" else f"head {self.head.value}"
        return f"{self.view.value}: layer {self.layer.value}, {head}"

    def _text_changed(self, _) -> None:
        try:
            self.maps = attention_maps(
                self.model, self.tokenizer, self.text_a.value, None if self.text_b is None else self.text_b.value
            )
        except ValueError as err:  # e.g. a text longer than the model's positions: say so and keep the last maps
            self.status.value = str(err)
            return
        self.status.value = ""
        self.thumbnails.children = ()
        self._render()

    def figure(self) -> Figure:
        "The current view as a matplotlib figure (the head view in its static form)."
        if self.view.value == "heatmap":
            return plot_attention(self.matrix, self.maps.tokens, self.title)
        if self.view.value == "head view":
            return plot_head_view(self.matrix, self.maps.tokens, self.title, self.min_weight)
        return plot_attention_grid(self.maps.attentions, self.maps.tokens, "all layers (rows) and heads (columns)")

    def _render(self) -> None:
        if self.view.value == "heatmap":
            self.image.value = figure_png(self.figure())
            self.canvas.children = (self.image,)
        elif self.view.value == "head view":
            self.svg.value = head_view_svg(self.matrix, self.maps.tokens, self.min_weight)
            self.canvas.children = (self.svg,)
        else:
            if not self.thumbnails.children:
                self.thumbnails.children = [
                    self._thumbnail(layer, head)
                    for layer in range(self.maps.num_layers)
                    for head in range(self.maps.num_heads)
                ]
            self.canvas.children = (self.thumbnails,)

    def _thumbnail(self, layer: int, head: int) -> widgets.VBox:
        "One cell of the model view: the map, and a button that opens it as a heatmap."
        button = widgets.Button(description=f"L{layer} H{head}", layout=widgets.Layout(width="80px"))
        button.on_click(lambda _: self.show_head(layer, head))
        image = widgets.Image(
            value=thumbnail_png(self.maps.attentions[layer, head]),
            format="png",
            layout=widgets.Layout(width="72px", height="72px"),
        )
        return widgets.VBox([image, button])

    def show_head(self, layer: int, head: int | str = "mean", view: str = "heatmap") -> None:
        """Show one layer and head (or "mean") in one of `VIEWS`, drawing once; clicking a thumbnail of the model
        view opens its head as a heatmap."""
        select_attention(self.maps.attentions, layer, head)
        check_choice("view", view, VIEWS)
        self._holding = True  # three controls change, but the view should be drawn once
        try:
            self.layer.value, self.head.value, self.view.value = layer, head, view
        finally:
            self._holding = False
        self._render()

    def _control_changed(self, _) -> None:
        if not self._holding:
            self._render()

    def to_png(self) -> bytes:
        "The current view as PNG bytes."
        return figure_png(self.figure())

    def to_html(self) -> str:
        "The current view as a self-contained HTML page (the head view keeps its hover)."
        texts = self.text_a.value if self.text_b is None else f"A: {self.text_a.value} | B: {self.text_b.value}"
        if self.view.value == "head view":
            body = head_view_svg(self.matrix, self.maps.tokens, self.min_weight)
        else:
            body = png_img(self.to_png(), self.title)
        return html_page(self.title, f"<p>{escape(texts)}</p>\n{body}")

    def explorer_html(self) -> str:
        """The widget's sentence in every layer, head and view, drawn beforehand into one self-contained HTML
        fragment that plain JavaScript switches (`bertlib.viz.render.explorer_html`): it works in a saved notebook
        and on a website, where no kernel redraws the widget."""
        texts = self.text_a.value if self.text_b is None else f"A: {self.text_a.value} | B: {self.text_b.value}"
        return explorer_html(self.maps, texts, self.min_weight)

    def explorer(self) -> HTML:
        "The explorer (`explorer_html`) as a notebook output."
        return HTML(self.explorer_html())

    def save_png(self, path: str | os.PathLike) -> Path:
        "Write the current view to `path` as PNG."
        return atomic_write(path, self.to_png())

    def save_html(self, path: str | os.PathLike) -> Path:
        "Write the current view to `path` as a self-contained HTML file."
        return atomic_write(path, self.to_html())

    def close(self) -> None:
        "Close the widget and every control and view in it (closing a Box alone leaves its children alive)."
        for part in (self.image, self.svg, *self.thumbnails.children, self.thumbnails, *self.children):
            for child in getattr(part, "children", ()):
                child.close()
            part.close()
        super().close()

    def _repr_mimebundle_(self, **kwargs) -> dict:
        # a PNG of the current view next to the widget, for viewers that cannot run widgets (a notebook
        # rendered on GitHub, say); Jupyter shows the widget itself
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["image/png"] = base64.b64encode(self.to_png()).decode()
        return bundle

    def _save_clicked(self, _) -> None:
        stem = self.file_name.value.strip() or "attention"
        saved = [self.save_png(f"{stem}.png"), self.save_html(f"{stem}.html")]
        self.status.value = "saved " + " and ".join(str(p) for p in saved)


def attention_widget(
    model: nn.Module, tokenizer: Tokenizer, text_a: str, text_b: str | None = None, **options
) -> AttentionWidget:
    "An `AttentionWidget` for `text_a` (and `text_b`, a sentence pair); `options` go to its constructor."
    return AttentionWidget(model, tokenizer, text_a, text_b, **options)
