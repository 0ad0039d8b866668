"""verl_ebpo.tools.stats: t intervals known by hand, pairing, verdicts decided by the interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ebpo.tools.stats import Interval, classify, mean_ci, mean_ci_rows, paired_diff_ci, verdict


def test_known_interval():
    # x = 1, 2, 3: mean 2, sd 1, se 1/sqrt(3); for 2 dof the t quantile has a closed form: (2p-1) sqrt(2 / (4p(1-p)))
    ci = mean_ci([1.0, 2.0, 3.0])
    half = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025)) / math.sqrt(3)
    assert ci.mean == 2.0 and ci.lo == pytest.approx(2 - half, rel=1e-12) and ci.hi == pytest.approx(2 + half, rel=1e-12)
    assert ci.n == 3 and not ci.resolved  # the interval covers 0


def test_one_seed_has_no_interval():
    ci = mean_ci([0.4])
    assert ci.mean == 0.4 and math.isnan(ci.lo) and ci.as_list() == [None, None]
    assert "one seed" in verdict("ebpo", "grpo", ci, "final reward")


def test_pairing_removes_shared_seed_variation():
    a = [0.10, 0.50, 0.90]
    b = [0.08, 0.475, 0.885]  # differences 0.02, 0.025, 0.015: sd 0.005, half-width 4.303 * 0.005 / sqrt(3)
    d = paired_diff_ci(a, b)
    assert d.mean == pytest.approx(0.02) and d.lo == pytest.approx(0.02 - 4.302653 * 0.005 / math.sqrt(3))
    assert d.resolved and "higher" in verdict("ebpo", "grpo", d, "final reward")
    assert not mean_ci(a).lo > mean_ci(b).hi  # unpaired, the two intervals overlap
    with pytest.raises(ValueError, match="as many values"):
        paired_diff_ci([1, 2], [1])


def test_verdict_follows_the_interval():
    assert "not resolved" in verdict("a", "b", Interval(0.1, -0.01, 0.2, 3), "x")
    assert "lower" in verdict("a", "b", Interval(-0.1, -0.2, -0.01, 3), "x")
    with pytest.raises(ValueError, match="non-finite"):
        mean_ci([1.0, float("nan")])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=30))
def test_interval_contains_the_mean(xs):
    ci = mean_ci(xs)
    assert ci.lo <= ci.mean <= ci.hi
    assert ci.mean == pytest.approx(float(np.mean(xs)), abs=1e-6)


def test_a_tiny_resolved_difference_is_printed_with_its_size_not_as_zero():
    """A resolved difference of 2e-5 must not read '-0.000 lower' (seen in the simulator's report)."""
    text = verdict("a", "b", Interval(-2e-5, -3e-5, -1e-5, 10), "x")
    assert "lower" in text and "-2.0e-05" in text and "[-3.0e-05, -1.0e-05]" in text
    assert "-0.000" not in text
    assert "+0.030, 95% CI [+0.025, +0.035]" in verdict("a", "b", Interval(0.03, 0.025, 0.035, 10), "x")


def test_mean_ci_rows_known_answer_and_each_row_is_mean_ci():
    # row 0: 1, 2, 3 (the hand-computed interval above); row 1: constant (zero width); row 2: any numbers
    half = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025)) / math.sqrt(3)
    values = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5], [0.1, -0.7, 2.9]])
    mean, lo, hi = mean_ci_rows(values)
    assert mean.shape == lo.shape == hi.shape == (3,) and mean.dtype == np.float64
    assert mean[0] == 2.0 and lo[0] == pytest.approx(2 - half, rel=1e-12) and hi[0] == pytest.approx(2 + half, rel=1e-12)
    assert lo[1] == hi[1] == 0.5
    for i, row in enumerate(values):
        ci = mean_ci(row)
        assert (mean[i], lo[i], hi[i]) == pytest.approx((ci.mean, ci.lo, ci.hi), rel=1e-12, abs=1e-15)
    m99, lo99, hi99 = mean_ci_rows(values, level=0.99)
    assert lo99[0] == pytest.approx(mean_ci(values[0], level=0.99).lo, rel=1e-12) and lo99[0] < lo[0]


def test_mean_ci_rows_one_seed_non_finite_and_bad_shapes():
    mean, lo, hi = mean_ci_rows(np.array([[0.4], [0.6]]))
    assert mean.tolist() == [0.4, 0.6] and np.isnan(lo).all() and np.isnan(hi).all()  # as mean_ci: no interval
    gappy = np.array([[1.0, 2.0, 3.0], [1.0, np.nan, 3.0], [np.inf, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"non-finite values in rows \[1, 2\]"):
        mean_ci_rows(gappy)
    mean, lo, hi = mean_ci_rows(gappy, nonfinite="nan")
    assert mean[0] == 2.0 and np.isfinite(lo[0]) and np.isnan([mean[1:], lo[1:], hi[1:]]).all()
    for bad in (np.zeros(3), np.zeros((2, 0)), np.zeros((2, 2, 2))):
        with pytest.raises(ValueError, match="points, seeds"):
            mean_ci_rows(bad)
    with pytest.raises(ValueError, match="nonfinite"):
        mean_ci_rows(np.zeros((2, 2)), nonfinite="skip")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_mean_ci_rows_equals_mean_ci_on_every_row(points, seeds, seed):
    values = np.random.default_rng(seed).normal(size=(points, seeds)) * 10
    mean, lo, hi = mean_ci_rows(values)
    for i in range(points):
        ci = mean_ci(values[i])
        np.testing.assert_allclose([mean[i], lo[i], hi[i]], [ci.mean, ci.lo, ci.hi], rtol=1e-12, atol=1e-12)


def test_verdict_words_on_intervals_built_by_hand():
    """Each verdict from an interval written down by hand: the word, the 80%-power difference on 'not resolved',
    the practical threshold on 'negligible' and 'equivalent' -- all decided by the interval, not the mean."""
    from verl_ebpo.tools.stats import classify

    covers = Interval(0.01, -0.04, 0.06, 5)  # half-width 0.05
    assert classify(covers) == "not resolved"
    text = verdict("ebpo", "grpo", covers, "reward")
    assert "not resolved" in text and f"±{covers.detectable():.3g} with 80% power" in text and "not excluded" in text
    small = Interval(0.002, 0.001, 0.003, 10)
    assert classify(small) == "higher" and classify(small, negligible=0.01) == "negligible"
    assert "negligible" in verdict("a", "b", small, "x", negligible=0.01) and "±0.01" in verdict("a", "b", small, "x", negligible=0.01)
    big = Interval(-0.2, -0.3, -0.1, 4)
    assert classify(big, negligible=0.01) == "lower"
    assert classify(Interval(0.5, math.nan, math.nan, 1)) == "one seed"
    assert covers.half == pytest.approx(0.05)
    with pytest.raises(ValueError, match="negligible"):
        classify(small, negligible=-1)


def test_negligible_is_decided_by_the_interval_not_the_point_estimate():
    """0.0049 [0.001, 0.009] with threshold 0.005: resolved, but neither negligible (it reaches 0.009 > 0.005) nor
    "higher" (it reaches 0.001 < 0.005): "higher (possibly negligible)"."""
    from verl_ebpo.tools.stats import classify

    d = Interval(0.0049, 0.001, 0.009, 5)
    assert classify(d, negligible=0.005) == "higher (possibly negligible)"
    assert classify(d, negligible=0.01) == "negligible"
    assert classify(d) == "higher"  # no threshold: resolved is enough
    assert classify(Interval(-0.0049, -0.009, -0.001, 5), negligible=0.005) == "lower (possibly negligible)"


def test_higher_only_when_the_whole_interval_lies_beyond_the_threshold():
    """+0.0049 [+0.0001, +0.0098] with threshold 0.005 is not "higher"; [+0.006, +0.02] is; the
    boundary itself counts as beyond."""
    from verl_ebpo.tools.stats import classify

    d = Interval(0.0049, 0.0001, 0.0098, 5)
    assert classify(d, negligible=0.005) != "higher"
    assert classify(d, negligible=0.005) == "higher (possibly negligible)"
    text = verdict("ebpo", "js", d, "AUC", negligible=0.005)
    assert "possibly negligibly" in text and "±0.005" in text and not text.startswith("ebpo is higher than js on AUC (")
    assert classify(Interval(0.013, 0.006, 0.02, 5), negligible=0.005) == "higher"
    assert classify(Interval(0.0125, 0.005, 0.02, 5), negligible=0.005) == "higher"
    assert classify(Interval(-0.013, -0.02, -0.006, 5), negligible=0.005) == "lower"
    assert classify(Interval(-0.01, -0.02, -0.004, 5), negligible=0.005) == "lower (possibly negligible)"
    # ratios on the log scale (the gradient noise, delta 0.05): log(0.90) = -0.105 [-0.112, -0.099] is lower
    assert classify(Interval(math.log(0.9), math.log(0.894), math.log(0.905), 5), negligible=0.05) == "lower"
    assert classify(Interval(math.log(0.96), math.log(0.93), math.log(0.99), 5), negligible=0.05) == \
        "lower (possibly negligible)"


def test_p_value_from_an_interval_is_the_paired_t_test():
    """Interval.p_value recovers scipy's one-sample t test p-value from the interval alone."""
    from scipy.stats import ttest_1samp

    rng = np.random.default_rng(3)
    for n in (3, 5, 10):
        x = rng.normal(0.02, 0.03, n)
        assert mean_ci(x).p_value() == pytest.approx(ttest_1samp(x, 0.0).pvalue, rel=1e-9)
    assert math.isnan(Interval(0.1, math.nan, math.nan, 1).p_value())
    assert mean_ci([0.2, 0.2, 0.2]).p_value() == 0.0 and mean_ci([0.0, 0.0]).p_value() == 1.0


def test_holm_against_hand_computed_p_values():
    """Holm at 0.05 over p = (0.01, 0.04, 0.03, 0.005): sorted 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2
    stops it: the two smallest are rejected. NaN counts in m and is never rejected."""
    from verl_ebpo.tools.stats import holm

    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([0.01, 0.02, 0.03, 0.04]) == [True, False, False, False]  # 0.02 > 0.05/3
    assert holm([0.012, 0.013]) == [True, True]  # 0.012 <= 0.025, 0.013 <= 0.05
    assert holm([0.012, float("nan")]) == [True, False]  # m = 2: 0.012 <= 0.025
    assert holm([0.03, float("nan")]) == [False, False]  # 0.03 > 0.025
    assert holm([]) == []


def test_holm_over_a_family_of_intervals_against_hand_computed_p_values():
    """Three intervals over 5 seeds whose t statistics are chosen so that their p-values are (by scipy) 0.0009,
    0.03 and 0.04: uncorrected all three are resolved; Holm over 18 comparisons keeps only
    the first (0.0009 <= 0.05/18 = 0.00278; 0.03 > 0.05/17)."""
    from scipy.stats import t as student

    from verl_ebpo.tools.stats import holm

    n, half_t = 5, student.ppf(0.975, 4)

    def with_p(p, se=0.01):  # the interval of a mean whose t test gives p
        mean = student.ppf(1 - p / 2, n - 1) * se
        return Interval(mean, mean - half_t * se, mean + half_t * se, n)

    family = [with_p(0.0009), with_p(0.03), with_p(0.04)] + [Interval(0.0, -0.05, 0.05, n)] * 15
    assert [d.p_value() for d in family[:3]] == pytest.approx([0.0009, 0.03, 0.04], rel=1e-9)
    assert all(classify(d, 0.005).startswith("higher") for d in family[:3])
    assert holm([d.p_value() for d in family]) == [True] + [False] * 17
    assert holm([d.p_value() for d in family[:1] + family[3:5]]) == [True, False, False]


def test_equivalent_when_the_interval_covers_0_inside_the_threshold():
    from verl_ebpo.tools.stats import classify

    eq = Interval(0.001, -0.003, 0.004, 6)
    assert classify(eq, negligible=0.005) == "equivalent"
    assert classify(eq) == "not resolved"  # no threshold: never "equivalent"
    assert classify(Interval(0.001, -0.003, 0.006, 6), negligible=0.005) == "not resolved"  # reaches past +0.005
    text = verdict("ebpo", "drgrpo", eq, "AUC", negligible=0.005)
    assert "equivalent within ±0.005" in text and "[-0.003, +0.004]" in text


def test_zero_width_intervals_are_reported_as_such():
    from verl_ebpo.tools.stats import classify

    exact = mean_ci([0.25, 0.25, 0.25])
    assert exact.zero_width and classify(exact) == "zero width" and classify(exact, negligible=0.1) == "zero width"
    zero = mean_ci([0.0, 0.0, 0.0])
    assert classify(zero) == "zero width"
    text = verdict("a", "b", zero, "x")
    assert "every one of the 3 seeds gives no difference" in text and "zero-width" in text and "resolve" not in text
    assert "the same difference, +0.250" in verdict("a", "b", exact, "x")
    assert not Interval(0.5, math.nan, math.nan, 1).zero_width and not mean_ci([0.1, 0.2]).zero_width


@pytest.mark.parametrize("n", [3, 5, 10, 30])
def test_detectable_difference_is_the_80_percent_power_formula(n):
    """detectable = (t_{0.975,n-1} + t_{0.80,n-1}) sd / sqrt(n); its exact power (noncentral t) is ~0.8."""
    from scipy.stats import nct, t

    rng = np.random.default_rng(n)
    x = rng.normal(0.0, 0.3, n)
    ci = mean_ci(x)
    sd = float(np.std(x, ddof=1))
    expected = (t.ppf(0.975, n - 1) + t.ppf(0.80, n - 1)) * sd / math.sqrt(n)
    assert ci.detectable() == pytest.approx(expected, rel=1e-9)
    assert ci.detectable() > abs(ci.half)  # the half-width is only ~50% power
    tc, delta = t.ppf(0.975, n - 1), expected / (sd / math.sqrt(n))
    power = 1 - nct.cdf(tc, n - 1, delta) + nct.cdf(-tc, n - 1, delta)
    assert 0.76 < power < 0.81
    assert math.isnan(Interval(0.1, math.nan, math.nan, 1).detectable())


def test_differences_equal_to_within_rounding_are_a_zero_width_interval():
    """0.3 - 0.1 and 0.4 - 0.2 differ by 5.6e-17: before, a 'higher' verdict with a 1e-16 interval."""
    diff = paired_diff_ci([0.3, 0.4, 0.5], [0.1, 0.2, 0.3])
    assert diff.zero_width and classify(diff) == "zero width"
    assert not mean_ci([0.2, 0.2 + 1e-9, 0.2]).zero_width  # a real (if tiny) spread keeps its interval
