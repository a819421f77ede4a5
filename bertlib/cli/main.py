"""The `bertlib` command line: `python -m bertlib <command> --help` explains each command. This module parses the
options (those of training are made from the fields of `bertlib.train.settings`) and turns errors into one line and
an exit code; `bertlib.cli.commands` (the commands that make a run) and `bertlib.cli.run_commands` (those that read one)
do the work.

Written by hand. Torch is imported by the commands that need it, so that `--help` is instant.
"""

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator

from ..data.tokenizer import DEFAULT_VOCAB_SIZE
from ..data.wikitext import WIKITEXT_CONFIGS
from ..model.config import PRESETS, BertConfig
from ..tasks.examples import TASK_NAMES
from ..tasks.inputs import INPUT_FORMATS
from ..train.runs import RunError, RunWarning
from ..train.settings import DistilConfig, FinetuneConfig, PretrainConfig
from .commands import UsageError, distil, finetune, prepare, pretrain
from .options import add_config_options
from .run_commands import evaluate, export_hf, fill_mask, info, predict

DESCRIPTION = (
    "BERT built from scratch in PyTorch: train a WordPiece tokenizer (prepare), pre-train, distil or fine-tune a run, "
    "and use one (predict, evaluate, fill-mask, export-hf, info). `python -m bertlib COMMAND --help` explains each "
    "command."
)
DEBUG = "show the full traceback of an error"


def _command(
    commands: argparse._SubParsersAction, name: str, func, help: str, *parents: argparse.ArgumentParser
) -> argparse.ArgumentParser:
    "A command that runs `func`, described by its docstring; --debug may come after it too."
    sub = commands.add_parser(name, help=help, description=func.__doc__, parents=list(parents))
    sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG)  # keeps one given before
    sub.set_defaults(func=func)
    return sub


def _training_command(
    commands: argparse._SubParsersAction,
    name: str,
    func,
    help: str,
    kind: type,
    default_dir: str,
    data: argparse.ArgumentParser,
    exclude: tuple[str, ...],
) -> argparse.ArgumentParser:
    "A command that trains a run folder: --output-dir, --resume, --data-dir and one option per field of `kind`."
    p = _command(commands, name, func, help, data)
    p.add_argument("--output-dir", help=f"the run folder (default: {default_dir}); must be new unless --resume")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its newest checkpoint")
    add_config_options(
        p.add_argument_group(f"{name} settings (bertlib.train.settings.{kind.__name__})"), kind, exclude=exclude
    )
    return p


def _add_making_commands(commands: argparse._SubParsersAction, data: argparse.ArgumentParser) -> None:
    "The commands that make a run folder (or the tokenizer one starts from)."
    p = _command(commands, "prepare", prepare, "corpus report and WordPiece tokenizer training", data)
    p.add_argument("--output-dir", default="runs/tokenizer", help="where tokenizer.json and vocab.txt go")
    p.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="number of word pieces")
    p.add_argument("--config", choices=WIKITEXT_CONFIGS, default="wikitext-2-v1", help="WikiText-2 variant")
    p.add_argument("--cased", action="store_true", help="keep case and accents")
    p.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer in --output-dir")

    p = _training_command(
        commands,
        "pretrain",
        pretrain,
        "pre-train BERT with MLM + NSP (the main job), MLM alone, or ELECTRA",
        PretrainConfig,
        "runs/PRESET",
        data,
        (),
    )
    p.add_argument("--preset", choices=tuple(PRESETS), help="model size (mini)")
    p.add_argument("--tokenizer", help="use this tokenizer.json (e.g. from `prepare`) instead of training one")
    model = p.add_argument_group("model (bertlib.model.config.BertConfig), over the preset's values")
    model.add_argument("--vocab-size", type=int, help=f"tokenizer and model vocabulary ({DEFAULT_VOCAB_SIZE})")
    add_config_options(model, BertConfig, exclude=("vocab_size", "pad_token_id"))
    _training_command(
        commands,
        "distil",
        distil,
        "distil a pre-training run into a smaller student (DistilBERT)",
        DistilConfig,
        "runs/student",
        data,
        ("time_budget",),
    )
    p = _training_command(
        commands,
        "finetune",
        finetune,
        "fine-tune a pre-trained encoder on SST-2, RTE, CoNLL-2003 or SQuAD",
        FinetuneConfig,
        "runs/TASK",
        data,
        ("task", "source", "time_budget"),
    )
    p.add_argument("task", choices=TASK_NAMES, help="the task")
    p.add_argument(
        "--from",
        dest="source",
        metavar="RUN_OR_HF_MODEL",
        help="the encoder: a bertlib run folder (pre-trained: its newest checkpoint; fine-tuned: its "
        "best/), an HF BERT folder, or a hub id",
    )


def _add_reading_commands(commands: argparse._SubParsersAction, data: argparse.ArgumentParser) -> None:
    "The commands that read a run folder."
    p = _command(commands, "predict", predict, "ask a fine-tuned run about a text, or every line of a file")
    p.add_argument("run", help="the fine-tuning run folder")
    p.add_argument("text", nargs="?", help="the text (for SQuAD: the paragraph); - reads it from stdin")
    p.add_argument("--pair", help="the second text of a sentence-pair task (RTE: the hypothesis)")
    p.add_argument("--question", help="the question, for question answering")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    files = p.add_argument_group("a file of inputs, one a line (bertlib.tasks.inputs)")
    files.add_argument(
        "--input",
        metavar="FILE",
        help="predict every line: plain text, or TSV, CSV (with a header) or JSONL with the task's fields "
        "(sst2: sentence; rte: sentence1, sentence2; conll2003: tokens; squad: context, question); with labels "
        "(label, ner_tags, answers) the task's scores are printed",
    )
    files.add_argument("--output", metavar="FILE", help="the JSONL file of the predictions, one per input line")
    files.add_argument("--format", choices=INPUT_FORMATS, help="the input's format (default: by its suffix)")
    files.add_argument("--skip-bad-lines", action="store_true", help="leave out bad lines (say how many) instead")
    files.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    files.add_argument("--batch-size", type=int, default=32, help="inputs per batch, sorted by length (32)")
    p.add_argument(
        "--newest",
        action="store_true",
        help="use the run's newest checkpoint, not its best validation's (best/, the default)",
    )

    p = _command(commands, "evaluate", evaluate, "score a run on the validation or test split", data)
    p.add_argument("run", help="the run folder")
    p.add_argument("--split", choices=("validation", "test"), default="validation", help="which split (validation)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--baseline", action="store_true", help="add the unigram-frequency baseline's scores")
    p.add_argument("--batch-size", type=int, default=64, help="sequences per batch (64)")
    p.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda', ... (auto)")

    p = _command(commands, "fill-mask", fill_mask, "guess the [MASK] tokens of a text")
    p.add_argument("run", help="the run folder")
    p.add_argument("text", help='text with one or more [MASK], e.g. "the cat sat on the [MASK] ."')
    p.add_argument("--top-k", type=int, default=5, help="guesses per mask (5)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    p = _command(commands, "export-hf", export_hf, "write a run in HF transformers' format")
    p.add_argument("run", help="the run folder")
    p.add_argument("output", help="the folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export in the output folder, whole")
    p.add_argument(
        "--newest",
        action="store_true",
        help="a fine-tuning run: export its newest checkpoint, not its best validation's (best/, the default)",
    )

    p = _command(commands, "info", info, "describe a run")
    p.add_argument("run", help="the run folder")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    "The parser of `python -m bertlib`: one subcommand per command, each calling its function with the options."
    parser = argparse.ArgumentParser(prog="python -m bertlib", description=DESCRIPTION)
    parser.add_argument("--debug", action="store_true", help=DEBUG)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument("--data-dir", default=None, help="local data folder (default: $BERTLIB_DATA_DIR, else the hub)")
    _add_making_commands(commands, data)
    _add_reading_commands(commands, data)
    return parser


@contextlib.contextmanager
def _run_warnings_in_one_line() -> Iterator[None]:
    "Show a `RunWarning` as one line on stderr, as errors are; other warnings as before."
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, *where) -> None:
            if issubclass(category, RunWarning):
                print(_one_line(f"warning: {message}"), file=sys.stderr)
            else:
                shown(message, category, *where)

        warnings.showwarning = show
        yield


def _one_line(message: str) -> str:
    "`message` on one line: a newline inside it (in a path, say) shown as \\n, so that nothing after it is lost."
    return message.strip().replace("\r", "\\r").replace("\n", "\\n")


def main(argv: list[str] | None = None) -> int:
    """Run one command. Errors a user can cause are one line on stderr and exit code 2; an interrupted run
    saves a checkpoint and exits with 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
    args = build_parser().parse_args(argv)
    from ..utils.processes import TrainingInterrupted  # after parsing: `--help` needs no torch

    try:
        with _run_warnings_in_one_line():
            args.func(args)
    except TrainingInterrupted as stop:
        print(f"{stop}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside training: every file on disk is whole
        print("interrupted", file=sys.stderr)
        return 130
    except (UsageError, RunError, ValueError, OSError, UnicodeError, ImportError) as err:  # the user can fix these
        if args.debug:
            raise
        print(_one_line(f"error: {err}"), file=sys.stderr)
        return 2
    except Exception as err:  # a bug, not a mistake of the user's: still one line, and how to see more
        if args.debug:
            raise
        print(
            _one_line(f"error: unexpected {type(err).__name__}: {err}") + " (run with --debug for the traceback, and "
            "please report it)",
            file=sys.stderr,
        )
        return 1
    return 0
