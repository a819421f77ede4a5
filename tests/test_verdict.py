"""The worked solutions' verdicts (`solutions/verdict.py`) do their arithmetic right: Student's t quantiles, paired
and Welch standard errors, a measurement against a fixed reference, a bootstrap and a ranking, checked against cases
worked by hand and against scipy's tests (scipy comes with scikit-learn, which seqeval needs)."""

import ast
import importlib.util
import math
import re
import statistics

import pytest
import torch
from conftest import ROOT, missing_tool

spec = importlib.util.spec_from_file_location("solutions_verdict", ROOT / "solutions" / "verdict.py")
verdict = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verdict)


def test_the_bar_is_students_t_at_95_percent_worked_by_hand():
    # df = 1 is Cauchy's: t = tan(pi (0.975 - 0.5)); df = 2 has P(|T| <= t) = t / sqrt(2 + t^2), so
    # t^2 = 2 x 0.95^2 / (1 - 0.95^2); an infinite df is the normal's 1.96
    assert verdict.t_quantile(1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-6)
    assert verdict.t_quantile(2) == pytest.approx(math.sqrt(2 * 0.95**2 / (1 - 0.95**2)), rel=1e-6)  # 4.303
    assert verdict.t_quantile(math.inf) == pytest.approx(1.959964, rel=1e-6)
    assert verdict.t_quantile(3.7) == verdict.t_quantile(3)  # Welch's fractional df is rounded down
    with pytest.raises(ValueError, match="at least 1 degree of freedom"):
        verdict.t_quantile(0.5)


def test_paired_seeds_worked_by_hand():
    # differences 1, 2, 3: mean 2, standard deviation 1, standard error 1/sqrt(3) = 0.577, t = 3.46 < 4.30
    found = verdict.compare([11, 12, 13], [10, 10, 10], paired=True)
    assert (found.difference, found.error, found.df) == pytest.approx((2, 1 / math.sqrt(3), 2))
    assert found.t == pytest.approx(2 * math.sqrt(3))
    assert found.outcome == "unclear" and not found.decided
    assert found.says(lower="a is lower", higher="a is higher").startswith("this run cannot tell them apart (+2.000")
    assert found.says(lower="", higher="", unclear="so more seeds").startswith(
        "this run cannot tell them apart, so more"
    )
    # differences 0.9, 1.0, 1.1: standard error 0.1/sqrt(3) = 0.058, t = 17.3, decided
    tight = verdict.compare([10.9, 11.0, 11.1], [10, 10, 10], paired=True)
    assert tight.outcome == "higher" and tight.says(lower="a is lower", higher="a is higher").startswith("a is higher")
    assert verdict.compare([10, 10, 10], [10.9, 11.0, 11.1], paired=True).outcome == "lower"


def test_welch_and_one_sample_agree_with_scipy():
    if importlib.util.find_spec("scipy") is None:
        missing_tool("scipy is not installed (scikit-learn, which seqeval needs, brings it)")
    from scipy import stats

    a, b = [6.321, 6.274, 6.330, 6.301], [6.299, 6.266, 6.251]
    found = verdict.compare(a, b)
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert found.t == pytest.approx(welch.statistic, rel=1e-9)
    assert found.df == pytest.approx(welch.df, rel=1e-9)
    assert found.spread == "4 against 3 seeds"
    paired = verdict.compare(a[:3], b, paired=True)
    assert paired.t == pytest.approx(stats.ttest_rel(a[:3], b).statistic, rel=1e-9)
    one = verdict.against([1, 0, 1, 1, 0, 1, 1, 1], 0.5, unit="pairs")
    assert one.t == pytest.approx(stats.ttest_1samp([1, 0, 1, 1, 0, 1, 1, 1], 0.5).statistic, rel=1e-9)
    for df in (1, 2, 3, 5, 10, 29, 200):
        assert verdict.t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-6)


def test_one_value_a_side_has_no_spread_and_says_so():
    with pytest.raises(ValueError, match="a holds 1 value"):
        verdict.compare([6.137], [6.126])
    with pytest.raises(ValueError, match="as many a as b"):
        verdict.compare([1, 2, 3], [1, 2], paired=True)


def test_a_bootstrap_of_a_mean_finds_its_standard_error():
    values = torch.arange(200, dtype=torch.float64) % 7  # standard error of the mean: stdev / sqrt(200)

    def measure(i: torch.Tensor) -> dict[str, float]:
        return {"mean": values[i].mean().item() - 3.0, "twice": 2 * values[i].mean().item()}

    found = verdict.bootstrap(measure, len(values), unit="tokens", fmt={"twice": ".1f"})
    error = statistics.stdev(values.tolist()) / math.sqrt(200)
    assert found["mean"].difference == pytest.approx(values.mean().item() - 3.0)
    assert found["mean"].error == pytest.approx(error, rel=0.1)
    assert found["twice"].error == pytest.approx(2 * found["mean"].error)  # the same resamples for every name
    assert found["mean"].df == math.inf and found["mean"].spread == "200 tokens, bootstrapped"
    assert (found["mean"].fmt, found["twice"].fmt) == (".3f", ".1f")
    assert verdict.bootstrap(measure, len(values), unit="tokens", fmt={"twice": ".1f"}) == found  # a fixed seed


def test_a_ranking_says_which_neighbours_it_cannot_tell_apart():
    found = verdict.rank({"T = 1": [34.0, 34.2, 33.9], "T = 2": [32.9, 33.2, 32.8], "T = 4": [32.6, 33.1, 32.7]})
    assert found.order == ["T = 4", "T = 2", "T = 1"]
    assert [s.decided for s in found.steps] == [False, True]
    assert found.lowest == ["T = 4", "T = 2"]
    assert str(found).startswith("T = 4 32.800 ~ T = 2 32.967 < T = 1 34.033")


# What the solutions' verdicts may not do by themselves: a conclusion that compares two measured numbers comes from
# solutions/verdict.py, which weighs them against their spread. A comparison whose outcome no rerun can change (a
# count of a whole split, a difference that is float rounding) says so on its line, `# exact: why`, and one that
# computes instead of concluding (a merge rule, a bin's label) says `# not a verdict: why`.
SOLUTIONS = sorted((ROOT / "solutions").glob("s[0-9][0-9]_*.py"))
ORDERING = (ast.Lt, ast.Gt, ast.LtE, ast.GtE)
RANKING = {"min", "max", "sorted"}
MARKER = re.compile(r"# (exact|not a verdict): \S")


def _prints(nodes: list[ast.stmt]) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
        for node in nodes
        for n in ast.walk(node)
    )


def _orderings(node: ast.AST) -> list[ast.Compare]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Compare) and any(isinstance(o, ORDERING) for o in n.ops)]


def _marked(lines: list[str], node: ast.AST) -> bool:
    "Whether the lines of `node`, or a comment line just above it, carry a marker."
    above = lines[node.lineno - 2] if node.lineno > 1 and lines[node.lineno - 2].lstrip().startswith("#") else ""
    return bool(MARKER.search("\n".join([above, *lines[node.lineno - 1 : node.end_lineno]])))


def bypasses(source: str) -> list[tuple[int, str]]:
    """The verdicts of a solution module that bypass the helper, as (line, what): a call of `compared` (judging by a
    fixed tolerance), an ordering comparison that picks the words printed (the test of a conditional expression, of
    an `if` whose branches print, or the key of a dict literal's lookup), and a ranking by value (`min`, `max` or
    `sorted` with a `key`); each unless its lines carry `# exact:` or `# not a verdict:`."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "compared":
                found.append((node, "compared() judges by a fixed tolerance"))
            elif node.func.id in RANKING and any(k.arg == "key" for k in node.keywords):
                found.append((node, f"{node.func.id}(key=...) ranks by value"))
        elif isinstance(node, ast.IfExp) or (isinstance(node, ast.If) and _prints(node.body + node.orelse)):
            found += [(c, "a comparison picks the words printed") for c in _orderings(node.test)]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            found += [(c, "a comparison picks the words printed") for c in _orderings(node.slice)]
    marked = [(n, why) for n, why in found if not _marked(lines, n)]
    return sorted({(n.lineno, f"{why}: {ast.get_source_segment(source, n)}") for n, why in marked})


@pytest.mark.parametrize("module", SOLUTIONS, ids=lambda p: p.stem)
def test_no_verdict_of_a_solution_bypasses_the_helper(module):
    found = bypasses(module.read_text(encoding="utf-8"))
    assert not found, f"{module.name} judges without the spread (use solutions/verdict.py): " + "; ".join(
        f"line {line}: {what}" for line, what in found
    )


def test_the_check_finds_a_verdict_by_tolerance_by_hand_and_by_ranking_but_not_an_exact_one():
    source = """
def exercise_1():
    said = {"lower": "falls", "higher": "rises"}[compared(a, b, 0.01)]
    print("better" if loss < other else "worse")
    if accuracy > chance:
        print("learned")
    best = min(found, key=found.get)
    print("the same" if diff < 1e-4 else "different")  # exact: float rounding of one computation
    if len(row) > width:
        flush()
    label = f"{5 * b + 4 if b < 5 else ''}"  # not a verdict: a bin's label
    if drawn > 2:  # exact:
        print("a marker must say why")
"""
    assert [line for line, _ in bypasses(source)] == [3, 4, 5, 7, 12]


def test_a_band_places_a_measurement_only_when_both_edges_decide():
    assert verdict.placed([1.09, 1.10, 1.08], 0.98, 1.02)[0] == "above"
    assert verdict.placed([0.90, 0.91, 0.89], 0.98, 1.02)[0] == "below"
    assert verdict.placed([1.000, 1.001, 0.999], 0.98, 1.02)[0] == "within"
    assert verdict.placed([0.95, 1.05, 1.00], 0.98, 1.02)[0] == "unclear"  # spread wider than the band
    outcome, text = verdict.placed([1.0, 1.0, 1.0], 0.9, 1.1)  # no spread at all: exactly inside
    assert outcome == "within" and text.startswith("1.000 +- 0.000 over 3 seeds, against 0.900 to 1.100")
