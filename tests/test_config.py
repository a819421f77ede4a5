import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertlib.model.config import PRESETS, BertConfig


@pytest.mark.parametrize(
    "name, layers, hidden, heads, intermediate",
    [
        ("tiny", 2, 128, 2, 512),
        ("mini", 4, 256, 4, 1024),
        ("small", 4, 512, 8, 2048),
        ("base", 12, 768, 12, 3072),
        ("large", 24, 1024, 16, 4096),
    ],
)
def test_presets(name, layers, hidden, heads, intermediate):
    c = BertConfig.from_preset(name)
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (
        layers,
        hidden,
        heads,
        intermediate,
    )
    assert (c.vocab_size, c.pad_token_id, c.max_position_embeddings, c.norm_style) == (8192, 0, 512, "post")


def test_defaults_are_mini_and_overrides_apply():
    assert BertConfig() == BertConfig.from_preset("mini")
    c = BertConfig.from_preset("base", vocab_size=30522, norm_style="pre")
    assert (c.vocab_size, c.norm_style, c.hidden_size) == (30522, "pre", 768)
    assert c.head_size == 64


def test_json_round_trip(tmp_path):
    c = BertConfig.from_preset("tiny", vocab_size=97, hidden_act="relu", norm_style="pre", layer_norm_eps=1e-5)
    path = tmp_path / "sub" / "config.json"
    c.to_json_file(path)
    assert json.loads(path.read_text()) == c.to_dict()
    assert BertConfig.from_json_file(path) == c
    assert list(tmp_path.glob("sub/.*")) == []  # no temporary file left behind


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            dict(hidden_size=100, num_attention_heads=3),
            "hidden_size=100 is not valid; it must be a multiple of num_attention_heads=3",
        ),
        (dict(vocab_size=0), "vocab_size=0 is not valid; it must be a positive integer"),
        (dict(num_hidden_layers=-1), "num_hidden_layers=-1"),
        (dict(intermediate_size=2.5), "intermediate_size=2.5"),
        (dict(max_position_embeddings=True), "max_position_embeddings=True"),
        (
            dict(hidden_act="tanh"),
            "hidden_act='tanh' is not valid; choose one of 'gelu', 'gelu_pytorch_tanh', 'relu', 'silu'",
        ),
        (dict(norm_style="middle"), "norm_style='middle' is not valid; choose one of 'post', 'pre'"),
        (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob=1.0 is not valid; it must be in [0, 1)"),
        (dict(attention_probs_dropout_prob=-0.1), "attention_probs_dropout_prob=-0.1"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps=0.0 is not valid; it must be a positive number"),
        (dict(initializer_range=-0.02), "initializer_range=-0.02"),
        (dict(pad_token_id=8192), "pad_token_id=8192 is not valid; it must be in [0, vocab_size=8192)"),
    ],
)
def test_invalid_configs_name_the_field_and_the_allowed_values(fields, message):
    with pytest.raises(ValueError) as err:
        BertConfig(**fields)
    assert message in str(err.value)


def test_unknown_preset_and_unknown_field():
    with pytest.raises(
        ValueError, match="preset='huge' is not valid; choose one of 'tiny', 'mini', 'small', 'base', 'large'"
    ):
        BertConfig.from_preset("huge")
    with pytest.raises(ValueError, match="unknown BertConfig field.*'num_layers'.*known fields: vocab_size"):
        BertConfig.from_dict({"num_layers": 3})
    with pytest.raises(ValueError, match="hidden_size"):
        BertConfig.from_preset("mini", hidden_size=250)


@settings(max_examples=50, deadline=None)
@given(
    heads=st.integers(1, 8),
    head_size=st.integers(1, 16),
    layers=st.integers(1, 4),
    preset=st.sampled_from(sorted(PRESETS)),
    act=st.sampled_from(["gelu", "relu"]),
)
def test_any_valid_config_survives_dict_round_trip(heads, head_size, layers, preset, act):
    c = BertConfig.from_preset(
        preset, num_attention_heads=heads, hidden_size=heads * head_size, num_hidden_layers=layers, hidden_act=act
    )
    assert BertConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert c.head_size == head_size
