"""The pre-tokenised corpus: WikiText-2 (or any documents of sentences) encoded once with the fast tokenizer,
kept as three flat arrays and cached on disk under a hash of everything it depends on. WikiText-2 is read checked
(`read_wikitext`): a file that is not WikiText-2's, or a split without text, is one line that names the file.

Written by hand; notebook 06 presents it.
"""

__all__ = [
    "CACHE_DIR_ENV",
    "CORPUS_CACHE_FORMAT",
    "resolve_cache_dir",
    "wikitext_source",
    "read_wikitext",
    "TokenizedCorpus",
    "encode_corpus",
    "wikitext_corpus",
]

import hashlib
import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ..utils.environment import resolve_data_dir
from ..utils.files import atomic_write
from .wikitext import HUB_DATASET, Unit, load_wikitext2, split_documents

CACHE_DIR_ENV = "BERTLIB_CACHE_DIR"
CORPUS_CACHE_FORMAT = 1  # bump when the cached arrays change meaning, so old files are ignored


def resolve_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    "The cache folder: `cache_dir`, else `$BERTLIB_CACHE_DIR`, else `$XDG_CACHE_HOME/bertlib` or `~/.cache/bertlib`."
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "bertlib"


def _cache_error(folder: Path, cache_dir: str | os.PathLike | None, err: OSError) -> OSError:
    "One line on a cache folder that cannot be written, naming what chose it (`cache_dir`, the variable, the default)."
    blocking = next((p for p in (folder, *folder.parents) if p.exists()), None)
    reason = f"{blocking} is a file" if blocking is not None and not blocking.is_dir() else err.strerror or str(err)
    if cache_dir is not None:
        chosen, way_out = f"the cache folder {cache_dir}", "give a folder you can write (cache_dir=)"
    elif os.environ.get(CACHE_DIR_ENV):
        chosen, way_out = (
            f"{CACHE_DIR_ENV}={os.environ[CACHE_DIR_ENV]}",
            f"point {CACHE_DIR_ENV} at a folder you can write",
        )
    else:
        chosen, way_out = f"the cache folder {folder.parent}", f"set {CACHE_DIR_ENV} to a folder you can write"
    return OSError(f"{chosen}: the encoded corpus cannot be kept in {folder} ({reason}); {way_out}")


def _writable_cache(folder: Path, cache_dir: str | os.PathLike | None) -> None:
    "Make the cache folder, or raise `_cache_error` now rather than after the corpus is encoded."
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(13, "Permission denied", str(folder))
    except OSError as err:
        raise _cache_error(folder, cache_dir, err) from err


def _parquet_files(split: str, config: str, data_dir: str | os.PathLike | None) -> list[Path] | None:
    "The parquet files `load_wikitext2` reads a split from, or None when it reads the hub."
    root = resolve_data_dir(data_dir)
    return None if root is None else sorted((root / "wikitext" / config).glob(f"{split}-*.parquet"))


def wikitext_source(split: str, config: str = "wikitext-2-v1", data_dir: str | os.PathLike | None = None) -> str:
    "Where `load_wikitext2` reads a split from, for a message: its parquet files in the local data folder, or the hub."
    files = _parquet_files(split, config, data_dir)
    return f"{HUB_DATASET} ({config}, {split}) on the HuggingFace hub" if files is None else ", ".join(map(str, files))


def _unreadable(files: Iterable[Path], where: str, err: Exception) -> str:
    "Why parquet `files` cannot be read as WikiText-2: the file that is not parquet, or that has no column `text`."
    import pyarrow.parquet as pq

    for f in files:
        try:
            columns = pq.read_schema(f).names
        except Exception as not_parquet:  # pyarrow's ArrowInvalid, OSError, ...
            return f"{f}: not a parquet file ({str(not_parquet).splitlines()[0]})"
        if "text" not in columns:
            return f"{f}: no column 'text' (it has {', '.join(map(repr, columns)) or 'none'})"
    return f"{where}: {str(err).splitlines()[0]}"


def read_wikitext(
    split: str = "train",
    unit: Unit = "sentences",
    config: str = "wikitext-2-v1",
    data_dir: str | os.PathLike | None = None,
) -> list[list[str]]:
    """`bertlib.data.wikitext.wikitext_documents`, checked: a file that is not WikiText-2's (not parquet, without a
    column `text` of strings) and a split without text are a one-line ValueError that names the file, instead of an
    error that names none or a run that never finds a sequence to train on."""
    import pyarrow

    where = wikitext_source(split, config, data_dir)
    expected = "WikiText-2's parquet files hold their rows in a column 'text' of strings"
    try:
        rows = load_wikitext2(split, config, data_dir)
    except pyarrow.ArrowException as err:
        raise ValueError(
            f"{_unreadable(_parquet_files(split, config, data_dir) or [], where, err)}; {expected}"
        ) from err
    bad = next((i for i, row in enumerate(rows) if not isinstance(row, str)), None)
    if bad is not None:
        raise ValueError(f"{where}: row {bad} of the column 'text' is {rows[bad]!r:.40}, not text; {expected}")
    documents = split_documents(rows, unit)
    if not documents:
        held = "no rows" if not rows else f"{len(rows):,} rows, every one blank or a heading"
        raise ValueError(f"{where}: the {split} split has no text ({held}); give WikiText-2's {split} split")
    return documents


@dataclass(frozen=True)
class TokenizedCorpus:
    "Documents of sentences of token ids, flat: sentence `s` is `ids[sentence_offsets[s]:sentence_offsets[s+1]]`."

    ids: np.ndarray  # int32
    sentence_offsets: np.ndarray  # int64, one more than the number of sentences
    document_offsets: np.ndarray  # int64 indices into the sentences, one more than the number of documents
    key: str  # the hash that names the cache file
    from_cache: bool = False

    def __len__(self) -> int:
        return len(self.document_offsets) - 1

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_offsets) - 1

    def document(self, index: int) -> list[list[int]]:
        "Document `index` as a list of sentences, each a list of token ids."
        first, last = self.document_offsets[index], self.document_offsets[index + 1]
        bounds = self.sentence_offsets[first : last + 1]
        flat = self.ids[bounds[0] : bounds[-1]].tolist()
        starts = (bounds - bounds[0]).tolist()
        return [flat[s:e] for s, e in zip(starts, starts[1:], strict=False)]

    def documents(self) -> list[list[list[int]]]:
        "All documents, as `document` gives them."
        return [self.document(i) for i in range(len(self))]


def _corpus_key(documents: Sequence[Sequence[str]], tokenizer: Tokenizer) -> str:
    h = hashlib.sha256(f"bertlib-corpus-v{CORPUS_CACHE_FORMAT}\0".encode())
    h.update(tokenizer.to_str().encode())
    for doc in documents:
        h.update(b"\x1d")  # separators keep ["ab"] and ["a", "b"] apart
        for sentence in doc:
            h.update(sentence.encode())
            h.update(b"\x1e")
    return h.hexdigest()


def _atomic_save_npz(path: Path, **arrays: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write(path, buffer.getvalue())


def _load_cached(path: Path, key: str) -> TokenizedCorpus | None:
    try:
        with np.load(path, allow_pickle=False) as f:
            if str(f["key"]) != key:
                return None
            return TokenizedCorpus(f["ids"], f["sentence_offsets"], f["document_offsets"], key, from_cache=True)
    except (OSError, ValueError, KeyError, EOFError):  # missing, truncated or foreign file: rebuild it
        return None


def encode_corpus(
    documents: Sequence[Sequence[str]],
    tokenizer: Tokenizer,
    *,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    batch_size: int = 16384,
) -> TokenizedCorpus:
    """Encode documents (lists of sentence strings) with `tokenizer`, without special tokens, in batches.

    The result is cached in `resolve_cache_dir(cache_dir)/corpus/`, named by a hash of the tokenizer, the
    text and the format, so that a changed tokenizer or text never reuses a stale file."""
    key = _corpus_key(documents, tokenizer)
    path = resolve_cache_dir(cache_dir) / "corpus" / f"{key[:40]}.npz"
    if use_cache and (cached := _load_cached(path, key)) is not None:
        return cached
    if use_cache:
        _writable_cache(path.parent, cache_dir)
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        tokenizer = Tokenizer.from_str(tokenizer.to_str())  # a copy, so the caller's settings stay
        tokenizer.no_truncation()
        tokenizer.no_padding()
    sentences = [s for doc in documents for s in doc]
    encoded: list[list[int]] = []
    for i in range(0, len(sentences), batch_size):
        encoded += [e.ids for e in tokenizer.encode_batch_fast(sentences[i : i + batch_size], add_special_tokens=False)]
    kept_per_doc, flat, lengths = [], [], []
    position = 0
    for doc in documents:
        ids = [e for e in encoded[position : position + len(doc)] if e]
        position += len(doc)
        kept_per_doc.append(len(ids))
        flat += ids
        lengths += map(len, ids)
    corpus = TokenizedCorpus(
        ids=np.fromiter(chain.from_iterable(flat), dtype=np.int32, count=sum(lengths)),
        sentence_offsets=np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64),
        document_offsets=np.concatenate([[0], np.cumsum(kept_per_doc, dtype=np.int64)]).astype(np.int64),
        key=key,
    )
    if use_cache:
        arrays = dict(
            ids=corpus.ids, sentence_offsets=corpus.sentence_offsets, document_offsets=corpus.document_offsets
        )
        try:
            _atomic_save_npz(path, **arrays, key=np.array(key))
        except OSError as err:  # a read-only file system, a full disk: the folder was writable a moment ago
            raise _cache_error(path.parent, cache_dir, err) from err
    return corpus


def wikitext_corpus(
    split: str,
    tokenizer: Tokenizer,
    *,
    config: str = "wikitext-2-v1",
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
) -> TokenizedCorpus:
    """One WikiText-2 split, read checked (`read_wikitext`), split into documents and sentences
    (`bertlib.data.wikitext`) and encoded with `encode_corpus`."""
    return encode_corpus(
        read_wikitext(split, "sentences", config, data_dir), tokenizer, cache_dir=cache_dir, use_cache=use_cache
    )
