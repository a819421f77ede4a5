"""Shared helpers for the model tests: small configs, padded two-segment batches, ours/HF model pairs, and a
tiny WordPiece tokenizer trained on synthetic sentences, and a process group of CPU processes."""

import os
import random
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from bertlib.hf import interop
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining
from bertlib.model.config import BertConfig

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CLS, SEP = 2, 3


def small_config(**overrides) -> BertConfig:
    "An odd-sized config (hidden 48, vocab 97) with weights large enough for differences to show."
    fields = dict(
        vocab_size=97,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=64,
        initializer_range=0.2,
    )
    return BertConfig(**{**fields, **overrides})


def make_batch(config: BertConfig, batch: int, seq: int, seed: int = 0, padded: bool = True) -> dict[str, torch.Tensor]:
    """`[CLS] A [SEP] B [SEP]` sequences of random ids padded to `seq` (the first row is full length), with
    segment ids, attention mask, MLM labels on ~15% of the real tokens (at least one) and NSP labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (batch, seq), generator=g)
    lengths = torch.randint(1, seq + 1, (batch,), generator=g) if padded else torch.full((batch,), seq)
    lengths[0] = seq
    positions = torch.arange(seq)
    mask = (positions < lengths[:, None]).long()
    split = lengths // 2
    types = ((positions >= split[:, None]) & (mask == 1)).long() if config.type_vocab_size > 1 else mask * 0
    ids[:, 0] = CLS
    ids[torch.arange(batch), (lengths - 1)] = SEP
    ids[mask == 0] = config.pad_token_id
    chosen = (torch.rand(batch, seq, generator=g) < 0.15) & (mask == 1)
    chosen[0, seq // 2] = True
    labels = torch.where(chosen, ids, IGNORE_INDEX)
    nsp = torch.randint(0, 2, (batch,), generator=g)
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels, next_sentence_label=nsp)


def model_pair(config: BertConfig, seed: int = 0) -> tuple[BertForPreTraining, transformers.BertForPreTraining]:
    "Our model and HF's with the same weights, both in eval mode; HF uses its eager attention (returns probabilities)."
    torch.manual_seed(seed)
    ours = BertForPreTraining(config).eval()
    hf = interop.to_transformers(ours).eval()
    hf.set_attn_implementation("eager")
    return ours, hf


def wordpiece_tokenizer(vocab_size: int = 150, seed: int = 0) -> Tokenizer:
    "A BERT-style WordPiece tokenizer (BertNormalizer, no post-processor) trained on synthetic sentences."
    rng = random.Random(seed)
    words = (
        "the a cat dog bird fish sat ran flew swam on under over near mat log tree house river quickly "
        "slowly big small red blue green jumped walked talked played"
    ).split()
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) for _ in range(400)]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(
        sentences, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False)
    )
    return tokenizer


def _joined(rank: int, world: int, port: int, worker, *args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        worker(rank, *args)
    finally:
        dist.destroy_process_group()


def spawn_group(worker, *args, processes: int = 2) -> None:
    "Run `worker(rank, *args)` in `processes` CPU processes joined in one process group (as `torchrun` would)."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_joined, args=(processes, port, worker, *args), nprocs=processes)
