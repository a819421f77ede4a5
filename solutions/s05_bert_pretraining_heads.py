"""Worked solutions of notebook 05's exercises (BERT with its pre-training heads): an untied decoder, sparse against
full prediction in one training step, and what RoBERTa's classifier reads instead of a pooler.

`python solutions/s05_bert_pretraining_heads.py` runs them all; `BERTLIB_QUICK=1` times a smaller batch.
"""

import time

import torch
import torch.nn.functional as F
import transformers
from common import QUICK, cli, documents, header, pair_batches, parameters
from torch import nn

from bertlib import BertConfig, BertForPreTraining


class UntiedMLMHead(nn.Module):
    "The MLM head of `tied` with a decoder matrix of its own, started as a copy of the embeddings it was tied to."

    def __init__(self, tied: nn.Module, embeddings: torch.Tensor):
        super().__init__()
        self.head = tied
        self.decoder = nn.Parameter(embeddings.detach().clone())

    def forward(self, hidden_states: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return self.head(hidden_states, self.decoder)  # the embedding matrix it is handed is no longer used


def exercise_1() -> None:
    "The parameters an untied decoder adds to `mini`."
    header("exercise 1: untie the decoder of mini")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("mini"))
    tied = parameters(model)
    model.mlm_head = UntiedMLMHead(model.mlm_head, model.bert.embeddings.word_embeddings.weight)
    untied = parameters(model)
    logits = model(torch.tensor([[2, 10, 4, 11, 3]])).prediction_logits
    print(
        f"tied {tied:,} parameters; untied {untied:,}: +{untied - tied:,} "
        f"({model.config.vocab_size:,} x {model.config.hidden_size}), {(untied - tied) / tied:.1%} more, "
        f"{(untied - tied) / untied:.1%} of the untied model; it still runs: logits {tuple(logits.shape)}"
    )


def _step(model: BertForPreTraining, batch: dict, sparse: bool) -> tuple[float, int]:
    "One forward and backward; the loss and the bytes of the prediction logits."
    inputs = dict(token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"])
    if sparse:
        out = model(
            batch["input_ids"], **inputs, labels=batch["labels"], next_sentence_label=batch["next_sentence_label"]
        )
        loss = out.loss
    else:  # every position projected onto the vocabulary, the labels applied afterwards
        out = model(batch["input_ids"], **inputs)
        loss = F.cross_entropy(
            out.prediction_logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100
        ) + F.cross_entropy(out.seq_relationship_logits, batch["next_sentence_label"])
    loss.backward()
    model.zero_grad()
    logits = out.prediction_logits
    return loss.item(), logits.numel() * logits.element_size()


def exercise_2() -> None:
    "Time and logits memory of a training step with sparse and with full prediction."
    header("exercise 2: sparse against full prediction in one training step of mini")
    batch_size = 8 if QUICK else 32
    batch = next(pair_batches(documents("train", 40), batch_size, 128))
    torch.manual_seed(0)
    model = BertForPreTraining(
        BertConfig.from_preset("mini", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    )
    print(
        f"batch {tuple(batch['input_ids'].shape)}, {int((batch['labels'] != -100).sum())} masked tokens, "
        f"vocabulary {model.config.vocab_size:,}"
    )
    times, results = {True: [], False: []}, {}
    for repeat in range(4):  # interleaved, so that both see the same load of the machine; the first is a warm-up
        for sparse in (True, False):
            start = time.perf_counter()
            results[sparse] = _step(model, batch, sparse)
            if repeat:
                times[sparse].append(time.perf_counter() - start)
    for sparse in (True, False):
        loss, logits_bytes = results[sparse]
        print(
            f"{'sparse' if sparse else 'full':<6}: loss {loss:.4f}, fastest step "
            f"{min(times[sparse]) * 1000:6.0f} ms, prediction logits {logits_bytes / 2**20:8.2f} MiB (their "
            f"gradient as much again)"
        )
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    same = abs(results[True][0] - results[False][0]) < 1e-4  # exact: one loss two ways, up to float rounding
    print(
        f"{'the same loss' if same else 'different losses'}; the full projection takes "
        f"{min(times[False]) / min(times[True]):.1f}x the time of the sparse one and its logits "
        f"{results[False][1] / results[True][1]:.0f}x the memory, {results[False][1] / weights:.1f}x the model's own "
        f"weights ({weights / 2**20:.1f} MiB)"
    )


def exercise_3() -> None:
    "What HF's RobertaForSequenceClassification reads: no pooler, its own head on the first token."
    header("exercise 3: does RoBERTa, without NSP, need a pooler?")
    config = transformers.RobertaConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, num_labels=2
    )
    model = transformers.RobertaForSequenceClassification(config).eval()
    print("roberta.pooler:", model.roberta.pooler)
    print("classifier:", model.classifier)
    ids = torch.tensor([[0, 10, 11, 12, 2]])
    with torch.no_grad():
        first = model.roberta(ids).last_hidden_state[:, 0]
        head = model.classifier
        by_hand = head.out_proj(torch.tanh(head.dense(first)))
        logits = model(ids).logits
    diff = (by_hand - logits).abs().max().item()
    print(f"the logits are out_proj(tanh(dense(first token's vector))): largest difference {diff:.1e}")
    if model.roberta.pooler is None and diff < 1e-5:  # exact: one computation two ways, up to float rounding
        print(
            "RoBERTa has no pooler (NSP would have been the only task to train one) and its classification head "
            "reads the first token through a dense layer with tanh of its own: the shape of BERT's pooler, with new "
            "weights that fine-tuning trains"
        )
    else:
        print("RoBERTa's classifier does not read what this exercise expected; look at the modules printed above")


if __name__ == "__main__":
    cli(__name__)
