"""The data side of pre-training on WikiText-2's train split: WordPiece tokenizer training, corpus encoding,
and the throughput of the batch pipeline (NSP pairs, masking, collation, length-grouped batches).

    python benchmarks/data_pipeline.py                 # writes results/data_pipeline.json
    python benchmarks/data_pipeline.py --workers 0 2   # loader throughput with 0 and 2 worker processes

The data comes from the hub, or from $BERTLIB_DATA_DIR when it is set.
"""

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

# runnable from a checkout: the repository's bertlib and the helpers next to this file come first
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from bench_utils import RESULTS_DIR, configure_process, machine_info, median, provenance, write_results  # noqa: E402

from bertlib.data.batching import make_loader, padding_waste  # noqa: E402
from bertlib.data.corpus import encode_corpus  # noqa: E402
from bertlib.data.pretraining import PretrainingDataset  # noqa: E402
from bertlib.data.tokenizer import DEFAULT_VOCAB_SIZE, train_tokenizer  # noqa: E402
from bertlib.data.wikitext import wikitext_documents, wikitext_paragraphs  # noqa: E402
from bertlib.recipes.objectives import MaskedLMAndNSP  # noqa: E402


def time_tokenizer_training(vocab_size: int, repeats: int) -> tuple[dict[str, Any], Any]:
    "Seconds to train the WordPiece tokenizer on the train split's paragraphs (as `python -m bertlib prepare`)."
    paragraphs = wikitext_paragraphs("train")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokenizer = train_tokenizer(paragraphs, vocab_size=vocab_size)
        times.append(time.perf_counter() - start)
    return {
        "seconds": median(times),
        "seconds_per_repeat": times,
        "paragraphs": len(paragraphs),
        "vocab_size": tokenizer.get_vocab_size(),
    }, tokenizer


def time_encoding(tokenizer, repeats: int) -> tuple[dict[str, Any], Any]:
    "Seconds to encode the train split into the pre-tokenised corpus, without the cache."
    documents = wikitext_documents("train", "sentences")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        corpus = encode_corpus(documents, tokenizer, use_cache=False)
        times.append(time.perf_counter() - start)
    return {
        "seconds": median(times),
        "seconds_per_repeat": times,
        "tokens": len(corpus.ids),
        "tokens_per_second": len(corpus.ids) / median(times),
    }, corpus


def time_loader(corpus, tokenizer, batch_size: int, seq_len: int, workers: int, batches: int) -> dict[str, Any]:
    """Sequences per second that the training loop's loader delivers (pairs drawn, masked, grouped by length,
    collated with the head index, pinned on a GPU machine), over the first `batches` batches of an epoch. Pairs
    are drawn when the dataset is built, so that cost is timed too."""
    start = time.perf_counter()
    dataset = PretrainingDataset(corpus, tokenizer, seq_len)
    loader = make_loader(
        dataset,
        batch_size,
        MaskedLMAndNSP().collate,
        dataset.lengths,
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
    )
    build_seconds = time.perf_counter() - start
    sequences = tokens = 0
    start = time.perf_counter()
    for i, batch in enumerate(loader):
        if i == batches:
            break
        sequences += batch["input_ids"].shape[0]
        tokens += int(batch["attention_mask"].sum())
    seconds = time.perf_counter() - start
    waste = padding_waste(dataset.lengths(), loader.sampler.order(), batch_size, pad_to_multiple_of=8)
    return {
        "workers": workers,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "batches": batches,
        "dataset_build_seconds": build_seconds,
        "sequences_per_second": sequences / seconds,
        "tokens_per_second": tokens / seconds,
        "padding_share": waste,
        "pairs_per_epoch": len(dataset),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batches", type=int, default=200, help="batches read per loader measurement")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="DataLoader worker counts to measure")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--output", default=RESULTS_DIR / "data_pipeline.json")
    args = p.parse_args(argv)
    settings = configure_process(args.threads)
    tokenizer_row, tokenizer = time_tokenizer_training(args.vocab_size, args.repeats)
    print(
        f"tokenizer training: {tokenizer_row['seconds']:.2f} s for {tokenizer_row['paragraphs']:,} paragraphs "
        f"({tokenizer_row['vocab_size']:,} pieces)",
        flush=True,
    )
    encoding_row, corpus = time_encoding(tokenizer, args.repeats)
    print(
        f"corpus encoding: {encoding_row['seconds']:.2f} s, {encoding_row['tokens_per_second']:,.0f} tokens/s",
        flush=True,
    )
    loader_rows = []
    for workers in args.workers:
        loader_rows.append(time_loader(corpus, tokenizer, args.batch_size, args.seq_len, workers, args.batches))
        row = loader_rows[-1]
        print(
            f"loader, {workers} workers: {row['sequences_per_second']:,.0f} sequences/s, "
            f"{row['tokens_per_second']:,.0f} tokens/s (dataset built in {row['dataset_build_seconds']:.2f} s, "
            f"{row['padding_share']:.1%} padding)",
            flush=True,
        )
    data = {
        "benchmark": "data_pipeline",
        "machine": machine_info(torch.device("cpu")),
        "settings": settings,
        "tokenizer_training": tokenizer_row,
        "encoding": encoding_row,
        "loader": loader_rows,
        "provenance": provenance(p, args, "batches", "repeats"),
    }
    print(f"wrote {write_results(args.output, data)}")


if __name__ == "__main__":
    main()
