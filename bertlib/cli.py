"""The `bertlib` command line: `python -m bertlib <command> --help` explains each command."""
import argparse
import sys
import time
from pathlib import Path

from bertlib.data import SPLITS, WIKITEXT_CONFIGS, corpus_stats, load_wikitext2, split_documents
from bertlib.tokenizer import DEFAULT_VOCAB_SIZE, UNK, save_tokenizer, train_tokenizer


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bertlib", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = commands.add_parser("prepare", help="corpus report and WordPiece tokenizer training",
                            description=prepare.__doc__)
    p.add_argument("--output-dir", default="runs/tokenizer", help="where tokenizer.json and vocab.txt go")
    p.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="number of word pieces")
    p.add_argument("--config", choices=WIKITEXT_CONFIGS, default="wikitext-2-v1", help="WikiText-2 variant")
    p.add_argument("--data-dir", default=None, help="local data folder (default: $BERTLIB_DATA_DIR, else the hub)")
    p.add_argument("--cased", action="store_true", help="keep case and accents")
    p.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer in --output-dir")
    p.set_defaults(func=prepare)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
