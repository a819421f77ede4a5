import os
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import normalizers, pre_tokenizers

from bertlib.data.tokenizer import (
    SPECIAL_TOKENS,
    WordPieceTokenizer,
    load_tokenizer,
    normalize,
    pre_tokenize,
    save_tokenizer,
    tokenizer_from_vocab,
    tokenizer_vocab,
    train_tokenizer,
    train_wordpiece,
    word_frequencies,
    wordpiece,
)

ADVERSARIAL = [
    "",
    " ",
    "\t\n",
    "Café résumé naïve",
    "ÅNGSTRÖM İstanbul ΟΔΟΣ ΣΑΣ",
    "北京欢迎你 and 東京 𠀀",
    "こんにちは 안녕하세요",
    "emoji 🤗🦞👩‍👩‍👧 ok",
    "ctrl\x00\x07\x1f\x7f\u200b\ufeff\u00adchars",
    "tabs\tand\nnewlines\r\n\u2028",
    "x" * 101,
    "a" * 100,
    "é" * 101,
    "[MASK] [CLS][SEP] [PAD]x[MASK]y",
    "<unk> <UNK> [UNK] [unk] un<unk>k <unk><unk>",
    "$3.50 + 20% = <tag> @user #hash ~`^|",
    "\ufffd\ufffd replacement",
    "x\u0301\u0302 combining \u0301",
    "ﬁnal ligature",
    "ＦＵＬＬ ｗｉｄｔｈ",
    "\U0010ffff private \ue000",
    "state @-@ of @-@ the @-@ art 1 @,@ 000",
]


@pytest.fixture(scope="session")
def ours(fast_tokenizer):
    return WordPieceTokenizer(tokenizer_vocab(fast_tokenizer))


@pytest.fixture(scope="session")
def unicode_disagreements():
    """Code points that the reference (Rust, several Unicode table versions) classifies differently from
    Python's unicodedata; the only places where the two tokenizers may legitimately differ."""
    reference, splitter = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    bad = set()
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        ref = reference.normalize_str(ch)
        if normalize(ch) != ref or pre_tokenize(f"a{ref}a") != [w for w, _ in splitter.pre_tokenize_str(f"a{ref}a")]:
            bad.add(ch)
    return bad


def test_special_tokens_have_fixed_ids(fast_tokenizer):
    assert [fast_tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert fast_tokenizer.get_vocab_size() == 8192


@pytest.mark.slow
@pytest.mark.parametrize("split", ["validation", "test"])
def test_equal_to_fast_tokenizer_on_every_line(split, wikitext, fast_tokenizer, ours):
    lines = wikitext[split]
    fast_ids = [e.ids for e in fast_tokenizer.encode_batch(lines)]
    differ = [line for line, ids in zip(lines, fast_ids, strict=True) if ours.encode(line) != ids]
    assert differ == []
    assert sum(map(len, fast_ids)) > 200_000  # the comparison really covered the split


def test_equal_on_adversarial_strings(fast_tokenizer, ours):
    for text in ADVERSARIAL:
        assert ours.encode(text) == fast_tokenizer.encode(text).ids, repr(text)
        assert ours.encode(text, text) == fast_tokenizer.encode(text, text).ids, repr(text)


def test_decode_equals_fast_decoder(wikitext, fast_tokenizer, ours):
    for line in wikitext["validation"][:500]:
        ids = fast_tokenizer.encode(line).ids
        assert ours.decode(ids) == fast_tokenizer.decode(ids)  # both keep [UNK], so a lost word shows


_pieces = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    st.sampled_from(["[MASK]", "[CLS]", "<unk>", "[UNK]", " ", "@-@", "##", "x" * 101, "é"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_pieces, max_size=8).map("".join))
def test_fuzz_never_crashes_and_agrees(fast_tokenizer, ours, unicode_disagreements, text):
    ids = ours.encode(text)
    assert ids[0] == 2 and ids[-1] == 3 and all(0 <= i < len(ours) for i in ids)
    assert isinstance(ours.decode(ids), str)
    if not set(text) & unicode_disagreements:
        assert ids == fast_tokenizer.encode(text).ids


def test_unicode_disagreements_are_few_and_recent(unicode_disagreements):
    # a regression guard: if our normaliser drifted, thousands of characters would differ
    assert 0 < len(unicode_disagreements) < 1000
    assert not unicode_disagreements & set("".join(ADVERSARIAL))


def test_pair_layout(fast_tokenizer):
    enc = fast_tokenizer.encode("The lobster is blue .", "It lives in the sea .")
    sep = enc.tokens.index("[SEP]")
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]" and enc.tokens.count("[SEP]") == 2
    assert enc.type_ids == [0] * (sep + 1) + [1] * (len(enc.tokens) - sep - 1)
    assert enc.special_tokens_mask == [1] + [0] * (sep - 1) + [1] + [0] * (len(enc.tokens) - sep - 2) + [1]
    assert fast_tokenizer.encode("x").tokens == ["[CLS]", "x", "[SEP]"]


def test_wikitext_unk_becomes_unk(fast_tokenizer, ours):
    assert fast_tokenizer.encode("a <unk> b", add_special_tokens=False).ids[1] == 1
    assert ours.tokenize("a <unk> b") == ["a", "[UNK]", "b"]


def test_wordpiece_rules():
    vocab = {"[UNK]", "un", "##aff", "##able", "aff", "##a", "##ble"}
    assert wordpiece("unaffable", vocab) == ["un", "##aff", "##able"]
    assert wordpiece("unaffablex", vocab) == ["[UNK]"]  # the whole word, not just the tail
    assert wordpiece("a" * 101, {"a", "##a"}) == ["[UNK]"]
    assert wordpiece("a" * 100, {"a", "##a"}) == ["a"] + ["##a"] * 99


def test_basic_tokenizer():
    assert pre_tokenize(normalize("Héllo,   WORLD!")) == ["hello", ",", "world", "!"]
    assert pre_tokenize(normalize("北京x")) == ["北", "京", "x"]
    assert normalize("ΟΔΟΣ") == "οδοσ"  # per character: no final sigma
    assert normalize("Ab", lowercase=False) == "Ab" and normalize("é", lowercase=False) == "é"
    assert pre_tokenize(normalize("a\x00b\u200bc\td")) == ["abc", "d"]


def test_save_and_load_round_trip(tmp_path, fast_tokenizer):
    path = save_tokenizer(fast_tokenizer, tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    assert loaded.to_str() == fast_tokenizer.to_str() and load_tokenizer(path).to_str() == fast_tokenizer.to_str()
    vocab = (tmp_path / "tok" / "vocab.txt").read_text().splitlines()
    assert vocab == tokenizer_vocab(fast_tokenizer)
    rebuilt = tokenizer_from_vocab(vocab)
    for text in ADVERSARIAL:
        assert rebuilt.encode(text).ids == fast_tokenizer.encode(text).ids
    assert WordPieceTokenizer(tmp_path / "tok" / "vocab.txt").vocab == WordPieceTokenizer(vocab).vocab
    assert not [p for p in (tmp_path / "tok").iterdir() if p.name.endswith(".tmp")]


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="prepare"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not a tokenizer.json that the tokenizers library can read"):
        load_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="special tokens"):
        tokenizer_from_vocab(["[PAD]", "[UNK]", "a"])
    with pytest.raises(ValueError, match="unknown token"):
        WordPieceTokenizer(["a", "b"])


def test_train_tokenizer_options():
    texts = ["The lobster is blue .", "Lobsters live in the sea ."] * 20
    tok = train_tokenizer(texts, vocab_size=60, lowercase=False)
    assert tok.get_vocab_size() <= 60 and "T" in tok.get_vocab()
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(texts, vocab_size=5)


def test_trainer_rules_on_a_small_table():
    freqs = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}
    vocab, merges = train_wordpiece(freqs, 16, rule="count")
    # "u"+"##g" occurs 20 times (hug, pug, hugs), "u"... the most frequent pair is ("##u", "##g")
    assert merges[0] == ("##u", "##g")
    assert vocab[:5] == list(SPECIAL_TOKENS) and len(vocab) == 16
    _, likelihood_merges = train_wordpiece(freqs, 16, rule="likelihood")
    # ##g##s: freq 5 / (freq(##g)=20 * freq(##s)=5) beats every other pair
    assert likelihood_merges[0] == ("##g", "##s")
    assert train_wordpiece(freqs, 16) == (vocab, merges)  # deterministic
    with pytest.raises(ValueError, match="rule"):
        train_wordpiece(freqs, 16, rule="bpe")


def test_trainer_stops_when_nothing_is_left_to_merge():
    vocab, merges = train_wordpiece({"ab": 3}, 100)
    assert vocab == [*SPECIAL_TOKENS, "##b", "a", "ab"] and merges == [("a", "##b")]


def test_word_frequencies():
    counts = word_frequencies(["The cat, the <unk> hat.", "CAT"])
    assert counts == {"the": 2, "cat": 2, ",": 1, "hat": 1, ".": 1}
    assert unicodedata.normalize("NFD", "é") != "é"  # the test data really has accents to strip


def test_training_is_reproducible_across_processes(monkeypatch):
    # The Rust trainer lists pieces in a per-process hash order, and with several threads it chose between equally
    # frequent pairs differently about once in 40 runs of these texts (##er or ##te): train_tokenizer must hide both.
    script = (
        "from bertlib.data.tokenizer import train_tokenizer; import sys; "
        "texts = [f'word{i % 97} piece{i % 13}x{i % 7} lobster' for i in range(3000)]; "
        "sys.stdout.write(train_tokenizer(texts, vocab_size=300).to_str())"
    )
    runs = {
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
        for _ in range(6)
    }
    assert len(runs) == 1 and '"[MASK]":4' in runs.pop()
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")  # the user's setting outlives training
    train_tokenizer(["a b c"], vocab_size=10)
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
