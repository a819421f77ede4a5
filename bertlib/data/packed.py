"""RoBERTa's pre-training data: no sentence pairs and no NSP, just the corpus as one stream of tokens (documents
joined by `[SEP]`) cut into full-length sequences, `[CLS] ... [SEP]`, masked afresh every epoch. Every
sequence is as long as allowed, so a batch has no padding at all.

Written by hand; notebook 11 presents it. It reuses the masking of `bertlib.data.pretraining`.
"""

__all__ = ["PackedDataset"]

import random
from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from torch.utils.data import Dataset

from .batching import child_seed
from .corpus import TokenizedCorpus
from .pretraining import continuation_table, mask_tokens
from .tokenizer import CLS, MASK, PAD, SEP, SPECIAL_TOKENS


def _stream(corpus: TokenizedCorpus | Sequence[Sequence[Sequence[int]]], sep_id: int) -> np.ndarray:
    "Every token of the corpus in order, with `[SEP]` after each document."
    if isinstance(corpus, TokenizedCorpus):
        ends = corpus.sentence_offsets[corpus.document_offsets[1:]]  # where each document's tokens end
        return np.insert(corpus.ids.astype(np.int64), ends, sep_id)
    return np.array([t for doc in corpus for t in [*(t for sentence in doc for t in sentence), sep_id]], dtype=np.int64)


class PackedDataset(Dataset):
    """Full-length MLM sequences: item `i` holds `input_ids` (`[CLS]`, `max_seq_len - 2` tokens of the stream,
    `[SEP]`), `token_type_ids` (all 0) and `labels`. Each epoch (`set_epoch`) starts the cuts at a new offset
    and draws new masks (RoBERTa's dynamic masking); `static=True` keeps epoch 0's cuts and masks for good. A corpus
    shorter than a sequence or two holds none in some epochs: `fewest_items` says."""

    def __init__(
        self,
        corpus: TokenizedCorpus | Sequence[Sequence[Sequence[int]]],
        tokenizer: Tokenizer,
        max_seq_len: int = 128,
        *,
        seed: int = 0,
        mlm_probability: float = 0.15,
        whole_word_mask: bool = False,
        static: bool = False,
    ):
        if max_seq_len < 3:
            raise ValueError(f"max_seq_len={max_seq_len} leaves no room for tokens between [CLS] and [SEP]")
        ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}
        if None in ids.values():
            raise ValueError(
                f"the tokenizer lacks {[t for t, i in ids.items() if i is None]}; BERT needs all of {SPECIAL_TOKENS}"
            )
        self.cls_id, self.sep_id, self.mask_id, self.pad_id = ids[CLS], ids[SEP], ids[MASK], ids[PAD]
        self.special_ids = tuple(ids.values())
        self.vocab_size = tokenizer.get_vocab_size()
        self.continuation = continuation_table(tokenizer) if whole_word_mask else None
        self.max_seq_len, self.width = max_seq_len, max_seq_len - 2
        self.seed, self.mlm_probability, self.static = seed, mlm_probability, static
        self.stream = torch.from_numpy(_stream(corpus, self.sep_id))
        self.epoch, self.offset = 0, 0

    def set_epoch(self, epoch: int) -> None:
        "Cut the stream at epoch `epoch`'s offset (and, through the seeds, draw its masks)."
        if not self.static:
            self.epoch = epoch
            self.offset = 0 if epoch == 0 else random.Random(child_seed(self.seed, epoch)).randrange(self.width)

    def __len__(self) -> int:
        return (len(self.stream) - self.offset) // self.width

    def fewest_items(self) -> int:
        "The items of the epoch whose cuts start latest: no epoch holds fewer (0: some epoch holds no sequence)."
        return (len(self.stream) - (0 if self.static else self.width - 1)) // self.width

    def lengths(self) -> list[int]:
        return [self.max_seq_len] * len(self)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start = self.offset + index * self.width
        input_ids = torch.cat(
            [torch.tensor([self.cls_id]), self.stream[start : start + self.width], torch.tensor([self.sep_id])]
        )
        special = (input_ids == self.cls_id) | (input_ids == self.sep_id)  # nor are the document ends inside
        generator = torch.Generator().manual_seed(child_seed(self.seed, self.epoch, index))
        masked, labels = mask_tokens(
            input_ids,
            special,
            mask_token_id=self.mask_id,
            vocab_size=self.vocab_size,
            mlm_probability=self.mlm_probability,
            generator=generator,
            special_token_ids=self.special_ids,
            word_starts=None if self.continuation is None else ~self.continuation[input_ids],
        )
        return {"input_ids": masked, "token_type_ids": torch.zeros_like(masked), "labels": labels}
