"""The life of a run folder that every recipe (pre-training, distillation, fine-tuning) shares: join the process
group `torchrun` describes; for a new run, check that the folder is free before anything is written, then make it
whole at once; for a resumed one, read its settings back (a change is allowed to `RESUMABLE_FIELDS` only) and
record the new ones; leave the process group at the end.

Written by hand: production plumbing that the recipes use.
"""

__all__ = ["RunSession", "open_run"]

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist
from tokenizers import Tokenizer

from .config import BertConfig
from .processes import init_distributed, world
from .runs import RunConfig, check_new_run, create_run, resumed_config, write_run_config


@dataclass
class RunSession:
    """A run being trained in this process: its folder, whether it resumes, and (when it resumes) the model config,
    settings and tokenizer it was made with."""

    run_dir: Path
    resume: bool
    model_config: BertConfig | None = None
    cfg: RunConfig | None = None
    tokenizer: Tokenizer | None = None

    def record(self, model_config: BertConfig, cfg: RunConfig, tokenizer: Tokenizer) -> None:
        """Write the run's settings (rank 0 only): a new run's folder with its `config.json` and tokenizer, all at
        once; a resumed run's `config.json` with what changed (a longer run, another device)."""
        if world()[1] != 0:
            return
        if self.resume:
            write_run_config(self.run_dir, model_config, cfg)
        else:
            create_run(self.run_dir, model_config, cfg, tokenizer)


@contextmanager
def open_run(output_dir: str | os.PathLike, cfg: RunConfig | None, kind: type, resume: bool) -> Iterator[RunSession]:
    """The run in `output_dir`, made by the recipe whose settings are `kind`: with `resume`, its saved settings (`cfg`
    may change only `RESUMABLE_FIELDS`); else a new run of `cfg`, whose folder must be absent or empty. Joins the
    process group `torchrun` describes, and leaves it at the end if it joined it."""
    run_dir = Path(output_dir)
    created_group = init_distributed()
    try:
        if run_dir.exists() and not run_dir.is_dir():
            raise ValueError(f"{run_dir} is a file, not a folder; choose another output folder")
        if resume:
            model_config, cfg, tokenizer = resumed_config(run_dir, cfg, kind)
            yield RunSession(run_dir, True, model_config, cfg, tokenizer)
        else:
            if cfg is None:
                raise ValueError(f"a new run needs its settings (a {kind.__name__})")
            check_new_run(run_dir)
            yield RunSession(run_dir, False, cfg=cfg)
    finally:
        if created_group:
            dist.destroy_process_group()
