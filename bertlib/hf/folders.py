"""Folders as HF `transformers` writes and reads them: a bertlib model and tokenizer saved so that `from_pretrained`
and the pipelines load them (with bertlib's own modeling file beside the weights when no transformers class holds
the model), and the encoder of any HF BERT checkpoint (a hub id, or a folder laid out as on the hub) for fine-tuning.

Written by hand; notebook 05 presents it.
"""

__all__ = ["HF_SPECIAL_TOKENS", "to_hf_tokenizer", "is_hf_folder", "save_pretrained_hf", "load_hf_encoder"]

import contextlib
import ctypes
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import tokenizers
import torch
import transformers
from tokenizers import decoders

from ..data.tokenizer import CLS, CONTINUATION, MASK, PAD, SEP, UNK, add_bert_post_processor
from ..model.bert import BertForPreTraining
from ..model.config import BertConfig
from ..utils.files import fsync_dir, open_up
from .interop import OWN_CLASSES, BertLibModel, from_hf_config, hf_name, to_transformers
from .remote import configuration_bertlib, modeling_bertlib

OWN_FILES = (configuration_bertlib, modeling_bertlib)  # what an export of bertlib's own classes carries
HF_SPECIAL_TOKENS = {"pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP, "mask_token": MASK}


def to_hf_tokenizer(tokenizer: tokenizers.Tokenizer, model_max_length: int) -> transformers.PreTrainedTokenizerFast:
    """Wrap a `tokenizers.Tokenizer` with BERT's special tokens for `transformers`.

    Works on a copy. A tokenizer without a post-processor gets BERT's `[CLS] A [SEP] B [SEP]` template, and
    one without a decoder gets the WordPiece decoder, so pipelines see the inputs the model was trained on."""
    missing = [token for token in HF_SPECIAL_TOKENS.values() if tokenizer.token_to_id(token) is None]
    if missing:
        raise ValueError(
            f"the tokenizer lacks the special token(s) {', '.join(missing)}; a BERT tokenizer needs "
            f"{', '.join(HF_SPECIAL_TOKENS.values())}"
        )
    copy = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    if copy.post_processor is None:
        add_bert_post_processor(copy)
    if copy.decoder is None:
        copy.decoder = decoders.WordPiece(prefix=CONTINUATION)
    # segment ids are a model input: without them a sentence-pair pipeline would feed segment 0 everywhere
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=copy,
        model_max_length=model_max_length,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        **HF_SPECIAL_TOKENS,
    )


def is_hf_folder(path: str | os.PathLike) -> bool:
    "Whether `path` holds a model saved in HF `transformers`' format: a `config.json` that names its `model_type`."
    try:
        return "model_type" in json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


_RENAME_EXCHANGE = 2  # renameat2's flag (Linux 3.15): swap two paths in one step


def _exchange(a: Path, b: Path) -> bool:
    "Swap the folders `a` and `b` in one step; False where the system or filesystem cannot (then nothing happened)."
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd = -100  # AT_FDCWD: relative paths start from the working directory
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _clear_leftovers(path: Path) -> None:
    """Clean up after a kill part-way through replacing the export `path`: a new export never put in place is removed;
    an old one moved aside (where folders cannot be swapped in one step) comes back if nothing took its place."""
    for new in path.parent.glob(f".{path.name}.new-*"):
        shutil.rmtree(new, ignore_errors=True)
    for old in path.parent.glob(f".{path.name}.old-*"):
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(old, path)


def _put_in_place(new: Path, path: Path) -> None:
    """Make the folder `new` the folder `path`, replacing a whole one there: swapped in one step, so that a kill at any
    moment leaves the old folder or the new one; where the filesystem cannot swap, the old one is moved aside first
    (a kill between the two renames is undone by `_clear_leftovers`)."""
    if not path.exists() or not any(path.iterdir()):
        os.replace(new, path)  # a rename onto an empty folder replaces it
    elif _exchange(new, path):
        shutil.rmtree(new)  # now the old export
    else:
        old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.old-"))
        os.replace(path, old)
        os.replace(new, path)
        shutil.rmtree(old)
    fsync_dir(path.parent)


def save_pretrained_hf(
    model: BertLibModel,
    tokenizer: tokenizers.Tokenizer,
    path: str | os.PathLike,
    *,
    model_max_length: int | None = None,
) -> Path:
    """Write `model` and `tokenizer` to the directory `path` in HF `transformers`' format and return it.

    The tokenizer's `model_max_length` (where a pipeline's `truncation=True` cuts) is the longest sequence the model
    was trained on, if given (`export-hf` gives a fine-tuned run's `max_seq_len`, so the pipeline cuts long text where
    `predict` does), else the model's `max_position_embeddings`.

    The directory holds the model as its HF class (`hf_class`: safetensors and config.json, with a head's label
    names) and the fast tokenizer, so `from_pretrained(path)` and the matching pipeline work: "fill-mask" for a
    pre-trained model (`AutoModelForMaskedLM` drops the NSP head), "text-classification",
    "token-classification" for a fine-tuned one (transformers 5 has no "question-answering" pipeline: load a
    reader with `AutoModelForQuestionAnswering`). A model that only bertlib's own classes hold (Pre-LN, for one)
    comes with their code (`configuration_bertlib.py`, `modeling_bertlib.py`): load it with
    `from_pretrained(path, trust_remote_code=True)`.

    The export is written beside `path` and put in its place whole (`path` may be absent, an empty folder or an
    earlier export, which it replaces; any other folder is refused), so that a kill at any moment leaves the old
    export or the new one, never a mix of their files. Where `path` is a symbolic link, the folder it points to is
    replaced, and the link stays. The files get the permissions the umask gives, as any other file."""
    pad = tokenizer.token_to_id(HF_SPECIAL_TOKENS["pad_token"])
    if pad is not None and pad != model.config.pad_token_id:
        raise ValueError(f"the tokenizer's [PAD] id is {pad} but BertConfig.pad_token_id={model.config.pad_token_id}")
    if tokenizer.get_vocab_size() > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.get_vocab_size()} tokens but the model only "
            f"BertConfig.vocab_size={model.config.vocab_size}"
        )
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir()) and not is_hf_folder(path)):
        raise ValueError(
            f"{path} is not an HF model folder (no config.json with a model_type), and an export replaces its folder "
            f"whole; choose a new or empty folder"
        )
    hf_tokenizer = to_hf_tokenizer(tokenizer, model_max_length or model.config.max_position_embeddings)
    hf_model = to_transformers(model)
    target = path.resolve()  # through a symbolic link: the folder it points to is replaced, and the link stays
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_leftovers(target)
    new = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.new-"))
    try:
        hf_model.save_pretrained(new)
        hf_tokenizer.save_pretrained(new)
        if type(hf_model) in OWN_CLASSES.values():  # the code that its config's auto_map names
            for module in OWN_FILES:
                shutil.copyfile(module.__file__, new / Path(module.__file__).name)
        for file in new.iterdir():
            with open(file, "rb") as f:
                os.fsync(f.fileno())
        open_up(new)  # mkdtemp makes a private folder, safetensors 0.8 private weights; an export is an ordinary one
        _put_in_place(new, target)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    return path


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' load report and progress bar: loading an encoder out of a pre-training checkpoint
    leaves its heads' weights unused by design, and `load_encoder` reports what is new."""
    verbosity, bar = transformers.logging.get_verbosity(), transformers.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bar:
            transformers.logging.enable_progress_bar()


def load_hf_encoder(
    name_or_path: str | os.PathLike,
) -> tuple[BertConfig, dict[str, torch.Tensor], tokenizers.Tokenizer]:
    """The encoder of an HF BERT checkpoint (a hub id such as `google/bert_uncased_L-4_H-256_A-4`, or a local
    folder laid out as on the hub): its `BertConfig`, its weights under bertlib's names (`bert.*`, for a head's
    `load_encoder`) and its tokenizer. Its special tokens keep their own ids (Google's vocabulary puts `[CLS]`
    at 101, not at 2).

    The classes are BERT's own rather than the `Auto*` ones: Google's small BERTs carry a `config.json` that
    predates `model_type` and only a `vocab.txt`, which `AutoTokenizer` of transformers 5 cannot place."""
    with _quiet_transformers():
        hf_model = transformers.BertModel.from_pretrained(name_or_path)
        hf_tokenizer = transformers.BertTokenizer.from_pretrained(name_or_path)
    config = from_hf_config(hf_model.config)
    hf_state = hf_model.state_dict()
    with torch.device("meta"):
        names = [key for key in BertForPreTraining(config).state_dict() if key.startswith("bert.")]
    state = {
        key: hf_state[hf_name(key).removeprefix("bert.")].clone()
        for key in names
        if hf_name(key).removeprefix("bert.") in hf_state
    }
    return config, state, tokenizers.Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
