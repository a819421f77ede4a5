"""Words checked against outputs: every number in a notebook's prose was printed by that notebook, is written in
one of the repository's results files, or is a literature number listed with its citation in
`docs/literature_numbers.toml`.

What is a number. The markdown cells are read as prose, with these parts left out because they are not claims:
code (fenced blocks and inline `code`, which runs or names settings), LaTeX math (`$...$`), link targets and
HTML tags. In what is left:

- checked: every number with a decimal point, an exponent (`1e-4`), a multiplier (`10k`, `5.5M`, `3.3 billion`),
  a ratio sign (`1.44x`) or a percent sign (`2%`), and every whole number of 10 or more (`1,000` is `1000`);
- not checked: whole numbers below 10 without such a mark (counts such as "4 layers", indices such as "head 2",
  the "2" of "ln 2"), notebook numbers (`07`, "notebook 10", "notebooks 10-12", the first column of a table of
  notebooks), section numbers ("section 3.1"), the enumerators of headings and numbered lists, four-digit years
  written without a thousands comma (1950 to 2039, as in "Devlin et al. 2019"; so write counts with one, "2,000
  steps"), and numbers that are part of a name (`WikiText-2`, `fp32`, `H100`, `L-4_H-256`).

When is a number supported. A prose number stands for a value known to the precision it is written with: "24.4"
for 24.35 to 24.45, "5.5M" for 5.45M to 5.55M, "22" for 21.5 to 22.5. It is supported when

- a number printed in an output of the same notebook (streams, plain text, the text of HTML) rounds to it; a
  percentage also matches a printed fraction ("49.3%" and 0.493), and a fraction a printed percentage; or
- a number in a results report has exactly its value: the generated blocks of the site's pages, the reports that the
  experiments write from their results (`docs/results/**/*.md`, `experiments/*/README.md`), and the course
  model's `README.md`, `evaluation.json` and `config.json`. Only an exact match counts there, and raw logs and
  metric files (`*.jsonl`, `log.txt`, the studies' per-run JSON) are left out: they hold every step number and
  thousands of unrounded values, which would support almost any number; or
- `docs/literature_numbers.toml` lists its value (a published number, each with what it is and its citation).

Signs are ignored ("-71%" and "71% lower" are the same claim). The check reads numbers, not meaning: a number may
pass because an unrelated printed number rounds to it (most easily a small or round one), so it catches numbers
that appear nowhere, not every misquoted one. A failure names the notebook, the cell and the number in its
sentence; fix the prose (quote the printed value, or say it without a number), never this rule.
"""

import json
import re
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LITERATURE = ROOT / "docs" / "literature_numbers.toml"

_MULTIPLIERS = {"k": 3, "K": 3, "M": 6, "B": 9, "thousand": 3, "million": 6, "billion": 9}
_NUMBER = re.compile(
    r"""
    (?P<mantissa>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?
    (?:[eE](?P<exp>[-+−]?\d{1,3})(?!\d))?  # an exponent of at most 3 digits: not the inside of a hex hash
    (?:\s?(?P<word>thousand|million|billion)\b|(?P<suffix>[kKMBx])(?![A-Za-z0-9]))?
    (?P<pct>\s?%)?
""",
    re.X,
)
# parts of a markdown cell that are not prose claims; each is replaced by a space
_NOT_PROSE = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]+\$|\]\([^)]*\)|<[^>\n]*>", re.S)
_NOTEBOOK_REFS = [
    re.compile(r"\bnotebooks?\s+\d{2}(?:\s*(?:,|and|or|to|–|-|—)\s*\d{2})*", re.I),  # notebook 10, notebooks 10-12
    re.compile(r"(?<![\d.,])0\d(?:\s*[–-]\s*(?:0\d|1[0-2]))?(?![\d.,%])"),  # 07, 02–05, 09–11
    re.compile(r"^\|\s*\d{2}(?:\s*[–-]\s*\d{2})?", re.M),  # the first column of a table of notebooks
    re.compile(r"\b(?:sections?|§)\s*\d+(?:\.\d+)*", re.I),  # "section 3.1" of a paper
    re.compile(r"^#+\s*\d+(?:\.\d+)*[.·]?", re.M),  # "## 10. The command line"
    re.compile(r"^\s*\d+[.)]\s", re.M),  # numbered lists
]
_GENERATED = re.compile(r"<!-- (\S+):start -->(.*?)<!-- \1:end -->", re.S)


@dataclass(frozen=True)
class Number:
    "A number as written: its value, the step it is rounded to, and whether it is a percentage."

    text: str
    value: Decimal
    quantum: Decimal
    percent: bool


def _parse(match: re.Match) -> Number:
    digits = match["mantissa"].replace(",", "") + ("." + match["frac"] if match["frac"] else "")
    shift = int((match["exp"] or "0").replace("−", "-")) + _MULTIPLIERS.get(match["word"] or match["suffix"] or "", 0)
    scale = Decimal(10) ** shift
    return Number(
        match.group(0).strip(),
        Decimal(digits) * scale,
        Decimal(10) ** -len(match["frac"] or "") * scale,
        bool(match["pct"]),
    )


def numbers_in_text(text: str) -> list[Number]:
    "Every number in printed text, attached to words or not (`step-0008556` holds 8556)."
    return [_parse(m) for m in _NUMBER.finditer(text)]


def _is_checked(number: Number, match: re.Match) -> bool:
    marked = match["frac"] or match["exp"] or match["word"] or match["suffix"] or match["pct"]
    if not marked and number.value < 10:
        return False
    year = re.fullmatch(r"\d{4}", match.group(0).strip())
    return not (year and 1950 <= number.value <= 2039)


def prose_numbers(markdown: str) -> list[tuple[Number, str]]:
    "The checked numbers of a markdown cell, each with the sentence around it."
    text = _NOT_PROSE.sub(" ", markdown)
    for pattern in _NOTEBOOK_REFS:
        text = pattern.sub(lambda m: re.sub(r"\d", " ", m.group(0)), text)
    found = []
    for match in _NUMBER.finditer(text):
        before, after = text[max(0, match.start() - 2) : match.start()], text[match.end() : match.end() + 1]
        if re.search(r"[\w.]\Z|[A-Za-z]-\Z", before) or re.match(r"[A-Za-z0-9_]", after):
            continue  # part of a name (WikiText-2, fp32), or of a longer token
        number = _parse(match)
        if _is_checked(number, match):
            found.append((number, " ".join(text[max(0, match.start() - 60) : match.end() + 40].split())))
    return found


def _outputs_text(cell: dict) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        data = output.get("data", {})
        for kind in ("text/plain", "text/markdown", "text/html"):
            parts.append(re.sub(r"<[^>]*>", " ", "".join(data.get(kind, ""))))
    return "\n".join(parts)


def generated_blocks(root: Path = ROOT) -> list[str]:
    "The generated blocks of the site's pages (`docs/*.md`), which the results' scripts write from result files."
    pages = sorted((root / "docs").glob("*.md"))
    return [m.group(2) for page in pages for m in _GENERATED.finditer(page.read_text(encoding="utf-8"))]


def results_values(root: Path = ROOT) -> set[Decimal]:
    "Every number written in the repository's results reports, by value."
    texts = generated_blocks(root)
    files = [
        *(root / "docs" / "results").rglob("*.md"),
        *root.glob("experiments/*/README.md"),
        *(root / "models" / "course-mini" / name for name in ("README.md", "evaluation.json", "config.json")),
    ]
    texts += [p.read_text(encoding="utf-8") for p in files]
    return {n.value for text in texts for n in numbers_in_text(text)}


def literature_values(path: Path = LITERATURE) -> dict[Decimal, dict]:
    "The literature numbers by value, each entry with `value`, `what` and `citation`."
    entries = tomllib.loads(path.read_text(encoding="utf-8"))["number"]
    values = {}
    for entry in entries:
        parsed = numbers_in_text(entry["value"])
        if len(parsed) != 1 or not entry.get("what") or not entry.get("citation"):
            raise ValueError(f"{path.name}: {entry} needs one number as `value`, a `what` and a `citation`")
        values[parsed[0].value] = entry
    return values


def _rounds_to(printed: Number, number: Number) -> bool:
    candidates = [printed.value]
    if number.percent and not printed.percent:
        candidates.append(printed.value * 100)
    if printed.percent and not number.percent:
        candidates.append(printed.value / 100)
    return any(abs(c - number.value) <= number.quantum / 2 for c in candidates)


def unsupported_numbers(notebook: dict, results: set[Decimal], literature: set[Decimal]) -> list[tuple[int, str, str]]:
    "`(cell index, number, sentence)` for each prose number of `notebook` that nothing supports."
    printed = [
        n for cell in notebook["cells"] if cell["cell_type"] == "code" for n in numbers_in_text(_outputs_text(cell))
    ]
    missing = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for number, sentence in prose_numbers("".join(cell["source"])):
            if number.value in results or number.value in literature:
                continue
            if not any(_rounds_to(p, number) for p in printed):
                missing.append((index, number.text, sentence))
    return missing


def _notebook(markdown: str, printed: str) -> dict:
    return {
        "cells": [
            {"cell_type": "code", "source": [], "outputs": [{"output_type": "stream", "text": [printed]}]},
            {"cell_type": "markdown", "source": [markdown]},
        ]
    }


def test_the_checker_flags_numbers_that_nothing_printed():
    notebook = _notebook(
        "After 1,200 steps of notebook 07 the loss was\n3.14 (about 24 minutes, 49.3% NSP); "
        "`lr=5e-4` in 4 layers, WikiText-2, Devlin et al. 2019.\n\n1. an exercise",
        "step 1200: loss 3.1, 24.4 min, nsp_accuracy 0.493",
    )
    missing = unsupported_numbers(notebook, results=set(), literature=set())
    assert [number for _, number, _ in missing] == ["3.14"]  # 3.1 printed is not 3.14; 24 is 24.4 rounded
    assert unsupported_numbers(notebook, results={Decimal("3.14")}, literature=set()) == []
    assert unsupported_numbers(notebook, results=set(), literature={Decimal("3.14")}) == []


def test_the_checker_reads_multipliers_percentages_and_names():
    values = {
        n.text: n.value
        for n, _ in prose_numbers(
            "5.5M parameters, 10k steps, 3.3 billion words, 1.44x, 2% of SST-2, fp32 and L-4_H-256, 1e-4, 30,522 pieces"
        )
    }
    assert values == {
        "5.5M": Decimal("5500000"),
        "10k": Decimal("10000"),
        "3.3 billion": Decimal("3300000000"),
        "1.44x": Decimal("1.44"),
        "2%": Decimal("2"),
        "1e-4": Decimal("0.0001"),
        "30,522": Decimal("30522"),
    }
    five_and_a_half = prose_numbers("5.5M")[0][0]
    assert _rounds_to(numbers_in_text("5,529,090")[0], five_and_a_half)
    assert not _rounds_to(numbers_in_text("5,449,999")[0], five_and_a_half)


def test_every_literature_number_has_a_citation_and_is_used():
    literature = literature_values()
    used = {
        number.value
        for path in NOTEBOOKS
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]
        if cell["cell_type"] == "markdown"
        for number, _ in prose_numbers("".join(cell["source"]))
    }
    # an entry that names a `task` is a published score that experiments/finetune_study.py sets beside its own
    unused = [entry["value"] for value, entry in literature.items() if value not in used and "task" not in entry]
    assert not unused, f"{LITERATURE.name} lists numbers that no notebook's prose uses: {unused}"


@pytest.fixture(scope="module")
def supported():
    return results_values(), set(literature_values())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_number_in_the_prose_was_printed_or_is_cited(path, supported):
    missing = unsupported_numbers(json.loads(path.read_text(encoding="utf-8")), *supported)
    report = "\n".join(f"  cell {index}: {number!r} in '...{sentence}...'" for index, number, sentence in missing)
    assert not missing, (
        f"{path.name}: numbers that no output of the notebook, no results file and no entry of "
        f"{LITERATURE.name} supports:\n{report}"
    )


# the README and the pages of results: every number they state is on a results page or in a results report, cited, in
# a saved full-mode output of the solutions, or printed by a notebook (the command line's and the survival claims'
# pages hold settings and exit codes, not results)
RESULTS_PAGES = [
    ROOT / "README.md",
    *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.stem not in ("command-line", "runs-that-survive")),
]


@pytest.mark.parametrize("page", RESULTS_PAGES, ids=[p.name for p in RESULTS_PAGES])
def test_every_number_on_the_readme_and_the_results_pages_is_measured_or_cited(page, supported):
    results, literature = supported
    solutions = {
        n.value for p in (ROOT / "solutions" / "outputs").glob("*.txt") for n in numbers_in_text(p.read_text())
    }
    printed = [
        n
        for path in NOTEBOOKS
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]
        if cell["cell_type"] == "code"
        for n in numbers_in_text(_outputs_text(cell))
    ]
    missing = [
        f"'{number.text}' in '...{sentence}...'"
        for number, sentence in prose_numbers(_GENERATED.sub(" ", page.read_text(encoding="utf-8")))
        if number.value not in results | literature | solutions and not any(_rounds_to(p, number) for p in printed)
    ]
    assert not missing, f"{page.name}: numbers that no result, citation or output supports:\n" + "\n".join(missing)
