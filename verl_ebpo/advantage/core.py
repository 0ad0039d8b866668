"""EBPO's math (pure functions over float64 tensors) and one advantage call (`ebpo_advantage`).

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

When the prior mean matters (tests/test_estimator_prior_mean.py): with equal group sizes and normalize=batch or
center, mu_glob adds the same -S mu_glob to every row and the centring removes it, so the prior acts through S only.

The tensors and uids are verl's trainer's own (float rewards, a 0/1 mask, one uid per row): trusted, with one
assertion on their shapes. What a user controls is guarded: a reward whose row score is NaN, inf or beyond
MAX_ABS_SCORE (1e100) is refused or skipped (`on_nonfinite`) and never reaches the prior; below that bound every
quantity here is finite in float64.
"""

from __future__ import annotations

import torch

from verl_ebpo.advantage.options import EBPOOptions

MAX_ABS_SCORE = 1e100  # (2e100)^2 * weight stays finite for any weight below ~4e107
ZERO_ADVANTAGE_TOL = 1e-6  # |A| below this counts as "zero advantage" in diagnostics
F64 = torch.float64


def moments(values: torch.Tensor) -> torch.Tensor:
    """Two-pass moments of `values` (k,): (3,) float64 [weight, mean, m2] on its device; zeros when empty."""
    v = values.to(F64).reshape(-1)
    weight = torch.tensor(float(v.numel()), dtype=F64, device=v.device)
    mean = v.sum() / weight.clamp_min(1.0)
    return torch.stack([weight, mean, torch.sum((v - mean) ** 2)])


def merge_moments(acc: torch.Tensor, batch: torch.Tensor, decay: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Chan/Welford parallel merge of `batch` into `acc`, after scaling acc's weight and m2 by `decay`.

    acc, batch: (..., 3) float64 [weight, mean, m2]; decay: a float or a tensor broadcasting against (...).
    Returns (..., 3). decay = 1 is plain Welford; decay < 1 forgets old observations geometrically.
    """
    w, mean, m2 = acc.unbind(-1)
    bw, bmean, bm2 = batch.unbind(-1)
    w_old = w * decay
    w_new = w_old + bw
    safe = w_new.clamp_min(1e-300)
    delta = bmean - mean
    return torch.stack([w_new, mean + delta * (bw / safe), m2 * decay + bm2 + delta * delta * (w_old * bw / safe)], -1)


def group_stats(scores: torch.Tensor, valid: torch.Tensor, gid: torch.Tensor, n: int):
    """Per-group statistics of the valid rows: scores (bs,) float64, valid (bs,) bool, gid (bs,) long in [0, n).
    Returns count G_q (n,) float64, mean m_q (n,) float64 (0 for an empty group), all_equal (n,) bool."""
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


def ebpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index, prior, options=None):
    """EBPO advantages for one batch; updates `prior` (an EBPOPrior) in place, only when the call succeeds.

    token_level_rewards, response_mask: (bs, T); a row's score is sum_t rewards * mask (summed in the rewards'
    precision, then float64), a row with no 1 in its mask is padding. index: (bs,) group labels (verl's uid). options: EBPOOptions (default: the defaults);
    with prior_scope="batch" the prior is reset first.
    Returns advantages (bs, T) in the rewards' dtype, = A[:, None] * mask (0 on padding/skipped rows), and a dict
    of float diagnostics ("ebpo/..."). ValueError when `index` is missing or of another length, or, with
    on_nonfinite="error", when a row's score is NaN/inf or beyond MAX_ABS_SCORE; the prior is then as before.
    """
    from verl.utils.groupwise import as_torch_index

    from verl_ebpo.advantage.prior import Moments  # prior imports this module

    options = options or EBPOOptions()
    bs = token_level_rewards.shape[0]
    assert token_level_rewards.dim() == 2 and response_mask.shape == token_level_rewards.shape, "(bs, T) tensors"
    if index is None or len(index) != bs:
        raise ValueError(f"ebpo needs `index` (one prompt uid per row, verl's non_tensor_batch['uid']) for its {bs} "
                         f"rows, got {'None' if index is None else f'{len(index)} labels'}")
    out = token_level_rewards * response_mask  # (bs, T), reused for the output: the one (bs, T) allocation
    scores = out.sum(-1).to(F64)  # (bs,), summed in the rewards' precision
    valid = response_mask.any(-1)
    rejected = valid & ~(scores.abs() <= MAX_ABS_SCORE)  # NaN, inf, or beyond what float64 moments hold
    n_skip = int(rejected.sum())
    if n_skip and options.on_nonfinite == "error":
        raise ValueError(
            f"ebpo: {n_skip} row(s) have a non-finite score (NaN/inf reward) or |score| > {MAX_ABS_SCORE:g} "
            f"(beyond what the prior's float64 moments hold), e.g. rows {torch.nonzero(rejected).reshape(-1)[:5].tolist()}; "
            "the prior was not updated. Set +algorithm.ebpo.on_nonfinite=skip to drop such rows instead.")
    valid &= ~rejected  # skipped rows get advantage 0 below, like padding
    if options.prior_scope == "batch":
        prior.reset()
    n_valid = int(valid.sum())
    diagnostics = {"ebpo/padding_rows": float(bs - n_valid - n_skip), "ebpo/skipped_rows": float(n_skip)}
    if n_valid:
        gid = as_torch_index(index, device=scores.device)
        count, mean, all_equal = group_stats(scores, valid, gid, int(gid.max()) + 1)
        present = count > 0
        batch = torch.stack([moments(scores[valid]), moments(mean[present])]).tolist()
        updated = prior.merged(*(Moments(*m) for m in batch), options.prior_decay)
        s = shrinkage(count, updated.sigma2, updated.tau2, options.epsilon)  # (n,)
        baseline = (1.0 - s) * mean + s * updated.mu_glob  # V_q (n,)
        adv = normalize_advantage(scores - baseline[gid], valid, options.normalize, options.epsilon)  # (bs,)
        s = s[present]
        values = torch.stack([s.mean(), s.min(), s.max(), all_equal[present].double().mean(),
                              ((adv.abs() < ZERO_ADVANTAGE_TOL) & valid).double().sum() / n_valid]).tolist()
        keys = ("shrinkage_mean", "shrinkage_min", "shrinkage_max", "equal_reward_group_frac", "zero_adv_frac")
        diagnostics.update({f"ebpo/{k}": v for k, v in zip(keys, values)})
        prior.assign(updated)  # commit only after everything above succeeded
    else:  # an empty or all-padding/skipped batch: zeros, the prior untouched
        adv = torch.zeros_like(scores)
    diagnostics.update({"ebpo/prior_mean": prior.mu_glob, "ebpo/sigma2": prior.sigma2, "ebpo/tau2": prior.tau2,
                        "ebpo/prior_weight": prior.reward.weight})
    return torch.mul(adv.to(out.dtype).unsqueeze(-1), response_mask, out=out).to(token_level_rewards.dtype), diagnostics
