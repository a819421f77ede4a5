"""The `bertlib` command line: `python -m bertlib <command> --help` explains each command.

Written by hand; the training options are made from the fields of `bertlib.train_config`.
"""

import argparse
import json
import sys
import time
import types
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from .config import PRESETS, BertConfig
from .data import SPLITS, WIKITEXT_CONFIGS, corpus_stats, load_wikitext2, wikitext_paragraphs
from .runs import RECIPES, RunError, checkpoints, load_model, load_run, read_metrics
from .task_examples import TASK_NAMES, TASKS
from .tokenizer import DEFAULT_VOCAB_SIZE, UNK, load_tokenizer, save_tokenizer, train_tokenizer
from .train_config import DistilConfig, FinetuneConfig, PretrainConfig

DEFAULT_MAX_STEPS = 4000  # without --max-steps or --epochs: with PretrainConfig's batch of 8, the training tokens
# of the former default (1,000 steps of 32), the budget of the CPU recipe study (experiments/recipe_study)


class UsageError(Exception):
    "A problem the user can fix; printed as one line, exit code 2."


def _field_type(annotation: Any) -> type:
    "The plain type of a config field: `int | None` -> int."
    if get_origin(annotation) in (Union, types.UnionType):
        return next(t for t in get_args(annotation) if t is not type(None))
    return annotation


def add_config_options(parser: argparse.ArgumentParser, config_class: type, exclude: tuple[str, ...] = ()) -> None:
    """One option per field of a config dataclass (`--max-steps` for `max_steps`), typed, with the help text
    and choices of the field's metadata. Options not given stay None, so that only what the user typed
    overrides the defaults or a resumed run's settings."""
    for f in fields(config_class):
        if f.name in exclude:
            continue
        kind = f.metadata.get("parse", _field_type(f.type))
        default = "" if f.default is MISSING or f.default is None else f" ({f.default})"
        if kind is bool:
            typed = {"action": argparse.BooleanOptionalAction}
        else:
            metavar = {int: "N", float: "X"}.get(kind, None if "choices" in f.metadata else "S")
            typed = {"type": kind, "metavar": metavar}
        parser.add_argument("--" + f.name.replace("_", "-"), default=None, help=f.metadata.get("help", "") + default,
                            choices=f.metadata.get("choices"), **typed)


def given_options(args: argparse.Namespace, config_class: type) -> dict[str, Any]:
    "The config fields the user typed on the command line."
    return {f.name: value for f in fields(config_class) if (value := getattr(args, f.name, None)) is not None}


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
    tokenizer = train_tokenizer(wikitext_paragraphs("train", args.config, args.data_dir), vocab_size=args.vocab_size,
                                lowercase=not args.cased, show_progress=sys.stderr.isatty())
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


def _train_config(args: argparse.Namespace, saved: PretrainConfig | DistilConfig | None,
                  kind: type = PretrainConfig) -> PretrainConfig | DistilConfig:
    "The options given on the command line over the saved config (resume) or the defaults (new run) of `kind`."
    given = given_options(args, kind)
    values = saved.to_dict() if saved else {}
    if {"max_steps", "epochs", "time_budget"} & set(given) or not saved:
        values.update(max_steps=None, epochs=None, time_budget=None)  # a new length replaces the old one
        if not {"max_steps", "epochs", "time_budget"} & set(given):
            given["max_steps"] = DEFAULT_MAX_STEPS
    return kind.from_dict({**values, **given})


def _saved_settings(run: Path, kind: type) -> PretrainConfig | DistilConfig:
    "The settings of the run to resume, which the recipe of `kind` must have made."
    saved = load_run(run)[1]
    if type(saved) is not kind:
        raise UsageError(f"{run} was made by `python -m bertlib {RECIPES[type(saved)]}`; resume it with that command")
    return saved


def pretrain(args: argparse.Namespace) -> None:
    """Pre-train BERT (MLM + NSP, or another --objective) on WikiText-2 into a run folder; with --resume, continue
    a run."""
    from .pretrain import pretrain as pretrain_run

    out = Path(args.output_dir or f"runs/{args.preset or 'mini'}")
    start = time.perf_counter()
    try:
        if args.resume:
            model_flags = [f"--{name.replace('_', '-')}" for name in given_options(args, BertConfig)]
            ignored = [flag for flag, value in (("--preset", args.preset), ("--tokenizer", args.tokenizer))
                       if value is not None] + model_flags
            if ignored:
                raise UsageError(f"--resume continues {out} with its own model and tokenizer, so {', '.join(ignored)} "
                                 f"cannot change them; leave them out, or start a new run")
            model_config, tokenizer = None, None
            saved = _saved_settings(out, PretrainConfig)
            cfg = _train_config(args, saved)
            if (cfg.max_steps, cfg.epochs) != (saved.max_steps, saved.epochs):
                print(f"the run's length changes from {_length(saved)} to {_length(cfg)}: the learning-rate "
                      f"schedule is recomputed for the new length, so from here on the run differs from one "
                      f"made that long from the start", file=sys.stderr)
        else:
            cfg = _train_config(args, None)
            tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
            vocab = args.vocab_size or (tokenizer.get_vocab_size() if tokenizer else DEFAULT_VOCAB_SIZE)
            model_config = BertConfig.from_preset(args.preset or "mini", **{**given_options(args, BertConfig),
                                                                            "vocab_size": vocab})
        records = pretrain_run(out, model_config, cfg, tokenizer=tokenizer, data_dir=args.data_dir,
                               resume=args.resume, on_log=_print_event)
    except (RunError, ValueError, FileNotFoundError, ConnectionError, ImportError) as err:
        raise UsageError(str(err)) from err
    _report_pretraining(out, records, start)


def distil(args: argparse.Namespace) -> None:
    """Distil a pre-training run (--teacher) into a student with fewer layers (DistilBERT) on WikiText-2, in a run
    folder; with --resume, continue a run."""
    from .distil import distil as distil_run

    out = Path(args.output_dir or "runs/student")
    start = time.perf_counter()
    try:
        if args.resume:
            saved = _saved_settings(out, DistilConfig)
            if args.teacher not in (None, saved.teacher):
                raise UsageError(f"--resume continues {out}, distilled from {saved.teacher}; leave out --teacher, or "
                                 f"start a new run")
            cfg = _train_config(args, saved, DistilConfig)
        else:
            if not args.teacher:
                raise UsageError("say which run to distil: --teacher RUN_FOLDER (a pre-training run, e.g. "
                                 "models/course-mini)")
            cfg = _train_config(args, None, DistilConfig)
        records = distil_run(out, cfg, data_dir=args.data_dir, resume=args.resume, on_log=_print_event)
    except (RunError, ValueError, FileNotFoundError, ConnectionError, ImportError) as err:
        raise UsageError(str(err)) from err
    _report_pretraining(out, records, start)


def _report_pretraining(out: Path, records: list[dict], start: float) -> None:
    "Say where a pre-training or distillation run was saved, its last validation, and what to look at next."
    valid = _report_saved(out, records, start)
    if valid:
        shown = ("mlm_loss", "mlm_perplexity", "mlm_accuracy", "nsp_accuracy", "rtd_accuracy")  # those the run has
        print(f"validation at step {valid[-1]['step']}: " + ", ".join(f"{k} {valid[-1][k]:.3f}" for k in shown
                                                                   if k in valid[-1]))
    print(f"loss curve: {out / 'loss_curve.png'}")
    print(f"test scores: python -m bertlib evaluate {out} --split test")


def _report_saved(out: Path, records: list[dict], start: float) -> list[dict]:
    "Say where a run was saved and how long this session took; return its validation records."
    print(f"run saved in {out}: {records[-1]['step'] if records else 0} steps "
          f"({(time.perf_counter() - start) / 60:.1f} min in this session)")
    return [r for r in records if r.get("split") == "validation"]


def _print_event(record: dict) -> None:
    "Say what the run decided on its own (a time budget turned into steps, a schedule made longer)."
    if "event" in record:
        timing = (f" ({record['seconds_per_step']:.2f} s a step, {record['seconds_per_validation']:.1f} s a "
                  f"validation)" if "seconds_per_step" in record else "")
        print(f"step {record['step']}: {record['event']}{timing}", file=sys.stderr)


def _length(cfg: PretrainConfig) -> str:
    if cfg.max_steps is not None:
        return f"{cfg.max_steps:,} steps"
    return f"{cfg.epochs:g} epochs" if cfg.epochs is not None else f"{cfg.time_budget:g} s"


def _pretraining_run(run: str, command: str) -> bool:
    "Refuse a fine-tuning run where a command needs the MLM head; say whether the run is ELECTRA's."
    try:
        cfg = load_run(run)[1]
    except RunError as err:
        raise UsageError(str(err)) from err
    if isinstance(cfg, FinetuneConfig):
        raise UsageError(f"{run} is a fine-tuning run ({cfg.task}) without the MLM head that `{command}` needs; use "
                         f"`python -m bertlib predict {run} TEXT`, or give a pre-training run")
    return getattr(cfg, "objective", None) == "electra"


def finetune(args: argparse.Namespace) -> None:
    "Fine-tune a pre-trained encoder on a task into a run folder; with --resume, continue a run."
    from .finetune import finetune as finetune_run

    out = Path(args.output_dir or f"runs/{args.task}")
    given = given_options(args, FinetuneConfig)
    if {"max_steps", "epochs"} & set(given):
        given = {"max_steps": None, "epochs": None, **given}  # one length replaces the other
    start = time.perf_counter()
    try:
        if args.resume:
            saved = load_run(out)[1]
            if not isinstance(saved, FinetuneConfig):
                raise UsageError(f"{out} is a pre-training run; resume it with `python -m bertlib pretrain "
                                 f"--output-dir {out} --resume`")
            if args.source is not None or args.task != saved.task:
                raise UsageError(f"--resume continues {out} ({saved.task} from {saved.source}); leave out --from and "
                                 f"give its task, or start a new run")
            cfg = FinetuneConfig.from_dict({**saved.to_dict(), **given})
        else:
            if not args.source:
                raise UsageError("say which encoder to fine-tune: --from RUN_FOLDER (python -m bertlib pretrain), an "
                                 "HF BERT folder, or a hub id such as google/bert_uncased_L-4_H-256_A-4")
            cfg = FinetuneConfig.from_dict({**given, "source": args.source})
        records = finetune_run(out, cfg, data_dir=args.data_dir, resume=args.resume, on_log=_print_event)
    except (RunError, ValueError, FileNotFoundError, ConnectionError, ImportError) as err:
        raise UsageError(str(err)) from err
    valid = _report_saved(out, records, start)
    if valid:
        from .finetune import SELECTION_METRIC

        metric = SELECTION_METRIC[cfg.task]
        best = max(valid, key=lambda r: r[metric])
        print(f"best validation {metric} {best[metric]:.4f} at step {best['step']} (kept in {out / 'best'}); "
              f"last {valid[-1][metric]:.4f}")
    print(f"try it: python -m bertlib predict {out} " + {"pair": '"TEXT" --pair "TEXT"',
                                                         "span": '"PARAGRAPH" --question "QUESTION"'}.get(
        TASKS[cfg.task].kind, '"TEXT"'))


def predict(args: argparse.Namespace) -> None:
    "What a fine-tuned run says about a text: its class, its entities, or the answer to a question about it."
    from .finetune import predict as run_predict

    try:
        cfg = load_run(args.run)[1]
        if not isinstance(cfg, FinetuneConfig):
            raise UsageError(f"{args.run} is a pre-training run; fine-tune it first (python -m bertlib finetune TASK "
                             f"--from {args.run}), or use fill-mask")
        model, tokenizer = load_model(args.run)
        result = run_predict(model, tokenizer, cfg.task, args.text, pair=args.pair, question=args.question,
                             max_seq_len=cfg.max_seq_len)
    except (RunError, ValueError) as err:
        raise UsageError(str(err)) from err
    if args.json:
        print(json.dumps(result))
    elif "probabilities" in result:
        print("  ".join(f"{name} {p:.3f}" for name, p in sorted(result["probabilities"].items(),
                                                               key=lambda item: -item[1])))
    elif "entities" in result:
        print(" ".join(w if t == "O" else f"{w}/{t}" for w, t in zip(result["words"], result["tags"], strict=True)))
        print("entities: " + (", ".join(f"{text} ({kind})" for kind, text in result["entities"]) or "none"))
    else:
        print(f"answer: {result['answer']!r} (characters {result['start']}-{result['end']})")


def evaluate(args: argparse.Namespace) -> None:
    """Score a run's newest checkpoint on the statically masked validation or test split (an ELECTRA run: its
    replaced-token detection and its generator's masked-LM scores)."""
    from .electra_evaluate import evaluate_electra_run
    from .evaluate import evaluate_run

    if args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size} is not valid; it must be at least 1")
    electra = _pretraining_run(args.run, "evaluate")
    if electra and args.baseline:
        raise UsageError(f"{args.run} is an ELECTRA run; the unigram baseline scores BERT's masked-LM guesses only, "
                         f"so leave out --baseline")
    options = dict(device=args.device, batch_size=args.batch_size, data_dir=args.data_dir)
    try:
        if electra:
            scores = evaluate_electra_run(args.run, args.split, **options)
        else:
            scores = evaluate_run(args.run, args.split, **options, baseline=args.baseline)
    except (RunError, ValueError, FileNotFoundError, ConnectionError, ImportError) as err:
        raise UsageError(str(err)) from err
    if args.json:
        print(json.dumps(scores))
        return
    print(f"{args.run} on the {args.split} split")
    for key, value in scores.items():
        print(f"  {key:<28}{value:>10.4f}")


def fill_mask(args: argparse.Namespace) -> None:
    "Guess the token behind each [MASK] in a text with a trained run (an ELECTRA run guesses with its generator)."
    from .evaluate import fill_mask as guess

    try:
        args.text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise UsageError("the text is not valid UTF-8; pass it in your terminal's UTF-8 encoding") from err
    electra = _pretraining_run(args.run, "fill-mask")
    try:
        model, tokenizer = load_model(args.run)
        guesses = guess(model.generator if electra else model, tokenizer, args.text, top_k=args.top_k)
    except (RunError, ValueError) as err:
        raise UsageError(str(err)) from err
    if args.json:
        print(json.dumps([[{"token": t, "score": p} for t, p in g] for g in guesses]))
        return
    for i, options in enumerate(guesses, 1):
        print(f"[MASK] {i}: " + "  ".join(f"{token} ({p:.3f})" for token, p in options))


def export_hf(args: argparse.Namespace) -> None:
    "Write a run's newest checkpoint and tokenizer as a folder HF transformers loads (from_pretrained, pipeline)."
    from .interop import OWN_CLASSES, hf_class, save_pretrained_hf

    out, run = Path(args.output), Path(args.run)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder; choose a folder to write the model into")
    if run.is_dir() and (out.resolve() == run.resolve() or run.resolve() in out.resolve().parents):
        raise UsageError(f"{out} is the run folder {run} (or inside it), whose files the export would replace; "
                         f"choose another folder")
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise UsageError(f"{out} exists and is not empty; pass --overwrite to replace its files, or choose another one")
    try:
        model, tokenizer = load_model(args.run)
        save_pretrained_hf(model, tokenizer, out)
    except (RunError, ValueError) as err:
        raise UsageError(str(err)) from err
    auto = {"BertForPreTraining": "AutoModelForMaskedLM"}.get(type(model).__name__,
                                                                 type(model).__name__.replace("Bert", "AutoModel"))
    trust = ", trust_remote_code=True" if hf_class(model) in OWN_CLASSES.values() else ""  # its code is in the folder
    print(f"saved {out}; load it with transformers.{auto}.from_pretrained({str(out)!r}{trust})")


def info(args: argparse.Namespace) -> None:
    "Describe a run: model, training settings, checkpoints and the latest metrics."
    try:
        model_config, cfg, tokenizer = load_run(args.run)
    except RunError as err:
        raise UsageError(str(err)) from err
    records = read_metrics(Path(args.run) / "metrics.jsonl")
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if r.get("split") == "validation"]
    summary = {"run": str(args.run), "model": model_config.to_dict(), "training": cfg.to_dict(),
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
    parser = argparse.ArgumentParser(prog="python -m bertlib", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
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

    p = command("pretrain", pretrain, "pre-train BERT with MLM + NSP (the main job), MLM alone, or ELECTRA")
    p.add_argument("--preset", choices=tuple(PRESETS), help="model size (mini)")
    p.add_argument("--output-dir", help="the run folder (default: runs/PRESET); must be new unless --resume")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its newest checkpoint")
    p.add_argument("--tokenizer", help="use this tokenizer.json (e.g. from `prepare`) instead of training one")
    p.add_argument("--data-dir", default=None, help=data_dir_help)
    add_config_options(p.add_argument_group("training (bertlib.train_config.PretrainConfig)"), PretrainConfig)
    model = p.add_argument_group("model (bertlib.config.BertConfig), over the preset's values")
    model.add_argument("--vocab-size", type=int, help=f"tokenizer and model vocabulary ({DEFAULT_VOCAB_SIZE})")
    add_config_options(model, BertConfig, exclude=("vocab_size", "pad_token_id"))

    p = command("distil", distil, "distil a pre-training run into a smaller student (DistilBERT)")
    p.add_argument("--output-dir", help="the run folder (default: runs/student); must be new unless --resume")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its newest checkpoint")
    p.add_argument("--data-dir", default=None, help=data_dir_help)
    add_config_options(p.add_argument_group("distillation (bertlib.train_config.DistilConfig)"), DistilConfig,
                       exclude=("time_budget",))

    p = command("finetune", finetune, "fine-tune a pre-trained encoder on SST-2, RTE, CoNLL-2003 or SQuAD")
    p.add_argument("task", choices=TASK_NAMES, help="the task")
    p.add_argument("--from", dest="source", metavar="RUN_OR_CHECKPOINT",
                   help="the encoder: a bertlib run folder, an HF BERT folder, or a hub id")
    p.add_argument("--output-dir", help="the run folder (default: runs/TASK); must be new unless --resume")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its newest checkpoint")
    p.add_argument("--data-dir", default=None, help=data_dir_help)
    add_config_options(p.add_argument_group("fine-tuning (bertlib.train_config.FinetuneConfig)"), FinetuneConfig,
                       exclude=("task", "source", "time_budget"))

    p = command("predict", predict, "ask a fine-tuned run about a text")
    p.add_argument("run", help="the fine-tuning run folder")
    p.add_argument("text", help="the text (for SQuAD: the paragraph)")
    p.add_argument("--pair", help="the second text of a sentence-pair task (RTE: the hypothesis)")
    p.add_argument("--question", help="the question, for question answering")
    p.add_argument("--json", action="store_true", help="print one JSON object")

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
    """Run one command. Errors a user can cause are one line on stderr and exit code 2; an interrupted run
    saves a checkpoint and exits with 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
    from .trainer import TrainingInterrupted

    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except TrainingInterrupted as stop:
        print(f"{stop}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside training: every file on disk is whole
        print("interrupted", file=sys.stderr)
        return 130
    except (UsageError, RunError, ValueError, OSError, UnicodeError) as err:
        if args.debug:
            raise
        print(f"error: {err}".splitlines()[0], file=sys.stderr)
        return 2
    except Exception as err:  # a bug, not a mistake of the user's: still one line, and how to see more
        if args.debug:
            raise
        print(f"error: unexpected {type(err).__name__}: {err}".splitlines()[0] + " (run with --debug for the "
              "traceback, and please report it)", file=sys.stderr)
        return 1
    return 0
