"""`BertConfig`: every size and option of a bertlib BERT, with HF's field names, the presets from `tiny` to `large`,
validation that names a bad field in one line, and JSON save/load. It also holds the choices that the settings name
without loading torch (activations, norm styles, position types, poolings, soft targets).

Written by hand: plain bookkeeping, which notebook 02 presents and the model and its variants read.
"""

__all__ = [
    "ACTIVATIONS",
    "NORM_STYLES",
    "POSITION_EMBEDDING_TYPES",
    "POOLINGS",
    "SOFT_TARGETS",
    "PRESETS",
    "BertConfig",
]

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..utils.checks import check_choice, check_positive_ints
from ..utils.files import atomic_write

# HF's `hidden_act` names; `bertlib.model.encoder.ACTIVATION_MODULES` maps each to its module ("gelu" is BERT's
# exact GELU)
ACTIVATIONS = ("gelu", "gelu_pytorch_tanh", "relu", "silu")
NORM_STYLES = ("post", "pre")
POSITION_EMBEDDING_TYPES = ("absolute", "rope")
POOLINGS = ("cls", "mean")  # what a sequence classifier reads (`bertlib.model.heads`)
SOFT_TARGETS = ("all", "masked")  # the tokens whose soft targets a student learns (`bertlib.model.distillation`)
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, intermediate_size=4096),
}
_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)


@dataclass
class BertConfig:
    """Sizes and options of a BERT model; field names follow HF `transformers.BertConfig`.

    The defaults are the `mini` preset with our 8,192-token vocabulary. `norm_style` is ours: "post"
    (LayerNorm after each residual sum, as in the paper) or "pre" (before each sub-layer, plus a final
    LayerNorm). `position_embedding_type="rope"` replaces the learned position table by rotary position
    embeddings (RoFormer, Su et al. 2021): queries and keys of every layer are rotated by an angle that grows
    with the position, at `rope_theta`'s base. ALBERT's two savings: `embedding_size` smaller than
    `hidden_size` (embeddings and the MLM head work at that width, a projection joins it to the encoder) and
    `share_layers` (one layer's weights applied `num_hidden_layers` times)."""

    vocab_size: int = field(default=8192, metadata={"help": "tokens in the vocabulary"})
    hidden_size: int = field(default=256, metadata={"help": "width of every token's vector"})
    num_hidden_layers: int = field(default=4, metadata={"help": "encoder layers"})
    num_attention_heads: int = field(default=4, metadata={"help": "attention heads per layer"})
    intermediate_size: int = field(default=1024, metadata={"help": "width of the feed-forward network"})
    hidden_act: str = field(
        default="gelu", metadata={"help": "activation of the feed-forward network", "choices": ACTIVATIONS}
    )
    hidden_dropout_prob: float = field(default=0.1, metadata={"help": "dropout on embeddings and sub-layer outputs"})
    attention_probs_dropout_prob: float = field(default=0.1, metadata={"help": "dropout on attention probabilities"})
    max_position_embeddings: int = field(default=512, metadata={"help": "longest input, in tokens"})
    type_vocab_size: int = field(default=2, metadata={"help": "segment ids (2: A and B)"})
    initializer_range: float = field(default=0.02, metadata={"help": "standard deviation of the initial weights"})
    layer_norm_eps: float = field(default=1e-12, metadata={"help": "LayerNorm's epsilon"})
    pad_token_id: int = field(default=0, metadata={"help": "id of [PAD]"})
    norm_style: str = field(
        default="post",
        metadata={
            "help": "'post' (LayerNorm after each residual sum, as in the paper) or 'pre' (before each sub-layer)",
            "choices": NORM_STYLES,
        },
    )
    position_embedding_type: str = field(
        default="absolute",
        metadata={
            "help": "'absolute' (a learned table, as BERT) or 'rope' (rotary embeddings in every attention layer)",
            "choices": POSITION_EMBEDDING_TYPES,
        },
    )
    rope_theta: float = field(default=10000.0, metadata={"help": "base of the rotary angles (rope only)"})
    embedding_size: int | None = field(
        default=None,
        metadata={
            "help": "width of the token embeddings, projected to hidden_size (ALBERT's factorisation; default: "
            "hidden_size, no projection)"
        },
    )
    share_layers: bool = field(
        default=False, metadata={"help": "one encoder layer's weights serve every layer (ALBERT's cross-layer sharing)"}
    )

    def __post_init__(self) -> None:
        for name in _POSITIVE_INTS:  # None is no size
            if getattr(self, name) is None:
                raise ValueError(f"BertConfig.{name}=None is not valid; it must be a positive integer")
        check_positive_ints(self, _POSITIVE_INTS)
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size={self.hidden_size} is not valid; it must be a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"BertConfig.{name}={value!r} is not valid; it must be in [0, 1)")
        if self.embedding_size is not None and (
            isinstance(self.embedding_size, bool) or not isinstance(self.embedding_size, int) or self.embedding_size < 1
        ):
            raise ValueError(
                f"BertConfig.embedding_size={self.embedding_size!r} is not valid; it must be a positive "
                f"integer (or None for hidden_size)"
            )
        for name in ("initializer_range", "layer_norm_eps", "rope_theta"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"BertConfig.{name}={value!r} is not valid; it must be a positive number")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"BertConfig.pad_token_id={self.pad_token_id!r} is not valid; it must be in "
                f"[0, vocab_size={self.vocab_size})"
            )
        check_choice("BertConfig.hidden_act", self.hidden_act, ACTIVATIONS)
        check_choice("BertConfig.norm_style", self.norm_style, NORM_STYLES)
        check_choice("BertConfig.position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        if self.position_embedding_type == "rope" and self.head_size % 2:
            raise ValueError(
                f"rotary embeddings turn pairs of numbers, so the head size (hidden_size / "
                f"num_attention_heads = {self.head_size}) must be even"
            )

    @property
    def embedding_width(self) -> int:
        "Width of the token embeddings: `embedding_size`, or `hidden_size` when it is not set."
        return self.embedding_size or self.hidden_size

    @property
    def head_size(self) -> int:
        "Width of one attention head."
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "BertConfig":
        "The preset `name` ('tiny', 'mini', 'small', 'base', 'large'), with any field overridden by keyword."
        check_choice("preset", name, tuple(PRESETS))
        return cls.from_dict({**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        "The fields as a plain dict (JSON-ready)."
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "BertConfig":
        "A config from a dict of fields; unknown keys raise a ValueError instead of being dropped silently."
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(
                f"unknown BertConfig field(s) {', '.join(map(repr, unknown))}; known fields: {', '.join(known)}"
            )
        return cls(**values)

    def to_json_file(self, path: str | os.PathLike) -> None:
        "Save as JSON (written atomically)."
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "BertConfig":
        "Load a config saved with `to_json_file`."
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
