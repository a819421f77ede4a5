"""Worked solutions of notebook 00's exercises (setup and tour): where `split_sentences` cuts wrongly, the
vocabulary of WikiText-2's train split, and why validation has more `<unk>` per word.

`python solutions/s00_setup_and_tour.py` runs them all; these read whole splits and take seconds even in full mode.
"""

from collections import Counter

from common import header, run_all

from bertlib import load_wikitext2
from bertlib.data.wikitext import parse_heading, restore_joiners, split_documents

# tokens that end an abbreviation in WikiText's tokenised text, where the full stop became a token of its own
ABBREVIATIONS = ("Jr", "St", "Mt", "No", "Co", "Dr", "Mr", "Lt")


def _words(split: str) -> list[str]:
    "The words of `split` as the files store them, headings included (WikiText's vocabulary counts them)."
    return [w for row in load_wikitext2(split) for w in row.split()]


def exercise_1() -> None:
    "Three kinds of wrong cut, found by looking for sentences that cannot stand alone."
    header("exercise 1: where split_sentences cuts in the wrong place")
    sentences = [s for doc in split_documents(load_wikitext2("train")) for s in doc]
    following = dict(zip(sentences, sentences[1:], strict=False))
    kinds = {
        "a closing quote left alone (the quote opened in an earlier sentence)": lambda s: s in ('"', "'", "”"),
        "a cut after an abbreviation whose full stop is a token (Jr . / St . ...), before a capital": lambda s: (
            len(s.split()) > 2 and s.split()[-2] in ABBREVIATIONS
        ),
        "an exclamation inside a title (Hibari-kun !, Time .), cut as a sentence": lambda s: (
            len(s.split()) == 2
            and s.split()[0][:1].isupper()
            and s.split()[1] in ".!"
            and s.split()[0] not in ABBREVIATIONS
        ),
    }
    for kind, test in kinds.items():
        found = [s for s in sentences if test(s)]
        example = found[0]
        print(f"{len(found):5,} sentences: {kind}\n      e.g. {example[-70:]!r} | next: {following[example][:60]!r}")
    print(
        "rules that would fix them: glue a sentence of closing punctuation only to the one before (breaks "
        "nothing we found); never end after Jr/St/Mt/No (breaks the rare sentence that truly ends with one); "
        "titles need a list of names, which no rule on tokens can know"
    )


def exercise_2() -> None:
    "Word types of the train split, as stored and with the joiners restored."
    header("exercise 2: distinct words of the train split, and the share that occurs once")
    text = [row for row in load_wikitext2("train") if row.strip() and parse_heading(row) is None]
    restored = [w for r in text for w in restore_joiners(r).split()]
    for name, words in (("words as stored", _words("train")), ("joiners restored (the notebook's words)", restored)):
        counts = Counter(w for w in words if w != "<unk>")
        once = sum(1 for c in counts.values() if c == 1)
        print(
            f"{name:<42} {len(counts):7,} distinct words, {once:6,} ({once / len(counts):.1%}) occur once; "
            f"the rarest occurs {min(counts.values())} times"
        )
    print(
        "as stored no word occurs fewer than 3 times: WikiText replaced rarer words by <unk>; the words that occur "
        "once are compounds that the restored joiners make (state-of-the-art)"
    )


def exercise_3() -> None:
    "The <unk> rate of each split, and where the vocabulary comes from."
    header("exercise 3: why validation has more <unk> per word than train")
    train_types = set(_words("train")) - {"<unk>"}
    for split in ("train", "validation", "test"):
        words = _words(split)
        unknown = sum(w == "<unk>" for w in words)
        outside = len({w for w in words if w != "<unk>"} - train_types)
        print(
            f"{split:<11} {unknown / len(words):6.2%} of the words are <unk>; "
            f"{outside} of its other word types are missing from train's"
        )
    print(
        "the vocabulary is train's words that occur at least 3 times; every other word is <unk>, so a word that "
        "the validation articles use but train has rarely or never (names, places of other topics) is <unk> there"
    )


def main() -> None:
    "Run every exercise of this notebook, in order."
    run_all(__name__)


if __name__ == "__main__":
    main()
