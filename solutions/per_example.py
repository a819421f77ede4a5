"""Per-example measurements that give the worked solutions' verdicts (`verdict.py`) their spread. Written by hand; no
notebook exports it.

A mean over an evaluation set hides how much it would move on another sample of it; the values it averages do not.
"""

import torch
import torch.nn.functional as F
from torch import nn


@torch.no_grad()
def masked_token_losses(model: nn.Module, batches) -> list[float]:
    """The MLM loss of every masked token of `batches` (in the order of the batches, then row by row), whose mean is
    `common.mean_mlm_loss`."""
    model.eval()
    found = []
    for batch in batches:
        out = model(
            batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=batch["labels"],
        )
        target = batch["labels"][batch["labels"] != -100]
        found += F.cross_entropy(out.prediction_logits.float(), target, reduction="none").tolist()
    return found
