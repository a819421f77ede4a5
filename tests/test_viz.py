"""bertlib.viz.attention, bertlib.viz.render and bertlib.viz.widget: the pictures show exactly the model's attentions,
the widget follows its controls, pairs mark their boundary, the longest inputs render in every view, saved files are
self-contained and reproducible, and the explorer carries every view of its sentence."""

import base64
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from bert_testing import wordpiece_tokenizer

from bertlib.data.tokenizer import add_bert_post_processor
from bertlib.model.bert import BertForPreTraining, BertModel
from bertlib.model.config import BertConfig
from bertlib.viz import diagrams
from bertlib.viz.attention import (
    AttentionMaps,
    attention_maps,
    head_entropy,
    head_scores,
    head_view_lines,
    plot_attention,
    plot_attention_grid,
    segment_starts,
    select_attention,
    stack_attentions,
)
from bertlib.viz.render import head_view_svg
from bertlib.viz.widget import VIEWS, attention_widget

TEXT_A, TEXT_B = "the big cat sat on the mat", "a small dog jumped quickly over the log"


@pytest.fixture(scope="module")
def tokenizer():
    return add_bert_post_processor(wordpiece_tokenizer())


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size(), num_attention_heads=4)
    return BertForPreTraining(config).eval()


def reference_attentions(model, tokenizer, text_a, text_b=None):
    encoding = tokenizer.encode(text_a) if text_b is None else tokenizer.encode(text_a, text_b)
    with torch.no_grad():
        out = model(
            torch.tensor([encoding.ids]), token_type_ids=torch.tensor([encoding.type_ids]), output_attentions=True
        )
    return out.attentions


def image_data(fig, index=0):
    return np.asarray(fig.axes[index].images[0].get_array())


def test_figure_data_equal_the_models_attentions(model, tokenizer):
    reference = reference_attentions(model, tokenizer, TEXT_A, TEXT_B)
    maps = attention_maps(model, tokenizer, TEXT_A, TEXT_B)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert maps.attentions.shape == (layers, heads, len(maps.tokens), len(maps.tokens))
    grid = plot_attention_grid(reference, maps.tokens)
    for layer in range(layers):
        for head in [*range(heads), "mean"]:
            expected = (reference[layer][0].mean(0) if head == "mean" else reference[layer][0, head]).numpy()
            matrix = select_attention(maps.attentions, layer, head)
            assert np.array_equal(image_data(plot_attention(matrix, maps.tokens)), expected)
            lines = {(i, j): w for i, j, w in head_view_lines(matrix, min_weight=0.0)}
            assert len(lines) == expected.size and all(math.isclose(w, expected[i, j]) for (i, j), w in lines.items())
            if head != "mean":
                assert np.array_equal(image_data(grid, layer * heads + head), expected)


def test_widget_controls_update_the_view(model, tokenizer):
    widget = attention_widget(model, tokenizer, TEXT_A, TEXT_B)
    reference = reference_attentions(model, tokenizer, TEXT_A, TEXT_B)
    assert widget.canvas.children == (widget.image,)
    first = widget.image.value
    widget.layer.value = 1
    assert widget.image.value != first and torch.equal(widget.matrix, reference[1][0].mean(0))
    second = widget.image.value
    widget.head.value = 2
    assert widget.image.value != second and torch.equal(widget.matrix, reference[1][0, 2])

    widget.view.value = "head view"
    assert widget.canvas.children == (widget.svg,)
    assert widget.svg.value == head_view_svg(widget.matrix, widget.maps.tokens)
    widget.view.value = "model view"
    assert widget.canvas.children == (widget.thumbnails,)
    assert len(widget.thumbnails.children) == model.config.num_hidden_layers * model.config.num_attention_heads
    widget.thumbnails.children[3].children[1].click()  # layer 0, head 3: opens it as a heatmap
    assert (widget.layer.value, widget.head.value, widget.view.value) == (0, 3, "heatmap")

    widget.text_b.value = "the dog sat"
    assert widget.maps.tokens[-4:] == ["the", "dog", "sat", "[SEP]"] and widget.status.value == ""
    assert torch.equal(widget.matrix, reference_attentions(model, tokenizer, TEXT_A, "the dog sat")[0][0, 3])
    widget.text_a.value = "cat " * 600
    assert "at most 512" in widget.status.value and widget.maps.tokens[-4:] == ["the", "dog", "sat", "[SEP]"]
    widget.close()


def test_pair_input_marks_the_segment_boundary(model, tokenizer):
    maps = attention_maps(model, tokenizer, TEXT_A, TEXT_B)
    start = maps.type_ids.index(1)
    assert maps.tokens[start - 1] == "[SEP]" and segment_starts(maps.tokens) == [start]
    matrix = select_attention(maps.attentions, 0)
    ax = plot_attention(matrix, maps.tokens).axes[0]
    horizontal = [line.get_ydata()[0] for line in ax.lines if line.get_ydata()[0] == line.get_ydata()[1]]
    vertical = [line.get_xdata()[0] for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[1]]
    assert horizontal == vertical == [start - 0.5]
    single = attention_maps(model, tokenizer, TEXT_A)
    assert segment_starts(single.tokens) == []
    assert not plot_attention(single.attentions[0, 0], single.tokens).axes[0].lines
    # the head view leaves half a row between the segments
    ys = [
        float(part.split('y="')[1].split('"')[0])
        for part in head_view_svg(matrix, maps.tokens).split("<text ")
        if 'class="token q' in part
    ]
    steps = np.diff(ys)
    assert steps[start - 1] == pytest.approx(1.5 * steps[0]) and np.allclose(np.delete(steps, start - 1), steps[0])
    assert set(maps.word_ids[1 : start - 1]).isdisjoint(maps.word_ids[start:-1])  # words are counted across segments


def test_the_longest_inputs_render_in_every_view(model, tokenizer):
    text = " ".join(["cat", "sat", "on", "the", "mat"] * 102)  # 510 words, each one piece
    widget = attention_widget(model, tokenizer, text)
    assert len(widget.maps.tokens) == 512
    for view in VIEWS:
        widget.view.value = view
        assert widget.to_png().startswith(b"\x89PNG")
    widget.close()


def test_viz_imports_without_ipywidgets_and_the_widget_says_what_is_missing():
    script = (
        "import sys; sys.modules['ipywidgets'] = None; import bertlib.viz.attention\n"
        "try:\n    import bertlib.viz.widget\nexcept ImportError as err:\n    print(err)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "pip install 'bertlib[notebooks]'" in out


def test_bad_input_is_refused_clearly(model, tokenizer):
    maps = attention_maps(model, tokenizer, TEXT_A)
    with pytest.raises(ValueError, match="layer=2 is out of range"):
        select_attention(maps.attentions, 2)
    with pytest.raises(ValueError, match="head=4 is not valid"):
        select_attention(maps.attentions, 0, 4)
    with pytest.raises(ValueError, match="at most 512"):
        attention_maps(model, tokenizer, "cat " * 511)
    with pytest.raises(ValueError, match=r"\[seq, seq\] map for"):
        plot_attention(maps.attentions[0], maps.tokens)
    with pytest.raises(ValueError, match="not a batch"):
        stack_attentions(torch.rand(2, 2, 3, 3, 3))
    with pytest.raises(ValueError, match="view='table'"):
        attention_widget(model, tokenizer, TEXT_A, view="table")
    with pytest.raises(ValueError, match="layer=5"):
        attention_widget(model, tokenizer, TEXT_A, layer=5)


def test_any_bertlib_model_in_any_mode(model, tokenizer, tmp_path):
    "A model saved and loaded again, left in training mode, and a bare BertModel give the same maps."
    model.config.to_json_file(tmp_path / "config.json")
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    loaded = BertForPreTraining(BertConfig.from_json_file(tmp_path / "config.json"))
    loaded.load_state_dict(torch.load(tmp_path / "weights.pt"))
    loaded.train()
    first, second = (attention_maps(loaded, tokenizer, TEXT_A, TEXT_B) for _ in range(2))
    assert loaded.training  # the caller's mode is restored
    assert torch.equal(first.attentions, second.attentions)  # no dropout on the maps
    assert torch.equal(first.attentions, attention_maps(model, tokenizer, TEXT_A, TEXT_B).attentions)
    body = BertModel(model.config)
    body.load_state_dict(model.bert.state_dict())
    assert torch.equal(attention_maps(body, tokenizer, TEXT_A, TEXT_B).attentions, first.attentions)


def test_saved_views_are_self_contained_and_reproducible(model, tokenizer, tmp_path):
    widget = attention_widget(model, tokenizer, TEXT_A, TEXT_B)
    again = attention_widget(model, tokenizer, TEXT_A, TEXT_B)
    for view in VIEWS:
        widget.show_head(1, 0, view)
        again.show_head(1, 0, view)
        png, html = widget.save_png(tmp_path / "v.png"), widget.save_html(tmp_path / "v.html")
        assert png.read_bytes().startswith(b"\x89PNG") and png.read_bytes() == again.to_png()
        text = html.read_text()
        assert text == again.to_html() and text.startswith("<!DOCTYPE html>")
        assert not any(marker in text for marker in ("<script", 'src="http', 'href="http', "@import"))
    assert ":hover" in text or "<svg" not in text
    widget.show_head(0, "mean", "head view")
    svg = widget.to_html()
    assert "<svg" in svg and ".bertlib-head-view:has(.q0:hover) line:not(.f0)" in svg
    widget.file_name.value = str(tmp_path / "clicked")
    widget.save_button.click()
    assert (tmp_path / "clicked.png").is_file() and (tmp_path / "clicked.html").is_file()
    bundle = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]) == widget.to_png()
    widget.close()
    again.close()


def test_head_scores_and_entropy_on_hand_made_heads(model, tokenizer):
    maps = attention_maps(model, tokenizer, "big dogs quickly", "the cats")
    n = len(maps.tokens)
    previous = torch.eye(n).roll(-1, dims=1)
    previous[0] = torch.eye(n)[0]
    to_cls = torch.zeros(n, n)
    to_cls[:, 0] = 1
    handmade = AttentionMaps(
        torch.stack([previous, to_cls, torch.full((n, n), 1 / n)])[None], maps.tokens, maps.type_ids, maps.word_ids
    )
    scores, entropy = head_scores(handmade), head_entropy(handmade)
    # of the n - 1 tokens with a previous one, only token 1 has [CLS] there
    assert scores["previous token"][0].tolist() == pytest.approx([1, 1 / (n - 1), 1 / n])
    assert scores["[CLS]"][0].tolist() == pytest.approx([2 / n, 1, 1 / n])  # tokens 0 and 1 look at [CLS]
    assert scores["next token"][0, 0] == 0 and scores["same token"][0, 0] == pytest.approx(1 / n)
    assert entropy[0].tolist() == pytest.approx([0, 0, math.log2(n)], abs=1e-5)
    pieces = [i for i, w in enumerate(maps.word_ids) if w is not None and maps.word_ids.count(w) > 1]
    assert pieces, "the test needs a word cut into pieces"
    assert torch.allclose(head_scores([handmade, handmade])["same word"], scores["same word"])
    no_pieces = attention_maps(model, tokenizer, "the cat")
    assert all(w is None or no_pieces.word_ids.count(w) == 1 for w in no_pieces.word_ids)
    assert torch.isnan(head_scores(no_pieces)["same word"]).all()
    with pytest.raises(ValueError, match="no attention maps"):
        head_entropy([])


ROOT = Path(__file__).resolve().parents[1]
CONCEPT_DIAGRAMS = {
    "02_embeddings": "embedding_sum",
    "03_self_attention": "masked_attention",
    "04_encoder": "encoder_blocks",
    "05_bert_pretraining_heads": "pretraining_model",
    "10_finetuning": "finetuning_patterns",
    "12_electra_distillation": "electra_model",
}


@pytest.mark.parametrize("notebook, name", CONCEPT_DIAGRAMS.items())
def test_each_concept_diagram_is_a_figure_output_of_its_notebook(notebook, name):
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    drawing = [c for c in cells if c["cell_type"] == "code" and f"{name}(" in "".join(c["source"])]
    assert drawing, f"notebook {notebook} does not draw {name}"
    assert any("image/png" in o.get("data", {}) for c in drawing for o in c["outputs"]), f"{name} has no saved figure"
    png = getattr(diagrams, name)()._repr_png_()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_the_padding_diagram_names_the_finite_bias_that_the_model_adds_not_minus_infinity():
    from bertlib.model.attention import attention_bias

    bias = attention_bias(torch.tensor([[1, 1, 0]]), torch.float32)
    assert torch.isfinite(bias).all() and bias.min() == torch.finfo(torch.float32).min  # what notebook 03 builds
    labels = " ".join(text.get_text() for text in diagrams.masked_attention().figure.axes[0].texts)
    assert "-inf" not in labels and "most negative finite float" in labels


def _drawn_pieces(artist) -> list:
    "The display boxes of the pieces a line or line collection draws: each segment, or each marker (error bar caps)."
    from matplotlib.lines import Line2D
    from matplotlib.transforms import Bbox

    if isinstance(artist, Line2D):
        points = artist.get_transform().transform(artist.get_xydata())
        if artist.get_linestyle() in ("None", ""):
            r = artist.get_markersize() * artist.figure.dpi / 72 / 2
            return [Bbox.from_extents(x - r, y - 1, x + r, y + 1) for x, y in points]
        return [Bbox(pair) for pair in zip(points, points[1:], strict=False)]
    return [Bbox(artist.get_transform().transform(segment)) for segment in artist.get_segments()]


def test_the_scores_written_on_the_bars_cross_no_reference_line_and_no_error_bar():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from bertlib.viz.tasks import score_bars

    fig = score_bars(  # notebook 10's study: reference lines just above the means, and a short bar
        ["rte", "sst2", "squad"],
        {
            "pretrained": [[57.8, 56.7, 53.8], [84.6, 85.0, 84.8], [27.9, 27.4, 26.9]],
            "random": [[54.5, 52.4, 52.0]] * 3,
        },
        {"majority class": [52.7, 50.9, None], "published": [57.9, 85.9, None]},
        ylabel="score (%)",
        title="bars",
        decimals=1,
    )
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    means = [t for t in ax.texts if t.get_text().replace(".", "").isdigit()]
    assert sorted(t.get_text() for t in means) == sorted(["56.1", "84.8", "27.4", "53.0", "53.0", "53.0"])
    pieces = [box for artist in [*ax.lines, *ax.collections] for box in _drawn_pieces(artist)]
    assert len(pieces) == 4 + 6 + 12  # four reference lines, six error bars with two caps each
    for text in means:
        box = text.get_window_extent(renderer)
        assert not any(box.overlaps(piece) for piece in pieces), text.get_text()


def test_the_explorer_carries_every_view_of_its_sentence_and_nothing_from_elsewhere():
    """Every layer and head (and each layer's mean) as a heatmap and a head view, and the model view; no file or
    address outside it; the same bytes for the same input; under 3 MB for the course model's pair of notebook 09."""
    import bertlib

    model, tokenizer = bertlib.load_model(ROOT / "models" / "course-mini")
    widget = attention_widget(model, tokenizer, "The cat sat on the mat.", "It was an unbelievably comfortable mat.")
    html = widget.explorer_html()
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    keys = re.findall(r'class="bx-view" data-key="([^"]+)"', html)
    every_head = ["mean", *map(str, range(heads))]
    views = [
        f"{view}/{layer}/{head}" for view in ("heatmap", "head view") for layer in range(layers) for head in every_head
    ]
    assert sorted(keys) == sorted([*views, "model view"])
    assert html.count('data-layer="') == layers * heads  # a thumbnail of the model view per head
    outside = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert not re.search(r'(src|href)="(?!data:)', outside) and "http" not in outside
    assert html == widget.explorer_html() and len(html.encode()) < 3 * 2**20
    widget.close()
