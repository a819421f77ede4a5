"""The objectives after BERT's (issue 16): RoBERTa's packed full-length sequences with dynamic masks
(bertlib.data.packed) and the MLM-only loss, through the same `pretrain` run folders as BERT's objective; and
ALBERT's sentence-order prediction pairs."""

import json
import random

import pytest
import torch
from bert_testing import spawn_group, wordpiece_tokenizer

from bertlib.data.packed import PackedDataset
from bertlib.data.pairs import create_nsp_examples
from bertlib.data.pretraining import PretrainingDataset
from bertlib.data.tokenizer import add_bert_post_processor
from bertlib.model.bert import IGNORE_INDEX, BertForPreTraining, head_index
from bertlib.model.config import BertConfig
from bertlib.recipes.objectives import MaskedLM, MaskedLMAndNSP, train
from bertlib.recipes.pretrain import pretrain
from bertlib.train.runs import load_run
from bertlib.train.settings import PretrainConfig


@pytest.fixture(scope="module")
def tokenizer():
    return add_bert_post_processor(wordpiece_tokenizer())


def documents(tokenizer, n_docs: int = 6) -> list[list[list[int]]]:
    text = "the cat sat on the mat . a dog ran over the log . the bird flew to the house ."
    sentence = tokenizer.encode(text, add_special_tokens=False).ids
    return [[sentence[: 5 + d], sentence[d:]] for d in range(n_docs)]


def test_sequences_are_full_and_cut_from_one_stream(tokenizer):
    docs = documents(tokenizer)
    data = PackedDataset(docs, tokenizer, max_seq_len=16, mlm_probability=0.3)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    stream = [t for doc in docs for t in [*(t for s in doc for t in s), sep]]
    assert len(data) == len(stream) // 14 and data.lengths() == [16] * len(data)
    rebuilt = []
    for i in range(len(data)):
        item = data[i]
        ids = torch.where(item["labels"] != IGNORE_INDEX, item["labels"], item["input_ids"])  # unmasked
        assert ids[0] == cls and ids[-1] == sep and len(ids) == 16 and not item["token_type_ids"].any()
        rebuilt += ids[1:-1].tolist()
        inner_seps = (ids[1:-1] == sep).nonzero().flatten() + 1
        assert (item["labels"][inner_seps] == IGNORE_INDEX).all()  # a document's end is never masked
    assert rebuilt == stream[: len(rebuilt)]


def test_masks_and_cuts_change_each_epoch_unless_static(tokenizer):
    data = PackedDataset(documents(tokenizer, 20), tokenizer, max_seq_len=16, seed=3)
    first = [data[i]["input_ids"] for i in range(len(data))]
    data.set_epoch(1)
    assert data.offset != 0 and any(not torch.equal(a, data[i]["input_ids"]) for i, a in enumerate(first))
    data.set_epoch(0)
    assert all(torch.equal(a, data[i]["input_ids"]) for i, a in enumerate(first))  # reproducible
    static = PackedDataset(documents(tokenizer, 20), tokenizer, max_seq_len=16, seed=3, static=True)
    static.set_epoch(5)
    assert all(torch.equal(a, static[i]["input_ids"]) for i, a in enumerate(first))


@pytest.mark.parametrize("objective", ["mlm_nsp", "mlm"])
def test_batches_carry_the_head_index_found_on_the_cpu(tokenizer, objective):
    if objective == "mlm_nsp":
        data, collate = PretrainingDataset(documents(tokenizer), tokenizer, 24), MaskedLMAndNSP().collate
    else:
        data, collate = PackedDataset(documents(tokenizer), tokenizer, max_seq_len=16), MaskedLM().collate
    batch = collate([data[i] for i in range(4)])
    positions, rows = head_index(batch["labels"])
    assert torch.equal(batch["head_positions"], positions) and torch.equal(batch["head_rows"], rows)
    assert len(rows) == int((batch["labels"] != IGNORE_INDEX).sum()) > 0


def test_batches_have_no_padding_and_the_nsp_head_is_not_trained(tokenizer):
    data = PackedDataset(documents(tokenizer, 30), tokenizer, max_seq_len=16)
    batch = MaskedLM(data.pad_id).collate([data[i] for i in range(4)])
    assert batch["attention_mask"].all() and batch["input_ids"].shape == (4, 16)
    torch.manual_seed(0)
    model = BertForPreTraining(
        BertConfig(
            vocab_size=tokenizer.get_vocab_size(),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
        )
    )
    nsp_before = {k: v.clone() for k, v in model.state_dict().items() if k.startswith(("nsp_head", "bert.pooler"))}
    mlm_before = model.state_dict()["mlm_head.bias"].clone()
    records = train(
        model, data, PretrainConfig(max_steps=3, batch_size=4, log_every=1, device="cpu"), show_progress=False
    )
    assert [set(r) >= {"mlm_loss"} and "nsp_loss" not in r for r in records] == [True] * 3
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in nsp_before.items())
    assert not torch.equal(mlm_before, model.state_dict()["mlm_head.bias"])


def test_pretrain_with_the_mlm_objective_makes_a_run(tmp_path, fast_tokenizer):
    cfg = PretrainConfig(
        max_steps=2,
        batch_size=4,
        max_seq_len=32,
        objective="mlm",
        eval_every=2,
        eval_batches=1,
        save_every=2,
        device="cpu",
    )
    model_config = BertConfig(
        vocab_size=fast_tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        position_embedding_type="rope",
    )
    records = pretrain(tmp_path / "run", model_config, cfg, tokenizer=fast_tokenizer, show_progress=False)
    assert records[-1]["split"] == "validation" and "mlm_perplexity" in records[-1]
    assert load_run(tmp_path / "run")[1].objective == "mlm"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"]["position_embedding_type"] == "rope"
    with pytest.raises(ValueError, match="objective"):
        PretrainConfig(max_steps=1, objective="xlnet")


def test_sop_pairs_come_from_one_document_and_half_are_swapped(corpus):
    documents = [corpus.document(i) for i in range(200)]
    examples = create_nsp_examples(documents, 128, random.Random(0), pairing="sop")
    assert all(e.doc_a == e.doc_b for e in examples)  # never a random B: order, not topic, tells them apart
    for e in examples:
        in_order = e.span_a[1] <= e.span_b[0]
        assert e.next_sentence_label == (0 if in_order else 1)
        assert e.seq_len <= 128
    swapped = sum(e.next_sentence_label for e in examples) / len(examples)
    assert 0.45 < swapped < 0.55, swapped
    with pytest.raises(ValueError, match="'sop'"):
        create_nsp_examples(documents, 128, random.Random(0), pairing="order")


def _train_packed(rank: int, tokenizer_json: str) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    sentence = tokenizer.encode("the cat sat on the mat and the dog sat on the log", add_special_tokens=False).ids
    data = PackedDataset([[sentence[d:], sentence] for d in range(16)], tokenizer, max_seq_len=16)
    model = BertForPreTraining(
        BertConfig(
            vocab_size=tokenizer.get_vocab_size(),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
        )
    )
    train(model, data, PretrainConfig(max_steps=2, batch_size=8, device="cpu"), show_progress=False)


@pytest.mark.slow
def test_two_processes_train_mlm_only(fast_tokenizer):
    "DistributedDataParallel needs a gradient for every trainable parameter: MLM alone freezes the NSP head."
    spawn_group(_train_packed, fast_tokenizer.to_str())
