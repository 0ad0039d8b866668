"""Comparing algorithms over seeds: means with 95% intervals, paired differences, verdicts from intervals.

Shared by `verl-ebpo demo`, `compare` and `simulate`, so all state results the same way:

- `mean_ci(x)`: the mean of per-seed values and its Student-t interval (the seeds are the replicates).
- `mean_ci_rows(x)`: the same for every row of a (points, seeds) array at once (a curve and its band).
- `paired_diff_ci(a, b)`: the mean of a[i] - b[i] over seeds run in pairs (same seed: same data, same
  initial model), with its t interval; pairing removes the seed-to-seed variation both runs share.
- `crossed_mean_ci(x)`: the grand mean of a (seeds, problems) table (every seed scored on the same problems, e.g.
  Pass@1 per problem) with an interval for both samplings: seeds and problems are two crossed random factors.
- `classify(diff, negligible)`: the verdict as a word, computed from the interval alone (never from the point
  estimate), with delta = `negligible`, the practical threshold (0: none):
  "higher" / "lower" (the whole interval lies beyond +delta / -delta, so the difference is resolved AND at least
  delta), "higher (possibly negligible)" / "lower (possibly negligible)" (the interval excludes 0 but reaches
  inside ±delta: resolved, yet the data allow a practically zero difference), "negligible" (it excludes 0 and lies
  inside ±delta: resolved but practically zero), "equivalent" (it covers 0 and lies inside ±delta: any difference
  is practically zero, at the 95% level -- stricter than the 90% interval of a TOST test), "not resolved" (it
  covers 0 and reaches beyond ±delta), "zero width" (n >= 2 seeds all give the same difference: no spread to
  test against, so no interval), "one seed" (no interval).
- `Interval.p_value()`: the two-sided paired t test's p-value for "the difference is 0", recovered from the interval
  (se = half-width / t_{(1+level)/2,n-1}); `holm(p_values, alpha)`: Holm's step-down correction over a family
  (which hypotheses it rejects at family-wise error `alpha`).
- `verdict(...)`: the same as a sentence. "Not resolved" carries the difference these seeds would resolve with
  80% power (`Interval.detectable`): (t_{0.975,n-1} + t_{0.80,n-1}) sd / sqrt(n) -- a true difference that
  large excludes 0 from the 95% interval in 80% of repetitions; the half-width t_{0.975,n-1} sd / sqrt(n) is only
  the observed difference that would have been just significant (about 50% power).

With one seed there is no interval: the bounds are NaN and the verdict says so. Each interval is a 95% interval
of its own comparison (not corrected for multiplicity); a family of comparisons is corrected with `holm`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int

    @property
    def resolved(self) -> bool:
        """True when the interval exists and excludes 0."""
        return self.n >= 2 and (self.lo > 0 or self.hi < 0)

    @property
    def half(self) -> float:
        """Half the interval's width: the observed difference that would be just significant (NaN with one seed)."""
        return (self.hi - self.lo) / 2.0

    @property
    def zero_width(self) -> bool:
        """True when n >= 2 values gave an interval of zero width (every seed the same difference)."""
        return self.n >= 2 and math.isfinite(self.lo) and self.hi == self.lo

    def detectable(self, power: float = 0.8, level: float = 0.95) -> float:
        """The true difference this design resolves with probability `power`: (t_{(1+level)/2,n-1} + t_{power,n-1})
        sd / sqrt(n), with sd / sqrt(n) = half / t_{(1+level)/2,n-1} (the interval is a `mean_ci` at `level`).
        NaN with one seed."""
        if self.n < 2 or not math.isfinite(self.half):
            return math.nan
        if not 0.5 <= power < 1:
            raise ValueError(f"power must be in [0.5, 1), got {power!r}")
        t_level = _t_quantile(level, self.n - 1)
        t_power = _t_quantile(2.0 * power - 1.0, self.n - 1)  # one-sided quantile at `power`
        return abs(self.half) * (1.0 + t_power / t_level)

    def as_list(self) -> list[float | None]:
        return [_json_float(self.lo), _json_float(self.hi)]

    def p_value(self, level: float = 0.95) -> float:
        """Two-sided p-value of the t test of "the true difference is 0", from this interval (a `mean_ci` at
        `level` over n values): t = mean / se with se = half / t_{(1+level)/2,n-1}. NaN with one seed; a
        zero-width interval gives 0 (every seed the same non-zero difference) or 1 (all zero)."""
        if self.n < 2 or not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            return math.nan
        if self.zero_width or self.half <= 0:
            return 1.0 if self.mean == 0 else 0.0
        se = self.half / _t_quantile(level, self.n - 1)
        return t_p_value(self.mean / se, self.n - 1)


def _json_float(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def _t_quantile(level: float, dof: float) -> float:
    """The two-sided Student-t quantile: t with P(|T| <= t) = `level` for `dof` >= 1 degrees of freedom (not
    necessarily an integer: Satterthwaite's)."""
    from scipy.stats import t

    if not (0.0 < level < 1.0 and 1.0 <= dof < math.inf):
        raise ValueError(f"t quantile needs 0 < level < 1 and finite dof >= 1, got level={level!r}, dof={dof!r}")
    return float(t.ppf(0.5 + level / 2, dof))


def mean_ci(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean of `values` (shape (n,)) and its two-sided Student-t interval at `level`."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("mean_ci needs at least one value")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"mean_ci got non-finite values: {x.tolist()}")
    m = float(x.mean())
    if x.size < 2:
        return Interval(m, math.nan, math.nan, int(x.size))
    if float(x.max() - x.min()) <= 4 * np.finfo(np.float64).eps * float(np.abs(x).max()):
        return Interval(m, m, m, int(x.size))  # equal to within rounding (0.3 - 0.1 vs 0.4 - 0.2): zero width
    half = _t_quantile(level, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Interval(m, m - half, m + half, int(x.size))


def mean_ci_rows(values, level: float = 0.95, nonfinite: str = "raise") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`mean_ci` of every row at once: `values` has shape (n_points, n_seeds) (one row per point of a curve, one
    column per seed); returns (mean, lo, hi), each of shape (n_points,), float64, row i equal to
    `mean_ci(values[i])`. With one seed lo and hi are NaN (no interval), as in `mean_ci`.

    nonfinite: "raise" (a NaN or inf is a ValueError naming the rows, as in `mean_ci`) or "nan" (a row holding
    one gives NaN mean and bounds: a documented gap in a curve, e.g. a share that verl did not log).
    """
    if nonfinite not in ("raise", "nan"):
        raise ValueError(f"nonfinite must be 'raise' or 'nan', got {nonfinite!r}")
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"mean_ci_rows needs a (points, seeds) array with at least one seed, got shape {x.shape}")
    finite = np.isfinite(x).all(axis=1)  # (n_points,)
    if nonfinite == "raise" and not finite.all():
        raise ValueError(f"mean_ci_rows got non-finite values in rows {np.flatnonzero(~finite)[:10].tolist()}")
    n = x.shape[1]
    clean = np.where(finite[:, None], x, 0.0)  # no warnings from the rows that become NaN anyway
    mean = np.where(finite, clean.mean(axis=1), np.nan)
    if n < 2:
        nan = np.full_like(mean, np.nan)
        return mean, nan, nan.copy()
    half = _t_quantile(level, n - 1) * clean.std(axis=1, ddof=1) / math.sqrt(n)
    half = np.where(finite, half, np.nan)
    return mean, mean - half, mean + half


def crossed_mean_ci(values, level: float = 0.95) -> Interval:
    """Grand mean of `values`, shape (S seeds, P problems), and its t interval when both seeds and problems are
    samples (two crossed random effects, x_sp = mu + a_s + b_p + e_sp):

        Var(mean) = s_a^2/S + s_b^2/P + s_e^2/(S P) = (MS_seed + MS_problem - MS_error) / (S P)

    from the two-way ANOVA mean squares (MS_seed = P var_s(row means), MS_problem = S var_p(column means),
    MS_error the residual), floored at the larger of the two one-way terms var_s/S and var_p/P (each
    underestimates Var(mean)); degrees of freedom by Satterthwaite (of the floor's term when it applies).
    One seed: NaN bounds (seed variation cannot be estimated); one problem: `mean_ci` over seeds. `n` = S.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"crossed_mean_ci needs a (seeds, problems) table, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("crossed_mean_ci got non-finite values")
    n_s, n_p = x.shape
    m = float(x.mean())
    if n_s < 2:
        return Interval(m, math.nan, math.nan, n_s)
    if n_p < 2:
        return mean_ci(x[:, 0], level)
    rows, cols = x.mean(axis=1), x.mean(axis=0)
    ms_s = n_p * float(rows.var(ddof=1))
    ms_p = n_s * float(cols.var(ddof=1))
    resid = x - rows[:, None] - cols[None, :] + m
    ms_e = float((resid ** 2).sum()) / ((n_s - 1) * (n_p - 1))
    var = (ms_s + ms_p - ms_e) / (n_s * n_p)
    one_way = [(ms_s / (n_s * n_p), n_s - 1), (ms_p / (n_s * n_p), n_p - 1)]
    floor, floor_dof = max(one_way)
    if var <= floor:
        var, dof = floor, floor_dof
    else:
        denom = ms_s ** 2 / (n_s - 1) + ms_p ** 2 / (n_p - 1) + ms_e ** 2 / ((n_s - 1) * (n_p - 1))
        dof = (ms_s + ms_p - ms_e) ** 2 / denom
    if var == 0:
        return Interval(m, m, m, n_s)
    half = _t_quantile(level, max(dof, 1.0)) * math.sqrt(var)
    return Interval(m, m - half, m + half, n_s)


def paired_diff_ci(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """Mean of a[i] - b[i] (shape (n,) each, paired by seed) and its t interval."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"paired_diff_ci needs as many values on each side, got {a.size} and {b.size}")
    return mean_ci(a - b, level)


def t_p_value(t: float, dof: float) -> float:
    """P(|T| >= |t|) for Student's T with `dof` >= 1 degrees of freedom."""
    from scipy.stats import t as student

    if not (math.isfinite(dof) and dof >= 1):
        raise ValueError(f"t_p_value needs finite dof >= 1, got {dof!r}")
    return float(2 * student.sf(abs(t), dof))


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down correction: which of the m hypotheses (p-values, any order; NaN: never rejected, still
    counted in m) are rejected with family-wise error <= `alpha`. Sorted ascending, p_(k) is rejected while
    p_(j) <= alpha / (m - j + 1) for every j <= k (k 1-based); the first that fails stops it."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    p = [math.inf if (x is None or math.isnan(x)) else float(x) for x in p_values]
    m = len(p)
    out = [False] * m
    for rank, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        if p[i] > alpha / (m - rank):
            break
        out[i] = True
    return out


def signed(x: float) -> str:
    """`x` with its sign: 3 decimals, or 2 significant digits when that would print as 0.000."""
    return f"{x:+.3f}" if x == 0 or abs(x) >= 0.0005 else f"{x:+.1e}"


def classify(diff: Interval, negligible: float = 0.0) -> str:
    """The verdict word (module docstring) for the difference `diff`, from its interval alone (see the module docstring);
    `negligible` is delta, the practical threshold (0: no threshold, so never "negligible" or "equivalent")."""
    if not negligible >= 0 or not math.isfinite(negligible):
        raise ValueError(f"negligible must be a finite number >= 0, got {negligible!r}")
    if diff.n < 2 or not (math.isfinite(diff.lo) and math.isfinite(diff.hi)):
        return "one seed"
    if diff.zero_width:
        return "zero width"
    inside = -negligible < diff.lo and diff.hi < negligible
    if not diff.resolved:
        return "equivalent" if inside else "not resolved"
    if inside:
        return "negligible"
    word = "higher" if diff.lo > 0 else "lower"
    beyond = diff.lo >= negligible if word == "higher" else diff.hi <= -negligible
    return word if beyond else f"{word} (possibly negligible)"


def power_note(power: float = 0.8) -> str:
    """The sentence a report prints once beside verdicts made with `verdict(..., explain_power=False)`."""
    return (f"\"±X at {power * 100:g}% power\" after a \"not resolved\" verdict: the true difference those seeds would "
            f"resolve with {power * 100:g}% power (`stats.Interval.detectable`); a smaller effect is not excluded.")


def verdict(a: str, b: str, diff: Interval, what: str, level: float = 0.95, negligible: float = 0.0, *,
            power: float = 0.8, explain_power: bool = True) -> str:
    """One sentence on `a - b` of `what`, decided by the interval alone (`classify`); `power` is the power at which
    a "not resolved" sentence states the difference these seeds would resolve (`Interval.detectable`);
    explain_power=False: that difference without the explanation, which the report then prints once
    (`power_note`)."""
    pct = f"{level * 100:g}%"
    kind = classify(diff, negligible)
    if kind == "one seed":
        return f"{a} vs {b} ({what}): one seed, no interval; run more seeds to compare."
    if kind == "zero width":
        same = "no difference" if diff.mean == 0 else f"the same difference, {signed(diff.mean)}"
        return (f"{a} vs {b} on {what}: every one of the {diff.n} seeds gives {same}; zero-width interval "
                "(no seed-to-seed spread to test against).")
    span = f"{signed(diff.mean)}, {pct} CI [{signed(diff.lo)}, {signed(diff.hi)}], {diff.n} seeds"
    if kind == "not resolved" and not explain_power:
        return (f"{a} vs {b} on {what}: not resolved ({span}; ±{diff.detectable(power, level):.3g} at "
                f"{power * 100:g}% power).")
    if kind == "not resolved":
        return (f"{a} vs {b} on {what}: not resolved ({span}); these seeds would resolve a true difference of "
                f"±{diff.detectable(power, level):.3g} with {power * 100:g}% power, so a smaller effect is not "
                "excluded.")
    if kind == "equivalent":
        return (f"{a} vs {b} on {what}: equivalent within ±{negligible:g} ({span}; the whole interval lies inside "
                f"±{negligible:g}).")
    if kind == "negligible":
        return (f"{a} vs {b} on {what}: resolved but negligible ({span}; the whole interval lies inside the "
                f"practical threshold ±{negligible:g}).")
    if kind.endswith("(possibly negligible)"):
        word = kind.split()[0]
        return (f"{a} is {word} than {b} on {what}, possibly negligibly ({span}; resolved, but the interval reaches "
                f"inside the practical threshold ±{negligible:g}).")
    return f"{a} is {kind} than {b} on {what} ({span})."
