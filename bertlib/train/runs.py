"""Run folders on disk: the configuration, the tokenizer and `metrics.jsonl` of a training run, written so that a
crash never leaves a broken file, and read back with clear errors (`RunError`; `NonFiniteLoss` when a run meets a
loss, gradient or weight that is not finite). The checkpoints inside are `bertlib.train.checkpoints`'.

    runs/<name>/
      config.json              {"format": 1, "model": BertConfig, "training": PretrainConfig, "data": {...},
                                "tokenizer": {"sha256": ...}}
                               (a fine-tuning run: "recipe": "finetune" and a FinetuneConfig; a distilled
                               student: "recipe": "distil" and a DistilConfig; "data": what it learns from;
                               "tokenizer": the fingerprint of its tokenizer.json, checked by every reader)
      tokenizer.json, vocab.txt
      metrics.jsonl            one JSON object per logged step or validation
      loss_curve.png           (`bertlib.viz.attention.plot_metrics`)
      checkpoints/step-0001000/   (`bertlib.train.checkpoints`)
      best/checkpoints/step-0000300/   a fine-tuning run's best validation so far

A run never holds another command's output (`check_outside_runs`): a run's writer replaces and deletes folders of
its own, which would take a run inside with them, and a tokenizer written into a run would change what its model
reads. A run whose tokenizer was replaced all the same is refused by every reader (`read_run`). How a run is made and
resumed is `bertlib.train.lifecycle`'s.

Written by hand: production plumbing that notebook 07 uses but does not show in full. It imports no torch.
"""

__all__ = [
    "RUN_FORMAT",
    "RECIPES",
    "RunError",
    "RunWarning",
    "NonFiniteLoss",
    "read_metrics",
    "write_metrics",
    "is_run_folder",
    "check_outside_runs",
    "no_room_error",
    "writing_into",
    "resume_command",
    "tokenizer_fingerprint",
    "write_run_config",
    "create_run",
    "check_vocabulary",
    "load_run",
    "read_run",
    "SavedRun",
    "trained_length",
]

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tokenizers import Tokenizer

from ..data.tokenizer import MASK, load_tokenizer, save_tokenizer
from ..model.config import BertConfig
from ..utils.environment import command_line
from ..utils.files import atomic_write, fsync_dir, no_room, no_room_reason
from .settings import DistilConfig, FinetuneConfig, PretrainConfig

RunConfig = PretrainConfig | FinetuneConfig | DistilConfig
RECIPES = {PretrainConfig: "pretrain", FinetuneConfig: "finetune", DistilConfig: "distil"}  # the command of each

RUN_FORMAT = 1


class RunError(Exception):
    "A problem with a run folder that the user can fix; the message says how."


class RunWarning(UserWarning):
    "Something about a run that a command goes on despite, and says in one line (an incomplete newest checkpoint)."


def read_metrics(path: str | os.PathLike) -> list[dict]:
    "The records of a `metrics.jsonl`, skipping a last line cut short by a crash."
    path = Path(path)
    if not path.exists():
        return []
    records = []
    # a damaged byte spoils its line only: it becomes U+FFFD, the line no longer parses and is skipped
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records


def write_metrics(path: str | os.PathLike, records: list[dict]) -> None:
    "Replace a `metrics.jsonl` with `records`, atomically (a resumed run drops what came after its checkpoint)."
    atomic_write(path, "".join(json.dumps(r) + "\n" for r in records))


def is_run_folder(path: str | os.PathLike) -> bool:
    "Whether `path` is a bertlib run folder: a `config.json` of bertlib's (or a damaged one, beside checkpoints)."
    path = Path(path)
    try:
        return "format" in json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return False
    except (OSError, ValueError, TypeError):
        return (path / "checkpoints").is_dir()


def _run_below(path: Path) -> Path | None:
    "The first bertlib run folder strictly below `path`, or None."
    for folder, subfolders, files in os.walk(path):
        subfolders.sort()
        if folder != str(path) and "config.json" in files and is_run_folder(folder):
            return Path(folder)
    return None


def check_outside_runs(path: str | os.PathLike, what: str, *, own_run: bool = False, below: bool = True) -> None:
    """Raise a RunError unless `path` may be written by `what` (a run's writer, an export, a tokenizer): it is not
    inside a bertlib run folder, whose writer replaces and deletes folders of its own, and (with `below`, for a folder
    `what` may replace) holds none below it, which `what` would replace or delete. With `own_run`, `path` itself may be
    a run (the one that `what` resumes). Every command that writes a folder calls it, so that runs never nest."""
    path = Path(path)
    resolved = path.resolve()
    outer = next((p for p in resolved.parents if is_run_folder(p)), None)
    if outer is None and not own_run and is_run_folder(resolved):
        outer = resolved
    if outer is not None:
        raise RunError(
            f"{path} is, or is inside, the bertlib run folder {outer}, which {what} must not write into (a run's "
            f"writer replaces and deletes folders of its own, and its model reads its own tokenizer); choose a folder "
            f"outside any run"
        )
    inner = _run_below(resolved) if below and resolved.is_dir() else None
    if inner is not None:
        raise RunError(
            f"{path} holds the bertlib run folder {inner}, which {what} could replace or delete; move that run "
            f"out of {path} first, or choose another folder"
        )


def no_room_error(kind: str, err: BaseException, path: str | os.PathLike, then: str) -> RunError:
    """The one-line error of a write of `path` that found no room (`no_room`'s `kind`: a full disk, a used-up quota,
    the file-size limit): what stopped it, how to make room, and `then`, what to do after."""
    return RunError(f"{no_room_reason(kind, err, path)}, {then}")


@contextmanager
def writing_into(tmp: Path, target: Path, then: str) -> Iterator[None]:
    """Around the writes of a folder's files into the temporary folder `tmp`, to become `target`: on any failure `tmp`
    is removed (so that a full disk gets its space back), and a write that found no room is a one-line
    `no_room_error` naming `target`, ending with `then`."""
    try:
        yield
    except BaseException as err:
        kind = no_room(err, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if kind is None:
            raise
        raise no_room_error(kind, err, target, then) from err


def resume_command(run_dir: str | os.PathLike, cfg: RunConfig, *options: str) -> str:
    "The shell command that resumes the run in `run_dir` made with `cfg`, with `options` added (quoted for a shell)."
    task = [cfg.task] if isinstance(cfg, FinetuneConfig) else []
    return command_line(RECIPES[type(cfg)], *task, "--output-dir", Path(run_dir), "--resume", *options)


MAKERS = "`python -m bertlib pretrain`, `distil` or `finetune` with --output-dir DIR"  # the commands that make runs


def _read_run_config(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    if not run_dir.is_dir():
        raise RunError(
            f"no run folder {run_dir}"
            + (" (it is a file)" if run_dir.exists() else "")
            + f"; runs are made by {MAKERS}"
        )
    if not path.exists():
        raise RunError(f"{run_dir} is not a bertlib run (no config.json); runs are made by {MAKERS}")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(saved, dict):
            raise TypeError(f"it holds a JSON {type(saved).__name__}, not an object")
        if "format" not in saved and "model_type" in saved:
            raise RunError(
                f"{run_dir} is an HF transformers folder ({saved['model_type']}), not a bertlib run; load it with "
                f"transformers' from_pretrained, or fine-tune it: {command_line('finetune', 'TASK', '--from', run_dir)}"
            )
        if saved.get("format") != RUN_FORMAT:
            raise RunError(f"{path} has run format {saved.get('format')!r}; this bertlib reads format {RUN_FORMAT}")
        training = {recipe: kind for kind, recipe in RECIPES.items()}.get(saved.get("recipe"), PretrainConfig)
        return {
            "model": BertConfig.from_dict(saved["model"]),
            "training": training.from_dict(saved["training"]),
            "data": saved.get("data"),
            "tokenizer": (saved.get("tokenizer") or {}).get("sha256"),
        }
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as err:
        raise RunError(f"{path} is damaged ({err}); restore it or start a new run") from err


def tokenizer_fingerprint(run_dir: str | os.PathLike) -> str:
    "The SHA-256 of a run's `tokenizer.json`, which its `config.json` records, so that a swapped tokenizer is caught."
    return hashlib.sha256((Path(run_dir) / "tokenizer.json").read_bytes()).hexdigest()


def write_run_config(
    run_dir: str | os.PathLike, model_config: BertConfig, cfg: RunConfig, data: dict | None = None
) -> None:
    """Write a run's `config.json` into its folder, which holds its tokenizer already, with the fingerprints of its
    training `data` (if given) and of its tokenizer."""
    run_dir = Path(run_dir)
    recipe = {} if isinstance(cfg, PretrainConfig) else {"recipe": RECIPES[type(cfg)]}
    fingerprint = {} if data is None else {"data": data}
    atomic_write(
        run_dir / "config.json",
        json.dumps(
            {
                "format": RUN_FORMAT,
                **recipe,
                "model": model_config.to_dict(),
                "training": cfg.to_dict(),
                **fingerprint,
                "tokenizer": {"sha256": tokenizer_fingerprint(run_dir)},
            },
            indent=2,
        )
        + "\n",
    )


def create_run(
    run_dir: str | os.PathLike, model_config: BertConfig, cfg: RunConfig, tokenizer: Tokenizer, data: dict | None = None
) -> Path:
    """Make a new run folder with its `config.json` (with the fingerprint of its training `data`) and tokenizer, all at
    once: the files are written to a temporary folder that is then renamed, so a crash leaves either no run or a whole
    one. A full disk is a one-line `RunError`, the temporary folder removed."""
    run_dir = Path(run_dir)
    tmp = run_dir.with_name(f".tmp-{run_dir.name}")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a crash
    with writing_into(tmp, run_dir, "then make the run again"):
        save_tokenizer(tokenizer, tmp)
        write_run_config(tmp, model_config, cfg, data)
        fsync_dir(tmp)
    os.rename(tmp, run_dir)  # replaces an empty folder the user made beforehand, never a full one
    fsync_dir(run_dir.parent)
    return run_dir


def _check_size(tokenizer: Tokenizer, config: BertConfig, where: str) -> None:
    if tokenizer.get_vocab_size() != config.vocab_size:
        raise RunError(
            f"{where}: the tokenizer has {tokenizer.get_vocab_size():,} tokens but the model's vocab_size "
            f"is {config.vocab_size:,}; use the tokenizer the model was trained with, or set the model's "
            f"vocab_size to match"
        )


def check_vocabulary(tokenizer: Tokenizer, config: BertConfig, where: str) -> None:
    """Raise a RunError unless a tokenizer given to train `config`'s model has its vocabulary size and keeps `[MASK]`
    whole, so that a `[MASK]` written in a text (fill-mask's, the run's report) is that token, not pieces of it."""
    _check_size(tokenizer, config, where)
    pieces = tokenizer.encode(MASK, add_special_tokens=False).tokens
    if pieces != [MASK]:
        raise RunError(
            f"{where}: the tokenizer cuts {MASK} into {len(pieces)} pieces ({' '.join(pieces)}), so no text could hold "
            f"a mask to fill; give one that keeps BERT's special tokens whole, as `python -m bertlib prepare` trains"
        )


@dataclasses.dataclass(frozen=True)
class SavedRun:
    "What a run folder holds, read once: its model config, its settings, its tokenizer and its data's fingerprint."

    model_config: BertConfig
    cfg: RunConfig
    tokenizer: Tokenizer
    data: dict | None  # `data_fingerprint`'s record (None for a run made before runs recorded it)


def read_run(run_dir: str | os.PathLike) -> SavedRun:
    """A run's model config, training config, tokenizer and data fingerprint, checked against each other: the tokenizer
    must be the one the run was made with (a run made before runs recorded it is not checked)."""
    run_dir = Path(run_dir)
    saved = _read_run_config(run_dir)
    file = run_dir / "tokenizer.json"
    if not file.is_file():
        raise RunError(f"{file} is missing; restore it from a backup of the run (with vocab.txt beside it)")
    try:
        tokenizer = load_tokenizer(run_dir)
    except ValueError as err:
        raise RunError(f"{file} cannot be loaded ({_first_words(err.__cause__ or err)}); {_RESTORE}") from err
    _check_size(tokenizer, saved["model"], str(run_dir))
    if saved["tokenizer"] is not None and tokenizer_fingerprint(run_dir) != saved["tokenizer"]:
        raise RunError(
            f"{file} is not the tokenizer the run was made with (config.json records sha256 {saved['tokenizer'][:12]}, "
            f"the file has {tokenizer_fingerprint(run_dir)[:12]}), so its model would read other tokens; {_RESTORE}"
        )
    return SavedRun(saved["model"], saved["training"], tokenizer, saved["data"])


_RESTORE = "put the run's own tokenizer.json (and vocab.txt) back from a backup of the run"


def _first_words(err: BaseException, limit: int = 160) -> str:
    "The first line of an error's message, at most `limit` characters, marked where it was cut."
    line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def load_run(run_dir: str | os.PathLike) -> tuple[BertConfig, RunConfig, Tokenizer]:
    "A run's model config, training config and tokenizer, checked against each other (`read_run`)."
    saved = read_run(run_dir)
    return saved.model_config, saved.cfg, saved.tokenizer


def trained_length(source: str | os.PathLike, model_config: BertConfig) -> int:
    """The longest sequences the source's encoder was trained on, which fine-tuning must not exceed: a bertlib run's
    training length (`long_seq_len` when it had a long phase), else its whole position table (an HF checkpoint does
    not record it; Google's BERTs trained their last phase at 512)."""
    path = Path(source)
    if not is_run_folder(path):
        return model_config.max_position_embeddings
    cfg = load_run(path)[1]
    return getattr(cfg, "long_seq_len", None) or cfg.max_seq_len or model_config.max_position_embeddings


class NonFiniteLoss(RunError):
    "Raised by `fit` when a loss or gradient norm is not finite: no checkpoint of bad weights is written."
