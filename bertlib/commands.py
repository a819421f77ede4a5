"""What each command of the command line does (`bertlib.cli` parses the options and maps errors to exit codes):
prepare a tokenizer; pre-train, distil or fine-tune a run folder; predict, evaluate, fill masks, export or describe a
run. A problem the user can fix raises `UsageError`.

Written by hand. Torch is imported by the commands that need it, so that `--help` is instant.
"""

__all__ = ["UsageError", "prepare", "pretrain", "distil", "finetune", "predict", "evaluate", "fill_mask", "export_hf",
           "info"]

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from .config import BertConfig
from .data import SPLITS, corpus_stats, load_wikitext2, wikitext_paragraphs
from .options import given_options
from .runs import RECIPES, is_run_folder, load_run, read_metrics
from .task_examples import TASKS
from .tokenizer import DEFAULT_VOCAB_SIZE, UNK, load_tokenizer, save_tokenizer, train_tokenizer
from .train_config import DistilConfig, FinetuneConfig, PretrainConfig

LENGTHS = ("max_steps", "epochs", "time_budget")  # one of them gives a run's length


class UsageError(Exception):
    "A problem the user can fix; printed as one line, exit code 2."


def prepare(args: argparse.Namespace) -> None:
    "Report on the corpus, train the WordPiece tokenizer on the train split and save it."
    out = Path(args.output_dir)
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


def _settings(args: argparse.Namespace, out: Path, kind: type) -> tuple[Any, Any]:
    """The settings of the run to make or resume, and a resumed run's saved ones (else None): the options typed over
    the saved settings (a new length replaces the old one) or over `kind`'s defaults."""
    given = given_options(args, kind)
    if set(LENGTHS) & set(given):
        given = {**dict.fromkeys(LENGTHS), **given}
    if not args.resume:
        return kind.from_dict(given), None
    saved = load_run(out)[1]
    if type(saved) is not kind:
        raise UsageError(f"{out} was made by `python -m bertlib {RECIPES[type(saved)]}`; resume it with that command")
    return kind.from_dict({**saved.to_dict(), **given}), saved


def pretrain(args: argparse.Namespace) -> None:
    """Pre-train BERT (MLM + NSP, or another --objective) on WikiText-2 into a run folder; with --resume, continue
    a run."""
    from .pretraining import pretrain as run_pretraining

    out, start = _output_dir(args, f"runs/{args.preset or 'mini'}"), time.perf_counter()
    model_config, tokenizer = None, None
    if args.resume:
        ignored = [flag for flag, value in (("--preset", args.preset), ("--tokenizer", args.tokenizer))
                   if value is not None] + [f"--{name.replace('_', '-')}" for name in given_options(args, BertConfig)]
        if ignored:
            raise UsageError(f"--resume continues {out} with its own model and tokenizer, so {', '.join(ignored)} "
                             f"cannot change them; leave them out, or start a new run")
        cfg = _settings(args, out, PretrainConfig)[0]
    elif _no_choices(args):
        model_config, cfg = _default_recipe()
    else:
        tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
        vocab = args.vocab_size or (tokenizer.get_vocab_size() if tokenizer else DEFAULT_VOCAB_SIZE)
        model_config = BertConfig.from_preset(args.preset or "mini", **{**given_options(args, BertConfig),
                                                                        "vocab_size": vocab})
        cfg = _settings(args, out, PretrainConfig)[0]
    records = run_pretraining(out, model_config, cfg, tokenizer=tokenizer, data_dir=args.data_dir,
                              resume=args.resume, on_log=_print_event)
    _report_pretraining(out, records, start, args.data_dir)


def _no_choices(args: argparse.Namespace) -> bool:
    "Whether the user chose nothing about the model or its training (only where the run goes, and the data)."
    chosen = given_options(args, PretrainConfig) | given_options(args, BertConfig)
    return not chosen and args.preset is None and args.tokenizer is None and args.vocab_size is None


def _default_recipe() -> tuple[BertConfig, PretrainConfig]:
    "What `python -m bertlib pretrain` trains when told nothing: the course model's recipe for this machine, said."
    import torch

    from .course import course_configs

    gpu = torch.cuda.is_available()
    model_config, cfg = course_configs(quick=False, gpu=gpu)
    if gpu:
        print(f"recipe: the course model's, since there is a GPU ({torch.cuda.get_device_name(0)}): mini, "
              f"{cfg.epochs:g} epochs of {cfg.batch_size}, {cfg.max_seq_len} tokens then {cfg.long_seq_len} for the "
              f"last {cfg.long_share:.0%} of the steps, {cfg.mlm_probability:.0%} masked; any option chooses your own")
    else:
        print(f"recipe: no GPU, so the CPU's: mini, {cfg.max_steps:,} steps of {cfg.batch_size} sequences of "
              f"{cfg.max_seq_len} tokens, {cfg.mlm_probability:.0%} masked (the course model's recipe needs a GPU); "
              f"any option chooses your own")
    return model_config, cfg


def distil(args: argparse.Namespace) -> None:
    """Distil a pre-training run (--teacher) into a student with fewer layers (DistilBERT) on WikiText-2, in a run
    folder; with --resume, continue a run."""
    from .distillation import distil as run_distillation

    out, start = _output_dir(args, "runs/student"), time.perf_counter()
    if not args.resume and not args.teacher:
        raise UsageError("say which run to distil: --teacher RUN_FOLDER (a pre-training run, e.g. models/course-mini)")
    cfg = _settings(args, out, DistilConfig)[0]  # on --resume, --teacher may only say where a moved teacher is now
    records = run_distillation(out, cfg, data_dir=args.data_dir, resume=args.resume, on_log=_print_event)
    _report_pretraining(out, records, start, args.data_dir)


def finetune(args: argparse.Namespace) -> None:
    "Fine-tune a pre-trained encoder on a task into a run folder; with --resume, continue a run."
    from .finetuning import SELECTION_METRIC, best_validation
    from .finetuning import finetune as run_finetuning

    out, start = _output_dir(args, f"runs/{args.task}"), time.perf_counter()
    if not args.resume and not args.source:
        raise UsageError("say which encoder to fine-tune: --from RUN_FOLDER (python -m bertlib pretrain), an HF BERT "
                         "folder, or a hub id such as google/bert_uncased_L-4_H-256_A-4")
    cfg, saved = _settings(args, out, FinetuneConfig)
    if saved and args.task != saved.task:
        raise UsageError(f"--resume continues {out}, which fine-tunes {saved.task}, not {args.task}; give its task, "
                         f"or start a new run")
    records = run_finetuning(out, cfg, data_dir=args.data_dir, resume=args.resume, on_log=_print_event)
    valid = _report_saved(out, records, start)
    metric, best = SELECTION_METRIC[cfg.task], best_validation(out)
    if best is not None:  # what best/ holds, which predict and export-hf read
        print(f"best validation {metric} {best['scores'][metric]:.4f} at step {best['step']} (kept in {out / 'best'})"
              + (f"; last {valid[-1][metric]:.4f}" if valid else ""))
    elif valid:
        print(f"{out / 'best'} is missing: no validation since it was lost beat it; predict and export-hf need "
              f"--newest to read the newest checkpoint instead", file=sys.stderr)
    usage = {"pair": '"TEXT" --pair "TEXT"', "span": '"PARAGRAPH" --question "QUESTION"'}.get(TASKS[cfg.task].kind,
                                                                                                 '"TEXT"')
    print(f"try it: python -m bertlib predict {out} {usage}")


def _output_dir(args: argparse.Namespace, default: str) -> Path:
    "The run folder a training command writes: --output-dir, else `default`; an empty name is refused."
    if args.output_dir is not None and not args.output_dir.strip():
        raise UsageError("--output-dir is empty; give a folder, or leave the option out to use " + default)
    return Path(default if args.output_dir is None else args.output_dir)


def _report_pretraining(out: Path, records: list[dict], start: float, data_dir: str | None) -> None:
    """Say where a pre-training or distillation run was saved, its last validation (a BERT's beside the unigram
    baseline, with its guesses for two sentences and whether it is on the plateau), and what to look at next."""
    valid = _report_saved(out, records, start)
    if valid and "rtd_accuracy" not in valid[-1]:
        from .run_report import run_report

        print("\n".join(run_report(out, valid[-1], data_dir)))
    elif valid:  # ELECTRA's: its discriminator's scores
        shown = ("mlm_loss", "mlm_perplexity", "mlm_accuracy", "rtd_accuracy")
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
        where = f"step {record['step']}: " if "step" in record else ""  # the run folder's own events have no step
        print(f"{where}{record['event']}{timing}", file=sys.stderr)


def _pretraining_run(run: str, command: str) -> bool:
    "Refuse a fine-tuning run where a command needs the MLM head; say whether the run is ELECTRA's."
    cfg = load_run(run)[1]
    if isinstance(cfg, FinetuneConfig):
        raise UsageError(f"{run} is a fine-tuning run ({cfg.task}) without the MLM head that `{command}` needs; use "
                         f"`python -m bertlib predict {run} TEXT`, or give a pre-training run")
    return getattr(cfg, "objective", None) == "electra"


def _check_utf8(*texts: str | None) -> None:
    for text in texts:
        try:
            (text or "").encode("utf-8")
        except UnicodeEncodeError as err:
            raise UsageError("the text is not valid UTF-8; pass it in your terminal's UTF-8 encoding") from err


def _finite(value: Any) -> Any:
    "`value` with every float that is not finite (a perplexity that overflowed) as None, which JSON can say."
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return [_finite(v) for v in value] if isinstance(value, list | tuple) else value


def _print_json(value: Any) -> None:
    "Print `value` as one line of valid JSON: no NaN or Infinity, which JSON does not have."
    print(json.dumps(_finite(value), allow_nan=False))


def predict(args: argparse.Namespace) -> None:
    "What a fine-tuned run says about a text: its class, its entities, or the answer to a question about it."
    from .finetuning import predict as run_predict

    _check_utf8(args.text, args.pair, args.question)
    cfg = load_run(args.run)[1]
    if not isinstance(cfg, FinetuneConfig):
        raise UsageError(f"{args.run} is a pre-training run; fine-tune it first (python -m bertlib finetune TASK "
                         f"--from {args.run}), or use fill-mask")
    model, tokenizer = _load(args)
    result = run_predict(model, tokenizer, cfg.task, args.text, pair=args.pair, question=args.question,
                         max_seq_len=cfg.max_seq_len, doc_stride=cfg.doc_stride, max_query_len=cfg.max_query_len)
    if args.json:
        _print_json(result)
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
    if electra:
        scores = evaluate_electra_run(args.run, args.split, **options)
    else:
        scores = evaluate_run(args.run, args.split, **options, baseline=args.baseline)
    if args.json:
        _print_json(scores)
        return
    print(f"{args.run} on the {args.split} split")
    for key, value in scores.items():
        print(f"  {key:<28}{value:>10.4f}")


def fill_mask(args: argparse.Namespace) -> None:
    "Guess the token behind each [MASK] in a text with a trained run (an ELECTRA run guesses with its generator)."
    from .evaluate import fill_mask as guess
    from .model_factory import load_model

    _check_utf8(args.text)
    electra = _pretraining_run(args.run, "fill-mask")
    model, tokenizer = load_model(args.run)
    guesses = guess(model.generator if electra else model, tokenizer, args.text, top_k=args.top_k)
    if args.json:
        _print_json([[{"token": t, "score": p} for t, p in g] for g in guesses])
        return
    for i, options in enumerate(guesses, 1):
        print(f"[MASK] {i}: " + "  ".join(f"{token} ({p:.3f})" for token, p in options))


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    "The model and tokenizer a command reads: a fine-tuning run's best/, or with --newest (said) its newest checkpoint."
    from .model_factory import load_model, run_checkpoint

    if args.newest:
        print(f"using {run_checkpoint(args.run, load_run(args.run)[1], newest=True)} (--newest)", file=sys.stderr)
    return load_model(args.run, newest=args.newest)


def export_hf(args: argparse.Namespace) -> None:
    """Write a run as a folder HF transformers loads (from_pretrained, pipeline): a fine-tuning run's best validation
    (best/; --newest: its newest checkpoint), a pre-training run's newest checkpoint, and the tokenizer, whose
    model_max_length is the length the run trained at."""
    from .hf_folders import save_pretrained_hf
    from .interop import OWN_CLASSES, hf_class

    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder; choose a folder to write the model into")
    inside = next((p for p in (out.resolve(), *out.resolve().parents) if is_run_folder(p)), None)
    if inside is not None:
        raise UsageError(f"{out} is, or is inside, the bertlib run folder {inside}, whose files an export could "
                         f"replace; choose a folder outside any run")
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise UsageError(f"{out} exists and is not empty; pass --overwrite to replace its files, or choose another one")
    cfg = load_run(args.run)[1]
    model, tokenizer = _load(args)
    save_pretrained_hf(model, tokenizer, out, model_max_length=getattr(cfg, "long_seq_len", None) or cfg.max_seq_len)
    auto = {"BertForPreTraining": "AutoModelForMaskedLM"}.get(type(model).__name__,
                                                                 type(model).__name__.replace("Bert", "AutoModel"))
    trust = ", trust_remote_code=True" if hf_class(model) in OWN_CLASSES.values() else ""  # its code is in the folder
    print(f"saved {out}; load it with transformers.{auto}.from_pretrained({str(out)!r}{trust})")


def info(args: argparse.Namespace) -> None:
    """Describe a run: model, training settings (a fine-tuning run: its task, encoder and best validation),
    checkpoints and the latest metrics."""
    from .checkpoints import checkpoints
    from .finetuning import best_validation

    model_config, cfg, tokenizer = load_run(args.run)
    records = read_metrics(Path(args.run) / "metrics.jsonl")
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if r.get("split") == "validation"]
    summary = {"run": str(args.run), "recipe": RECIPES[type(cfg)], "model": model_config.to_dict(),
               "training": cfg.to_dict(), "vocabulary": tokenizer.get_vocab_size(),
               "checkpoints": [c.name for c in checkpoints(args.run)],
               "last_train": train[-1] if train else None, "last_validation": valid[-1] if valid else None}
    if isinstance(cfg, FinetuneConfig):
        best = best_validation(args.run)
        summary["best"] = None if best is None else {"step": best["step"], **{
            k: v for k, v in best["scores"].items() if k not in ("step", "tokens", "train_seconds")}}
    if args.json:
        _print_json(summary)
        return
    m = model_config
    print(f"run {args.run}")
    print(f"  model       {m.num_hidden_layers} layers, hidden {m.hidden_size}, {m.num_attention_heads} heads, "
          f"vocabulary {m.vocab_size:,}, {m.norm_style}-LN")
    length = f"{cfg.max_steps} steps" if cfg.max_steps else f"{cfg.epochs} epochs"
    print(f"  training    {length}, batch {cfg.batch_size}, lr {cfg.lr}, {cfg.schedule} schedule, seed {cfg.seed}")
    if isinstance(cfg, FinetuneConfig):
        best = summary["best"]
        scores = ", ".join(f"{k} {v:.4g}" for k, v in (best or {}).items() if k != "step")
        kept = f"step {best['step']}, {scores}" if best else "missing (predict and export-hf need --newest)"
        print(f"  task        {cfg.task}, from {cfg.source} ({cfg.init} weights)")
        print(f"  best/       {kept}")
    print(f"  checkpoints {', '.join(summary['checkpoints']) or 'none yet'}")
    for name, entry in (("last step", summary["last_train"]), ("validation", summary["last_validation"])):
        if entry:
            print(f"  {name:<11} " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in entry.items() if k != "split"))
