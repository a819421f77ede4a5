"""What the model checks of its inputs before it computes: token and segment ids inside their tables, shapes that
match, labels that a loss can read, each refused with a one-line ValueError that names the input and the limit.

The checks read values, so they run only where reading is free (`bertlib.utils.devices.free_to_read`: tensors in CPU
memory, outside `torch.compile`). On a GPU, reading a value back makes the host wait for the device at every step,
so there an id out of range trips the embedding lookup's own device-side assertion instead.

Written by hand; notebooks 02 and 05 call it.
"""

__all__ = [
    "check_head_index",
    "check_index_range",
    "check_input_ids",
    "check_labels",
    "check_next_sentence_label",
    "check_same_shape",
    "padding_mask",
]

from collections.abc import Callable

import torch

from ..utils.devices import free_to_read
from .config import BertConfig


def check_index_range(
    name: str, values: torch.Tensor, size: int, meaning: str, ignore_index: int | None = None
) -> None:
    """Raise a ValueError naming `name` unless every entry of `values` is in [0, size).

    Entries equal to `ignore_index` (such as the -100 of MLM labels) are allowed too. `meaning` tells the
    reader where `size` comes from, e.g. "BertConfig.vocab_size=8192"."""
    if not free_to_read(values) or values.numel() == 0:
        return
    if ignore_index is not None:
        values = values.masked_fill(values == ignore_index, 0)
    low, high = torch.stack(torch.aminmax(values)).tolist()  # one host sync for both
    if low < 0 or high >= size:
        allowed = f"0..{size - 1}" + (f" or {ignore_index}" if ignore_index is not None else "")
        raise ValueError(f"{name} contains {low if low < 0 else high}, outside {allowed} ({meaning})")


def check_same_shape(name: str, values: torch.Tensor, input_ids: torch.Tensor) -> None:
    "Raise a ValueError unless `values` (named `name`) has the shape of `input_ids`."
    if values.shape != input_ids.shape:
        raise ValueError(
            f"{name} has shape {tuple(values.shape)}, but input_ids has {tuple(input_ids.shape)}; they must match"
        )


def check_input_ids(config: BertConfig, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> None:
    "Raise a ValueError unless `input_ids` (and `token_type_ids`) form a batch this config can embed."
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [batch, seq_len]; got shape {tuple(input_ids.shape)}")
    seq_len = input_ids.shape[1]
    if not 1 <= seq_len <= config.max_position_embeddings:
        raise ValueError(
            f"input_ids has seq_len={seq_len}, but the model reads 1 to "
            f"BertConfig.max_position_embeddings={config.max_position_embeddings} tokens; "
            f"truncate the input"
        )
    check_index_range("input_ids", input_ids, config.vocab_size, f"BertConfig.vocab_size={config.vocab_size}")
    if token_type_ids is not None:
        check_same_shape("token_type_ids", token_type_ids, input_ids)
        check_index_range(
            "token_type_ids",
            token_type_ids,
            config.type_vocab_size,
            f"BertConfig.type_vocab_size={config.type_vocab_size}",
        )


def padding_mask(attention_mask: torch.Tensor | None, input_ids: torch.Tensor) -> torch.Tensor | None:
    """`attention_mask` checked against `input_ids`, or None when it marks no padding at all and reading that is
    free: without a mask, `scaled_dot_product_attention` may pick its faster kernels."""
    if attention_mask is None:
        return None
    check_same_shape("attention_mask", attention_mask, input_ids)
    return None if free_to_read(attention_mask) and bool(attention_mask.all()) else attention_mask


def check_labels(labels: torch.Tensor, input_ids: torch.Tensor, vocab_size: int, ignore_index: int) -> None:
    "Raise a ValueError unless MLM `labels` match `input_ids` and hold token ids or `ignore_index`."
    check_same_shape("labels", labels, input_ids)
    check_index_range("labels", labels, vocab_size, f"BertConfig.vocab_size={vocab_size}", ignore_index=ignore_index)


def check_next_sentence_label(label: torch.Tensor, input_ids: torch.Tensor) -> None:
    "Raise a ValueError unless `label` holds one NSP class per sequence of `input_ids`."
    if label.numel() != input_ids.shape[0]:
        raise ValueError(
            f"next_sentence_label has {label.numel()} entries for a batch of {input_ids.shape[0]} sequences; "
            f"give one per sequence"
        )
    check_index_range("next_sentence_label", label, 2, "0 = B follows A, 1 = B is random")


def check_head_index(
    given: tuple[torch.Tensor, torch.Tensor],
    labels: torch.Tensor,
    find: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """Refuse a head index (notebook 05's `head_index`) that was not found from these `labels`, where checking is free.
    A data loader finds the index ahead, on the CPU, so that a training step on a GPU never waits to read the labels
    back; the model then only gathers with it, and on a GPU cannot afford to check it."""
    if free_to_read(labels):
        expected = find(labels)
        if not all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(given, expected, strict=True)):
            raise ValueError("head_index does not match labels; pass what head_index(labels) returns for these labels")
