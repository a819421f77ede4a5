"""What every study in `experiments/` shares: where its files go, result files that say how they were made, and the
last step of every report, which publishes only complete, full-mode results on the study's page of the site.

Hand-written; not part of the library. The studies are scripts (`python experiments/NAME.py`), so this folder is on
their `sys.path` and they import this module as `study`; bertlib comes from its installation (`pip install -e .`).
What the studies share with the benchmarks (provenance, result files, the pages' blocks) is `docs/publish.py`.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))  # docs/publish.py: what every report shares, studies and benchmarks alike
import publish  # noqa: E402

MissingResults = publish.MissingResults
commit = publish.commit
result_files = publish.result_files
read_json = publish.read_result
refuse_missing = publish.refuse_missing
write_json = publish.write_json


def provenance(smoke: bool) -> dict:
    """What a study's result file records of how it was made: `provenance` (`publish.provenance`: full or trial mode,
    machine, threads, commit, date) and, as the reports show them, the machine, threads and commit."""
    made = publish.provenance("trial" if smoke else "full")
    return {"machine": made["machine"], "threads": made["threads"], "commit": made["commit"], "provenance": made}


def unpublished(results: dict[Path, dict], lacking: str | None = None) -> str | None:
    """Why the results (by file) may not be published, or None: some were made in a trial mode or do not say how,
    or the report lacks part of what its page shows (`lacking`)."""
    trials = [path for path, result in results.items() if (result.get("provenance") or {}).get("mode") != "full"]
    reasons = []
    if trials:
        reasons.append(
            f"{len(trials)} of the {len(results)} results in {trials[0].parent} were made in a trial mode or do not "
            f"say how they were made ({trials[0].name}{', ...' if len(trials) > 1 else ''})"
        )
    if lacking:
        reasons.append(lacking)
    return "; ".join(reasons) or None


def check_publishable(out: Path, page: Path, why_not: str | None) -> None:
    """Before a report writes anything: results that may not be published (`why_not`) are refused when `out` is
    where published results live; elsewhere (a trial's folder) the report writes there and leaves `page` alone."""
    if why_not and publish.is_published(out):
        raise MissingResults(f"{why_not}: {out} and {page} are left as they are")


def publish_block(name: str, body: str, page: Path, why_not: str | None) -> None:
    "The last step of a report: `page`'s block `name` becomes `body`, unless the results may not be published."
    if why_not:
        print(f"{page} is left as it is: {why_not}", file=sys.stderr)
    else:
        publish.write_block(name, body, page)


def output_options(parser: argparse.ArgumentParser, folder: Path, block: str, smoke: str | None = None) -> None:
    """Add `--out` (the study's folder, `folder` by default), `--page` (the page whose generated block `block` the
    study rewrites) and, when the study has a smallest mode (`smoke` says what it does), `--smoke`, which needs an
    `--out`."""
    parser.add_argument(
        "--out",
        type=Path,
        default=folder,
        help=f"folder of the results, runs and report (default: {folder.relative_to(ROOT)})",
    )
    publish.page_option(parser, block)
    if smoke:
        parser.add_argument("--smoke", action="store_true", help=f"{smoke}; only with --out elsewhere")


def parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    "Parse the command line and note the commit the process starts from; `--smoke` must not write into the study."
    commit()
    args = parser.parse_args()
    if getattr(args, "smoke", False) and publish.is_published(args.out):
        parser.error("--smoke writes a trial result: give it an --out outside the folders of published results")
    return args
