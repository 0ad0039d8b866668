"""EBPO's math: pure functions over tensors, no verl, no state.

Notation (paper, Algorithm 1):
    r_i          outcome score of answer i (sum of its token-level rewards over its response mask)
    m_q          mean score of the valid answers of prompt q (its "group"), G_q of them
    mu_glob      running mean of all scores seen           (Welford accumulator W_r)
    sigma2       running population variance of all scores (W_r)
    tau2         running population variance of the group means m_q (W_mu)
    S_q          = (sigma2 / G_q) / (sigma2 / G_q + tau2), or 1 when that denominator <= epsilon * (sigma2 + tau2)
                   (unit-free: sigma2 = tau2 = 0, or G_q >= 1/epsilon with tau2 ~ 0; multiplying every score by
                   c > 0 scales both sides by c^2, so S does not depend on the reward's unit)
    V_q          = (1 - S_q) * m_q + S_q * mu_glob
    raw_i        = r_i - V_q(i)
    A_i          = normalize(raw)_i: `batch` c / (std + epsilon * max|c|), c = raw - mean, `center` raw - mean, `none` raw

When the prior mean matters (tests/test_estimator_prior_mean.py): with equal group sizes and normalize=batch or
center, mu_glob adds the same -S mu_glob to every row and the centring removes it; with rbar the batch mean,
    center:  A_i = (1 - S) (r_i - m_q) + S (r_i - rbar)   (group-centred and batch-centred, mixed by S)
    batch:   the same divided by the batch std (+ epsilon)
so an all-fail group gets -S rbar (/ std), and 0 when every group of the batch fails; the prior acts through S
only. With unequal group sizes (S_q differs per group) or normalize=none, mu_glob changes the advantages.

Everything that accumulates statistics is float64. No Python loop runs over rows or groups.

Magnitude rule: a score with |r_i| > MAX_ABS_SCORE (1e100) is treated like a non-finite one (the caller refuses
or skips it). Below that bound every quantity here (sums, squared deviations times any plausible weight,
normalised advantages) is finite in float64, so the prior can never hold inf/NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

NORMALIZE_MODES = ("batch", "center", "none")
# Scores beyond this magnitude would let the float64 second moments overflow ((2e100)^2 * weight stays finite for
# any weight below ~4e107); such rows are handled like NaN/inf rows (EBPOOptions.on_nonfinite).
MAX_ABS_SCORE = 1e100


@dataclass(frozen=True)
class Moments:
    """Weighted Welford moments of a set of observations: total weight, mean, sum of squared deviations."""

    weight: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    @property
    def variance(self) -> float:
        """Population variance m2 / weight (0 for an empty accumulator)."""
        return self.m2 / self.weight if self.weight > 0 else 0.0


def moments_of(values: torch.Tensor) -> Moments:
    """Two-pass float64 moments of a 1-D tensor `values` (k,). Empty -> Moments()."""
    return Moments(*moments_tensor(values).tolist())


def moments_tensor(values: torch.Tensor) -> torch.Tensor:
    """Two-pass float64 moments of a 1-D tensor `values` (k,), left on its device (no host sync).

    Returns:
        (3,) float64 tensor [weight, mean, m2]; zeros when empty.
    """
    v = values.to(torch.float64).reshape(-1)
    weight = torch.tensor(float(v.numel()), dtype=torch.float64, device=v.device)
    mean = v.sum() / weight.clamp_min(1.0)
    return torch.stack([weight, mean, torch.sum((v - mean) ** 2)])


def merge_moments(acc: Moments, batch: Moments, decay: float = 1.0) -> Moments:
    """Chan/Welford parallel merge of `batch` into `acc`, after scaling acc's weight and m2 by `decay`.

    decay = 1 is plain Welford: merging batches one after another gives the moments of everything seen.
    decay < 1 forgets old observations geometrically (an exponentially weighted prior).
    """
    if batch.weight <= 0:
        return acc
    w_old, m2_old = acc.weight * decay, acc.m2 * decay
    w_new = w_old + batch.weight
    delta = batch.mean - acc.mean
    mean = acc.mean + delta * (batch.weight / w_new)
    m2 = m2_old + batch.m2 + delta * delta * (w_old * batch.weight / w_new)
    return Moments(w_new, mean, m2)


def group_ids(index) -> tuple[torch.Tensor, int]:
    """Map group labels to contiguous ids (hash-based factorization, O(bs)).

    Args:
        index: (bs,) labels -- numpy array (verl passes `uid` as an object array of strings), list or tensor.
            Labels are compared by value: callers must make sure they are all of one kind (the estimator
            validates them, see `verl_ebpo.advantage.estimator.check_labels`), since None/NaN labels form one
            group and 1 == 1.0 == True would merge.
    Returns:
        LongTensor (bs,) with values in [0, n_groups), and n_groups.
    """
    import pandas as pd

    if isinstance(index, torch.Tensor):
        labels = index.detach().cpu().numpy().reshape(-1)
    else:
        labels = np.asarray(index).reshape(-1)
    codes, uniques = pd.factorize(labels, use_na_sentinel=False)
    return torch.from_numpy(np.asarray(codes, dtype=np.int64)), len(uniques)


@dataclass(frozen=True)
class GroupStats:
    """Per-group sufficient statistics of the valid rows of one batch (shapes: n = number of ids)."""

    gid: torch.Tensor  # (bs,) long, group id of each row
    count: torch.Tensor  # (n,) float64, valid rows per group (G_q)
    mean: torch.Tensor  # (n,) float64, m_q (0 where count == 0)
    all_equal: torch.Tensor  # (n,) bool, every valid score of the group is the same
    present: torch.Tensor  # (n,) bool, the group has at least one valid row


def group_stats(scores: torch.Tensor, valid: torch.Tensor, gid: torch.Tensor, n: int) -> GroupStats:
    """Group means over valid rows.

    Args:
        scores: (bs,) float64 scores (values of invalid rows are ignored; may be non-finite there).
        valid: (bs,) bool.
        gid: (bs,) long group ids in [0, n).
        n: number of group ids.
    """
    f64 = {"dtype": torch.float64, "device": scores.device}
    gid = gid.to(scores.device)
    w = valid.to(torch.float64)
    s = torch.where(valid, scores, torch.zeros((), **f64))
    count = torch.zeros(n, **f64).index_add_(0, gid, w)
    total = torch.zeros(n, **f64).index_add_(0, gid, s)
    present = count > 0
    mean = torch.where(present, total / count.clamp_min(1.0), torch.zeros((), **f64))
    big = torch.finfo(torch.float64).max
    hi = torch.full((n,), -big, **f64).scatter_reduce_(
        0, gid, torch.where(valid, s, torch.full_like(s, -big)), reduce="amax"
    )
    lo = torch.full((n,), big, **f64).scatter_reduce_(
        0, gid, torch.where(valid, s, torch.full_like(s, big)), reduce="amin"
    )
    return GroupStats(gid=gid, count=count, mean=mean, all_equal=present & (hi == lo), present=present)


def shrinkage(count: torch.Tensor, sigma2: float, tau2: float, epsilon: float) -> torch.Tensor:
    """S_q = (sigma2 / G_q) / (sigma2 / G_q + tau2); S_q = 1 where the denominator <= epsilon * (sigma2 + tau2).

    The degenerate rule is relative, so S is the same for scores in any unit (scores times c > 0 scale sigma2,
    tau2 and the bound by c^2): it fires when both variances are 0 (every score so far equal), or when tau2 is
    negligible and G_q >= 1/epsilon (where S is 1 to within epsilon anyway). For 0/1 rewards
    sigma2 + tau2 <= 0.5, so every denominator above the former absolute bound epsilon is still above it.

    Args:
        count: (n,) float64 group sizes G_q (entries <= 0 give S = 1; callers ignore those groups).
    Returns:
        (n,) float64 in [0, 1].
    """
    noise = sigma2 / count.clamp_min(1.0)
    denom = noise + tau2
    safe = denom > epsilon * (sigma2 + tau2)
    return torch.where(safe, noise / torch.where(safe, denom, torch.ones_like(denom)), torch.ones_like(denom))


def shrunk_baseline(group_mean: torch.Tensor, s: torch.Tensor, mu_glob: float) -> torch.Tensor:
    """V_q = (1 - S_q) * m_q + S_q * mu_glob, all (n,) float64."""
    return (1.0 - s) * group_mean + s * mu_glob


def normalize_advantage(raw: torch.Tensor, valid: torch.Tensor, mode: str, epsilon: float) -> torch.Tensor:
    """Batch-level normalization of raw advantages over the valid rows.

    Statistics are taken over raw[valid] only, so padding rows cannot change a single bit of the result.

    Args:
        raw: (bs,) float64. valid: (bs,) bool.
        mode: "batch" -> c / (std_unbiased + epsilon * max|c|) with c = raw - mean; "center" -> c;
              "none" -> raw. With fewer than two valid rows "batch" and "center" give 0. The epsilon is relative
              to the largest |c|, so `batch` is unit-free and shift-free like the rest (for 0/1 rewards
              max|c| <= 1: at most verl's absolute 1e-6). A constant batch (every |c| within the mean's
              rounding, k * eps * max|raw|) gives 0.
    Returns:
        (bs,) float64, 0 on invalid rows.
    """
    if mode not in NORMALIZE_MODES:
        raise ValueError(f"normalize must be one of {NORMALIZE_MODES}, got {mode!r}")
    zero = torch.zeros((), dtype=torch.float64, device=raw.device)
    raw = torch.where(valid, raw, zero)
    if mode == "none":
        return raw
    picked = raw[valid]
    k = picked.numel()
    if k < 2:
        return torch.zeros_like(raw)
    centered = torch.where(valid, raw - picked.mean(), zero)
    top = centered.abs().max()
    # The float64 mean of k values is off by up to ~k * eps * max|raw|: a batch whose every |c| lies within that is
    # constant (an all-fail batch with mu_glob != 0 has raw = -S * mu_glob on every row), so 0, never c / tiny.
    if not top > k * torch.finfo(torch.float64).eps * picked.abs().max():
        return torch.zeros_like(raw)
    if mode == "center":
        return centered
    unit = centered / top  # = c / (std(c) + epsilon * max|c|), computed at |c| <= 1: no under/overflow in std
    return unit / (torch.std(unit[valid], unbiased=True) + epsilon)


def ebpo_scalar_advantage(
    scores: torch.Tensor,
    valid: torch.Tensor,
    stats: GroupStats,
    mu_glob: float,
    sigma2: float,
    tau2: float,
    normalize: str = "batch",
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One advantage per row from given prior statistics (the prior is NOT updated here).

    Args:
        scores: (bs,) float64. valid: (bs,) bool. stats: group_stats(scores, valid, gid, n).
    Returns:
        advantage (bs,) float64 (0 on invalid rows) and S per group (n,) float64.
    """
    s = shrinkage(stats.count, sigma2, tau2, epsilon)
    baseline = shrunk_baseline(stats.mean, s, mu_glob)
    raw = scores - baseline[stats.gid]
    return normalize_advantage(raw, valid, normalize, epsilon), s
