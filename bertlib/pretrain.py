"""The pre-training recipe: BERT's MLM + NSP objective (and RoBERTa's and ELECTRA's) for the training loop of
`bertlib.trainer`, `train` on a ready dataset, `pretrain` from a name to a trained run folder on WikiText-2, and
the course model's settings.

Written by hand; notebook 07 uses it.
"""

__all__ = ["HeadIndexed", "given_head_index", "MaskedLMAndNSP", "MaskedLM", "freeze_nsp", "ReplacedTokenDetection",
           "train", "course_configs", "pretraining_data", "pretrain"]

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from tokenizers import Tokenizer
from torch import nn

from .config import BertConfig
from .corpus import wikitext_corpus
from .devices import resolve_device
from .electra import ElectraForPreTraining
from .electra_evaluate import rtd_metrics
from .evaluate import validation_metrics
from .model import IGNORE_INDEX, BertForPreTraining, head_index
from .model_factory import build_model
from .packed_data import PackedDataset
from .pretraining_data import PaddingCollator, PretrainingDataset, evaluation_loader
from .runs import check_new_run, check_vocabulary, create_run, resumed_config, write_run_config
from .tokenizer import PAD_ID, train_wikitext_tokenizer
from .train_config import PretrainConfig, PretrainDataConfig, TrainConfig
from .trainer import fit, init_distributed, world

CALIBRATION_STEPS = 20  # timed on a throwaway model to turn a time budget into steps


@dataclass(frozen=True)
class HeadIndexed:
    """A collator whose batches also carry `head_positions` and `head_rows`: `bertlib.model.head_index` of the
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
        out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"],
                    labels=batch["labels"], next_sentence_label=batch["next_sentence_label"],
                    head_index=given_head_index(batch))
        return out.mlm_loss, out.nsp_loss


class MaskedLM:
    "RoBERTa's objective: the MLM loss alone, so the NSP head (and the pooler under it) is never trained."

    parts = ("mlm_loss",)

    def __init__(self, pad_token_id: int = PAD_ID):
        self.collate = HeadIndexed(PaddingCollator(pad_token_id, pad_to_multiple_of=8))

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int]:
        return (int((batch["labels"] != IGNORE_INDEX).sum()),)

    def losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor]:
        out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"],
                    labels=batch["labels"], head_index=given_head_index(batch))
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
        out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"],
                    labels=batch["labels"])
        return out.mlm_loss, self.rtd_weight * out.rtd_loss


def freeze_nsp(model: BertForPreTraining) -> None:
    """Freeze the NSP head and the pooler under it, for an objective without NSP: no loss reaches them, and
    DistributedDataParallel would wait for their gradients."""
    for unused in (model.nsp_head, model.bert.pooler):
        unused.requires_grad_(False)


def _scores(model: nn.Module) -> Callable[..., dict[str, float]]:
    "The validation scores of a pre-training model: ELECTRA's, or BERT's (`validation_metrics`)."
    return rtd_metrics if isinstance(model, ElectraForPreTraining) else validation_metrics


def train(model: BertForPreTraining | ElectraForPreTraining, dataset: PretrainingDataset | PackedDataset,
          cfg: TrainConfig, *, valid_loader: torch.utils.data.DataLoader | None = None,
          run_dir: str | os.PathLike | None = None,
          resume: bool = False, on_log: Callable[[dict], None] | None = None, show_progress: bool = True) -> list[dict]:
    """Pre-train `model` on `dataset` as `cfg` says and return the metric records: with MLM + NSP on sentence
    pairs (`PretrainingDataset`), with MLM alone on packed sequences (`PackedDataset`), or an ELECTRA model with
    replaced-token detection on packed sequences (weighted by `cfg.rtd_weight`, so `cfg` is a `PretrainConfig`).

    With `valid_loader`, `validation_metrics` (ELECTRA: `rtd_metrics`) scores the model every `cfg.eval_every`
    steps. With `run_dir`, metrics, checkpoints and the loss curve are written there, and `resume=True` continues
    from its newest checkpoint. `on_log` is called with every record (e.g. to draw a live plot)."""
    evaluate = None if valid_loader is None else partial(_scores(model), loader=valid_loader,
                                                         max_batches=cfg.eval_batches)
    if isinstance(model, ElectraForPreTraining):
        objective = ReplacedTokenDetection(dataset.pad_id, cfg.rtd_weight)
    elif isinstance(dataset, PackedDataset):
        objective = MaskedLM(dataset.pad_id)
        freeze_nsp(model)
    else:
        objective = MaskedLMAndNSP(dataset.pad_id)
    return fit(model, dataset, objective, cfg, evaluate=evaluate, run_dir=run_dir,
               resume=resume, on_log=on_log, show_progress=show_progress)


def course_configs(quick: bool, gpu: bool | None = None) -> tuple[BertConfig, PretrainConfig]:
    """The model and training settings of the course model (notebook 07): in quick mode the `tiny` preset for
    300 steps (about a minute on a laptop CPU); otherwise the `mini` preset, on a GPU for 100 epochs of batch
    256 (the recipe of `models/course-mini`), on a CPU as the README's main command: 4,000 steps of
    `PretrainConfig`'s defaults (a step count rather than a time budget, so the run is the same on a busy
    machine). The first two mask 15% of the tokens, as they did before the defaults became 30%."""
    if quick:
        return BertConfig.from_preset("tiny"), PretrainConfig(max_steps=300, batch_size=32, lr=2e-3, log_every=10,
                                                              eval_every=100, eval_batches=10, save_every=100,
                                                              mlm_probability=0.15)
    if torch.cuda.is_available() if gpu is None else gpu:
        return BertConfig.from_preset("mini"), PretrainConfig(epochs=100, batch_size=256, lr=1e-3, log_every=93,
                                                              eval_every=930, save_every=930, keep_checkpoints=10,
                                                              mlm_probability=0.15)
    return BertConfig.from_preset("mini"), PretrainConfig(max_steps=4000, log_every=50, eval_every=500,
                                                          save_every=500)


def _same_on_every_process(value: int) -> int:
    "Rank 0's value on every process of a `torchrun` group (timings differ from process to process)."
    if world()[0] == 1:
        return value
    shared = [value]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]


def check_settings(model_config: BertConfig, cfg: PretrainDataConfig, run_dir: Path) -> None:
    "Raise a ValueError for settings that cannot work together here, before anything is written."
    resolve_device(cfg.device)
    if cfg.max_seq_len > model_config.max_position_embeddings:
        raise ValueError(f"max_seq_len={cfg.max_seq_len} is longer than the model's max_position_embeddings="
                         f"{model_config.max_position_embeddings}; use at most that many tokens per sequence")
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"{run_dir} is a file, not a folder; choose another output folder")


def steps_for_budget(model_config: BertConfig, cfg: PretrainConfig, dataset: PretrainingDataset | PackedDataset,
                     valid_loader: torch.utils.data.DataLoader, seconds_left: float) -> tuple[int, dict]:
    """How many steps of `cfg` fit in `seconds_left`, validations included, timed on a throwaway copy of the
    model (`CALIBRATION_STEPS` steps and one validation); the timing run's own time is taken off first.
    Returns the steps and what was measured."""
    start = time.perf_counter()
    probe = build_model(model_config, cfg)
    timing = replace(cfg, max_steps=CALIBRATION_STEPS, epochs=None, time_budget=None, log_every=CALIBRATION_STEPS,
                     eval_every=CALIBRATION_STEPS + 1, save_every=CALIBRATION_STEPS + 1)
    train(probe, dataset, timing, show_progress=False)
    step_s = (time.perf_counter() - start) / CALIBRATION_STEPS
    start_eval = time.perf_counter()
    _scores(probe)(probe, valid_loader, cfg.eval_batches)
    eval_s = time.perf_counter() - start_eval
    left = seconds_left - (time.perf_counter() - start)
    steps = max(1, int(left / step_s))
    while steps > 1 and steps * step_s + math.ceil(steps / cfg.eval_every) * eval_s > left:
        steps = max(1, int((left - math.ceil(steps / cfg.eval_every) * eval_s) / step_s))
    return steps, {"seconds_per_step": step_s, "seconds_per_validation": eval_s, "seconds_left": left}


def pretraining_data(cfg: PretrainDataConfig, tokenizer: Tokenizer, data_dir: str | None = None
                     ) -> tuple[PretrainingDataset | PackedDataset, torch.utils.data.DataLoader]:
    """The training data of a run on WikiText-2's train split: sentence pairs for BERT's objective, packed
    sequences for the MLM-only ones (RoBERTa's, ELECTRA's, distillation's); and its validation batches."""
    corpus = wikitext_corpus("train", tokenizer, config=cfg.data_config, data_dir=data_dir)
    if isinstance(cfg, PretrainConfig) and cfg.objective == "mlm_nsp":
        dataset = PretrainingDataset(corpus, tokenizer, cfg.max_seq_len, seed=cfg.seed, pairing=cfg.pairing,
                                     mlm_probability=cfg.mlm_probability, whole_word_mask=cfg.whole_word_mask)
    else:
        dataset = PackedDataset(corpus, tokenizer, cfg.max_seq_len, seed=cfg.seed,
                                mlm_probability=cfg.mlm_probability, whole_word_mask=cfg.whole_word_mask)
    valid_loader = evaluation_loader("validation", tokenizer, max_seq_len=cfg.max_seq_len, pairing=cfg.pairing,
                                     data_config=cfg.data_config, data_dir=data_dir)
    return dataset, valid_loader


def pretrain(output_dir: str | os.PathLike, model_config: BertConfig | None = None,
             cfg: PretrainConfig | None = None, *, tokenizer: Tokenizer | None = None, data_dir: str | None = None,
             resume: bool = False, on_log: Callable[[dict], None] | None = None,
             show_progress: bool = True) -> list[dict]:
    """Pre-train BERT on WikiText-2 into the run folder `output_dir` and return the metric records.

    A new run needs `model_config` and `cfg` (the tokenizer is trained on the train split unless given) and
    an `output_dir` that does not exist or is empty; the settings are checked before anything is written.
    `resume=True` continues the run in `output_dir` from its newest checkpoint (or from the start, if it
    stopped before its first one); then `cfg`, if given, may only change the fields in `RESUMABLE_FIELDS`.

    With `cfg.time_budget` (seconds, counted from this call) a new run times a few steps first and trains
    for as many steps as fit; the run folder records that number, so resuming it is exact."""
    started = time.perf_counter()
    run_dir = Path(output_dir)
    created_group = init_distributed()
    try:
        if resume:
            model_config, cfg, tokenizer = resumed_config(run_dir, cfg, PretrainConfig)
            if cfg.max_steps is None and cfg.epochs is None:
                raise ValueError("a resumed run keeps its length in steps; give --max-steps (or --epochs) to change "
                                 "it, not a time budget")
            check_settings(model_config, cfg, run_dir)
            if world()[1] == 0:
                write_run_config(run_dir, model_config, cfg)
        else:
            if model_config is None or cfg is None:
                raise ValueError("a new run needs model_config and cfg")
            check_settings(model_config, cfg, run_dir)
            check_new_run(run_dir)
            if tokenizer is None:
                tokenizer = train_wikitext_tokenizer(model_config.vocab_size, config=cfg.data_config,
                                                     data_dir=data_dir)
            check_vocabulary(tokenizer, model_config, "the tokenizer given")
        dataset, valid_loader = pretraining_data(cfg, tokenizer, data_dir)
        calibration = None
        if not resume and cfg.max_steps is None and cfg.epochs is None:
            steps, calibration = steps_for_budget(model_config, cfg, dataset, valid_loader,
                                                  cfg.time_budget - (time.perf_counter() - started))
            cfg = replace(cfg, max_steps=_same_on_every_process(steps))
        if not resume and world()[1] == 0:
            create_run(run_dir, model_config, cfg, tokenizer)
        if calibration is not None and on_log is not None:
            on_log({"step": 0, "event": f"time budget of {cfg.time_budget:g} s: {cfg.max_steps} steps", **calibration})
        torch.manual_seed(cfg.seed)
        model = build_model(model_config, cfg)
        return train(model, dataset, cfg, valid_loader=valid_loader, run_dir=run_dir, resume=resume, on_log=on_log,
                     show_progress=show_progress)
    finally:
        if created_group:
            dist.destroy_process_group()
