"""One EBPO advantage call: score the rows, update the prior, compute advantages, report diagnostics.

verl-free: `ebpo_advantage` takes tensors, the group labels, a prior object and options; verl's registered
estimator (`verl_ebpo.advantage.verl_glue.compute_ebpo_outcome_advantage`) forwards verl's arguments here.
The tensors and the uids are verl's trainer's own (float rewards, a 0/1 mask, one str uid per row): they are
trusted, with one assertion on their shapes. What a user controls is guarded: the reward values (a NaN, inf or
huge score is refused or skipped, per `on_nonfinite`, and never reaches the prior) and the options.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from verl_ebpo.advantage.core import MAX_ABS_SCORE, group_stats, moments, normalize_advantage, shrinkage
from verl_ebpo.advantage.options import EBPOOptions
from verl_ebpo.advantage.prior import EBPOPrior, Moments

ZERO_ADVANTAGE_TOL = 1e-6  # |A| below this counts as "zero advantage" in diagnostics
_SHOW = 5  # rows named in an error message


def _row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_t a[i, t] * b[i, t] (bs,) for (bs, T) tensors of one dtype, with no (bs, T) temporary: rows in pairs
    through bmm ((2, T) @ (T, 2), the diagonal; several times faster on CPU than one product per row)."""
    head = a.shape[0] - a.shape[0] % 2
    pairs = torch.bmm(a[:head].unflatten(0, (-1, 2)), b[:head].unflatten(0, (-1, 2)).transpose(1, 2))
    return torch.cat([pairs.diagonal(dim1=1, dim2=2).reshape(-1), (a[head:] * b[head:]).sum(-1)])


def _diagnostics(prior: EBPOPrior, n_pad: int, n_skip: int) -> dict:
    return {"ebpo/prior_mean": prior.mu_glob, "ebpo/sigma2": prior.sigma2, "ebpo/tau2": prior.tau2,
            "ebpo/prior_weight": prior.reward.weight, "ebpo/padding_rows": float(n_pad),
            "ebpo/skipped_rows": float(n_skip), "ebpo/saturated_rows": 0.0}


def ebpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    prior: EBPOPrior,
    options: EBPOOptions = EBPOOptions(),
) -> tuple[torch.Tensor, dict]:
    """EBPO advantages for one batch; updates `prior` in place (only when the call succeeds).

    Args:
        token_level_rewards: (bs, T) float rewards; a row's score is sum_t rewards * mask (in float32 for
            half-precision rewards), then float64.
        response_mask: (bs, T) 0/1 mask (bool, int or float). A row with no 1 is padding.
        index: (bs,) group labels (verl's uid). Rows sharing a label are one prompt's answers.
        prior: the running prior; with options.prior_scope == "batch" it is reset first.
        options: EBPOOptions.
    Returns:
        advantages (bs, T) in rewards' dtype, = A[:, None] * mask (0 on padding/skipped rows and outside the mask),
        and a dict of float diagnostics (keys "ebpo/..."). An advantage beyond the rewards' dtype range is clamped
        to its largest finite value and counted in "ebpo/saturated_rows".
    Raises:
        ValueError when `index` is missing or of another length than the batch, or, with on_nonfinite="error",
        when a row's score is NaN/inf or beyond MAX_ABS_SCORE (1e100); the prior is then exactly as before.
    """
    bs = token_level_rewards.shape[0]
    assert token_level_rewards.dim() == 2 and response_mask.shape == token_level_rewards.shape, "(bs, T) tensors"
    if index is None or len(index) != bs:
        raise ValueError(f"ebpo needs `index` (one prompt uid per row, verl's non_tensor_batch['uid']) for its {bs} "
                         f"rows, got {'None' if index is None else f'{len(index)} labels'}")
    dtype = token_level_rewards.dtype if token_level_rewards.dtype in (torch.float32, torch.float64) else torch.float32
    out = torch.empty(response_mask.shape, dtype=dtype, device=response_mask.device).copy_(response_mask)
    scores = _row_dots(token_level_rewards.to(dtype), out).to(torch.float64)  # (bs,)
    valid = out.amax(dim=-1) > 0 if out.numel() else torch.zeros(bs, dtype=torch.bool, device=out.device)
    rejected = valid & ~(scores.abs() <= MAX_ABS_SCORE)  # NaN, inf, or beyond what float64 moments hold
    n_marked, n_skip = (int(x) for x in torch.stack([valid.sum(), rejected.sum()]).tolist())
    if n_skip and options.on_nonfinite == "error":
        raise ValueError(
            f"ebpo: {n_skip} row(s) have a non-finite score (NaN/inf reward) or |score| > {MAX_ABS_SCORE:g} "
            f"(beyond what the prior's float64 moments hold), e.g. rows "
            f"{torch.nonzero(rejected).reshape(-1)[:_SHOW].tolist()}; the prior was not updated. "
            "Set +algorithm.ebpo.on_nonfinite=skip to drop such rows instead."
        )
    valid &= ~rejected  # skipped rows get advantage 0 below, like padding
    if options.prior_scope == "batch":
        prior.reset()
    if n_marked == n_skip:  # an empty or all-padding/skipped batch: zeros, the prior untouched
        return out.zero_().to(token_level_rewards.dtype), _diagnostics(prior, bs - n_marked, n_skip)

    labels = index.cpu().numpy() if isinstance(index, torch.Tensor) else np.asarray(index)
    codes, uniques = pd.factorize(labels.reshape(-1), use_na_sentinel=False)
    gid = torch.from_numpy(codes.astype(np.int64)).to(scores.device)
    count, mean, all_equal = group_stats(scores, valid, gid, len(uniques))
    present = count > 0
    batch = torch.stack([moments(scores[valid]), moments(mean[present])]).tolist()
    updated = prior.merged(Moments(*batch[0]), Moments(*batch[1]), options.prior_decay, options.prior_shaping())
    if not updated.is_finite():  # a loaded prior of huge weight could overflow
        raise ValueError(f"ebpo: merging this batch would make the prior non-finite ({updated.state_dict()}); "
                         "the prior was not updated")

    s = shrinkage(count, updated.sigma2, updated.tau2, options.epsilon)  # (n,)
    baseline = (1.0 - s) * mean + s * updated.mu_glob  # V_q (n,)
    adv = normalize_advantage(scores - baseline[gid], valid, options.normalize, options.epsilon)  # (bs,) float64
    top = torch.finfo(token_level_rewards.dtype).max
    saturated = valid & (adv.abs() > top)
    adv = adv.clamp(-top, top)
    s_present = s[present]
    values = torch.stack([s_present.mean(), s_present.min(), s_present.max(), all_equal[present].double().mean(),
                          ((adv.abs() < ZERO_ADVANTAGE_TOL) & valid).sum() / (n_marked - n_skip),
                          saturated.sum().double()]).tolist()
    prior.assign(updated)  # commit only after everything above succeeded
    keys = ("shrinkage_mean", "shrinkage_min", "shrinkage_max", "equal_reward_group_frac", "zero_adv_frac",
            "saturated_rows")
    diagnostics = {**_diagnostics(prior, bs - n_marked, n_skip), **{f"ebpo/{k}": v for k, v in zip(keys, values)}}
    return out.mul_(adv.to(dtype).unsqueeze(-1)).to(token_level_rewards.dtype), diagnostics
