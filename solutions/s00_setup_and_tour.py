"""Worked solutions of notebook 00's exercises (setup and tour): where `split_sentences` cuts wrongly, the
vocabulary of WikiText-2's train split, and why validation has more `<unk>` per word.

`python solutions/s00_setup_and_tour.py` runs them all; these read whole splits and take seconds even in full mode.
"""

import re
from collections import Counter

from common import cli, header, parse_heading, restore_joiners, split_documents, split_sentences

from bertlib import load_wikitext2

# tokens that end an abbreviation in WikiText's tokenised text, where the full stop became a token of its own
ABBREVIATIONS = ("Jr", "St", "Mt", "No", "Co", "Dr", "Mr", "Lt")


def _words(split: str) -> list[str]:
    "The words of `split` as the files store them, headings included (WikiText's vocabulary counts them)."
    return [w for row in load_wikitext2(split) for w in row.split()]


def _most_common(words: list[str]) -> str:
    return ", ".join(f"{w!r} {n}x" for w, n in Counter(words).most_common(3))


def exercise_1() -> None:
    "Three kinds of wrong cut, found by looking for sentences that cannot stand alone; what two fixes would break."
    header("exercise 1: where split_sentences cuts in the wrong place")
    cuts = []  # (sentence, the next one in its document, the text of its paragraph before it)
    for doc in split_documents(load_wikitext2("train"), unit="paragraphs"):
        paragraphs = [split_sentences(p) for p in doc]
        flat = [(s, " ".join(p[:k])) for p in paragraphs for k, s in enumerate(p)]
        cuts += [(s, nxt, before) for (s, before), (nxt, _) in zip(flat, [*flat[1:], ("", "")], strict=True)]
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
    found = {}
    for kind, test in kinds.items():
        found[kind] = [(s, following, before) for s, following, before in cuts if test(s)]
        s, following, _ = found[kind][0]
        print(f"{len(found[kind]):5,} sentences: {kind}\n      e.g. {s[-70:]!r} | next: {following[:60]!r}")
    quotes, abbreviations, titles = found.values()
    straight = [before for s, _, before in quotes if s == '"']
    closing = sum(before.count('"') % 2 == 1 for before in straight)
    print(
        f"fix 1, glue a lone quote to the sentence before: of the {len(straight):,} lone straight quotes, right for "
        f"the {closing:,} that close a quote opened earlier in their paragraph, wrong for the "
        f"{len(straight) - closing:,} that open one"
    )
    words = Counter(_words("train"))
    # the word after the cut: an ordinary word written lower-case elsewhere began a real sentence; a name did not
    after = [nxt.split()[0] for _, nxt, _ in abbreviations if nxt]
    ordinary = [w for w in after if words[w.lower()] > words[w]]
    names = [w for w in after if words[w.lower()] <= words[w]]
    print(
        f"fix 2, never end a sentence after {'/'.join(ABBREVIATIONS)}: right for the {len(names)} cuts before a "
        f"name or punctuation, which go on with the sentence ({_most_common(names)}), wrong for the {len(ordinary)} "
        f"before a word more often written lower-case, which begins a real sentence ({_most_common(ordinary)})"
    )
    common = Counter(s.split()[0] for s, _, _ in titles).most_common(5)
    print(
        f"fix 3: the tokens of a title look like a sentence's end, so only a list of titles helps; the {len(titles):,} "
        f"two-token sentences hold {len({s.split()[0] for s, _, _ in titles})} different words, and the 5 most "
        f"common ({', '.join(w for w, _ in common)}) make {sum(n for _, n in common) / len(titles):.0%} of them"
    )


def exercise_2() -> None:
    "Word types of the train split, as stored and with the joiners restored."
    header("exercise 2: distinct words of the train split, and the share that occurs once")
    text = [row for row in load_wikitext2("train") if row.strip() and parse_heading(row) is None]
    restored = [w for r in text for w in restore_joiners(r).split()]
    rarest = {}
    for name, words in (("as stored", _words("train")), ("restored", restored)):
        counts = Counter(w for w in words if w != "<unk>")
        once = [w for w, c in counts.items() if c == 1]
        rarest[name] = min(counts.values())
        print(
            f"words {name:<9} {len(counts):7,} distinct words, {len(once):6,} ({len(once) / len(counts):.1%}) occur "
            f"once; the rarest occurs {rarest[name]} times"
        )
    joined = [w for w in once if re.search(r"\w[-,.]\w", w)]  # `once` is the restored text's
    print(
        f"as stored no word occurs fewer than {rarest['as stored']} times: WikiText made every rarer word <unk>"
        if rarest["as stored"] > 1  # exact: a count over the whole split
        else "as stored some words occur once: WikiText kept rare words"
    )
    print(
        f"of the words that occur once with the joiners restored, {len(joined) / max(1, len(once)):.0%} are words "
        f"that a restored joiner glued together (e.g. {', '.join(joined[:3])})"
    )


def exercise_3() -> None:
    "The <unk> rate of each split, and where the vocabulary comes from."
    header("exercise 3: why validation has more <unk> per word than train")
    train_counts = Counter(_words("train"))
    train_types = set(train_counts) - {"<unk>"}
    rate, outside = {}, {}
    for split in ("train", "validation", "test"):
        words = _words(split)
        rate[split] = sum(w == "<unk>" for w in words) / len(words)
        outside[split] = len({w for w in words if w != "<unk>"} - train_types)
        print(
            f"{split:<11} {rate[split]:6.2%} of the words are <unk>; "
            f"{outside[split]} of its other word types are missing from train's"
        )
    rarest = min(c for w, c in train_counts.items() if w != "<unk>")
    if outside["validation"] == outside["test"] == 0:
        print(
            f"every word of validation and test that is not <unk> is one of train's: the vocabulary is train's words "
            f"(the rarest occurs {rarest} times in train), so a word that validation's articles use and train has "
            f"rarely or never is <unk> there; validation's rate is {rate['validation'] / rate['train']:.2f}x train's"
        )
    else:
        print(
            f"validation uses {outside['validation']} word types that train lacks, so the vocabulary is not train's "
            f"alone; validation's <unk> rate is {rate['validation'] / rate['train']:.2f}x train's"
        )


if __name__ == "__main__":
    cli(__name__)
