"""The worked solutions' verdicts (`solutions/verdict.py`) do their arithmetic right: Student's t quantiles, paired
and Welch standard errors, a measurement against a fixed reference, a bootstrap and a ranking, checked against cases
worked by hand and against scipy's tests (scipy comes with scikit-learn, which seqeval needs)."""

import importlib.util
import math
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
    found = verdict.bootstrap(lambda i: values[i].mean().item() - 3.0, len(values), unit="tokens")
    assert found.difference == pytest.approx(values.mean().item() - 3.0)
    assert found.error == pytest.approx(statistics.stdev(values.tolist()) / math.sqrt(200), rel=0.1)
    assert found.df == math.inf and found.spread == "200 tokens, bootstrapped"
    again = verdict.bootstrap(lambda i: values[i].mean().item() - 3.0, len(values), unit="tokens")
    assert again == found  # a fixed seed: the same verdict on every machine


def test_a_ranking_says_which_neighbours_it_cannot_tell_apart():
    found = verdict.rank({"T = 1": [34.0, 34.2, 33.9], "T = 2": [32.9, 33.2, 32.8], "T = 4": [32.6, 33.1, 32.7]})
    assert found.order == ["T = 4", "T = 2", "T = 1"]
    assert [s.decided for s in found.steps] == [False, True]
    assert found.lowest == ["T = 4", "T = 2"]
    assert str(found).startswith("T = 4 32.800 ~ T = 2 32.967 < T = 1 34.033")
