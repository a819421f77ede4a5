"""The course recipe's settings (notebook 07): the `tiny` preset for a few hundred steps in quick mode; otherwise
`mini`, on a GPU for 100 epochs at 128 tokens and then 512 (the shipped `models/course-mini` ran the 128-token part
only), or as the README's main command trains it on a CPU.

Written by hand; notebook 07 uses it.
"""

__all__ = ["course_configs"]

import torch

from ..model.config import BertConfig
from ..train.settings import PretrainConfig


def course_configs(quick: bool, gpu: bool | None = None) -> tuple[BertConfig, PretrainConfig]:
    """The model and training settings of the course model (notebook 07): in quick mode the `tiny` preset for
    300 steps (about a minute on a laptop CPU); otherwise the `mini` preset, on a GPU for 100 epochs of batch
    256 at BERT's 15% masking, the last tenth of the steps on sequences of 512 tokens (BERT's length schedule, so
    that fine-tuning reads no untrained position), on a CPU as the README's main command: 4,000 steps of
    `PretrainConfig`'s defaults (a step count rather than a time budget, so the run is the same on a busy
    machine)."""
    if quick:
        return BertConfig.from_preset("tiny"), PretrainConfig(
            max_steps=300,
            batch_size=32,
            lr=2e-3,
            log_every=10,
            eval_every=100,
            eval_batches=10,
            save_every=100,
            mlm_probability=0.15,
        )
    if torch.cuda.is_available() if gpu is None else gpu:
        return BertConfig.from_preset("mini"), PretrainConfig(
            epochs=100,
            batch_size=256,
            lr=1e-3,
            log_every=93,
            eval_every=930,
            save_every=930,
            keep_checkpoints=10,
            mlm_probability=0.15,
            long_seq_len=512,
            compile=True,  # one H100 call is 10 minutes: the compiled, sync-free step and 8 loader workers fit it
            num_workers=8,
        )
    return BertConfig.from_preset("mini"), PretrainConfig(max_steps=4000, log_every=50, eval_every=500, save_every=500)
