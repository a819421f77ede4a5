"""Tests of bertlib.data.pretraining: the corpus cache, NSP pairs, MLM masking and batching."""

import random
import signal
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DistributedSampler

from bertlib.data.batching import LengthGroupedSampler, padding_waste, set_epoch
from bertlib.data.corpus import encode_corpus
from bertlib.data.pairs import create_nsp_examples
from bertlib.data.pretraining import (
    PaddingCollator,
    PretrainingDataset,
    build_inputs,
    continuation_table,
    mask_tokens,
    pretraining_dataloader,
)
from bertlib.data.tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_IDS, train_tokenizer
from bertlib.data.wikitext import load_wikitext2, split_documents
from bertlib.model.bert import IGNORE_INDEX


@pytest.fixture(scope="session")
def train_rows() -> list[str]:
    return load_wikitext2("train")


@pytest.fixture(scope="session")
def tokenizer(fast_tokenizer):
    return fast_tokenizer


@pytest.fixture(scope="session")
def train_documents(train_rows) -> list[list[str]]:
    return split_documents(train_rows)


@pytest.fixture(scope="session")
def small_corpus(corpus):
    return corpus.documents()[:25]


@contextmanager
def time_limit(seconds: int):
    "Fail instead of hanging if the code under test loops forever."

    def fail(signum, frame):
        raise TimeoutError(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_pairs(examples, documents, max_seq_len: int) -> None:
    "Every pair fits, its tokens are where its spans say, and a true B continues A in A's document."
    tokens = [[t for sentence in doc for t in sentence] for doc in documents]
    for ex in examples:
        assert ex.tokens_a and ex.tokens_b
        assert ex.seq_len == len(ex.tokens_a) + len(ex.tokens_b) + 3 <= max_seq_len
        assert ex.tokens_a == tokens[ex.doc_a][slice(*ex.span_a)]
        assert ex.tokens_b == tokens[ex.doc_b][slice(*ex.span_b)]
        if ex.is_random_next:
            assert ex.doc_b != ex.doc_a
        else:
            assert ex.doc_b == ex.doc_a
            assert ex.span_a[1] <= ex.span_b[0]
            if ex.span_a[1] < ex.span_b[0]:  # tokens between A and B only go when truncation needed room
                assert ex.seq_len == max_seq_len


# --- the corpus cache -------------------------------------------------------------------------------------


def test_corpus_holds_the_tokenizers_ids(train_documents, tokenizer, corpus):
    assert len(corpus) == len(train_documents) and len(corpus.ids) > 2_000_000
    for d in (0, 100, len(corpus) - 1):
        expected = [e.ids for e in tokenizer.encode_batch(train_documents[d], add_special_tokens=False) if e.ids]
        assert corpus.document(d) == expected


def test_cache_is_reused_and_a_changed_tokenizer_or_text_invalidates_it(train_rows, tmp_path):
    docs = split_documents(train_rows[:600])
    tok = train_tokenizer(train_rows[:600], vocab_size=600)
    first = encode_corpus(docs, tok, cache_dir=tmp_path)
    again = encode_corpus(docs, tok, cache_dir=tmp_path)
    assert not first.from_cache and again.from_cache
    assert np.array_equal(first.ids, again.ids) and again.documents() == first.documents()
    other_tok = train_tokenizer(train_rows[:600], vocab_size=700)
    changed = encode_corpus(docs, other_tok, cache_dir=tmp_path)
    assert not changed.from_cache and changed.key != first.key
    assert changed.documents() == [
        [e.ids for e in other_tok.encode_batch(d, add_special_tokens=False) if e.ids] for d in docs
    ]
    edited = [list(d) for d in docs]
    edited[3][0] += " extra"
    assert not encode_corpus(edited, tok, cache_dir=tmp_path).from_cache
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave no temporary files


def test_unreadable_or_foreign_cache_files_are_rebuilt(train_rows, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLIB_CACHE_DIR", str(tmp_path))
    docs = split_documents(train_rows[:300])
    tok = train_tokenizer(train_rows[:300], vocab_size=500)
    built = encode_corpus(docs, tok)
    (path,) = (tmp_path / "corpus").glob("*.npz")
    path.write_bytes(b"not a zip file")
    rebuilt = encode_corpus(docs, tok)
    assert not rebuilt.from_cache and np.array_equal(rebuilt.ids, built.ids)
    np.savez(
        path,
        ids=built.ids,
        sentence_offsets=built.sentence_offsets,
        document_offsets=built.document_offsets,
        key=np.array("someone else's key"),
    )
    assert not encode_corpus(docs, tok).from_cache
    assert encode_corpus(docs, tok).from_cache


def test_encoding_ignores_and_keeps_the_callers_truncation(train_rows, tmp_path):
    tok = train_tokenizer(train_rows[:300], vocab_size=500)
    tok.enable_truncation(4)
    corpus = encode_corpus([["a rather long sentence with more than four tokens in it ."]], tok, use_cache=False)
    assert len(corpus.ids) > 4 and tok.truncation is not None


# --- next-sentence pairs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("pairing", ["segments", "sentences"])
def test_nsp_pairs_on_wikitext_train(corpus, pairing):
    documents = corpus.documents()
    examples = create_nsp_examples(documents, 128, random.Random(7), pairing=pairing)
    assert len(examples) > 15_000
    assert abs(sum(ex.is_random_next for ex in examples) / len(examples) - 0.5) < 0.01
    check_pairs(examples, documents, 128)
    if pairing == "segments":  # packed: nearly full, with ~10% short targets
        assert np.mean([ex.seq_len for ex in examples]) > 110


def test_sentence_pairs_take_whole_sentences(corpus):
    documents = corpus.documents()[:50]
    bounds = [np.cumsum([0] + [len(s) for s in doc]).tolist() for doc in documents]
    examples = create_nsp_examples(documents, 1024, random.Random(1), pairing="sentences")  # 1024: no truncation
    for ex in examples:
        i = bounds[ex.doc_a].index(ex.span_a[0])
        assert ex.span_a[1] == bounds[ex.doc_a][i + 1]
        j = bounds[ex.doc_b].index(ex.span_b[0])
        assert ex.span_b[1] == bounds[ex.doc_b][j + 1]
        assert ex.is_random_next or j == i + 1
    assert len(examples) == sum(len(doc) - 1 for doc in documents if doc)


def test_new_pairs_each_epoch_but_the_same_for_the_same_seed(small_corpus, tokenizer):
    a = PretrainingDataset(small_corpus, tokenizer, 64, seed=3)
    b = PretrainingDataset(small_corpus, tokenizer, 64, seed=3)
    assert a.examples == b.examples
    a.set_epoch(1)
    assert a.examples != b.examples
    b.set_epoch(1)
    assert a.examples == b.examples


def test_unused_sentences_are_put_back():
    # one document of 20 two-token sentences: every token of A must be used, no sentence skipped over
    docs = [[[100 + s, 100 + s] for s in range(20)], [[7, 7]] * 5]
    examples = create_nsp_examples(docs, 11, random.Random(0), short_seq_prob=0.0)
    starts = sorted(ex.span_a[0] for ex in examples if ex.doc_a == 0)
    ends = sorted(ex.span_b[1] if not ex.is_random_next else ex.span_a[1] for ex in examples if ex.doc_a == 0)
    assert starts[0] == 0 and ends[-1] == 40
    assert starts[1:] == ends[:-1]  # each chunk starts where the previous one's tokens from this document ended


def test_edge_cases_do_not_crash_or_hang(tokenizer):
    texts = [
        [],
        ["<unk> <unk> <unk> ."],
        ["<unk>"],
        ["a single sentence ."],
        [" ".join(["word"] * 3000) + " ."],
        ["", "   "],
        ["first .", "second .", " ".join(["long"] * 500) + " .", "last ."],
    ]
    corpus = encode_corpus(texts, tokenizer, use_cache=False)
    documents = corpus.documents()
    assert documents[0] == [] and documents[5] == [] and set(documents[1][0]) <= {1, tokenizer.token_to_id(".")}
    with time_limit(30):
        for pairing in ("segments", "sentences"):
            for max_seq_len in (5, 8, 128):
                for seed in range(5):
                    examples = create_nsp_examples(documents, max_seq_len, random.Random(seed), pairing=pairing)
                    check_pairs(examples, documents, max_seq_len)
        dataset = PretrainingDataset(corpus, tokenizer, 16, whole_word_mask=True)
        batch = PaddingCollator()([dataset[i] for i in range(len(dataset))])
    assert batch["input_ids"].shape == (len(dataset), 16)


@pytest.mark.parametrize(
    "documents, expected",
    [
        ([], 0),
        ([[], []], 0),
        ([[[5]]], 0),  # nothing to pair
        ([[[5, 6]]], 1),
        ([[[5], [6]]], 1),  # one document: a true continuation, split inside if it must be
    ],
)
def test_tiny_corpora(documents, expected):
    with time_limit(10):
        examples = create_nsp_examples(documents, 8, random.Random(0))
    assert len(examples) == expected and not any(ex.is_random_next for ex in examples)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), max_size=8), max_size=6),
    st.integers(5, 40),
    st.floats(0, 1),
    st.sampled_from(["segments", "sentences"]),
    st.integers(0, 2**32),
)
def test_pairs_are_valid_for_any_documents(lengths, max_seq_len, short_seq_prob, pairing, seed):
    documents = [
        [[1000 * d + 10 * s + k for k in range(n)] for s, n in enumerate(doc)] for d, doc in enumerate(lengths)
    ]
    examples = create_nsp_examples(documents, max_seq_len, random.Random(seed), short_seq_prob, pairing=pairing)
    check_pairs(examples, documents, max_seq_len)


@pytest.mark.parametrize("kwargs", [{"max_seq_len": 4}, {"short_seq_prob": 1.5}, {"pairing": "words"}])
def test_bad_pair_arguments(kwargs):
    args = {"max_seq_len": 16, "short_seq_prob": 0.1} | kwargs
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        create_nsp_examples([[[1, 2], [3, 4]]], rng=random.Random(0), **args)


# --- masking ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_masking_statistics_over_the_train_split(corpus, tokenizer):
    "Over 1.1M tokens through the dataset and collator: 15% picked, 80/10/10, never a special or padding token."
    dataset = PretrainingDataset(corpus, tokenizer, 128, seed=0)
    collate = PaddingCollator(pad_to_multiple_of=8)
    picked = candidates = to_mask = to_random = kept = 0
    for start in range(0, 9216, 512):
        indices = range(start, start + 512)
        batch = collate([dataset[i] for i in indices])
        ids, labels = batch["input_ids"], batch["labels"]
        original = pad_sequence(
            [build_inputs(dataset.examples[i].tokens_a, dataset.examples[i].tokens_b)[0] for i in indices],
            batch_first=True,
            padding_value=PAD_ID,
        )
        original = F.pad(original, (0, ids.shape[1] - original.shape[1]), value=PAD_ID)
        special = torch.isin(original, torch.tensor([CLS_ID, SEP_ID, PAD_ID]))
        sel = labels != IGNORE_INDEX
        assert not sel[special].any()  # [CLS], [SEP] and padding are never picked
        assert torch.equal(labels[sel], original[sel])  # labels hold the original ids
        changed = sel & (ids != MASK_ID) & (ids != original)
        assert not torch.isin(ids[changed], torch.tensor(SPECIAL_IDS)).any()  # random ids are never special
        assert torch.equal(ids[~sel], original[~sel])
        picked += sel.sum().item()
        candidates += (~special).sum().item()
        to_mask += (sel & (ids == MASK_ID)).sum().item()
        to_random += changed.sum().item()
        kept += (sel & (ids == original)).sum().item()
    assert candidates > 1_000_000
    assert abs(picked / candidates - 0.15) < 0.003
    assert abs(to_mask / picked - 0.8) < 0.01
    assert abs(to_random / picked - 0.1) < 0.01
    assert abs(kept / picked - 0.1) < 0.01


def test_masking_rate_030_and_random_ids_skip_any_special_ids():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 12, (1000, 100), generator=g)
    special = ids % 7 == 0
    masked, labels = mask_tokens(
        ids, special, mask_token_id=11, vocab_size=12, mlm_probability=0.3, generator=g, special_token_ids=(0, 5, 9, 11)
    )
    sel = labels != IGNORE_INDEX
    assert abs(sel.sum().item() / (~special).sum().item() - 0.3) < 0.005
    random_ids = masked[sel & (masked != 11) & (masked != ids)]
    assert set(random_ids.tolist()) == {1, 2, 3, 4, 6, 7, 8, 10}  # every ordinary id, no special one
    counts = torch.bincount(random_ids, minlength=12)[[1, 2, 3, 4, 6, 7, 8, 10]].float()
    assert counts.min() > 0.8 * counts.mean()  # uniform over the ordinary ids


def test_masking_does_not_change_its_input_and_is_seeded():
    ids = torch.arange(5, 105).repeat(3, 1)
    special = torch.zeros_like(ids, dtype=torch.bool)
    before = ids.clone()
    one = mask_tokens(ids, special, mask_token_id=MASK_ID, vocab_size=200, generator=torch.Generator().manual_seed(4))
    two = mask_tokens(ids, special, mask_token_id=MASK_ID, vocab_size=200, generator=torch.Generator().manual_seed(4))
    assert torch.equal(ids, before)
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])


def test_whole_word_masking_never_splits_a_word(corpus, tokenizer):
    dataset = PretrainingDataset(corpus.documents()[:60], tokenizer, 128, whole_word_mask=True, seed=1)
    continuation = continuation_table(tokenizer)
    picked = total = pieces = 0
    for i in range(len(dataset)):
        ex = dataset.examples[i]
        original, _, special = build_inputs(ex.tokens_a, ex.tokens_b)
        selected = (dataset[i]["labels"] != IGNORE_INDEX).tolist()
        is_piece, special = continuation[original].tolist(), special.tolist()
        for j in range(1, len(original)):
            if is_piece[j] and not special[j - 1]:
                assert selected[j] == selected[j - 1], (i, j)  # a ## piece shares its word's fate
                pieces += 1
        picked += sum(selected)
        total += len(special) - sum(special)
    assert pieces > 1000 and abs(picked / total - 0.15) < 0.01


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5])
def test_bad_masking_probability(p):
    ids = torch.tensor([[2, 10, 11, 3]])
    with pytest.raises(ValueError, match="mlm_probability"):
        mask_tokens(ids, ids < 5, mask_token_id=MASK_ID, vocab_size=20, mlm_probability=p)


def test_mask_shapes_must_match():
    with pytest.raises(ValueError, match="shape"):
        mask_tokens(
            torch.zeros(2, 4, dtype=torch.long),
            torch.zeros(2, 5, dtype=torch.bool),
            mask_token_id=MASK_ID,
            vocab_size=20,
        )


# --- layout and batches -----------------------------------------------------------------------------------


def test_layout_matches_the_tokenizers_post_processor(train_documents, tokenizer):
    sentences = train_documents[0][:30]
    for s1, s2 in zip(sentences, sentences[1:], strict=False):
        reference = tokenizer.encode(s1, s2)
        ids, types, special = build_inputs(
            tokenizer.encode(s1, add_special_tokens=False).ids, tokenizer.encode(s2, add_special_tokens=False).ids
        )
        assert ids.tolist() == reference.ids and types.tolist() == reference.type_ids
        assert special.int().tolist() == reference.special_tokens_mask


@pytest.mark.parametrize("multiple", [None, 8])
def test_batches_are_laid_out_and_padded(small_corpus, tokenizer, multiple):
    dataset = PretrainingDataset(small_corpus, tokenizer, 100, pairing="sentences")
    for batch in pretraining_dataloader(dataset, 16, group_by_length=False, pad_to_multiple_of=multiple):
        assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label"}
        width = batch["input_ids"].shape[1]
        lengths = batch["attention_mask"].sum(1).tolist()
        assert width == (max(lengths) if multiple is None else -(-max(lengths) // 8) * 8)
        for ids, types, attention, labels, n in zip(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["labels"], lengths, strict=True
        ):
            seps = (ids == SEP_ID).nonzero().flatten().tolist()
            assert ids[0] == CLS_ID and len(seps) == 2 and seps[1] == n - 1
            assert types.tolist() == [0] * (seps[0] + 1) + [1] * (n - seps[0] - 1) + [0] * (width - n)
            assert attention.tolist() == [1] * n + [0] * (width - n)
            assert (ids[n:] == PAD_ID).all() and (labels[n:] == IGNORE_INDEX).all()
            assert (labels[[0, *seps]] == IGNORE_INDEX).all()
        assert set(batch["next_sentence_label"].tolist()) <= {0, 1}


def test_next_sentence_label_is_zero_when_b_follows(small_corpus, tokenizer):
    dataset = PretrainingDataset(small_corpus, tokenizer, 64)
    assert [dataset[i]["next_sentence_label"].item() for i in range(len(dataset))] == [
        int(ex.is_random_next) for ex in dataset.examples
    ]


def test_same_seed_same_batches_with_or_without_workers(small_corpus, tokenizer):
    def batches(seed, workers, epoch=0):
        loader = pretraining_dataloader(
            PretrainingDataset(small_corpus, tokenizer, 64, seed=seed), 32, num_workers=workers, seed=seed
        )
        set_epoch(loader, epoch)
        return list(loader)

    def same(x, y):
        return len(x) == len(y) and all(all(torch.equal(a[k], b[k]) for k in a) for a, b in zip(x, y, strict=True))

    reference = batches(1, 0)
    assert same(reference, batches(1, 0))
    assert same(reference, batches(1, 2))
    assert not same(reference, batches(2, 0))
    assert not same(reference, batches(1, 0, epoch=1))


def test_static_masking_ignores_the_epoch(small_corpus, tokenizer):
    static = PretrainingDataset(small_corpus, tokenizer, 64, seed=9, static=True)
    before = [static[i] for i in range(len(static))]
    static.set_epoch(4)
    after = [static[i] for i in range(len(static))]
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(before, after, strict=True))


def test_works_with_distributed_samplers(small_corpus, tokenizer):
    dataset = PretrainingDataset(small_corpus, tokenizer, 64)
    n = len(dataset)
    shares = [list(DistributedSampler(dataset, num_replicas=2, rank=r, seed=0)) for r in range(2)]
    assert set(shares[0]) | set(shares[1]) == set(range(n)) and len(shares[0]) == len(shares[1])
    ours = [list(LengthGroupedSampler(dataset.lengths, 8, num_replicas=2, rank=r)) for r in range(2)]
    assert set(ours[0]) | set(ours[1]) == set(range(n)) and len(ours[0]) == len(ours[1]) == -(-n // 2)
    if n % 2 == 0:
        assert not set(ours[0]) & set(ours[1])
    loader = pretraining_dataloader(dataset, 8, num_replicas=2, rank=1)
    assert sum(len(b["input_ids"]) for b in loader) == len(ours[1])


def test_grouping_by_length_cuts_padding(corpus, tokenizer):
    dataset = PretrainingDataset(corpus.documents()[:100], tokenizer, 128, pairing="sentences")
    lengths = dataset.lengths()
    plain = padding_waste(lengths, LengthGroupedSampler(lengths, 32, group_by_length=False).order(), 32)
    grouped_sampler = LengthGroupedSampler(lengths, 32)
    grouped = padding_waste(lengths, grouped_sampler.order(), 32)
    assert plain > 0.3 and grouped < 0.05
    loader = pretraining_dataloader(dataset, 32, pad_to_multiple_of=None)
    padded = sum(b["attention_mask"].numel() for b in loader)
    assert abs((1 - sum(lengths) / padded) - grouped) < 1e-9  # the loader's batches are the ones measured
    assert sorted(grouped_sampler.order()) == list(range(len(lengths)))  # a permutation: nothing lost or repeated
    assert padding_waste([2, 4], [0, 1], 2) == 0.25 and padding_waste([2, 4], [0, 1], 2, pad_to_multiple_of=8) == 0.625
