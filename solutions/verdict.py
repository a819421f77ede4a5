"""Verdicts that judge with the noise: every conclusion a worked solution draws from two measured numbers comes from
here. Written by hand; no notebook exports it.

A measurement varies from run to run (another seed draws other weights, batches and dropout) and from sample to
sample (other sentences, other masked tokens). So a verdict needs the spread, not just the two numbers: per-seed
values (`compare`), a bootstrap over the evaluation examples for a statistic that is no plain mean (`bootstrap`), or
a measurement against a fixed reference such as chance (`against`). Each returns a `Verdict`: the difference, its
standard error, and the outcome, which is "lower" or "higher" only when the difference is more than `bar` standard
errors from zero (Student's t at 95%, two-sided: 1.96 for a large sample, more for a few seeds, 4.30 for three paired
seeds) and otherwise "unclear": this run cannot tell them apart. `rank` orders several settings by the same rule, and
`placed` says whether a measurement lies within a band that counts as no change (within 10%, say).
"""

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import torch

LEVEL = 0.95  # the two-sided confidence that a decided verdict asks for
UNCLEAR = "this run cannot tell them apart"


@cache
def t_quantile(df: float, level: float = LEVEL) -> float:
    """How many standard errors a difference must reach to be decided at `level` (two-sided) with `df` degrees of
    freedom: Student's t quantile, the normal one when `df` is infinite. A fractional `df` (Welch's) is rounded down,
    which asks a little more."""
    if df < 1:
        raise ValueError(f"a spread needs at least 1 degree of freedom (two values), got {df}")
    if math.isinf(df) or df > 1000:
        return statistics.NormalDist().inv_cdf((1 + level) / 2)
    df = int(df)
    low, high = 0.0, 1e6
    for _ in range(200):  # bisection: the probability below is monotone in t
        mid = (low + high) / 2
        low, high = (mid, high) if _within(mid, df) < level else (low, mid)
    return (low + high) / 2


def _within(t: float, df: int) -> float:
    "P(|T| <= t) for Student's t with `df` degrees of freedom (Abramowitz and Stegun 26.7.3, exact for whole df)."
    theta = math.atan(t / math.sqrt(df))
    sin, cos = math.sin(theta), math.cos(theta)
    if df % 2:  # odd: (2/pi) (theta + sin (cos + 2/3 cos^3 + 2.4/(3.5) cos^5 + ... up to cos^(df-2)))
        term = total = cos if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= cos * cos * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + sin * total)
    term = total = 1.0  # even: sin (1 + 1/2 cos^2 + 1.3/(2.4) cos^4 + ... up to cos^(df-2))
    for k in range(1, df // 2):
        term *= cos * cos * (2 * k - 1) / (2 * k)
        total += term
    return sin * total


@dataclass(frozen=True)
class Verdict:
    """`difference` (a - b, or a measurement - its reference) with its standard `error` and the `df` degrees of
    freedom of that error (infinite for a bootstrap); `spread` says where the error comes from ("3 paired seeds"),
    `fmt` how to print the numbers."""

    difference: float
    error: float
    df: float
    spread: str
    fmt: str = ".3f"

    @property
    def t(self) -> float:
        "The difference in standard errors."
        if self.error > 0:
            return self.difference / self.error
        return 0.0 if self.difference == 0 else math.copysign(math.inf, self.difference)

    @property
    def bar(self) -> float:
        "How far `t` must be from zero for a decided verdict."
        return t_quantile(self.df)

    @property
    def outcome(self) -> str:
        "'lower' or 'higher' (a than b) when |t| reaches `bar`, else 'unclear'."
        if abs(self.t) < self.bar:
            return "unclear"
        return "lower" if self.difference < 0 else "higher"

    @property
    def decided(self) -> bool:
        return self.outcome != "unclear"

    def __str__(self) -> str:
        return (
            f"{self.difference:+{self.fmt}} +- {self.error:{self.fmt}} over {self.spread}, t = {self.t:+.1f}; "
            f"a verdict needs |t| >= {self.bar:.1f}"
        )

    def says(self, lower: str, higher: str, unclear: str = "") -> str:
        """The conclusion: `lower` or `higher` when decided, else that this run cannot tell them apart (and
        `unclear`, what follows from that); then the numbers."""
        text = {"lower": lower, "higher": higher, "unclear": f"{UNCLEAR}, {unclear}" if unclear else UNCLEAR}
        return f"{text[self.outcome]} ({self})"


def _floats(values: Sequence[float] | torch.Tensor, name: str) -> list[float]:
    found = values.tolist() if isinstance(values, torch.Tensor) else [float(v) for v in values]
    if len(found) < 2:
        raise ValueError(f"{name} holds {len(found)} value(s): a spread needs two or more (more seeds, or examples)")
    return found


def compare(
    a: Sequence[float] | torch.Tensor,
    b: Sequence[float] | torch.Tensor,
    *,
    paired: bool = False,
    unit: str = "seeds",
    fmt: str = ".3f",
) -> Verdict:
    """mean(a) - mean(b), from per-seed (or per-example) values. `paired`: a[i] and b[i] share everything but the
    change (the same seed's weights, batches and dropout, or the same example), so the error is that of the
    differences, with len - 1 degrees of freedom; otherwise Welch's, with Welch-Satterthwaite's degrees of freedom.
    `unit` names what the values are per ("seeds", "sentences")."""
    a, b = _floats(a, "a"), _floats(b, "b")
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired values need as many a as b, got {len(a)} and {len(b)}")
        d = [x - y for x, y in zip(a, b, strict=True)]
        error = statistics.stdev(d) / math.sqrt(len(d))
        return Verdict(statistics.mean(d), error, len(d) - 1, f"{len(d):,} paired {unit}", fmt)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    error = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb > 0 else math.inf
    sizes = f"{len(a):,} {unit} a side" if len(a) == len(b) else f"{len(a):,} against {len(b):,} {unit}"
    return Verdict(statistics.mean(a) - statistics.mean(b), error, df, sizes, fmt)


def against(
    values: Sequence[float] | torch.Tensor, reference: float, *, unit: str = "seeds", fmt: str = ".3f"
) -> Verdict:
    """mean(values) - `reference`, a fixed number (chance, a prediction, a baseline that has no spread), with the
    standard error of the mean and len - 1 degrees of freedom."""
    values = _floats(values, "values")
    error = statistics.stdev(values) / math.sqrt(len(values))
    return Verdict(statistics.mean(values) - reference, error, len(values) - 1, f"{len(values):,} {unit}", fmt)


def placed(
    values: Sequence[float] | torch.Tensor, low: float, high: float, *, unit: str = "seeds", fmt: str = ".3f"
) -> tuple[str, str]:
    """Where mean(values) lies against the band [`low`, `high`] (a size that counts as no change, such as within
    10%): 'above' or 'below' when `against` decides it past an edge, 'within' when it decides it inside both, else
    'unclear'; and the numbers, to print beside the conclusion."""
    under, over = against(values, low, unit=unit, fmt=fmt), against(values, high, unit=unit, fmt=fmt)
    if over.outcome == "higher":
        outcome = "above"
    elif under.outcome == "lower":
        outcome = "below"
    else:
        outcome = "within" if (over.outcome, under.outcome) == ("lower", "higher") else "unclear"
    mean = under.difference + low
    text = (
        f"{mean:{fmt}} +- {under.error:{fmt}} over {under.spread}, against {low:{fmt}} to {high:{fmt}}: t = "
        f"{under.t:+.1f} from the low edge, {over.t:+.1f} from the high one; a verdict needs |t| >= {under.bar:.1f}"
    )
    return outcome, text


def bootstrap(
    measure: Callable[[torch.Tensor], Mapping[str, float]],
    count: int,
    *,
    unit: str = "examples",
    resamples: int = 1000,
    seed: int = 0,
    fmt: str | Mapping[str, str] = ".3f",
) -> dict[str, Verdict]:
    """Differences that are no plain mean over examples (a ratio of sums, a maximum over heads, a difference of
    differences): `measure(indices)` computes them, by name, from the examples at `indices` (0..count-1, repeats
    allowed). Each verdict holds its value on all `count` examples and, as standard error, the spread of its values
    over `resamples` resamples drawn with replacement (Efron's bootstrap), with infinite degrees of freedom. `fmt`
    may differ by name."""
    if count < 2:
        raise ValueError(f"a bootstrap needs two or more {unit}, got {count}")
    generator = torch.Generator().manual_seed(seed)
    drawn = [measure(torch.randint(count, (count,), generator=generator)) for _ in range(resamples)]
    spread = f"{count:,} {unit}, bootstrapped"
    formats = fmt if isinstance(fmt, Mapping) else {}
    default = ".3f" if isinstance(fmt, Mapping) else fmt
    return {
        name: Verdict(value, statistics.stdev(d[name] for d in drawn), math.inf, spread, formats.get(name, default))
        for name, value in measure(torch.arange(count)).items()
    }


@dataclass(frozen=True)
class Ranking:
    "Settings in order of their mean, lowest first, and the verdict between each and the next."

    order: list[str]
    means: dict[str, float]
    steps: list[Verdict]
    fmt: str = ".3f"

    def __str__(self) -> str:
        text = f"{self.order[0]} {self.means[self.order[0]]:{self.fmt}}"
        for name, step in zip(self.order[1:], self.steps, strict=True):
            text += f" {'<' if step.decided else '~'} {name} {self.means[name]:{self.fmt}}"
        return text + f" ('<': lower by more than the noise, '~': {UNCLEAR}; {self.steps[0].spread})"

    @property
    def lowest(self) -> list[str]:
        "The settings that this run cannot tell from the lowest one, it included."
        tied = [self.order[0]]
        for name, step in zip(self.order[1:], self.steps, strict=True):
            if step.decided:
                break
            tied.append(name)
        return tied


def rank(
    values: Mapping[str, Sequence[float]], *, paired: bool = False, unit: str = "seeds", fmt: str = ".3f"
) -> Ranking:
    """Order settings by the mean of their per-seed values and `compare` each with the next: a ranking that says
    where this run cannot tell two neighbours apart."""
    means = {name: statistics.mean(_floats(v, name)) for name, v in values.items()}
    order = sorted(means, key=means.get)
    steps = [
        compare(values[b], values[a], paired=paired, unit=unit, fmt=fmt) for a, b in zip(order, order[1:], strict=False)
    ]
    return Ranking(order, means, steps, fmt)
