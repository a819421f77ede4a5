"""Checks of settings, each raising a one-line ValueError that names the setting, its value and what is allowed.

Written by hand; every settings class (`BertConfig`, the training configs) and public function uses them. It
imports nothing from bertlib.
"""

__all__ = ["check_choice", "check_positive_ints", "check_positive", "check_non_negative"]

import math
from collections.abc import Sequence
from typing import Any


def check_choice(name: str, value: str, allowed: Sequence[str]) -> None:
    "Raise a ValueError that names the argument and lists the allowed values, unless `value` is one of them."
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not valid; choose one of {', '.join(map(repr, allowed))}")


def check_positive_ints(settings: Any, names: Sequence[str]) -> None:
    "Raise a ValueError naming the first of `settings`' fields `names` that is set but not a positive integer."
    for name in names:
        value = getattr(settings, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{type(settings).__name__}.{name}={value!r} is not valid; it must be a positive integer")


def check_positive(settings: Any, names: Sequence[str]) -> None:
    "Raise a ValueError naming the first of `settings`' fields `names` that is set but not a positive, finite number."
    for name in names:
        value = getattr(settings, name)
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ValueError(
                f"{type(settings).__name__}.{name}={value!r} is not valid; it must be a positive, finite number"
            )


def check_non_negative(settings: Any, names: Sequence[str]) -> None:
    "Raise a ValueError naming the first of `settings`' fields `names` that is not a finite number of 0 or more."
    for name in names:
        value = getattr(settings, name)
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"{type(settings).__name__}.{name}={value!r} is not valid; it must be 0 or more")
