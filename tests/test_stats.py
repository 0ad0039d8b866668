"""verl_ebpo.stats: t intervals known by hand, pairing, verdicts decided by the interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ebpo.stats import Interval, mean_ci, paired_diff_ci, verdict


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
    b = [0.08, 0.48, 0.88]
    d = paired_diff_ci(a, b)
    assert d.mean == pytest.approx(0.02) and d.lo == pytest.approx(0.02) and d.resolved
    assert "higher" in verdict("ebpo", "grpo", d, "final reward")
    with pytest.raises(ValueError, match="as many values"):
        paired_diff_ci([1, 2], [1])


def test_verdict_follows_the_interval():
    assert "no difference resolved" in verdict("a", "b", Interval(0.1, -0.01, 0.2, 3), "x")
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
