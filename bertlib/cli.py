"""The `bertlib` command line: `python -m bertlib <command> --help` explains each command."""
import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import get_args

from bertlib.config import PRESETS, BertConfig
from bertlib.data import SPLITS, WIKITEXT_CONFIGS, corpus_stats, load_wikitext2, split_documents
from bertlib.pretraining_data import Pairing
from bertlib.tokenizer import DEFAULT_VOCAB_SIZE, UNK, load_tokenizer, save_tokenizer, train_tokenizer
from bertlib.train import SCHEDULES, RunError, TrainConfig, checkpoints, load_run, read_metrics

DEFAULT_MAX_STEPS = 1000  # without --max-steps or --epochs: about half an hour of `mini` on a laptop CPU
# pretrain flags that map one to one onto TrainConfig fields
TRAIN_FLAGS = ("max_steps", "epochs", "batch_size", "grad_accum", "max_seq_len", "lr", "weight_decay", "warmup_ratio",
               "schedule", "max_grad_norm", "seed", "pairing", "whole_word_mask", "log_every", "eval_every",
               "eval_batches", "save_every", "keep_checkpoints", "device", "compile", "num_workers")


class UsageError(Exception):
    "A problem the user can fix; printed as one line, exit code 2."


def _paragraphs(rows: list[str]) -> list[str]:
    return [p for doc in split_documents(rows, unit="paragraphs") for p in doc]


def prepare(args: argparse.Namespace) -> None:
    "Report on the corpus, train the WordPiece tokenizer on the train split and save it."
    out = Path(args.output_dir)
    if (out / "tokenizer.json").exists() and not args.overwrite:
        raise UsageError(f"{out / 'tokenizer.json'} exists; pass --overwrite to replace it or choose --output-dir")
    if args.vocab_size < 16:
        raise UsageError(f"--vocab-size {args.vocab_size} is too small; use at least 16 (default {DEFAULT_VOCAB_SIZE})")
    try:
        rows = {split: load_wikitext2(split, args.config, args.data_dir) for split in SPLITS}
    except (FileNotFoundError, ConnectionError, ImportError) as err:
        raise UsageError(str(err)) from err
    print(f"WikiText-2 ({args.config})")
    columns = ("documents", "paragraphs", "sentences", "words", "unk_words")
    print(f"  {'split':<11}" + "".join(f"{c:>12}" for c in columns))
    for split, split_rows in rows.items():
        stats = corpus_stats(split_rows)
        print(f"  {split:<11}" + "".join(f"{stats[c]:>12,}" for c in columns))

    start = time.perf_counter()
    tokenizer = train_tokenizer(_paragraphs(rows["train"]), vocab_size=args.vocab_size,
                                lowercase=not args.cased, show_progress=sys.stderr.isatty())
    seconds = time.perf_counter() - start
    path = save_tokenizer(tokenizer, out)
    valid = _paragraphs(rows["validation"])
    ids = [e.ids for e in tokenizer.encode_batch(valid, add_special_tokens=False)]
    n_tokens = sum(map(len, ids))
    n_unk = sum(x.count(tokenizer.token_to_id(UNK)) for x in ids)
    n_words = sum(len(p.split()) for p in valid)
    print(f"tokenizer: {tokenizer.get_vocab_size():,} pieces trained in {seconds:.1f} s")
    print(f"  validation: {n_tokens / n_words:.3f} pieces per word, {n_unk / n_tokens:.2%} [UNK]")
    print(f"saved {path} and {path.parent / 'vocab.txt'}")


def _train_config(args: argparse.Namespace, saved: TrainConfig | None) -> TrainConfig:
    "The flags given on the command line over the saved config (resume) or the defaults (new run)."
    # unset flags are None (store_true flags False), so only what the user typed overrides the defaults
    given = {name: value for name in TRAIN_FLAGS if (value := getattr(args, name)) is not None and value is not False}
    values = asdict(saved) if saved else {"data_config": args.config}
    if "max_steps" in given or "epochs" in given or not saved:
        values.update(max_steps=None, epochs=None)  # a new length replaces the old one
        if "max_steps" not in given and "epochs" not in given:
            given["max_steps"] = DEFAULT_MAX_STEPS
    return TrainConfig.from_dict({**values, **given})


def pretrain(args: argparse.Namespace) -> None:
    "Pre-train BERT (MLM + NSP) on WikiText-2 into a run folder; with --resume, continue a run."
    import torch

    from bertlib.train import pretrain as pretrain_run

    out = Path(args.output_dir or f"runs/{args.preset}")
    start = time.perf_counter()
    try:
        if args.resume:
            model_config, tokenizer = None, None
            cfg = _train_config(args, load_run(out)[1])
        else:
            cfg = _train_config(args, None)
            tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
            vocab = args.vocab_size or (tokenizer.get_vocab_size() if tokenizer else DEFAULT_VOCAB_SIZE)
            model_config = BertConfig.from_preset(args.preset, vocab_size=vocab)
        # tiny softmax gradients would otherwise fall into the slow denormal range of CPU arithmetic; the setting
        # is process-wide, so it is switched back (to PyTorch's default) when the command is done
        torch.set_flush_denormal(True)
        try:
            records = pretrain_run(out, model_config, cfg, tokenizer=tokenizer, data_dir=args.data_dir,
                                   resume=args.resume)
        finally:
            torch.set_flush_denormal(False)
    except (RunError, ValueError, FileNotFoundError, ConnectionError, ImportError) as err:
        raise UsageError(str(err)) from err
    valid = [r for r in records if r.get("split") == "validation"]
    print(f"run saved in {out}: {records[-1]['step'] if records else 0} steps "
          f"({(time.perf_counter() - start) / 60:.1f} min in this session)")
    if valid:
        shown = ("mlm_loss", "mlm_perplexity", "mlm_accuracy", "nsp_accuracy")
        print(f"validation at step {valid[-1]['step']}: " + ", ".join(f"{k} {valid[-1][k]:.3f}" for k in shown))
    print(f"loss curve: {out / 'loss_curve.png'}")
    print(f"test scores: python -m bertlib evaluate {out} --split test")


def evaluate(args: argparse.Namespace) -> None:
    "Score a run's newest checkpoint on the statically masked validation or test split."
    from bertlib.evaluate import evaluate_run, unigram_baseline
    from bertlib.pretraining_data import wikitext_corpus
    from bertlib.train import evaluation_loader

    try:
        scores = evaluate_run(args.run, args.split, device=args.device, batch_size=args.batch_size,
                              data_dir=args.data_dir)
        if args.baseline:
            _, cfg, tokenizer = load_run(args.run)
            train_ids = wikitext_corpus("train", tokenizer, config=cfg.data_config, data_dir=args.data_dir).ids
            loader = evaluation_loader(args.split, tokenizer, max_seq_len=cfg.max_seq_len, pairing=cfg.pairing,
                                       data_config=cfg.data_config, data_dir=args.data_dir)
            baseline = unigram_baseline(train_ids, loader, tokenizer.get_vocab_size())
            scores.update({f"unigram_{k}": v for k, v in baseline.items()})
    except (RunError, FileNotFoundError, ConnectionError, ImportError) as err:
        raise UsageError(str(err)) from err
    if args.json:
        print(json.dumps(scores))
        return
    print(f"{args.run} on the {args.split} split")
    for key, value in scores.items():
        print(f"  {key:<28}{value:>10.4f}")


def fill_mask(args: argparse.Namespace) -> None:
    "Guess the token behind each [MASK] in a text with a trained run."
    from bertlib.evaluate import fill_mask as guess
    from bertlib.train import load_model

    try:
        model, tokenizer = load_model(args.run)
        guesses = guess(model, tokenizer, args.text, top_k=args.top_k)
    except (RunError, ValueError) as err:
        raise UsageError(str(err)) from err
    if args.json:
        print(json.dumps([[{"token": t, "score": p} for t, p in g] for g in guesses]))
        return
    for i, options in enumerate(guesses, 1):
        print(f"[MASK] {i}: " + "  ".join(f"{token} ({p:.3f})" for token, p in options))


def export_hf(args: argparse.Namespace) -> None:
    "Write a run's newest checkpoint and tokenizer as a folder HF transformers loads (from_pretrained, pipeline)."
    from bertlib.interop import save_pretrained_hf
    from bertlib.train import load_model

    out = Path(args.output)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise UsageError(f"{out} exists and is not empty; pass --overwrite to replace its files, or choose another one")
    try:
        model, tokenizer = load_model(args.run)
        save_pretrained_hf(model, tokenizer, out)
    except (RunError, ValueError) as err:
        raise UsageError(str(err)) from err
    print(f"saved {out}; load it with transformers.AutoModelForMaskedLM.from_pretrained({str(out)!r})")


def info(args: argparse.Namespace) -> None:
    "Describe a run: model, training settings, checkpoints and the latest metrics."
    try:
        model_config, cfg, tokenizer = load_run(args.run)
    except RunError as err:
        raise UsageError(str(err)) from err
    records = read_metrics(Path(args.run) / "metrics.jsonl")
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if r.get("split") == "validation"]
    summary = {"run": str(args.run), "model": model_config.to_dict(), "training": asdict(cfg),
               "vocabulary": tokenizer.get_vocab_size(),
               "checkpoints": [c.name for c in checkpoints(args.run)],
               "last_train": train[-1] if train else None, "last_validation": valid[-1] if valid else None}
    if args.json:
        print(json.dumps(summary))
        return
    m = model_config
    print(f"run {args.run}")
    print(f"  model       {m.num_hidden_layers} layers, hidden {m.hidden_size}, {m.num_attention_heads} heads, "
          f"vocabulary {m.vocab_size:,}, {m.norm_style}-LN")
    length = f"{cfg.max_steps} steps" if cfg.max_steps else f"{cfg.epochs} epochs"
    print(f"  training    {length}, batch {cfg.batch_size}, lr {cfg.lr}, {cfg.schedule} schedule, seed {cfg.seed}")
    print(f"  checkpoints {', '.join(summary['checkpoints']) or 'none yet'}")
    for name, entry in (("last step", summary["last_train"]), ("validation", summary["last_validation"])):
        if entry:
            print(f"  {name:<11} " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in entry.items() if k != "split"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bertlib", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=func.__doc__)
        sub.set_defaults(func=func)
        return sub

    data_dir_help = "local data folder (default: $BERTLIB_DATA_DIR, else the hub)"
    p = command("prepare", prepare, "corpus report and WordPiece tokenizer training")
    p.add_argument("--output-dir", default="runs/tokenizer", help="where tokenizer.json and vocab.txt go")
    p.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="number of word pieces")
    p.add_argument("--config", choices=WIKITEXT_CONFIGS, default="wikitext-2-v1", help="WikiText-2 variant")
    p.add_argument("--data-dir", default=None, help=data_dir_help)
    p.add_argument("--cased", action="store_true", help="keep case and accents")
    p.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer in --output-dir")

    d = TrainConfig(max_steps=1)  # for the defaults shown in --help
    p = command("pretrain", pretrain, "pre-train BERT with MLM + NSP (the main job)")
    p.add_argument("--preset", choices=tuple(PRESETS), default="mini", help="model size (default: mini)")
    p.add_argument("--output-dir", help="the run folder (default: runs/PRESET); must be new unless --resume")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its newest checkpoint")
    p.add_argument("--max-steps", type=int, help=f"optimiser steps (default: {DEFAULT_MAX_STEPS} unless --epochs)")
    p.add_argument("--epochs", type=float, help="train this many passes over the data instead of --max-steps")
    p.add_argument("--batch-size", type=int, help=f"sequences per optimiser step, over all processes ({d.batch_size})")
    p.add_argument("--grad-accum", type=int, help=f"micro-batches per optimiser step ({d.grad_accum})")
    p.add_argument("--max-seq-len", type=int, help=f"tokens per sequence, special tokens included ({d.max_seq_len})")
    p.add_argument("--lr", type=float, help=f"peak learning rate ({d.lr})")
    p.add_argument("--weight-decay", type=float, help=f"AdamW weight decay of the matrices ({d.weight_decay})")
    p.add_argument("--warmup-ratio", type=float, help=f"share of the steps spent warming up ({d.warmup_ratio})")
    p.add_argument("--schedule", choices=SCHEDULES, help=f"learning-rate decay ({d.schedule})")
    p.add_argument("--max-grad-norm", type=float, help=f"gradient clipping ({d.max_grad_norm})")
    p.add_argument("--seed", type=int, help=f"seed of the weights, data order, masks and dropout ({d.seed})")
    p.add_argument("--pairing", choices=get_args(Pairing), help=f"how NSP pairs are made ({d.pairing})")
    p.add_argument("--whole-word-mask", action="store_true", help="mask whole words rather than single pieces")
    p.add_argument("--vocab-size", type=int, help=f"tokenizer and model vocabulary ({DEFAULT_VOCAB_SIZE})")
    p.add_argument("--tokenizer", help="use this tokenizer.json (e.g. from `prepare`) instead of training one")
    p.add_argument("--config", choices=WIKITEXT_CONFIGS, default="wikitext-2-v1", help="WikiText-2 variant")
    p.add_argument("--data-dir", default=None, help=data_dir_help)
    p.add_argument("--device", help="'auto' (a GPU if there is one), 'cpu', 'cuda', 'cuda:1', ... (auto)")
    p.add_argument("--compile", action="store_true", help="compile the model with torch.compile (best on a GPU)")
    p.add_argument("--num-workers", type=int, help="data loader processes (0 on a CPU, 4 with a GPU)")
    p.add_argument("--log-every", type=int, help=f"steps between logged losses ({d.log_every})")
    p.add_argument("--eval-every", type=int, help=f"steps between validations ({d.eval_every})")
    p.add_argument("--eval-batches", type=int, help="validation batches per validation (all)")
    p.add_argument("--save-every", type=int, help=f"steps between checkpoints ({d.save_every})")
    p.add_argument("--keep-checkpoints", type=int, help=f"newest checkpoints kept on disk ({d.keep_checkpoints})")

    p = command("evaluate", evaluate, "score a run on the validation or test split")
    p.add_argument("run", help="the run folder")
    p.add_argument("--split", choices=("validation", "test"), default="validation", help="which split (validation)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--baseline", action="store_true", help="add the unigram-frequency baseline's scores")
    p.add_argument("--batch-size", type=int, default=64, help="sequences per batch (64)")
    p.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda', ... (auto)")
    p.add_argument("--data-dir", default=None, help=data_dir_help)

    p = command("fill-mask", fill_mask, "guess the [MASK] tokens of a text")
    p.add_argument("run", help="the run folder")
    p.add_argument("text", help='text with one or more [MASK], e.g. "the cat sat on the [MASK] ."')
    p.add_argument("--top-k", type=int, default=5, help="guesses per mask (5)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    p = command("export-hf", export_hf, "write a run in HF transformers' format")
    p.add_argument("run", help="the run folder")
    p.add_argument("output", help="the folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace files in a non-empty output folder")

    p = command("info", info, "describe a run")
    p.add_argument("run", help="the run folder")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
