"""One EBPO advantage call: validate input, update the prior (first), compute advantages, report diagnostics.

verl-free: `ebpo_advantage` takes tensors, the group labels, a prior object and options. The verl glue
(`verl_ebpo.advantage.verl_glue`) only reads verl's kwargs and config and forwards them here.
"""

from __future__ import annotations

import torch

from verl_ebpo.advantage.math import (
    GroupStats,
    Moments,
    ebpo_scalar_advantage,
    group_ids,
    group_stats,
    moments_tensor,
)
from verl_ebpo.advantage.options import EBPOOptions
from verl_ebpo.advantage.prior import EBPOPrior

ZERO_ADVANTAGE_TOL = 1e-6  # |A| below this counts as "zero advantage" in diagnostics


def _check_inputs(token_level_rewards, response_mask, index) -> None:
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.dim() != 2:
        raise ValueError(
            f"token_level_rewards must be a 2-D tensor (bs, response_length), got "
            f"{getattr(token_level_rewards, 'shape', type(token_level_rewards).__name__)}"
        )
    if not token_level_rewards.is_floating_point():
        raise ValueError(f"token_level_rewards must be floating point, got {token_level_rewards.dtype}")
    if not isinstance(response_mask, torch.Tensor) or response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"response_mask shape {tuple(getattr(response_mask, 'shape', ()))} does not match "
            f"token_level_rewards shape {tuple(token_level_rewards.shape)}"
        )
    if index is None:
        raise ValueError(
            "ebpo needs `index` (the prompt uid of every row, verl's non_tensor_batch['uid']) to form groups; "
            "got None"
        )
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(f"index has {len(index)} entries but the batch has {token_level_rewards.shape[0]} rows")


def _row_scores(token_level_rewards: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """r_i = sum_t rewards[i, t] * mask[i, t] as float64 (bs,), with `out` holding the mask as floats.

    A batched dot product: no (bs, T) temporary for float32/float64 inputs.
    """
    if token_level_rewards.dtype in (torch.float32, torch.float64):
        return torch.bmm(token_level_rewards.unsqueeze(1), out.unsqueeze(2)).reshape(-1).to(torch.float64)
    return (token_level_rewards.float() * out.float()).sum(-1).to(torch.float64)


def _diagnostics(prior: EBPOPrior, n_pad: int, n_skip: int, batch_stats: dict | None = None) -> dict:
    d = {
        "ebpo/prior_mean": prior.mu_glob,
        "ebpo/sigma2": prior.sigma2,
        "ebpo/tau2": prior.tau2,
        "ebpo/prior_weight": prior.reward.weight,
        "ebpo/padding_rows": float(n_pad),
        "ebpo/skipped_rows": float(n_skip),
    }
    d.update(batch_stats or {})
    return d


def _batch_diagnostics(stats: GroupStats, s: torch.Tensor, adv: torch.Tensor, valid: torch.Tensor, k: int) -> dict:
    """Shrinkage over the batch's groups, share of all-equal groups, share of zero advantages (one sync)."""
    present = stats.present
    inf = torch.tensor(float("inf"), dtype=torch.float64, device=s.device)
    n_groups = present.sum()
    values = torch.stack(
        [
            torch.where(present, s, 0.0).sum() / n_groups,
            torch.where(present, s, inf).min(),
            torch.where(present, s, -inf).max(),
            (stats.all_equal & present).sum() / n_groups,
            ((adv.abs() < ZERO_ADVANTAGE_TOL) & valid).sum() / k,
        ]
    ).tolist()
    keys = ("shrinkage_mean", "shrinkage_min", "shrinkage_max", "equal_reward_group_frac", "zero_adv_frac")
    return {f"ebpo/{key}": float(v) for key, v in zip(keys, values)}


def ebpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    prior: EBPOPrior,
    options: EBPOOptions = EBPOOptions(),
) -> tuple[torch.Tensor, dict]:
    """EBPO advantages for one batch; updates `prior` in place (only when the call succeeds).

    Args:
        token_level_rewards: (bs, T) float rewards; a row's score is sum_t rewards * mask.
        response_mask: (bs, T) 0/1 mask (bool, int or float). A row with no 1 is padding.
        index: (bs,) group labels (verl's uid). Rows sharing a label are one prompt's answers.
        prior: the running prior; with options.prior_scope == "batch" it is reset first.
        options: EBPOOptions.
    Returns:
        advantages (bs, T) in rewards' dtype, = A[:, None] * mask (0 on padding/skipped rows),
        and a dict of float diagnostics (keys "ebpo/...").
    Raises:
        ValueError on bad shapes, missing index, or a non-finite score with on_nonfinite="error";
        the prior is then exactly as before.

    Works on any device; the few host syncs are batched (counts, batch moments, diagnostics).
    """
    _check_inputs(token_level_rewards, response_mask, index)
    out = response_mask.to(dtype=token_level_rewards.dtype, copy=True)  # becomes the output in place
    scores = _row_scores(token_level_rewards, out)
    if out.shape[1]:
        valid = out.amax(dim=-1) > 0
    else:
        valid = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
    nonfinite = valid & ~torch.isfinite(scores)
    n_marked, n_skip = (int(x) for x in torch.stack([valid.sum(), nonfinite.sum()]).tolist())
    n_pad = out.shape[0] - n_marked

    if n_skip:
        if options.on_nonfinite == "error":
            raise ValueError(
                f"ebpo: {n_skip} row(s) have a non-finite score (NaN/inf reward), e.g. rows "
                f"{torch.nonzero(nonfinite).reshape(-1)[:5].tolist()}; the prior was not updated. "
                "Set +algorithm.ebpo.on_nonfinite=skip to drop such rows instead."
            )
        valid = valid & ~nonfinite
    k = n_marked - n_skip

    if options.prior_scope == "batch":
        prior.reset()
    if k == 0:
        return out.zero_(), _diagnostics(prior, n_pad, n_skip)

    gid, n_groups = group_ids(index)
    stats = group_stats(scores, valid, gid, n_groups)
    moments = torch.cat([moments_tensor(scores[valid]), moments_tensor(stats.mean[stats.present])]).tolist()
    updated = prior.merged(Moments(*moments[:3]), Moments(*moments[3:]), options.prior_decay)
    updated.shaping = options.prior_shaping()
    adv, s = ebpo_scalar_advantage(
        scores, valid, stats, updated.mu_glob, updated.sigma2, updated.tau2, options.normalize, options.epsilon
    )
    batch_stats = _batch_diagnostics(stats, s, adv, valid, k)
    prior.assign(updated)  # commit only after everything above succeeded
    out.mul_(adv.to(out.dtype).unsqueeze(-1))
    return out, _diagnostics(prior, n_pad, n_skip, batch_stats)
