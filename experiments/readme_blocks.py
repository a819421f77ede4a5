"""The README's generated sections: each lies between `<!-- NAME:start -->` and `<!-- NAME:end -->` and is
rewritten whole by the script that measures what it shows, so that no number in it is typed by hand."""

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def replace_block(name: str, body: str, readme: Path = README) -> None:
    "Put `body` between the markers of section `name` in the README (the markers must be there)."
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = readme.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise SystemExit(f"{readme} lacks the markers {start} ... {end}; add them where the section belongs")
    text = text[:text.index(start) + len(start)] + "\n" + body.strip("\n") + "\n" + text[text.index(end):]
    readme.write_text(text, encoding="utf-8")
