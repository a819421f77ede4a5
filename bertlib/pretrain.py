"""The pre-training recipe: BERT's MLM + NSP objective for the training loop of `bertlib.trainer`, `train` on a
ready dataset, `pretrain` from a name to a trained run folder on WikiText-2, and the course model's settings.

Written by hand; notebook 07 uses it.
"""

__all__ = ["MaskedLMAndNSP", "train", "course_configs", "pretrain"]

import os
from collections.abc import Callable
from dataclasses import fields
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from tokenizers import Tokenizer
from torch import nn

from .config import BertConfig
from .corpus import wikitext_corpus
from .evaluate import validation_metrics
from .helpers import IGNORE_INDEX, resolve_device
from .model import BertForPreTraining
from .pretraining_data import PretrainingCollator, PretrainingDataset, evaluation_loader
from .runs import RunError, check_vocabulary, load_run, write_run_config
from .tokenizer import PAD_ID, save_tokenizer, train_wikitext_tokenizer
from .train_config import PretrainConfig, TrainConfig
from .trainer import fit, init_distributed, world

# settings a resumed run may change; all others define what is learned and must stay as they were
RESUMABLE_FIELDS = ("max_steps", "epochs", "log_every", "eval_every", "eval_batches", "save_every",
                    "keep_checkpoints", "device", "compile", "num_workers", "on_nan")


class MaskedLMAndNSP:
    "BERT's pre-training objective: the MLM loss (a mean over masked tokens) and the NSP loss (over sequences)."

    parts = ("mlm_loss", "nsp_loss")

    def __init__(self, pad_token_id: int = PAD_ID):
        self.collate = PretrainingCollator(pad_token_id, pad_to_multiple_of=8)  # tensor cores work in tiles of 8

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int, int]:
        "(masked tokens, sequences) of a batch, counted on the CPU."
        return int((batch["labels"] != IGNORE_INDEX).sum()), len(batch["input_ids"])

    def losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        "The mean MLM and NSP losses of `model` on a batch."
        out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"],
                    labels=batch["labels"], next_sentence_label=batch["next_sentence_label"])
        return out.mlm_loss, out.nsp_loss


def train(model: BertForPreTraining, dataset: PretrainingDataset, cfg: TrainConfig, *,
          valid_loader: torch.utils.data.DataLoader | None = None, run_dir: str | os.PathLike | None = None,
          resume: bool = False, on_log: Callable[[dict], None] | None = None, show_progress: bool = True) -> list[dict]:
    """Pre-train `model` on `dataset` with MLM + NSP as `cfg` says and return the metric records.

    With `valid_loader`, `validation_metrics` scores the model every `cfg.eval_every` steps. With `run_dir`,
    metrics, checkpoints and the loss curve are written there, and `resume=True` continues from its newest
    checkpoint. `on_log` is called with every record (e.g. to draw a live plot)."""
    evaluate = None if valid_loader is None else partial(validation_metrics, loader=valid_loader,
                                                         max_batches=cfg.eval_batches)
    return fit(model, dataset, MaskedLMAndNSP(dataset.pad_id), cfg, evaluate=evaluate, run_dir=run_dir,
               resume=resume, on_log=on_log, show_progress=show_progress)


def course_configs(quick: bool) -> tuple[BertConfig, PretrainConfig]:
    """The model and training settings of the run that notebooks 07 to 09 share: in quick mode the `tiny`
    preset for about a minute on a laptop CPU, otherwise the `mini` preset for 40 epochs (minutes on a GPU)."""
    if quick:
        return BertConfig.from_preset("tiny"), PretrainConfig(max_steps=300, batch_size=32, lr=2e-3, log_every=10,
                                                              eval_every=100, eval_batches=10, save_every=100)
    return BertConfig.from_preset("mini"), PretrainConfig(epochs=40, batch_size=256, lr=1e-3, log_every=20,
                                                          eval_every=200, save_every=500)


def _resumed_config(run_dir: Path, cfg: PretrainConfig | None) -> tuple[BertConfig, PretrainConfig, Tokenizer]:
    model_config, saved_cfg, tokenizer = load_run(run_dir)
    if cfg is not None:
        changed = [f.name for f in fields(PretrainConfig) if f.name not in RESUMABLE_FIELDS
                   and getattr(cfg, f.name) != getattr(saved_cfg, f.name)]
        if changed:
            raise RunError(f"a resumed run keeps its settings, but {', '.join(changed)} differ from "
                           f"{run_dir / 'config.json'}; start a new run to change them")
    return model_config, cfg or saved_cfg, tokenizer


def check_settings(model_config: BertConfig, cfg: PretrainConfig, run_dir: Path) -> None:
    "Raise a ValueError for settings that cannot work together here, before anything is written."
    resolve_device(cfg.device)
    if cfg.max_seq_len > model_config.max_position_embeddings:
        raise ValueError(f"max_seq_len={cfg.max_seq_len} is longer than the model's max_position_embeddings="
                         f"{model_config.max_position_embeddings}; use at most that many tokens per sequence")
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"{run_dir} is a file, not a folder; choose another output folder")


def pretrain(output_dir: str | os.PathLike, model_config: BertConfig | None = None,
             cfg: PretrainConfig | None = None, *, tokenizer: Tokenizer | None = None, data_dir: str | None = None,
             resume: bool = False, on_log: Callable[[dict], None] | None = None,
             show_progress: bool = True) -> list[dict]:
    """Pre-train BERT on WikiText-2 into the run folder `output_dir` and return the metric records.

    A new run needs `model_config` and `cfg` (the tokenizer is trained on the train split unless given) and
    an `output_dir` that does not exist or is empty; the settings are checked before anything is written.
    `resume=True` continues the run in `output_dir` from its newest checkpoint (or from the start, if it
    stopped before its first one); then `cfg`, if given, may only change the fields in `RESUMABLE_FIELDS`."""
    run_dir = Path(output_dir)
    created_group = init_distributed()
    try:
        if resume:
            model_config, cfg, tokenizer = _resumed_config(run_dir, cfg)
            check_settings(model_config, cfg, run_dir)
            if world()[1] == 0:
                write_run_config(run_dir, model_config, cfg)
        else:
            if model_config is None or cfg is None:
                raise ValueError("a new run needs model_config and cfg")
            check_settings(model_config, cfg, run_dir)
            if run_dir.exists() and any(run_dir.iterdir()):
                raise RunError(f"{run_dir} already exists and is not empty; pass resume=True (--resume) to "
                               f"continue it, or choose another output folder")
            if tokenizer is None:
                tokenizer = train_wikitext_tokenizer(model_config.vocab_size, config=cfg.data_config,
                                                     data_dir=data_dir)
            check_vocabulary(tokenizer, model_config, "the tokenizer given")
            if world()[1] == 0:
                save_tokenizer(tokenizer, run_dir)
                write_run_config(run_dir, model_config, cfg)
        torch.manual_seed(cfg.seed)
        model = BertForPreTraining(model_config)
        corpus = wikitext_corpus("train", tokenizer, config=cfg.data_config, data_dir=data_dir)
        dataset = PretrainingDataset(corpus, tokenizer, cfg.max_seq_len, seed=cfg.seed, pairing=cfg.pairing,
                                     mlm_probability=cfg.mlm_probability, whole_word_mask=cfg.whole_word_mask)
        valid_loader = evaluation_loader("validation", tokenizer, max_seq_len=cfg.max_seq_len, pairing=cfg.pairing,
                                         data_config=cfg.data_config, data_dir=data_dir)
        return train(model, dataset, cfg, valid_loader=valid_loader, run_dir=run_dir, resume=resume, on_log=on_log,
                     show_progress=show_progress)
    finally:
        if created_group:
            dist.destroy_process_group()
