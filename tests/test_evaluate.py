"""Tests of bertlib.evaluation.scores (validation metrics, baselines, token scores, fill-mask) against direct
computations."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertlib.data.corpus import encode_corpus
from bertlib.data.pretraining import PretrainingDataset, pretraining_dataloader
from bertlib.data.tokenizer import train_tokenizer
from bertlib.evaluation.scores import fill_mask, token_scores, unigram_baseline, validation_metrics
from bertlib.model.bert import BertForPreTraining
from bertlib.model.config import BertConfig

TEXTS = [
    ["the cat sat on the mat .", "the dog ate the bone .", "a bird sang in the tree ."],
    ["rivers flow to the sea .", "the bank of the river was green .", "fish swim in the water ."],
    ["she paid money at the bank .", "he sold the old car .", "they bought a new house ."],
]


@pytest.fixture(scope="module")
def setup():
    tokenizer = train_tokenizer([s for doc in TEXTS for s in doc] * 5, vocab_size=120)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size())).eval()
    corpus = encode_corpus(TEXTS, tokenizer, use_cache=False)
    dataset = PretrainingDataset(corpus, tokenizer, 24, seed=0, pairing="sentences", static=True, mlm_probability=0.3)
    loader = pretraining_dataloader(dataset, 4, shuffle=False)
    return tokenizer, model, corpus, loader


def test_validation_metrics_equal_a_dense_computation(setup):
    _, model, _, loader = setup
    scores = validation_metrics(model, loader)
    logits, targets, nsp_logits, nsp_targets = [], [], [], []
    with torch.no_grad():
        for b in loader:
            # no labels: every position is projected
            out = model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
            keep = b["labels"] != -100
            logits.append(out.prediction_logits[keep])
            targets.append(b["labels"][keep])
            nsp_logits.append(out.seq_relationship_logits)
            nsp_targets.append(b["next_sentence_label"])
    logits, targets = torch.cat(logits), torch.cat(targets)
    nsp_logits, nsp_targets = torch.cat(nsp_logits), torch.cat(nsp_targets)
    loss = F.cross_entropy(logits, targets).item()
    top5 = logits.topk(5, -1).indices
    assert scores["mlm_loss"] == pytest.approx(loss, abs=1e-5)
    assert scores["mlm_perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)
    assert scores["mlm_accuracy"] == pytest.approx((top5[:, 0] == targets).float().mean().item())
    assert scores["mlm_top5_accuracy"] == pytest.approx((top5 == targets[:, None]).any(-1).float().mean().item())
    assert scores["nsp_loss"] == pytest.approx(F.cross_entropy(nsp_logits, nsp_targets).item(), abs=1e-5)
    assert scores["nsp_accuracy"] == pytest.approx((nsp_logits.argmax(-1) == nsp_targets).float().mean().item())


def test_token_scores_add_up_to_the_accuracy(setup):
    _, model, _, loader = setup
    stats = token_scores(model, loader)
    scores = validation_metrics(model, loader)
    masked = sum(n for n, _, _ in stats.values())
    assert sum(c for _, c, _ in stats.values()) / masked == pytest.approx(scores["mlm_accuracy"])
    assert sum(n * loss for n, _, loss in stats.values()) / masked == pytest.approx(scores["mlm_loss"], abs=1e-5)


def test_unigram_baseline_by_hand(setup):
    tokenizer, _, corpus, loader = setup
    vocab = tokenizer.get_vocab_size()
    scores = unigram_baseline(corpus.ids, loader, vocab)
    counts = np.bincount(corpus.ids, minlength=vocab) + 1.0
    targets = torch.cat([b["labels"][b["labels"] != -100] for b in loader]).numpy()
    nll = -np.log(counts[targets] / counts.sum()).mean()
    assert scores["mlm_loss"] == pytest.approx(nll)
    assert scores["mlm_accuracy"] == pytest.approx(np.mean(targets == counts.argmax()))
    labels = torch.cat([b["next_sentence_label"] for b in loader]).float()
    assert scores["nsp_accuracy"] == pytest.approx(max(labels.mean().item(), 1 - labels.mean().item()))


def test_fill_mask_several_masks_and_probabilities(setup):
    tokenizer, model, _, _ = setup
    guesses = fill_mask(model, tokenizer, "the [MASK] sat on the [MASK] .", top_k=4)
    assert len(guesses) == 2 and all(len(g) == 4 for g in guesses)
    for guess in guesses:
        probs = [p for _, p in guess]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    # the probabilities are the softmax over the vocabulary at each mask position
    encoding = tokenizer.encode("the [MASK] sat on the [MASK] .")
    with torch.no_grad():
        logits = model(torch.tensor([encoding.ids])).prediction_logits[0]
    mask_positions = [i for i, t in enumerate(encoding.tokens) if t == "[MASK]"]
    for guess, position in zip(guesses, mask_positions, strict=True):
        token, p = guess[0]
        assert p == pytest.approx(logits[position].softmax(-1)[tokenizer.token_to_id(token)].item(), abs=1e-6)


@pytest.mark.parametrize("text, message", [("no mask here", r"\[MASK\]"), ("word " * 600 + "[MASK]", "at most")])
def test_fill_mask_rejects_bad_text(setup, text, message):
    tokenizer, model, _, _ = setup
    with pytest.raises(ValueError, match=message):
        fill_mask(model, tokenizer, text)
