"""Run folders on disk: the configuration, the tokenizer, `metrics.jsonl`, the loss curve and the checkpoints
of a training run, written so that a crash never leaves a broken file, and read back with clear errors.

    runs/<name>/
      config.json              {"format": 1, "model": BertConfig, "training": PretrainConfig}
                               (a fine-tuning run: "recipe": "finetune" and a FinetuneConfig; a distilled
                               student: "recipe": "distil" and a DistilConfig)
      tokenizer.json, vocab.txt
      metrics.jsonl            one JSON object per logged step or validation
      loss_curve.png
      checkpoints/step-0001000/
        model.safetensors      the weights (all that evaluation, fill-mask and export need), a tensor that
                               several modules share (ELECTRA's embeddings) stored once
        training_state.pt      optimiser, schedule, step and data position (what resuming needs)
        checksums.json         SHA-256 of the two files, checked when they are read
      best/checkpoints/step-0000300/   a fine-tuning run's best validation so far (its scores as training state)

Written by hand: production plumbing that notebook 07 uses but does not show in full.
"""

__all__ = ["RUN_FORMAT", "CHECKPOINT_PREFIX", "RECIPES", "RunError", "checkpoints", "save_checkpoint", "load_weights",
           "load_training_state", "load_checkpoint", "write_checksums", "read_metrics", "write_metrics",
           "plot_metrics", "save_figure", "write_run_config", "check_new_run", "create_run", "check_vocabulary",
           "load_run", "RESUMABLE_FIELDS", "resumed_config", "latest_checkpoint", "best_checkpoint", "build_model",
           "model_from_checkpoint", "load_model"]

import dataclasses
import hashlib
import io
import json
import os
import pickle
import shutil
from pathlib import Path

import torch
from matplotlib.figure import Figure
from safetensors import SafetensorError
from safetensors.torch import load_model as load_safetensors
from safetensors.torch import save_model as save_safetensors
from tokenizers import Tokenizer
from torch import nn

from .config import BertConfig
from .electra import ElectraForPreTraining
from .heads import HEADS, BertForQuestionAnswering, BertForSequenceClassification
from .helpers import atomic_write, fsync_dir, resolve_device
from .model import BertForPreTraining
from .task_examples import TASKS
from .tokenizer import load_tokenizer, save_tokenizer
from .train_config import DistilConfig, FinetuneConfig, PretrainConfig

RunConfig = PretrainConfig | FinetuneConfig | DistilConfig
RECIPES = {PretrainConfig: "pretrain", FinetuneConfig: "finetune", DistilConfig: "distil"}  # the command of each

RUN_FORMAT = 1
CHECKPOINT_PREFIX = "step-"
WEIGHTS, TRAINING_STATE, CHECKSUMS = "model.safetensors", "training_state.pt", "checksums.json"


class RunError(Exception):
    "A problem with a run folder that the user can fix; the message says how."


def _fsync_tree(folder: Path) -> None:
    for file in folder.iterdir():
        with open(file, "rb") as f:
            os.fsync(f.fileno())
    fsync_dir(folder)


def checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    "The complete checkpoints of a run (a step folder with its weights and checksums), oldest first."
    folder = Path(run_dir) / "checkpoints"
    found = folder.glob(f"{CHECKPOINT_PREFIX}*") if folder.is_dir() else []
    return sorted(p for p in found if p.name[len(CHECKPOINT_PREFIX):].isdigit()
                  and (p / WEIGHTS).is_file() and (p / CHECKSUMS).is_file())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_checksums(folder: Path) -> None:
    "Record the SHA-256 of every file of a checkpoint folder in its `checksums.json`."
    sums = {f.name: _sha256(f) for f in sorted(folder.iterdir()) if f.name != CHECKSUMS}
    atomic_write(folder / CHECKSUMS, json.dumps(sums, indent=1) + "\n")


def _remove(folder: Path) -> None:
    "Delete a folder so that no half-deleted copy is ever listed: rename it out of the way first (atomic)."
    trash = folder.with_name(f".trash-{folder.name}")
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(folder, trash)
    fsync_dir(folder.parent)
    shutil.rmtree(trash)


def save_checkpoint(run_dir: str | os.PathLike, model: nn.Module, training_state: dict, step: int,
                    keep: int = 2) -> Path:
    """Write `model`'s weights and `training_state` as checkpoint `step`, atomically and with checksums, then
    delete all but the newest `keep` checkpoints."""
    folder = Path(run_dir) / "checkpoints"
    final = folder / f"{CHECKPOINT_PREFIX}{step:07d}"
    tmp = folder / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a crash
    for trash in folder.glob(".trash-*"):  # left by a crash while deleting
        shutil.rmtree(trash, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_safetensors(model, tmp / WEIGHTS)  # stores a shared tensor once; safetensors refuses shared memory
    torch.save(training_state, tmp / TRAINING_STATE)
    write_checksums(tmp)
    _fsync_tree(tmp)
    if final.exists():  # the same step saved again (e.g. a resumed run that stopped right after saving)
        _remove(final)
    os.rename(tmp, final)
    fsync_dir(folder)
    for old in checkpoints(run_dir)[:-keep]:
        _remove(old)
    return final


def _verified(checkpoint: Path, name: str) -> Path:
    "The path of a checkpoint's file, after checking it against the checksum recorded when it was written."
    path = checkpoint / name
    try:
        expected = json.loads((checkpoint / CHECKSUMS).read_text(encoding="utf-8"))[name]
        actual = _sha256(path)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise _unreadable(checkpoint, err) from err
    if actual != expected:
        raise RunError(f"checkpoint {checkpoint}: {name} does not match its checksum (the file is damaged); "
                       f"delete it (the whole step folder) to fall back to the previous checkpoint")
    return path


def _unreadable(checkpoint: Path, err: Exception) -> RunError:
    return RunError(f"checkpoint {checkpoint} is unreadable ({type(err).__name__}: {str(err)[:120]}); "
                    f"delete it to fall back to the previous checkpoint")


def load_weights(checkpoint: Path, model: nn.Module) -> None:
    "Load a checkpoint's weights, checked against their checksum, into `model` (float16 is cast to its dtype)."
    path = _verified(checkpoint, WEIGHTS)
    try:
        load_safetensors(model, path)  # fills a shared tensor under every name it has
    except (OSError, SafetensorError) as err:
        raise _unreadable(checkpoint, err) from err
    except RuntimeError as err:
        raise RunError(f"checkpoint {checkpoint} does not fit the model of config.json ({str(err)[:160]}); "
                       f"was config.json edited?") from err


def load_training_state(checkpoint: Path) -> dict:
    "A checkpoint's optimiser, schedule, step and data position, for resuming."
    path = _verified(checkpoint, TRAINING_STATE)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise _unreadable(checkpoint, err) from err


def load_checkpoint(checkpoint: Path, model: nn.Module) -> dict:
    "Load a checkpoint's weights into `model` and return its training state (what resuming needs)."
    load_weights(checkpoint, model)
    return load_training_state(checkpoint)


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


def plot_metrics(records: list[dict], title: str = "") -> Figure:
    """Training and validation losses against the step (every `*_loss` key), and the validation scores
    (every `*accuracy` key but top-5, F1 and exact match) beside them."""
    fig = Figure(figsize=(9, 3.2))
    loss_ax, acc_ax = fig.subplots(1, 2)
    train = [r for r in records if "loss" in r]
    valid = [r for r in records if r.get("split") == "validation"]
    for key in sorted({k for r in train for k in r if k.endswith("_loss")}):
        loss_ax.plot([r["step"] for r in train], [r[key] for r in train], label=f"train {key[:-5].upper()}")
    for key in sorted({k for r in valid for k in r if k.endswith("_loss")}):
        loss_ax.plot([r["step"] for r in valid], [r[key] for r in valid], "o-", label=f"validation {key[:-5].upper()}")
    scores = {k for r in valid for k in r if (k.endswith("accuracy") and "top5" not in k) or k in ("f1", "exact_match")}
    for key in sorted(scores):
        acc_ax.plot([r["step"] for r in valid], [r[key] for r in valid], "o-", label=key.replace("_", " "))
    if any("nsp_accuracy" in r for r in valid):
        acc_ax.axhline(0.5, color="gray", ls=":", label="NSP chance")
    loss_ax.set(xlabel="step", ylabel="loss", title=title or "losses")
    acc_ax.set(xlabel="step", ylabel="score", title="validation scores", ylim=(0.0, 1.0))
    for ax in (loss_ax, acc_ax):
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | os.PathLike) -> None:
    "Save a figure as PNG, atomically."
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write(path, buffer.getvalue())


def _read_run_config(run_dir: Path) -> dict:
    path = run_dir / "config.json"
    if not run_dir.is_dir():
        raise RunError(f"no run folder {run_dir}; runs are made by `python -m bertlib pretrain --output-dir DIR`")
    if not path.exists():
        raise RunError(f"{run_dir} is not a bertlib run (no config.json); make runs with `python -m bertlib pretrain`")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(saved, dict):
            raise TypeError(f"it holds a JSON {type(saved).__name__}, not an object")
        if saved.get("format") != RUN_FORMAT:
            raise RunError(f"{path} has run format {saved.get('format')!r}; this bertlib reads format {RUN_FORMAT}")
        training = {recipe: kind for kind, recipe in RECIPES.items()}.get(saved.get("recipe"), PretrainConfig)
        return {"model": BertConfig.from_dict(saved["model"]), "training": training.from_dict(saved["training"])}
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as err:
        raise RunError(f"{path} is damaged ({err}); restore it or start a new run") from err


def write_run_config(run_dir: str | os.PathLike, model_config: BertConfig, cfg: RunConfig) -> None:
    "Write a run's `config.json` (creating the folder if needed)."
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    recipe = {} if isinstance(cfg, PretrainConfig) else {"recipe": RECIPES[type(cfg)]}
    atomic_write(run_dir / "config.json", json.dumps(
        {"format": RUN_FORMAT, **recipe, "model": model_config.to_dict(), "training": cfg.to_dict()}, indent=2) + "\n")


def check_new_run(run_dir: str | os.PathLike) -> None:
    """Raise a RunError unless `run_dir` is free for a new run (absent, or an empty folder). Under `torchrun` every
    process checks before rank 0 may create the run, so a slow process never finds the folder its peer has made."""
    run_dir = Path(run_dir)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise RunError(f"{run_dir} already exists and is not an empty folder; pass resume=True (--resume) to "
                       f"continue it, or choose another output folder")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def create_run(run_dir: str | os.PathLike, model_config: BertConfig, cfg: RunConfig,
               tokenizer: Tokenizer) -> Path:
    """Make a new run folder with its `config.json` and tokenizer, all at once: the files are written to a
    temporary folder that is then renamed, so a crash leaves either no run or a whole one."""
    run_dir = Path(run_dir)
    tmp = run_dir.with_name(f".tmp-{run_dir.name}")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a crash
    save_tokenizer(tokenizer, tmp)
    write_run_config(tmp, model_config, cfg)
    fsync_dir(tmp)
    os.rename(tmp, run_dir)  # replaces an empty folder the user made beforehand, never a full one
    fsync_dir(run_dir.parent)
    return run_dir


def check_vocabulary(tokenizer: Tokenizer, config: BertConfig, where: str) -> None:
    "Raise a RunError unless the tokenizer and the model have the same vocabulary size."
    if tokenizer.get_vocab_size() != config.vocab_size:
        raise RunError(f"{where}: the tokenizer has {tokenizer.get_vocab_size():,} tokens but the model's vocab_size "
                       f"is {config.vocab_size:,}; use the tokenizer the model was trained with, or set the model's "
                       f"vocab_size to match")


def load_run(run_dir: str | os.PathLike) -> tuple[BertConfig, RunConfig, Tokenizer]:
    "A run's model config, training config and tokenizer, checked against each other."
    run_dir = Path(run_dir)
    saved = _read_run_config(run_dir)
    try:
        tokenizer = load_tokenizer(run_dir)
    except Exception as err:  # the tokenizers library raises its own exception types
        raise RunError(f"{run_dir / 'tokenizer.json'} cannot be loaded ({err}); restore it from a backup") from err
    check_vocabulary(tokenizer, saved["model"], str(run_dir))
    return saved["model"], saved["training"], tokenizer


# settings a resumed run may change; all others define what is learned and must stay as they were
RESUMABLE_FIELDS = ("max_steps", "epochs", "log_every", "eval_every", "eval_batches", "save_every",
                    "keep_checkpoints", "device", "compile", "num_workers", "on_nan")


def resumed_config(run_dir: str | os.PathLike, cfg: RunConfig | None, kind: type
                   ) -> tuple[BertConfig, RunConfig, Tokenizer]:
    """A run's model config, settings and tokenizer, to resume it: its saved settings, or `cfg` if that
    changes only fields in `RESUMABLE_FIELDS`. `kind` is the settings class the resuming recipe expects."""
    run_dir = Path(run_dir)
    model_config, saved_cfg, tokenizer = load_run(run_dir)
    if not isinstance(saved_cfg, kind):
        raise RunError(f"{run_dir} was made by another recipe ({type(saved_cfg).__name__}); resume it with "
                       f"`python -m bertlib {RECIPES[type(saved_cfg)]} ... --resume`")
    if cfg is not None:
        changed = [f.name for f in dataclasses.fields(saved_cfg) if f.name not in RESUMABLE_FIELDS
                   and getattr(cfg, f.name) != getattr(saved_cfg, f.name)]
        if changed:
            raise RunError(f"a resumed run keeps its settings, but {', '.join(changed)} differ from "
                           f"{run_dir / 'config.json'}; start a new run to change them")
    return model_config, cfg or saved_cfg, tokenizer


def latest_checkpoint(run_dir: str | os.PathLike) -> Path:
    "The newest complete checkpoint of a run."
    found = checkpoints(run_dir)
    if not found:
        raise RunError(f"{run_dir} has no checkpoint yet; wait for the first one or resume the run")
    return found[-1]


def best_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    "The checkpoint of a fine-tuning run's best validation so far, or None."
    found = checkpoints(Path(run_dir) / "best")
    return found[-1] if found else None


def build_model(model_config: BertConfig, cfg: RunConfig | None = None) -> nn.Module:
    """The model a run trains, with fresh weights: `BertForPreTraining` (a distilled student too), for an ELECTRA
    run `ElectraForPreTraining`, for a fine-tuning run the head of its task (`bertlib.heads.HEADS`) with the
    task's label names."""
    if isinstance(cfg, PretrainConfig) and cfg.objective == "electra":
        return ElectraForPreTraining(model_config, cfg.generator_size)
    if not isinstance(cfg, FinetuneConfig):
        return BertForPreTraining(model_config)
    task = TASKS[cfg.task]
    head = HEADS[task.kind]
    if head is BertForQuestionAnswering:
        return head(model_config)
    if head is BertForSequenceClassification:
        return head(model_config, task.label_names, pooling=cfg.pooling)
    return head(model_config, task.label_names)


def model_from_checkpoint(model_config: BertConfig, checkpoint: Path, cfg: RunConfig | None = None) -> nn.Module:
    "The model of a run (`build_model`) with the weights of `checkpoint`."
    model = build_model(model_config, cfg)
    load_weights(checkpoint, model)
    return model


def load_model(run_dir: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[nn.Module, Tokenizer]:
    """A run's model in eval mode on `device`, and its tokenizer: the newest checkpoint of a pre-training run
    (a `BertForPreTraining`, or an `ElectraForPreTraining`), the best one of a fine-tuning run (its task's head)."""
    model_config, cfg, tokenizer = load_run(run_dir)
    checkpoint = (isinstance(cfg, FinetuneConfig) and best_checkpoint(run_dir)) or latest_checkpoint(run_dir)
    model = model_from_checkpoint(model_config, checkpoint, cfg)
    return model.to(resolve_device(device)).eval(), tokenizer
