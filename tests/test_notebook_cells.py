"""The course reads in small cells: no code cell of a notebook is longer than 40 lines, except the few that the
prose before them names as longer, with its reason (at most three in the whole course). And its saved outputs show the
idea, not the machinery: no training run's notice about CPU threads or a slowed run (the command line says those)."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONGEST = 40
# (notebook, cell id): the cells the prose names, each a class that reads best whole
NAMED = {("05_bert_pretraining_heads", "c006e"), ("06_pretraining_data", "c027b")}


def long_cells() -> set[tuple[str, str]]:
    found = set()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code" and len("".join(cell["source"]).splitlines()) > LONGEST:
                found.add((path.stem, cell["id"]))
    return found


def test_no_code_cell_is_longer_than_40_lines_but_the_named_ones():
    assert len(NAMED) <= 3
    assert long_cells() <= NAMED, f"code cells over {LONGEST} lines: {sorted(long_cells() - NAMED)}"


def test_the_prose_names_each_long_cell():
    for notebook, cell_id in NAMED:
        cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
        index = next(i for i, c in enumerate(cells) if c["id"] == cell_id)
        before = "".join(cells[index - 1]["source"])
        assert cells[index - 1]["cell_type"] == "markdown" and "40 lines" in before, (notebook, cell_id)


# what a training run says on the command line about how it shares the CPU (bertlib.train.lifecycle, .loop, .pace)
NOTICES = re.compile(r"CPU thread\(s\)|CPU threads, the count|training slowed to")


def test_no_saved_output_carries_a_notice_about_threads_or_a_slowed_run():
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
                found += [f"{path.stem} {cell['id']}: {line}" for line in text.splitlines() if NOTICES.search(line)]
    assert not found, "saved outputs print the command line's notices:\n" + "\n".join(found)
