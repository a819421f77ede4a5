"""The commands that make a run folder (`bertlib.cli.main` parses the options and maps errors to exit codes): prepare a
tokenizer; pre-train, distil or fine-tune a run. A problem the user can fix raises `UsageError`; the commands that
read a run are `bertlib.cli.run_commands`'.

Written by hand. Torch is imported by the commands that need it, so that `--help` is instant.
"""

__all__ = ["UsageError", "prepare", "pretrain", "distil", "finetune"]

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..data.tokenizer import DEFAULT_VOCAB_SIZE, UNK, load_tokenizer, save_tokenizer, train_tokenizer
from ..data.wikitext import SPLITS, corpus_stats, load_wikitext2, wikitext_paragraphs
from ..model.config import BertConfig
from ..tasks.examples import TASKS
from ..train.runs import check_outside_runs, load_run
from ..train.settings import DistilConfig, FinetuneConfig, PretrainConfig, objective_of
from ..utils.environment import command_line
from .options import given_options

LENGTHS = ("max_steps", "epochs", "time_budget")  # one of them gives a run's length


class UsageError(Exception):
    "A problem the user can fix; printed as one line, exit code 2."


def prepare(args: argparse.Namespace) -> None:
    "Report on the corpus, train the WordPiece tokenizer on the train split and save it."
    out = Path(args.output_dir)
    check_outside_runs(out, "prepare", below=False)  # a run's tokenizer is what its model reads
    if (out / "tokenizer.json").exists() and not args.overwrite:
        raise UsageError(f"{out / 'tokenizer.json'} exists; pass --overwrite to replace it or choose --output-dir")
    if args.vocab_size < 16:
        raise UsageError(f"--vocab-size {args.vocab_size} is too small; use at least 16 (default {DEFAULT_VOCAB_SIZE})")
    rows = {split: load_wikitext2(split, args.config, args.data_dir) for split in SPLITS}
    print(f"WikiText-2 ({args.config})")
    columns = ("documents", "paragraphs", "sentences", "words", "unk_words")
    print(f"  {'split':<11}" + "".join(f"{c:>12}" for c in columns))
    for split, split_rows in rows.items():
        stats = corpus_stats(split_rows)
        print(f"  {split:<11}" + "".join(f"{stats[c]:>12,}" for c in columns))

    start = time.perf_counter()
    tokenizer = train_tokenizer(
        wikitext_paragraphs("train", args.config, args.data_dir),
        vocab_size=args.vocab_size,
        lowercase=not args.cased,
        show_progress=sys.stderr.isatty(),
    )
    seconds = time.perf_counter() - start
    path = save_tokenizer(tokenizer, out)
    valid = wikitext_paragraphs("validation", args.config, args.data_dir)
    ids = [e.ids for e in tokenizer.encode_batch(valid, add_special_tokens=False)]
    n_tokens = sum(map(len, ids))
    n_unk = sum(x.count(tokenizer.token_to_id(UNK)) for x in ids)
    n_words = sum(len(p.split()) for p in valid)
    print(f"tokenizer: {tokenizer.get_vocab_size():,} pieces trained in {seconds:.1f} s")
    print(f"  validation: {n_tokens / n_words:.3f} pieces per word, {n_unk / n_tokens:.2%} [UNK]")
    print(f"saved {path} and {path.parent / 'vocab.txt'}")


def _settings(args: argparse.Namespace, kind: type) -> Any:
    """The settings of the run to make: the options typed over `kind`'s defaults; or, to resume a run, only the options
    typed (a new length replaces the old one), which the run's recipe puts over the settings it reads from the run."""
    given = given_options(args, kind)
    if set(LENGTHS) & set(given):
        given = {**dict.fromkeys(LENGTHS), **given}
    return given if args.resume else kind.from_dict(given)


def pretrain(args: argparse.Namespace) -> None:
    """Pre-train BERT (MLM + NSP, or another --objective) on WikiText-2 into a run folder; with --resume, continue
    a run."""
    from ..recipes.pretrain import pretrain as run_pretraining

    out, start = _output_dir(args, f"runs/{args.preset or 'mini'}"), time.perf_counter()
    model_config, tokenizer = None, None
    if args.resume:
        ignored = [
            flag for flag, value in (("--preset", args.preset), ("--tokenizer", args.tokenizer)) if value is not None
        ] + [f"--{name.replace('_', '-')}" for name in given_options(args, BertConfig)]
        if ignored:
            raise UsageError(
                f"--resume continues {out} with its own model and tokenizer, so {', '.join(ignored)} "
                f"cannot change them; leave them out, or start a new run"
            )
        cfg = _settings(args, PretrainConfig)
    elif _no_choices(args):
        model_config, cfg = _default_recipe()
    else:
        tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
        vocab = args.vocab_size or (tokenizer.get_vocab_size() if tokenizer else DEFAULT_VOCAB_SIZE)
        model_config = BertConfig.from_preset(
            args.preset or "mini", **{**given_options(args, BertConfig), "vocab_size": vocab}
        )
        cfg = _settings(args, PretrainConfig)
    records = run_pretraining(
        out, model_config, cfg, tokenizer=tokenizer, data_dir=args.data_dir, resume=args.resume, on_log=_print_event
    )
    _report_pretraining(out, records, start, args.data_dir)


def _no_choices(args: argparse.Namespace) -> bool:
    "Whether the user chose nothing about the model or its training (only where the run goes, and the data)."
    chosen = given_options(args, PretrainConfig) | given_options(args, BertConfig)
    return not chosen and args.preset is None and args.tokenizer is None and args.vocab_size is None


def _default_recipe() -> tuple[BertConfig, PretrainConfig]:
    "What `python -m bertlib pretrain` trains when told nothing: the course recipe for this machine, said."
    import torch

    from ..recipes.course import course_configs

    gpu = torch.cuda.is_available()
    model_config, cfg = course_configs(quick=False, gpu=gpu)
    if gpu:
        print(
            f"recipe: the course recipe, since there is a GPU ({torch.cuda.get_device_name(0)}): mini, "
            f"{cfg.epochs:g} epochs of {cfg.batch_size}, {cfg.max_seq_len} tokens then {cfg.long_seq_len} for the "
            f"last {cfg.long_share:.0%} of the steps, {cfg.mlm_probability:.0%} masked; any option chooses your own"
        )
    else:
        print(
            f"recipe: no GPU, so the CPU's: mini, {cfg.max_steps:,} steps of {cfg.batch_size} sequences of "
            f"{cfg.max_seq_len} tokens, {cfg.mlm_probability:.0%} masked (the course recipe needs a GPU); "
            f"any option chooses your own"
        )
    return model_config, cfg


def distil(args: argparse.Namespace) -> None:
    """Distil a pre-training run (--teacher) into a student with fewer layers (DistilBERT) on WikiText-2, in a run
    folder; with --resume, continue a run."""
    from ..recipes.distil import distil as run_distillation

    out, start = _output_dir(args, "runs/student"), time.perf_counter()
    if not args.resume and not args.teacher:
        raise UsageError("say which run to distil: --teacher RUN_FOLDER (a pre-training run, e.g. models/course-mini)")
    cfg = _settings(args, DistilConfig)  # on --resume, --teacher may only say where a moved teacher is now
    records = run_distillation(out, cfg, data_dir=args.data_dir, resume=args.resume, on_log=_print_event)
    _report_pretraining(out, records, start, args.data_dir)


def finetune(args: argparse.Namespace) -> None:
    "Fine-tune a pre-trained encoder on a task into a run folder; with --resume, continue a run."
    from ..recipes.finetune import SELECTION_METRIC
    from ..recipes.finetune import finetune as run_finetuning
    from ..train.checkpoints import best_validation

    out, start = _output_dir(args, f"runs/{args.task}"), time.perf_counter()
    if not args.resume and not args.source:
        raise UsageError(
            "say which encoder to fine-tune: --from RUN_FOLDER (python -m bertlib pretrain), an HF BERT "
            "folder, or a hub id such as google/bert_uncased_L-4_H-256_A-4"
        )
    cfg = _settings(args, FinetuneConfig)
    records = run_finetuning(out, cfg, data_dir=args.data_dir, resume=args.resume, on_log=_print_event)
    valid = _report_saved(out, records, start)
    task = load_run(out)[1].task  # as the run holds it (a resumed run was given only the options typed)
    metric, best = SELECTION_METRIC[task], best_validation(out)
    if best is not None:  # what best/ holds, which predict and export-hf read
        print(
            f"best validation {metric} {best['scores'][metric]:.4f} at step {best['step']} (kept in {out / 'best'})"
            + (f"; last {valid[-1][metric]:.4f}" if valid else "")
        )
    elif valid:
        print(
            f"{out / 'best'} is missing: no validation since it was lost beat it; predict and export-hf need "
            f"--newest to read the newest checkpoint instead",
            file=sys.stderr,
        )
    usage = {"pair": '"TEXT" --pair "TEXT"', "span": '"PARAGRAPH" --question "QUESTION"'}.get(
        TASKS[task].kind, '"TEXT"'
    )
    print(f"try it: {command_line('predict', out)} {usage}")


def _output_dir(args: argparse.Namespace, default: str) -> Path:
    "The run folder a training command writes: --output-dir, else `default`; an empty name is refused."
    if args.output_dir is not None and not args.output_dir.strip():
        raise UsageError("--output-dir is empty; give a folder, or leave the option out to use " + default)
    return Path(default if args.output_dir is None else args.output_dir)


def _report_pretraining(out: Path, records: list[dict], start: float, data_dir: str | None) -> None:
    """Say where a pre-training or distillation run was saved, its last validation (a BERT's beside the unigram
    baseline, with its guesses for two sentences and whether it is on the plateau), and what to look at next."""
    valid = _report_saved(out, records, start)
    if valid and objective_of(load_run(out)[1]) != "electra":
        from ..evaluation.report import run_report

        print("\n".join(run_report(out, valid[-1], data_dir)))
    elif valid:  # ELECTRA's: its discriminator's scores
        shown = ("mlm_loss", "mlm_perplexity", "mlm_accuracy", "rtd_accuracy")
        print(
            f"validation at step {valid[-1]['step']}: "
            + ", ".join(f"{k} {valid[-1][k]:.3f}" for k in shown if k in valid[-1])
        )
    print(f"loss curve: {out / 'loss_curve.png'}")
    print(f"test scores: {command_line('evaluate', out, '--split', 'test')}")


def _report_saved(out: Path, records: list[dict], start: float) -> list[dict]:
    "Say where a run was saved and how long this session took; return its validation records."
    print(
        f"run saved in {out}: {records[-1]['step'] if records else 0} steps "
        f"({(time.perf_counter() - start) / 60:.1f} min in this session)"
    )
    return [r for r in records if r.get("split") == "validation"]


def _print_event(record: dict) -> None:
    "Say what the run decided on its own (a time budget turned into steps, a schedule made longer)."
    if "event" in record:
        timing = (
            f" ({record['seconds_per_step']:.2f} s a step, {record['seconds_per_validation']:.1f} s a validation)"
            if "seconds_per_step" in record
            else ""
        )
        where = f"step {record['step']}: " if "step" in record else ""  # the run folder's own events have no step
        print(f"{where}{record['event']}{timing}", file=sys.stderr)
