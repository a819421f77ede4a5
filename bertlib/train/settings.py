"""How to train: `TrainConfig` (the training loop's settings), `PretrainConfig` (plus the pre-training data and
objective), `DistilConfig` (the same data, plus the teacher and the distillation loss) and `FinetuneConfig` (plus
the task and where the encoder comes from), validated when made and saved in every run's `config.json`. Each
field's metadata holds its command-line help, so a new option is one edit here.

Written by hand; notebook 07 presents it.
"""

__all__ = [
    "objective_of",
    "SCHEDULES",
    "ON_NAN",
    "INITS",
    "OBJECTIVES",
    "Pairing",
    "SOFT_TARGETS",
    "parse_duration",
    "TrainConfig",
    "PretrainDataConfig",
    "PretrainConfig",
    "DistilConfig",
    "default_seq_len",
    "default_doc_stride",
    "FinetuneConfig",
]

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from ..data.pairs import PAIRINGS, Pairing
from ..data.wikitext import WIKITEXT_CONFIGS
from ..model.config import POOLINGS, SOFT_TARGETS
from ..tasks.examples import TASK_NAMES, TASKS
from ..utils.checks import check_choice, check_non_negative, check_positive, check_positive_ints

SCHEDULES = ("linear", "cosine", "constant")
ON_NAN = ("stop", "skip")
INITS = ("pretrained", "random")
OBJECTIVES = ("mlm_nsp", "mlm", "electra")


def _option(default: Any, help: str, **metadata: Any) -> Any:
    return field(default=default, metadata={"help": help, **metadata})


def parse_duration(text: str) -> float:
    "Seconds in a duration such as '90s', '20m', '1.5h' or '600' (seconds)."
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", str(text))
    if not match or not float(match[1]) > 0:
        raise ValueError(f"{text!r} is not a duration; write it like 90s, 20m or 1.5h")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


@dataclass
class TrainConfig:
    """How the training loop runs: its length, batches, optimiser, schedule, bookkeeping and device.

    `batch_size` counts sequences per optimiser step over all processes and accumulation steps, so the
    number of GPUs and `grad_accum` do not change what is learned."""

    max_steps: int | None = _option(None, "optimiser steps")
    epochs: float | None = _option(None, "passes over the training data instead of --max-steps")
    time_budget: float | None = _option(
        None,
        "train for this long (90s, 20m, 1.5h) instead: the number of steps "
        "is fixed from a short timing run, so the run stays reproducible",
        parse=parse_duration,
    )
    batch_size: int = _option(32, "sequences per optimiser step, over all processes and accumulation steps")
    grad_accum: int = _option(1, "micro-batches per optimiser step (gradient accumulation)")
    max_seq_len: int = _option(128, "tokens per sequence, special tokens included")
    lr: float = _option(5e-4, "peak learning rate")
    weight_decay: float = _option(0.01, "AdamW weight decay of the weight matrices")
    warmup_ratio: float = _option(0.06, "share of the steps spent warming the learning rate up from 0")
    schedule: str = _option("linear", "learning-rate decay after the warm-up", choices=SCHEDULES)
    max_grad_norm: float = _option(1.0, "clip the gradient's norm to this (> 0)")
    on_nan: str = _option(
        "stop",
        "a step whose loss or gradient is not finite: stop the run (keeping its good checkpoints), or skip the step",
        choices=ON_NAN,
    )
    seed: int = _option(0, "seed of the weights, data order, masks and dropout")
    log_every: int = _option(50, "steps between logged training losses")
    eval_every: int = _option(500, "steps between validations")
    eval_batches: int | None = _option(None, "validation batches per validation (default: all)")
    save_every: int = _option(500, "steps between checkpoints")
    keep_checkpoints: int = _option(2, "newest checkpoints kept on disk")
    device: str = _option("auto", "'auto' (a GPU if there is one), 'cpu', 'cuda', 'cuda:1', ...")
    compile: bool = _option(False, "compile the model with torch.compile (best on a GPU)")
    num_workers: int | None = _option(None, "data loader processes (default: 0 on a CPU, 4 with a GPU)")
    threads: int | None = _option(
        None,
        "CPU threads to train with (default: OMP_NUM_THREADS if set, else as many as "
        "the CPUs idle when the run starts; recorded, so that a resumed run computes "
        "exactly as before)",
    )

    def __post_init__(self) -> None:
        name = type(self).__name__
        if self.max_steps is None and self.epochs is None and self.time_budget is None:
            for key, value in self.default_length.items():
                setattr(self, key, value)
        if (self.max_steps is None) == (self.epochs is None) and not (self.time_budget and self.epochs is None):
            # a time budget comes with max_steps once it has been turned into steps (`bertlib.recipes.pretrain`)
            raise ValueError(f"give exactly one of {name}.max_steps, {name}.epochs and {name}.time_budget")
        check_positive_ints(
            self,
            (
                "max_steps",
                "batch_size",
                "grad_accum",
                "max_seq_len",
                "log_every",
                "eval_every",
                "save_every",
                "keep_checkpoints",
                "eval_batches",
                "threads",
            ),
        )
        check_positive(self, ("epochs", "lr", "max_grad_norm", "time_budget"))
        check_non_negative(self, ("weight_decay",))
        if self.num_workers is not None and (isinstance(self.num_workers, bool) or self.num_workers < 0):
            raise ValueError(f"{name}.num_workers={self.num_workers!r} is not valid; it must be 0 or more")
        if self.batch_size % self.grad_accum:
            raise ValueError(f"{name}.batch_size={self.batch_size} is not a multiple of grad_accum={self.grad_accum}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"{name}.warmup_ratio={self.warmup_ratio} is not valid; it must be in [0, 1)")
        check_choice(f"{name}.schedule", self.schedule, SCHEDULES)
        check_choice(f"{name}.on_nan", self.on_nan, ON_NAN)

    # the length of a run whose settings give none of max_steps, epochs and time_budget (the loop itself needs one)
    default_length: ClassVar[dict[str, Any]] = {}

    def total_steps(self, micro_batches_per_epoch: int) -> int:
        "The number of optimiser steps: `max_steps`, or `epochs` worth of micro-batches (epoch 0's count)."
        if self.max_steps is not None:
            return self.max_steps
        return max(1, math.ceil(self.epochs * micro_batches_per_epoch / self.grad_accum))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Self:
        "A config from a dict; unknown keys raise a ValueError."
        known = {f.name for f in dataclasses.fields(cls)}
        if set(values) - known:
            raise ValueError(f"unknown {cls.__name__} field(s) {sorted(set(values) - known)}; known: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        "The fields as a plain dict (JSON-ready)."
        return dataclasses.asdict(self)


def _retuned(name: str, default: Any, base: type | None = None) -> Any:
    "The field `name` of `base` (default `TrainConfig`) with another default (its help and choices kept)."
    return field(default=default, metadata=(base or TrainConfig).__dataclass_fields__[name].metadata)


@dataclass
class PretrainDataConfig(TrainConfig):
    """`TrainConfig` plus the pre-training data: which WikiText-2, how NSP pairs are made, how tokens are masked.

    Its batch, learning rate and masking rate (batch 8, peak learning rate 1e-3, 30% of the tokens masked) beat
    the former defaults (batch 32, 5e-4, 15%) at equal training tokens in the CPU recipe study
    (`experiments/recipe_study`); its default length, 4,000 steps of 8, holds the tokens of the former 1,000 of 32."""

    max_steps: int | None = _option(None, "optimiser steps (default: 4,000, unless --epochs or --time-budget)")
    batch_size: int = _retuned("batch_size", 8)
    lr: float = _retuned("lr", 1e-3)
    data_config: str = _option("wikitext-2-v1", "WikiText-2 variant", choices=WIKITEXT_CONFIGS)
    pairing: str = _option("segments", "how NSP pairs are made", choices=tuple(PAIRINGS))
    mlm_probability: float = _option(0.30, "share of the tokens that MLM predicts (BERT: 0.15)")
    whole_word_mask: bool = _option(False, "mask whole words rather than single pieces")
    long_seq_len: int | None = _option(
        None,
        "train the last steps on sequences this long (BERT: 512 for the last "
        "tenth), so that every position a fine-tuning task reads is trained",
    )
    long_share: float = _option(0.1, "the share of the steps at --long-seq-len")

    default_length: ClassVar[dict[str, Any]] = {"max_steps": 4000}

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        check_choice(f"{name}.data_config", self.data_config, WIKITEXT_CONFIGS)
        check_choice(f"{name}.pairing", self.pairing, tuple(PAIRINGS))
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"{name}.mlm_probability={self.mlm_probability} is not valid; it must be in (0, 1)")
        check_positive_ints(self, ("long_seq_len",))
        if self.long_seq_len is not None and self.long_seq_len <= self.max_seq_len:
            raise ValueError(
                f"{name}.long_seq_len={self.long_seq_len} is not valid; it must be longer than "
                f"max_seq_len={self.max_seq_len}"
            )
        if not 0 < self.long_share < 1:
            raise ValueError(f"{name}.long_share={self.long_share} is not valid; it must be in (0, 1)")
        if self.long_seq_len is not None and self.time_budget is not None:
            raise ValueError(
                f"{name}.long_seq_len cannot go with a time budget, which is timed on the short "
                f"sequences; give max_steps or epochs"
            )


@dataclass
class PretrainConfig(PretrainDataConfig):
    """`PretrainDataConfig` plus the objective: BERT's MLM + NSP on sentence pairs, RoBERTa's MLM alone on packed
    sequences, or ELECTRA's replaced-token detection on packed sequences (with its generator's size and the
    weight of the discriminator's loss)."""

    objective: str = _option(
        "mlm_nsp",
        "'mlm_nsp' (BERT: sentence pairs, MLM + NSP), 'mlm' (RoBERTa: full-length "
        "packed sequences, MLM only) or 'electra' (packed sequences, a generator "
        "fills the masks and the model learns which tokens were replaced)",
        choices=OBJECTIVES,
    )
    generator_size: float = _option(
        0.25, "electra: the generator's width as a share of the model's (ELECTRA: 1/4 to 1/3)"
    )
    rtd_weight: float = _option(
        50.0, "electra: the weight of the replaced-token loss beside the generator's MLM loss (ELECTRA's lambda)"
    )
    target_perplexity: float | None = _option(
        None, "stop at the first validation whose MLM perplexity is at most this (a speedrun's mark), with a checkpoint"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("PretrainConfig.objective", self.objective, OBJECTIVES)
        check_positive(self, ("target_perplexity",))
        if not 0 < self.generator_size <= 1:
            raise ValueError(f"PretrainConfig.generator_size={self.generator_size} is not valid; it must be in (0, 1]")
        check_non_negative(self, ("rtd_weight",))


@dataclass
class DistilConfig(PretrainDataConfig):
    """`PretrainDataConfig` plus DistilBERT's recipe (Sanh et al. 2019): a student with fewer layers, initialised
    from the teacher, learns on packed MLM sequences from `alpha_ce` x the KL divergence to the teacher's
    predictions softened by `temperature` (times its square; at `soft_targets` positions), `alpha_mlm` x its own
    MLM loss and `alpha_cos` x the cosine loss between its last hidden states and the teacher's. The weights and
    the temperature are those of DistilBERT's training command, the soft-target positions its code's default; so
    is masking 15% of the tokens, the rate the course's teacher learned at."""

    mlm_probability: float = _retuned("mlm_probability", 0.15, PretrainDataConfig)
    teacher: str | None = _option(None, "the teacher: a bertlib pre-training run folder (e.g. models/course-mini)")
    student_layers: int | None = _option(
        None,
        "the student's layers, taken from the teacher's layers spread "
        "evenly, first and last included (default: half the teacher's)",
    )
    temperature: float = _option(2.0, "softens both models' predictions in the soft-target loss")
    soft_targets: str = _option(
        "all",
        "where the soft-target loss compares the models: every real token "
        "(DistilBERT's default) or the masked ones only",
        choices=SOFT_TARGETS,
    )
    alpha_ce: float = _option(5.0, "weight of the soft-target loss (KL divergence to the teacher)")
    alpha_mlm: float = _option(2.0, "weight of the student's own MLM loss")
    alpha_cos: float = _option(1.0, "weight of the cosine loss between the last hidden states")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_ints(self, ("student_layers",))
        check_positive(self, ("temperature",))
        check_choice("DistilConfig.soft_targets", self.soft_targets, SOFT_TARGETS)
        check_non_negative(self, ("alpha_ce", "alpha_mlm", "alpha_cos"))
        if not self.alpha_ce + self.alpha_mlm + self.alpha_cos > 0:
            raise ValueError("DistilConfig.alpha_ce, alpha_mlm and alpha_cos are all 0; give at least one a weight")


def default_seq_len(task: str) -> int:
    "A task's sequence length unless told otherwise: 384 for question answering (as BERT), else 128."
    return 384 if TASKS[task].kind == "span" else 128


def default_doc_stride(max_seq_len: int) -> int:
    "SQuAD's stride between windows unless told otherwise: a third of the window, as BERT's 128 of 384."
    return max_seq_len // 3


@dataclass
class FinetuneConfig(TrainConfig):
    """`TrainConfig` with fine-tuning's defaults (3 epochs, lr 1e-4, 10% warm-up, a validation and a
    checkpoint each epoch) plus the task, where the encoder comes from, and the span search of SQuAD."""

    epochs: float | None = _option(None, "passes over the training data (default: 3, unless --max-steps)")
    max_seq_len: int | None = _option(
        None,
        "tokens per sequence, special tokens included (default: 384 for "
        "SQuAD, as BERT, 128 for the others, but at most the length the "
        "encoder was pre-trained on)",
    )
    lr: float = _option(1e-4, "peak learning rate")
    warmup_ratio: float = _option(0.1, "share of the steps spent warming the learning rate up from 0")
    eval_every: int | None = _option(None, "steps between validations (default: one per epoch)")
    save_every: int | None = _option(None, "steps between checkpoints (default: one per epoch)")
    task: str = _option("sst2", "the task", choices=TASK_NAMES)
    source: str = _option("", "the encoder: a bertlib run folder, an HF BERT folder or hub id")
    init: str = _option(
        "pretrained",
        "start from the source's weights, or from random ones of the same shape "
        "(the baseline that shows what pre-training is worth)",
        choices=INITS,
    )
    pooling: str = _option(
        "cls", "what a classifier reads: the pooled [CLS] vector or the mean of the tokens", choices=POOLINGS
    )
    train_examples: int | None = _option(
        None, "train on this many examples, spread evenly over the split (default: all)"
    )
    eval_examples: int | None = _option(None, "validate on this many examples, spread evenly (default: all)")
    doc_stride: int | None = _option(
        None,
        "SQuAD: pieces between the starts of two windows over one paragraph "
        "(default: a third of --max-seq-len, as BERT's 128 of 384; a window's "
        "length when that is less, so that no text is skipped)",
    )
    max_query_len: int = _option(64, "SQuAD: question pieces kept")
    max_answer_len: int = _option(30, "SQuAD: the longest answer, in pieces, that span search proposes")
    untrained_positions: bool = _option(
        False,
        "allow --max-seq-len past the length the encoder was pre-trained on "
        "(its positions there are untrained; for the experiment only)",
    )

    default_length: ClassVar[dict[str, Any]] = {"epochs": 3.0}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("FinetuneConfig.task", self.task, TASK_NAMES)
        check_choice("FinetuneConfig.init", self.init, INITS)
        check_choice("FinetuneConfig.pooling", self.pooling, POOLINGS)
        check_positive_ints(self, ("train_examples", "eval_examples", "doc_stride", "max_query_len", "max_answer_len"))
        kind, length = TASKS[self.task].kind, self.max_seq_len or default_seq_len(self.task)
        shortest = 5 if kind in ("pair", "span") else 3  # [CLS], [SEP] (twice for two texts) and a piece of each text
        if length < shortest:
            raise ValueError(
                f"FinetuneConfig.max_seq_len={length} is too short for {self.task}: it must hold the "
                f"special tokens and a piece of each text, at least {shortest}"
            )


def objective_of(cfg: TrainConfig | None) -> str:
    """What a run's settings train, decided here and nowhere else: `"finetune"` for a task, `"distil"` for a student,
    else the pre-training objective (`PretrainConfig.objective`: `"mlm_nsp"`, `"mlm"` or `"electra"`); settings of the
    generic loop, or none, train BERT's own (`"mlm_nsp"`)."""
    if isinstance(cfg, FinetuneConfig):
        return "finetune"
    if isinstance(cfg, DistilConfig):
        return "distil"
    return cfg.objective if isinstance(cfg, PretrainConfig) else "mlm_nsp"
