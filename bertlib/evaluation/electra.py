"""The scores of an ELECTRA model: how well its discriminator tells replaced tokens from original ones
(replaced-token detection accuracy, with the share of replaced tokens that a guess of "original" everywhere would
score against), and its generator's masked-LM scores, on the statically masked validation or test split.

Written by hand; notebook 12 presents it.
"""

__all__ = ["RTD_METRICS", "rtd_metrics", "evaluate_electra_run"]

import math
import os
from itertools import islice
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from ..model.bert import IGNORE_INDEX
from ..model.electra import ElectraForPreTraining
from ..train.checkpoints import latest_checkpoint
from ..train.factory import model_from_checkpoint
from ..train.runs import RunError, load_run
from ..train.settings import objective_of
from ..utils.devices import autocast, eval_mode, resolve_device, to_device
from ..utils.environment import command_line
from .scores import EVAL_SEED, run_evaluation_loader

RTD_METRICS = ("mlm_loss", "mlm_perplexity", "mlm_accuracy", "rtd_loss", "rtd_accuracy", "replaced_share")


def rtd_metrics(model: ElectraForPreTraining, loader: DataLoader, max_batches: int | None = None) -> dict[str, float]:
    """`RTD_METRICS` of `model` over `loader`: the generator's MLM loss, perplexity and accuracy on the masked
    tokens; the discriminator's loss and accuracy on every real token of the sampled input, and the share of
    those tokens that were replaced. The samples are drawn from a fixed seed, so a model always gets one score."""
    device = next(model.parameters()).device
    sums = torch.zeros(5, dtype=torch.float64, device=device)  # MLM loss, MLM hits, RTD loss, RTD hits, replaced
    masked = real = 0
    with eval_mode(model), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(EVAL_SEED)
        for batch in islice(loader, max_batches):
            n_masked, n_real = int((batch["labels"] != IGNORE_INDEX).sum()), int(batch["attention_mask"].sum())
            masked, real = masked + n_masked, real + n_real
            b = to_device(batch, device)
            with autocast(device):
                out = model(
                    b["input_ids"],
                    token_type_ids=b["token_type_ids"],
                    attention_mask=b["attention_mask"],
                    labels=b["labels"],
                )
            target, replaced = b["labels"][b["labels"] != IGNORE_INDEX], out.replaced[b["attention_mask"] == 1]
            detected = out.logits[b["attention_mask"] == 1] > 0
            sums += torch.stack(
                [
                    out.mlm_loss.float() * n_masked,
                    (out.prediction_logits.argmax(-1) == target).sum(),
                    out.rtd_loss.float() * n_real,
                    (detected == replaced.bool()).sum(),
                    replaced.sum(),
                ]
            ).double()
    if not masked:
        raise ValueError("the evaluation data has no masked tokens")
    mlm_sum, mlm_hits, rtd_sum, rtd_hits, n_replaced = sums.tolist()
    return {
        "mlm_loss": mlm_sum / masked,
        "mlm_perplexity": math.exp(mlm_sum / masked),
        "mlm_accuracy": mlm_hits / masked,
        "rtd_loss": rtd_sum / real,
        "rtd_accuracy": rtd_hits / real,
        "replaced_share": n_replaced / real,
    }


def evaluate_electra_run(
    run_dir: str | os.PathLike,
    split: str = "validation",
    *,
    device: str = "auto",
    batch_size: int = 64,
    data_dir: str | None = None,
    max_batches: int | None = None,
) -> dict[str, float]:
    "The scores (`RTD_METRICS`) of an ELECTRA run's newest checkpoint on a statically masked WikiText-2 split."
    model_config, cfg, tokenizer = load_run(run_dir)
    if objective_of(cfg) != "electra":
        raise RunError(f"{run_dir} is not an ELECTRA run; score it with {command_line('evaluate', Path(run_dir))}")
    model = model_from_checkpoint(model_config, latest_checkpoint(run_dir), cfg).to(resolve_device(device))
    loader = run_evaluation_loader(split, tokenizer, cfg, batch_size=batch_size, data_dir=data_dir)
    return rtd_metrics(model, loader, max_batches)
