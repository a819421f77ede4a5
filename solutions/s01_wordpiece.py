"""Worked solutions of notebook 01's exercises (WordPiece): a cased tokenizer, an incremental WordPiece trainer,
and a word that the two merge rules split differently.

`python solutions/s01_wordpiece.py` runs them all; `BERTLIB_QUICK=1` trains the from-scratch vocabularies on fewer
paragraphs.
"""

import time
from collections import Counter, defaultdict

import torch
from common import (
    CONTINUATION,
    QUICK,
    SPECIAL_TOKENS,
    WordPieceTokenizer,
    cli,
    header,
    split_documents,
    train_wordpiece,
    word_frequencies,
)
from verdict import bootstrap

from bertlib import load_wikitext2, train_tokenizer


def _paragraphs(split: str, rows: int | None = None) -> list[str]:
    "The paragraphs of `split` (or of its first `rows` rows), joiners restored, as notebook 01 trains on them."
    return [p for doc in split_documents(load_wikitext2(split)[:rows], unit="paragraphs") for p in doc]


def _small_corpus_frequencies():
    "Word counts of the first paragraphs of the train split, notebook 01's small corpus (fewer in quick mode)."
    return word_frequencies(_paragraphs("train", 200 if QUICK else 400))


def exercise_1() -> None:
    "Pieces per word of a lower-cased and a cased tokenizer of 8,192 pieces."
    header("exercise 1: a cased tokenizer (lowercase=False) at 8,192 pieces")
    train, valid = _paragraphs("train"), _paragraphs("validation")
    words = torch.tensor([len(p.split()) for p in valid], dtype=torch.float64)
    pieces, vocab = {}, {}
    for lowercase in (True, False):
        tokenizer = train_tokenizer(train, lowercase=lowercase)
        encoded = tokenizer.encode_batch(valid, add_special_tokens=False)
        pieces[lowercase] = torch.tensor([len(e.ids) for e in encoded], dtype=torch.float64)
        vocab[lowercase] = tokenizer.get_vocab()
        print(
            f"lowercase={lowercase!s:<5}: {pieces[lowercase].sum() / words.sum():.3f} pieces per word on validation "
            f"({int(pieces[lowercase].sum()):,} pieces)"
        )

    def measure(rows: torch.Tensor) -> dict[str, float]:
        "How many more pieces per word the cased tokenizer needs, over the paragraphs at `rows`."
        return {"more": (pieces[False][rows].sum() / pieces[True][rows].sum()).item() - 1}

    more = bootstrap(measure, len(valid), unit="paragraphs", fmt=".1%")["more"]
    copies = sorted(p for p in vocab[False] if p != p.lower() and p.lower() in vocab[False])
    readable = [c for c in copies if len(c) > 3 and not c.startswith(CONTINUATION)]  # whole words, not letters
    print(
        f"the cased tokenizer needs {more.difference:+.1%} pieces per word; {len(copies):,} of its "
        f"{len(vocab[False]):,} pieces are capitalised copies of pieces it also holds in lower case "
        f"({', '.join(readable[:3])}), room that the lower-cased vocabulary gives to "
        + more.says(
            lower="other pieces, which do not help here: the cased one needs fewer",
            higher="more words, so fewer are spelled in pieces",
        )
    )


def train_wordpiece_incremental(
    word_freqs: dict[str, int], vocab_size: int, rule: str = "count"
) -> tuple[list[str], list[tuple[str, str]]]:
    """`bertlib.data.tokenizer.train_wordpiece`, with the counts updated after each merge only for the words that held
    the merged pair, instead of recounted over every word. Same rules, same ties, so the same vocabulary."""
    splits = {w: [w[0]] + [CONTINUATION + c for c in w[1:]] for w in word_freqs}
    vocab = list(SPECIAL_TOKENS) + sorted({p for pieces in splits.values() for p in pieces})
    piece_freq: Counter[str] = Counter()
    pair_freq: Counter[tuple[str, str]] = Counter()
    words_with: defaultdict[tuple[str, str], set[str]] = defaultdict(set)  # which words hold each pair

    def count(word: str, sign: int) -> None:
        n, pieces = sign * word_freqs[word], splits[word]
        for p in pieces:
            piece_freq[p] += n
        for pair in zip(pieces, pieces[1:], strict=False):
            pair_freq[pair] += n
            if sign > 0:
                words_with[pair].add(word)

    for word in splits:
        count(word, +1)
    merges: list[tuple[str, str]] = []
    while len(vocab) < vocab_size and pair_freq:
        if rule == "count":
            best = min(pair_freq, key=lambda pair: (-pair_freq[pair], pair))  # not a verdict: the merge rule
        else:
            # not a verdict: the merge rule
            best = min(pair_freq, key=lambda p: (-pair_freq[p] / (piece_freq[p[0]] * piece_freq[p[1]]), p))
        merges.append(best)
        new_piece = best[0] + best[1].removeprefix(CONTINUATION)
        if new_piece not in vocab:
            vocab.append(new_piece)
        for word in words_with.pop(best):
            count(word, -1)
            pieces, merged, i = splits[word], [], 0
            while i < len(pieces):
                if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == best:
                    merged.append(new_piece)
                    i += 2
                else:
                    merged.append(pieces[i])
                    i += 1
            splits[word] = merged
            count(word, +1)
        for table in (pair_freq, piece_freq):  # a pair or piece no word holds any more is gone, as in a recount
            for key in [k for k, v in table.items() if v == 0]:
                del table[key]
    return vocab, merges


def exercise_2() -> None:
    "The incremental trainer against the library's, for both rules: the same vocabulary, and the time each takes."
    header("exercise 2: update the pair counts instead of recounting them")
    freqs = _small_corpus_frequencies()
    size = 400 if QUICK else 800
    for rule in ("count", "likelihood"):
        start = time.perf_counter()
        reference = train_wordpiece(freqs, size, rule=rule)
        recount = time.perf_counter() - start
        start = time.perf_counter()
        incremental = train_wordpiece_incremental(freqs, size, rule=rule)
        update = time.perf_counter() - start
        print(
            f"{rule:<10}: {len(freqs):,} words, {size} pieces; same vocabulary and merges: "
            f"{incremental == reference}; recount {recount:.2f} s, update {update:.2f} s "
            f"({recount / update:.1f}x faster)"
        )


def exercise_3() -> None:
    "A frequent word split differently at 400 pieces, with the scores behind each piece."
    header("exercise 3: a word the two rules split differently at 400 pieces")
    freqs = _small_corpus_frequencies()
    trained = {rule: train_wordpiece(freqs, 400, rule=rule) for rule in ("count", "likelihood")}
    tokenizers = {rule: WordPieceTokenizer(vocab) for rule, (vocab, _) in trained.items()}
    word = next(
        w
        for w, _ in freqs.most_common()
        if len(w) > 4 and tokenizers["count"].tokenize(w) != tokenizers["likelihood"].tokenize(w)
    )
    # the scores of the word's letter pairs before any merge: what each rule sees at the start
    splits = {w: [w[0]] + [CONTINUATION + c for c in w[1:]] for w in freqs}
    pieces, pairs = Counter(), Counter()
    for w, letters in splits.items():
        for p in letters:
            pieces[p] += freqs[w]
        for pair in zip(letters, letters[1:], strict=False):
            pairs[pair] += freqs[w]
    print(f"'{word}' occurs {freqs[word]} times in {len(freqs):,} distinct words")
    for rule, (_, merges) in trained.items():
        made = {a + b.removeprefix(CONTINUATION): i for i, (a, b) in enumerate(merges)}
        split = tokenizers[rule].tokenize(word)
        print(f"{rule:>10}: {split}, pieces made at merge " + ", ".join(str(made.get(p, "-")) for p in split))
    letters = list(zip(splits[word], splits[word][1:], strict=False))
    scores = {pair: (pairs[pair], pairs[pair] / (pieces[pair[0]] * pieces[pair[1]])) for pair in letters}
    for (a, b), (n, likelihood) in scores.items():
        print(f"   pair ({a}, {b}): count {n:5}, likelihood {likelihood:.2e}")
    by_count = max(letters, key=lambda pair: scores[pair][0])  # exact: counts of the whole corpus
    by_likelihood = max(letters, key=lambda pair: scores[pair][1])  # exact: counts of the whole corpus
    print(
        f"of this word's letter pairs, the count rule merges {by_count} first (count {scores[by_count][0]}), the "
        f"likelihood rule {by_likelihood} (likelihood {scores[by_likelihood][1]:.2e}"
        + (
            f", though it occurs only {scores[by_likelihood][0]} times): the likelihood divides by how common the "
            f"parts are, so it glues letters that seldom appear apart before the commonest pairs"
            if by_count != by_likelihood
            else "): both start from the same pair, and the splits part later, when merges of other words change "
            "the counts"
        )
    )
    for rule, (_, merges) in trained.items():
        first = merges[0]
        print(
            f"   for scale, the {rule} rule's first merge {first}: count {pairs[first]}, likelihood "
            f"{pairs[first] / (pieces[first[0]] * pieces[first[1]]):.2e}"
        )


if __name__ == "__main__":
    cli(__name__)
