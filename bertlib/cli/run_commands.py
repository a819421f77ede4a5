"""The commands that read a run folder (`bertlib.cli.main` parses the options and maps errors to exit codes): predict,
evaluate, fill masks, export or describe a run. A problem the user can fix raises `bertlib.cli.commands.UsageError`.

Written by hand. Torch is imported by the commands that need it, so that `--help` is instant.
"""

__all__ = ["predict", "evaluate", "fill_mask", "export_hf", "info"]

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..train.runs import RECIPES, check_outside_runs, load_run, no_room_error, read_metrics
from ..train.settings import objective_of
from ..utils.environment import command_line
from ..utils.files import no_room
from .commands import UsageError


def _pretraining_run(run: str, command: str) -> bool:
    "Refuse a fine-tuning run where a command needs the MLM head; say whether the run is ELECTRA's."
    cfg = load_run(run)[1]
    if objective_of(cfg) == "finetune":
        raise UsageError(
            f"{run} is a fine-tuning run ({cfg.task}) without the MLM head that `{command}` needs; use "
            f"{command_line('predict', Path(run))} TEXT, or give a pre-training run"
        )
    return objective_of(cfg) == "electra"


def _check_utf8(*texts: str | None) -> None:
    for text in texts:
        try:
            (text or "").encode("utf-8")
        except UnicodeEncodeError as err:
            raise UsageError("the text is not valid UTF-8; pass it in your terminal's UTF-8 encoding") from err


def _stdin_text() -> str:
    "All of stdin, the text of `predict RUN -`."
    try:
        return sys.stdin.read()
    except UnicodeDecodeError as err:
        raise UsageError(
            f"stdin is not UTF-8 text ({err.reason} at byte {err.start}); pipe UTF-8 text into it"
        ) from err


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


def _finetuning_run(run: str) -> Any:
    "A fine-tuning run's settings; a pre-training run is refused with what to do instead."
    cfg = load_run(run)[1]
    if objective_of(cfg) != "finetune":
        finetune = command_line("finetune", "TASK", "--from", Path(run))
        raise UsageError(f"{run} is a pre-training run; fine-tune it first ({finetune}), or use fill-mask")
    return cfg


def predict(args: argparse.Namespace) -> None:
    """What a fine-tuned run says about a text: its class, its entities, or the answer to a question about it; or,
    with --input and --output, about every line of a file (scored when the lines hold labels)."""
    from ..recipes.predict import predict as run_predict

    if (args.text is None) == (args.input is None):
        raise UsageError("give the TEXT (- reads it from stdin), or --input FILE --output FILE; not both")
    if args.input is not None:
        _predict_file(args)
        return
    if args.text == "-":
        args.text = _stdin_text()
    _check_utf8(args.text, args.pair, args.question)
    cfg = _finetuning_run(args.run)
    model, tokenizer = _load(args)
    result = run_predict(
        model,
        tokenizer,
        cfg.task,
        args.text,
        pair=args.pair,
        question=args.question,
        max_seq_len=cfg.max_seq_len,
        doc_stride=cfg.doc_stride,
        max_query_len=cfg.max_query_len,
    )
    if args.json:
        _print_json(result)
    elif "probabilities" in result:
        print(
            "  ".join(
                f"{name} {p:.3f}" for name, p in sorted(result["probabilities"].items(), key=lambda item: -item[1])
            )
        )
    elif "entities" in result:
        print(" ".join(w if t == "O" else f"{w}/{t}" for w, t in zip(result["words"], result["tags"], strict=True)))
        print("entities: " + (", ".join(f"{text} ({kind})" for kind, text in result["entities"]) or "none"))
    else:
        print(f"answer: {result['answer']!r} (characters {result['start']}-{result['end']})")


def _check_output(source: Path, out: Path, overwrite: bool) -> None:
    "Refuse an --output that would lose something (the input, a file not replaced on purpose) or cannot be written."
    if out.is_dir():
        raise UsageError(f"--output {out} is a folder; give the name of the JSONL file to write")
    if out.exists() and out.resolve() == source.resolve():
        raise UsageError(f"--output {out} is the input file; write the predictions to another file")
    if out.exists() and not overwrite:
        raise UsageError(f"{out} exists; pass --overwrite to replace it, or choose another file")
    if not out.parent.is_dir():
        raise UsageError(f"the folder of --output {out} does not exist; create it, or write elsewhere")
    check_outside_runs(out, "predict's output", below=False)


def _predict_file(args: argparse.Namespace) -> None:
    "`predict --input FILE --output FILE`: every line's answer as JSONL, written whole or not at all, and the scores."
    from ..recipes.predict import predict_file
    from ..utils.files import atomic_write

    if args.pair is not None or args.question is not None:
        raise UsageError("--pair and --question go with one TEXT; with --input, each line holds its own")
    if args.output is None:
        raise UsageError("--input needs --output FILE, the JSONL file the predictions go to")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size} is not valid; it must be at least 1")
    source, out = Path(args.input), Path(args.output)
    if not source.is_file():
        raise UsageError(f"--input {source}: no such file")
    _check_output(source, out, args.overwrite)
    cfg = _finetuning_run(args.run)
    model, tokenizer = _load(args)
    records, scores, bad = predict_file(
        model,
        tokenizer,
        cfg.task,
        source,
        args.format,
        skip_bad=args.skip_bad_lines,
        max_seq_len=cfg.max_seq_len,
        doc_stride=cfg.doc_stride,
        max_query_len=cfg.max_query_len,
        batch_size=args.batch_size,
        progress=True,
    )
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        print(
            f"warning: skipped {len(bad)} bad line{'s' * (len(bad) > 1)} of {source}: {bad[0]}{more}", file=sys.stderr
        )
    lines = "".join(json.dumps(_finite(r), ensure_ascii=False, allow_nan=False) + "\n" for r in records)
    try:
        atomic_write(out, lines)
    except OSError as err:
        kind = no_room(err, out.parent)
        if kind is None:
            raise
        raise no_room_error(kind, err, out, "then predict again") from err
    if args.json:
        _print_json({"output": str(out), "predictions": len(records), "skipped": len(bad), "scores": scores})
        return
    print(f"wrote {len(records):,} predictions to {out}" + (f", skipped {len(bad)} bad lines" if bad else ""))
    if scores is not None:
        print(f"{cfg.task} scores on the {scores['labelled']:,} labelled lines")
        for key, value in scores.items():
            if isinstance(value, float):
                print(f"  {key:<16}{value:>10.4f}")


def evaluate(args: argparse.Namespace) -> None:
    """Score a run's newest checkpoint on the statically masked validation or test split (an ELECTRA run: its
    replaced-token detection and its generator's masked-LM scores)."""
    from ..evaluation.electra import evaluate_electra_run
    from ..evaluation.scores import evaluate_run

    if args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size} is not valid; it must be at least 1")
    electra = _pretraining_run(args.run, "evaluate")
    if electra and args.baseline:
        raise UsageError(
            f"{args.run} is an ELECTRA run; the unigram baseline scores BERT's masked-LM guesses only, "
            f"so leave out --baseline"
        )
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
    from ..evaluation.scores import fill_mask as guess
    from ..train.factory import load_model

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
    from ..train.factory import load_model, run_checkpoint

    if args.newest:
        print(f"using {run_checkpoint(args.run, load_run(args.run)[1], newest=True)} (--newest)", file=sys.stderr)
    return load_model(args.run, newest=args.newest)


def export_hf(args: argparse.Namespace) -> None:
    """Write a run as a folder HF transformers loads (from_pretrained, pipeline): a fine-tuning run's best validation
    (best/; --newest: its newest checkpoint), a pre-training run's newest checkpoint, and the tokenizer, whose
    model_max_length is the length the run trained at."""
    from ..hf.folders import is_hf_folder, save_pretrained_hf
    from ..hf.interop import OWN_CLASSES, hf_class

    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder; choose a folder to write the model into")
    # an export is replaced whole (--overwrite), which would take along a run inside it
    check_outside_runs(out, "an export", below=is_hf_folder(out))
    if out.exists() and any(out.iterdir()):
        if not args.overwrite:
            raise UsageError(
                f"{out} exists and is not empty; pass --overwrite to replace the export in it, or choose another one"
            )
        if not is_hf_folder(out):
            raise UsageError(
                f"{out} holds files other than an HF export (no config.json with a model_type), which --overwrite "
                f"would delete, since it replaces an export whole; choose a new or empty folder"
            )
    cfg = load_run(args.run)[1]
    model, tokenizer = _load(args)
    try:
        save_pretrained_hf(
            model, tokenizer, out, model_max_length=getattr(cfg, "long_seq_len", None) or cfg.max_seq_len
        )
    except Exception as err:  # a writer's own error may be all that says it found no room (safetensors')
        kind = no_room(err, out.parent)
        if kind is None:
            raise
        raise no_room_error(kind, err, out, "then export again") from err
    auto = {"BertForPreTraining": "AutoModelForMaskedLM"}.get(
        type(model).__name__, type(model).__name__.replace("Bert", "AutoModel")
    )
    trust = ", trust_remote_code=True" if hf_class(model) in OWN_CLASSES.values() else ""  # its code is in the folder
    print(f"saved {out}; load it with transformers.{auto}.from_pretrained({str(out)!r}{trust})")


def info(args: argparse.Namespace) -> None:
    """Describe a run: model, training settings (a fine-tuning run: its task, encoder and best validation),
    checkpoints and the latest metrics."""
    from ..train.checkpoints import best_validation, checkpoints, incomplete_checkpoints

    model_config, cfg, tokenizer = load_run(args.run)
    records = read_metrics(Path(args.run) / "metrics.jsonl")
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if r.get("split") == "validation"]
    summary = {
        "run": str(args.run),
        "recipe": RECIPES[type(cfg)],
        "model": model_config.to_dict(),
        "training": cfg.to_dict(),
        "vocabulary": tokenizer.get_vocab_size(),
        "checkpoints": [c.name for c in checkpoints(args.run)],
        "incomplete_checkpoints": {p.name: missing for p, missing in incomplete_checkpoints(args.run).items()},
        "last_train": train[-1] if train else None,
        "last_validation": valid[-1] if valid else None,
    }
    if objective_of(cfg) == "finetune":
        best = best_validation(args.run)
        summary["best"] = (
            None
            if best is None
            else {
                "step": best["step"],
                **{k: v for k, v in best["scores"].items() if k not in ("step", "tokens", "train_seconds")},
            }
        )
    if args.json:
        _print_json(summary)
        return
    m = model_config
    print(f"run {args.run}")
    print(
        f"  model       {m.num_hidden_layers} layers, hidden {m.hidden_size}, {m.num_attention_heads} heads, "
        f"vocabulary {m.vocab_size:,}, {m.norm_style}-LN"
    )
    length = f"{cfg.max_steps} steps" if cfg.max_steps else f"{cfg.epochs} epochs"
    print(f"  training    {length}, batch {cfg.batch_size}, lr {cfg.lr}, {cfg.schedule} schedule, seed {cfg.seed}")
    if objective_of(cfg) == "finetune":
        best = summary["best"]
        scores = ", ".join(f"{k} {v:.4g}" for k, v in (best or {}).items() if k != "step")
        missing = "missing (predict and export-hf need --newest)" if summary["checkpoints"] else "none yet"
        kept = f"step {best['step']}, {scores}" if best else missing
        print(f"  task        {cfg.task}, from {cfg.source} ({cfg.init} weights)")
        print(f"  best/       {kept}")
    incomplete = [
        f"{name} incomplete ({', '.join(missing)} missing)"
        for name, missing in summary["incomplete_checkpoints"].items()
    ]
    print(f"  checkpoints {', '.join(summary['checkpoints'] + incomplete) or 'none yet'}")
    for name, entry in (("last step", summary["last_train"]), ("validation", summary["last_validation"])):
        if entry:
            print(
                f"  {name:<11} "
                + ", ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in entry.items() if k != "split"
                )
            )
