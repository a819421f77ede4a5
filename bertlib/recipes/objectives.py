"""The pre-training objectives for the training loop (`bertlib.train.accumulation.Objective`): BERT's MLM + NSP on
sentence pairs, RoBERTa's MLM alone on packed sequences and ELECTRA's replaced-token detection; and `train`, which runs
the loop on a model with the objective its data calls for, scored on a validation loader (with notebook 07's plateau
probes for BERT).

Written by hand; notebook 07 uses it.
"""

__all__ = [
    "HeadIndexed",
    "given_head_index",
    "MaskedLMAndNSP",
    "MaskedLM",
    "ReplacedTokenDetection",
    "freeze_nsp",
    "bert_validation",
    "validation_scores",
    "train",
]

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..data.batching import Phase
from ..data.packed import PackedDataset
from ..data.pretraining import PaddingCollator, PretrainingDataset
from ..data.tokenizer import PAD_ID
from ..evaluation.electra import rtd_metrics
from ..evaluation.plateau import plateau_probes
from ..evaluation.scores import validation_metrics
from ..model.bert import IGNORE_INDEX, BertForPreTraining, head_index
from ..model.electra import ElectraForPreTraining
from ..train.loop import Hook, fit
from ..train.settings import TrainConfig


@dataclass(frozen=True)
class HeadIndexed:
    """A collator whose batches also carry `head_positions` and `head_rows`: `bertlib.model.bert.head_index` of the
    labels, found here on the CPU (in the loader's workers), so that the training step on a GPU reads nothing back
    from the device."""

    collate: Callable[[Sequence[dict[str, torch.Tensor]]], dict[str, torch.Tensor]]

    def __call__(self, items: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        batch = self.collate(items)
        batch["head_positions"], batch["head_rows"] = head_index(batch["labels"])
        return batch


def given_head_index(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
    "The head index a `HeadIndexed` collator put in `batch`; None for other batches (the model then finds it)."
    return (batch["head_positions"], batch["head_rows"]) if "head_rows" in batch else None


class MaskedLMAndNSP:
    "BERT's pre-training objective: the MLM loss (a mean over masked tokens) and the NSP loss (over sequences)."

    parts = ("mlm_loss", "nsp_loss")

    def __init__(self, pad_token_id: int = PAD_ID):
        # tensor cores work in tiles of 8
        self.collate = HeadIndexed(PaddingCollator(pad_token_id, pad_to_multiple_of=8))

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int, int]:
        "(masked tokens, sequences) of a batch, counted on the CPU."
        return int((batch["labels"] != IGNORE_INDEX).sum()), len(batch["input_ids"])

    def losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        "The mean MLM and NSP losses of `model` on a batch."
        out = model(
            batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=batch["labels"],
            next_sentence_label=batch["next_sentence_label"],
            head_index=given_head_index(batch),
        )
        return out.mlm_loss, out.nsp_loss


class MaskedLM:
    "RoBERTa's objective: the MLM loss alone, so the NSP head (and the pooler under it) is never trained."

    parts = ("mlm_loss",)

    def __init__(self, pad_token_id: int = PAD_ID):
        self.collate = HeadIndexed(PaddingCollator(pad_token_id, pad_to_multiple_of=8))

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int]:
        return (int((batch["labels"] != IGNORE_INDEX).sum()),)

    def losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor]:
        out = model(
            batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=batch["labels"],
            head_index=given_head_index(batch),
        )
        return (out.mlm_loss,)


class ReplacedTokenDetection(MaskedLM):
    """ELECTRA's objective: the generator's MLM loss (a mean over masked tokens) plus `rtd_weight` x the
    discriminator's replaced-token loss (a mean over real tokens). The training loop adds up the parts it is
    given, so the second part is logged with its weight, as `weighted_rtd_loss`; validation reports `rtd_loss`."""

    parts = ("mlm_loss", "weighted_rtd_loss")

    def __init__(self, pad_token_id: int = PAD_ID, rtd_weight: float = 50.0):
        super().__init__(pad_token_id)
        self.rtd_weight = rtd_weight

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int, int]:
        return (*super().counts(batch), int(batch["attention_mask"].sum()))

    def losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        out = model(
            batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=batch["labels"],
        )
        return out.mlm_loss, self.rtd_weight * out.rtd_loss


def freeze_nsp(model: BertForPreTraining) -> None:
    """Freeze the NSP head and the pooler under it, for an objective without NSP: no loss reaches them, and
    DistributedDataParallel would wait for their gradients."""
    for unused in (model.nsp_head, model.bert.pooler):
        unused.requires_grad_(False)


def bert_validation(model: BertForPreTraining, loader: DataLoader, max_batches: int | None = None) -> dict:
    "BERT's validation scores (`validation_metrics`), and notebook 07's plateau probes on the loader's first batch."
    return {**validation_metrics(model, loader, max_batches), **plateau_probes(model, loader)}


def validation_scores(model: nn.Module) -> Callable[..., dict]:
    "The validation scores of a pre-training model: ELECTRA's (`rtd_metrics`), or BERT's (`bert_validation`)."
    return rtd_metrics if isinstance(model, ElectraForPreTraining) else bert_validation


def train(
    model: BertForPreTraining | ElectraForPreTraining,
    data: PretrainingDataset | PackedDataset | Sequence[Phase],
    cfg: TrainConfig,
    *,
    valid_loader: DataLoader | None = None,
    run_dir: str | os.PathLike | None = None,
    resume: bool = False,
    on_log: Callable[[dict], None] | None = None,
    hooks: Sequence[Hook] = (),
    show_progress: bool = True,
) -> list[dict]:
    """Pre-train `model` on `data` as `cfg` says and return the metric records: with MLM + NSP on sentence pairs
    (`PretrainingDataset`), with MLM alone on packed sequences (`PackedDataset`), or an ELECTRA model with
    replaced-token detection on packed sequences (weighted by `cfg.rtd_weight`, so `cfg` is a `PretrainConfig`).
    `data` may also be `Phase`s of such datasets (BERT's short, then long sequences).

    With `valid_loader`, `validation_metrics` (ELECTRA: `rtd_metrics`) scores the model every `cfg.eval_every`
    steps. With `run_dir`, metrics, checkpoints and the loss curve are written there, and `resume=True` continues
    from its newest checkpoint. `on_log` and `hooks` are `bertlib.train.loop.fit`'s."""
    dataset = data if isinstance(data, Dataset) else data[0].dataset
    evaluate = (
        None
        if valid_loader is None
        else partial(validation_scores(model), loader=valid_loader, max_batches=cfg.eval_batches)
    )
    if isinstance(model, ElectraForPreTraining):
        objective = ReplacedTokenDetection(dataset.pad_id, cfg.rtd_weight)
    elif isinstance(dataset, PackedDataset):
        objective = MaskedLM(dataset.pad_id)
        freeze_nsp(model)
    else:
        objective = MaskedLMAndNSP(dataset.pad_id)
    return fit(
        model,
        data,
        objective,
        cfg,
        evaluate=evaluate,
        run_dir=run_dir,
        resume=resume,
        on_log=on_log,
        hooks=hooks,
        show_progress=show_progress,
    )
