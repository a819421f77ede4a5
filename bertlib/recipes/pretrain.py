"""The pre-training recipe: `pretrain` takes a name to a trained run folder on WikiText-2, with BERT's MLM + NSP on
sentence pairs, RoBERTa's MLM alone or ELECTRA's replaced-token detection on packed sequences; its data is
`pretraining_data`.

Written by hand; notebook 07 uses it.
"""

__all__ = ["check_settings", "pretraining_data", "wikitext_tokenizer", "reached", "pretrain"]

import os
import time
from collections.abc import Callable
from dataclasses import replace

import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from ..data.batching import Phase
from ..data.corpus import read_wikitext, wikitext_corpus, wikitext_source
from ..data.packed import PackedDataset
from ..data.pretraining import PretrainingDataset
from ..data.tokenizer import train_wikitext_tokenizer
from ..evaluation.scores import run_evaluation_loader
from ..model.config import BertConfig
from ..train.factory import build_model
from ..train.lifecycle import open_run
from ..train.loop import Hook, Loop
from ..train.runs import check_vocabulary
from ..train.settings import PretrainConfig, PretrainDataConfig, objective_of
from ..utils.devices import resolve_device
from .objectives import train
from .time_budget import same_on_every_process, steps_for_budget


def check_settings(model_config: BertConfig, cfg: PretrainDataConfig) -> None:
    "Raise a ValueError for settings that cannot work together here, before anything is written."
    resolve_device(cfg.device)
    longest = cfg.long_seq_len or cfg.max_seq_len
    if longest > model_config.max_position_embeddings:
        name = "long_seq_len" if cfg.long_seq_len else "max_seq_len"
        raise ValueError(
            f"{name}={longest} is longer than the model's max_position_embeddings="
            f"{model_config.max_position_embeddings}; use at most that many tokens per sequence"
        )
    if objective_of(cfg) == "electra":
        # HF ELECTRA, which an ELECTRA run exports to, is Post-LN with a layer per depth and learned positions
        unsupported = [
            option
            for option, used in (
                ("--position-embedding-type rope", model_config.position_embedding_type != "absolute"),
                ("--share-layers", model_config.share_layers),
                ("--norm-style pre", model_config.norm_style != "post"),
                ("--pairing sop", cfg.pairing == "sop"),
            )
            if used
        ]
        if unsupported:
            raise ValueError(
                f"--objective electra cannot go with {', '.join(unsupported)}: ELECTRA's model here is "
                f"HF ELECTRA's (Post-LN, a layer per depth, learned positions, no sentence-order head)"
            )


def _holds_items(dataset: PretrainingDataset | PackedDataset, split: str, cfg: PretrainDataConfig, data_dir) -> None:
    "Refuse a split that makes no sequence in some epoch: a run on it would never take a step, or validate nothing."
    fewest = dataset.fewest_items() if isinstance(dataset, PackedDataset) else len(dataset)
    if fewest == 0:
        raise ValueError(
            f"{wikitext_source(split, cfg.data_config, data_dir)}: the {split} split has too little text to make "
            f"sequences of {dataset.max_seq_len} tokens in every epoch; give it more text"
        )


def pretraining_data(
    cfg: PretrainDataConfig, tokenizer: Tokenizer, data_dir: str | None = None
) -> tuple[PretrainingDataset | PackedDataset | list[Phase], DataLoader]:
    """The training data of a run on WikiText-2's train split, and its validation batches (at `max_seq_len`): sentence
    pairs for BERT's objective, packed sequences for the MLM-only ones (RoBERTa's, ELECTRA's, distillation's); with
    `long_seq_len`, two `Phase`s, the last `long_share` of the steps on the longer sequences. A split without text,
    or too little of it for one sequence, is a one-line ValueError naming its file."""
    corpus = wikitext_corpus("train", tokenizer, config=cfg.data_config, data_dir=data_dir)

    def dataset(max_seq_len: int) -> PretrainingDataset | PackedDataset:
        options = dict(seed=cfg.seed, mlm_probability=cfg.mlm_probability, whole_word_mask=cfg.whole_word_mask)
        if objective_of(cfg) == "mlm_nsp":
            made = PretrainingDataset(corpus, tokenizer, max_seq_len, pairing=cfg.pairing, **options)
        else:
            made = PackedDataset(corpus, tokenizer, max_seq_len, **options)
        _holds_items(made, "train", cfg, data_dir)
        return made

    valid_loader = run_evaluation_loader("validation", tokenizer, cfg, data_dir=data_dir)
    _holds_items(valid_loader.dataset, "validation", cfg, data_dir)
    if cfg.long_seq_len is None:
        return dataset(cfg.max_seq_len), valid_loader
    return [
        Phase(dataset(cfg.max_seq_len), 1 - cfg.long_share),
        Phase(dataset(cfg.long_seq_len), cfg.long_share),
    ], valid_loader


def wikitext_tokenizer(model_config: BertConfig, cfg: PretrainDataConfig, data_dir: str | None = None) -> Tokenizer:
    """A new run's WordPiece tokenizer of `model_config.vocab_size` pieces, trained on WikiText-2's train split (read
    checked first, so that a file without text is named rather than trained on); a split too small to fill the
    vocabulary is a one-line ValueError that says so."""
    read_wikitext("train", "paragraphs", cfg.data_config, data_dir)
    tokenizer = train_wikitext_tokenizer(model_config.vocab_size, config=cfg.data_config, data_dir=data_dir)
    if tokenizer.get_vocab_size() < model_config.vocab_size:
        raise ValueError(
            f"{wikitext_source('train', cfg.data_config, data_dir)}: the train split is too small for a vocabulary "
            f"of {model_config.vocab_size:,} pieces (a tokenizer trained on it has {tokenizer.get_vocab_size():,}); "
            f"give a smaller --vocab-size, more text, or a tokenizer (--tokenizer)"
        )
    return tokenizer


def reached(perplexity: float) -> Hook:
    "A hook that ends training at the first validation whose MLM perplexity is at most `perplexity`."

    def check(loop: Loop) -> bool:
        last = loop.records[-1] if loop.records else {}
        return last.get("split") == "validation" and last["step"] == loop.step and last["mlm_perplexity"] <= perplexity

    return check


def pretrain(
    output_dir: str | os.PathLike,
    model_config: BertConfig | None = None,
    cfg: PretrainConfig | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    data_dir: str | None = None,
    resume: bool = False,
    on_log: Callable[[dict], None] | None = None,
    show_progress: bool = True,
) -> list[dict]:
    """Pre-train BERT on WikiText-2 into the run folder `output_dir` and return the metric records.

    A new run needs `model_config` and `cfg` (the tokenizer is trained on the train split unless given) and
    an `output_dir` that does not exist or is empty; the settings are checked before anything is written.
    `resume=True` continues the run in `output_dir` from its newest checkpoint (or from the start, if it
    stopped before its first one); then `cfg`, if given, may only change the fields in `RESUMABLE_FIELDS` (or be
    a dict of them).

    With `cfg.time_budget` (seconds, counted from this call) a new run times a few steps first and trains
    for as many steps as fit; the run folder records that number, so resuming it is exact."""
    started = time.perf_counter()
    with open_run(output_dir, cfg, PretrainConfig, resume, on_log, data_dir=data_dir) as run:
        cfg = run.cfg
        if resume:
            model_config, tokenizer = run.model_config, run.tokenizer
            if cfg.max_steps is None and cfg.epochs is None:
                raise ValueError(
                    "a resumed run keeps its length in steps; give --max-steps (or --epochs) to change "
                    "it, not a time budget"
                )
        elif model_config is None:
            raise ValueError("a new run needs model_config")
        check_settings(model_config, cfg)
        if tokenizer is None:
            tokenizer = wikitext_tokenizer(model_config, cfg, data_dir)
        check_vocabulary(tokenizer, model_config, "the tokenizer given")
        data, valid_loader = pretraining_data(cfg, tokenizer, data_dir)
        calibration = None
        if cfg.max_steps is None and cfg.epochs is None:
            steps, calibration = steps_for_budget(
                model_config, cfg, data, valid_loader, cfg.time_budget - (time.perf_counter() - started)
            )
            cfg = replace(cfg, max_steps=same_on_every_process(steps))
        run.record(model_config, cfg, tokenizer)
        if calibration is not None and on_log is not None:
            on_log({"step": 0, "event": f"time budget of {cfg.time_budget:g} s: {cfg.max_steps} steps", **calibration})
        torch.manual_seed(cfg.seed)
        model = build_model(model_config, cfg)
        hooks = [reached(cfg.target_perplexity)] if cfg.target_perplexity else []
        return train(
            model,
            data,
            cfg,
            valid_loader=valid_loader,
            run_dir=run.run_dir,
            resume=resume,
            on_log=on_log,
            hooks=hooks,
            show_progress=show_progress,
        )
