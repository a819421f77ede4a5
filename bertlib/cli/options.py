"""Command-line options made from the settings dataclasses: one option per field (`--max-steps` for `max_steps`),
typed, with the help text and choices of the field's metadata, so that a new setting is one edit in
`bertlib.train.settings` or `bertlib.model.config`.

Written by hand; the command line uses it. It imports nothing from bertlib.
"""

__all__ = ["add_config_options", "given_options"]

import argparse
import types
from dataclasses import MISSING, fields
from typing import Any, Union, get_args, get_origin


def _field_type(annotation: Any) -> type:
    "The plain type of a config field: `int | None` -> int."
    if get_origin(annotation) in (Union, types.UnionType):
        return next(t for t in get_args(annotation) if t is not type(None))
    return annotation


def add_config_options(parser: argparse.ArgumentParser, config_class: type, exclude: tuple[str, ...] = ()) -> None:
    """One option per field of a config dataclass (`--max-steps` for `max_steps`), typed, with the help text
    and choices of the field's metadata. Options not given stay None, so that only what the user typed
    overrides the defaults or a resumed run's settings."""
    for f in fields(config_class):
        if f.name in exclude:
            continue
        kind = f.metadata.get("parse", _field_type(f.type))
        default = "" if f.default is MISSING or f.default is None else f" ({f.default})"
        if kind is bool:
            typed = {"action": argparse.BooleanOptionalAction}
        else:
            metavar = {int: "N", float: "X"}.get(kind, None if "choices" in f.metadata else "S")
            typed = {"type": kind, "metavar": metavar}
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            default=None,
            help=f.metadata.get("help", "") + default,
            choices=f.metadata.get("choices"),
            **typed,
        )


def given_options(args: argparse.Namespace, config_class: type) -> dict[str, Any]:
    "The config fields the user typed on the command line."
    return {f.name: value for f in fields(config_class) if (value := getattr(args, f.name, None)) is not None}
