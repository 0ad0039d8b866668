"""EBPO's math: pure functions over float64 tensors, no verl, no state.

Notation (paper, Algorithm 1):
    r_i          outcome score of answer i (sum of its token-level rewards over its response mask)
    m_q          mean score of the valid answers of prompt q (its "group"), G_q of them
    mu_glob      running mean of all scores seen           (Welford accumulator W_r)
    sigma2       running population variance of all scores (W_r)
    tau2         running population variance of the group means m_q (W_mu)
    S_q          = (sigma2 / G_q) / (sigma2 / G_q + tau2), or 1 when that denominator <= epsilon * (sigma2 + tau2)
                   (unit-free: multiplying every score by c > 0 scales both sides by c^2)
    V_q          = (1 - S_q) * m_q + S_q * mu_glob
    raw_i        = r_i - V_q(i)
    A_i          = normalize(raw)_i: `batch` c / (std + epsilon * max|c|), c = raw - mean, `center` raw - mean, `none` raw

When the prior mean matters (tests/test_estimator.py): with equal group sizes and normalize=batch or center,
mu_glob adds the same -S mu_glob to every row and the centring removes it; with rbar the batch mean,
    center:  A_i = (1 - S) (r_i - m_q) + S (r_i - rbar)   (group-centred and batch-centred, mixed by S)
    batch:   the same divided by the batch std (+ epsilon)
so the prior acts through S only. With unequal group sizes or normalize=none, mu_glob changes the advantages.

Magnitude rule: a score with |r_i| > MAX_ABS_SCORE (1e100) is treated like a non-finite one (the caller refuses
or skips it). Below that bound every quantity here is finite in float64, so the prior never holds inf/NaN.
"""

from __future__ import annotations

import torch

NORMALIZE_MODES = ("batch", "center", "none")
MAX_ABS_SCORE = 1e100  # (2e100)^2 * weight stays finite for any weight below ~4e107
F64 = torch.float64


def moments(values: torch.Tensor) -> torch.Tensor:
    """Two-pass moments of `values` (k,): (3,) float64 [weight, mean, m2] on its device; zeros when empty."""
    v = values.to(F64).reshape(-1)
    weight = torch.tensor(float(v.numel()), dtype=F64, device=v.device)
    mean = v.sum() / weight.clamp_min(1.0)
    return torch.stack([weight, mean, torch.sum((v - mean) ** 2)])


def merge_moments(acc: torch.Tensor, batch: torch.Tensor, decay: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Chan/Welford parallel merge of `batch` into `acc`, after scaling acc's weight and m2 by `decay`.

    acc, batch: (..., 3) float64 [weight, mean, m2] (any leading shape: one accumulator or one per cell);
    decay: a float or a tensor broadcasting against (...). Returns (..., 3). decay = 1 is plain Welford; decay < 1
    forgets old observations geometrically. A batch of weight 0 only decays `acc`.
    """
    w, mean, m2 = acc.unbind(-1)
    bw, bmean, bm2 = batch.unbind(-1)
    w_old = w * decay
    w_new = w_old + bw
    safe = w_new.clamp_min(1e-300)
    delta = bmean - mean
    return torch.stack([w_new, mean + delta * (bw / safe), m2 * decay + bm2 + delta * delta * (w_old * bw / safe)], -1)


def group_stats(scores: torch.Tensor, valid: torch.Tensor, gid: torch.Tensor, n: int):
    """Per-group statistics of the valid rows.

    scores (bs,) float64 (ignored where not valid), valid (bs,) bool, gid (bs,) long in [0, n).
    Returns count G_q (n,) float64, mean m_q (n,) float64 (0 for an empty group), all_equal (n,) bool.
    """
    zero = torch.zeros(n, dtype=F64, device=scores.device)
    s = torch.where(valid, scores, 0.0)
    count = zero.index_add(0, gid, valid.to(F64))
    mean = zero.index_add(0, gid, s) / count.clamp_min(1.0)
    inf = torch.full_like(s, float("inf"))
    hi = zero.scatter_reduce(0, gid, torch.where(valid, s, -inf), reduce="amax", include_self=False)
    lo = zero.scatter_reduce(0, gid, torch.where(valid, s, inf), reduce="amin", include_self=False)
    return count, mean, (count > 0) & (hi == lo)


def shrinkage(count: torch.Tensor, sigma2: float, tau2: float, epsilon: float) -> torch.Tensor:
    """S_q (n,) float64 in [0, 1] for group sizes `count` (n,) float64: (sigma2 / G) / (sigma2 / G + tau2), and 1
    where that denominator <= epsilon * (sigma2 + tau2) (every score so far equal, or tau2 ~ 0 and G >= 1/epsilon)."""
    noise = sigma2 / count.clamp_min(1.0)
    denom = noise + tau2
    safe = denom > epsilon * (sigma2 + tau2)
    return torch.where(safe, noise / torch.where(safe, denom, torch.ones_like(denom)), torch.ones_like(denom))


def normalize_advantage(raw: torch.Tensor, valid: torch.Tensor, mode: str, epsilon: float) -> torch.Tensor:
    """Normalise raw advantages (bs,) float64 over the valid rows (bs,) bool; (bs,) float64, 0 on invalid rows.

    "batch": c / (std_unbiased + epsilon * max|c|) with c = raw - mean; "center": c; "none": raw. Fewer than two
    valid rows, or a constant batch (every |c| within the mean's rounding, k * eps * max|raw|), give 0.
    """
    raw = torch.where(valid, raw, 0.0)
    if mode == "none":
        return raw
    picked = raw[valid]
    k = picked.numel()
    if k < 2:
        return torch.zeros_like(raw)
    centered = torch.where(valid, raw - picked.mean(), 0.0)
    top = centered.abs().max()
    if not top > k * torch.finfo(F64).eps * picked.abs().max():
        return torch.zeros_like(raw)
    if mode == "center":
        return centered
    unit = centered / top  # = c / (std(c) + epsilon * max|c|), computed at |c| <= 1: no under/overflow in std
    return unit / (torch.std(unit[valid], unbiased=True) + epsilon)
