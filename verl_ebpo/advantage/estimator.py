"""One EBPO advantage call: validate input, update the prior (first), compute advantages, report diagnostics.

verl-free: `ebpo_advantage` takes tensors, the group labels, a prior object and options. The verl glue
(`verl_ebpo.advantage.verl_glue`) only reads verl's kwargs and config and forwards them here.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch

from verl_ebpo.advantage.math import (
    MAX_ABS_SCORE,
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
_SHOW = 5  # rows named in an error message
_LABEL_KINDS = ("string", "bytes", "integer", "empty")  # pandas.api.types.infer_dtype of an accepted index


def _kind(x) -> str:
    module = type(x).__module__
    return type(x).__name__ if module == "builtins" else f"{module}.{type(x).__name__}"


def _check_inputs(token_level_rewards, response_mask) -> None:
    for name, t in (("token_level_rewards", token_level_rewards), ("response_mask", response_mask)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(
                f"ebpo: {name} must be a torch.Tensor of shape (bs, response_length), got {_kind(t)} "
                "(convert it with torch.as_tensor)"
            )
    if token_level_rewards.dim() != 2:
        raise ValueError(
            f"token_level_rewards must be a 2-D tensor (bs, response_length), got shape {tuple(token_level_rewards.shape)}"
        )
    if not token_level_rewards.is_floating_point():
        raise ValueError(f"token_level_rewards must be floating point, got {token_level_rewards.dtype}")
    if response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} does not match "
            f"token_level_rewards shape {tuple(token_level_rewards.shape)}"
        )
    if response_mask.is_complex():
        raise ValueError(f"ebpo: response_mask must hold 0/1 values (bool, int or float), got {response_mask.dtype}")


def check_labels(index, bs: int) -> np.ndarray:
    """The group labels as a 1-D numpy array of `bs` labels, all str (or bytes) or all int; else ValueError.

    verl passes `uid` as an object array of str. None/NaN labels, floats, bools and mixed kinds are refused: a
    hash factorization would silently merge them into one group (None with NaN, 1 with 1.0 and True).
    A vectorised check (pandas' infer_dtype): no Python loop over rows unless the labels are refused.
    """
    how = "ebpo needs `index` (the prompt uid of every row, verl's non_tensor_batch['uid']) to form groups"
    if index is None:
        raise ValueError(f"{how}; got None")
    if isinstance(index, torch.Tensor):
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
            raise ValueError(f"{how}: a tensor of integer ids or an array of str, got a {index.dtype} tensor")
        labels = index.detach().cpu().numpy()
    elif isinstance(index, np.ndarray):
        labels = index
    elif isinstance(index, (str, bytes)) or not hasattr(index, "__len__"):
        raise ValueError(f"{how}: one label per row (an array or list), got {_kind(index)}")
    else:
        labels = np.fromiter(index, dtype=object, count=len(index))  # a tuple label stays one (refused) label
    if labels.ndim != 1:
        raise ValueError(
            f"{how}: one str or int label per row, got an array of shape {labels.shape} "
            "(are the labels tuples or lists? join them into one str per row)"
        )
    if labels.shape[0] != bs:
        raise ValueError(f"index has {labels.shape[0]} entries but the batch has {bs} rows")
    if bs == 0:
        return labels
    import pandas as pd

    kind = pd.api.types.infer_dtype(labels, skipna=False)
    if kind not in _LABEL_KINDS:
        kinds: dict[str, int] = {}
        first: dict[str, int] = {}
        for i, x in enumerate(labels.tolist()):  # error path only
            k = "None" if x is None else type(x).__name__
            kinds[k] = kinds.get(k, 0) + 1
            first.setdefault(k, i)
        odd = sorted(kinds, key=lambda k: (k in ("str", "int"), first[k]))[0]
        raise ValueError(
            f"{how}: every label must be a str (verl's uid) or every label an int, but index holds "
            f"{', '.join(f'{n} {k}' for k, n in kinds.items())} (e.g. row {first[odd]}: {labels[first[odd]]!r}); "
            "None/NaN, float, bool, tuple or mixed labels would silently merge or split groups"
        )
    return labels


def _row_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """r_i = sum_t rewards[i, t] * mask[i, t] as float64 (bs,); `out` (bs, T) holds the 0/1 mask in the rewards'
    dtype unless the mask already has that dtype (float32/float64: `out` is then scratch, not read).

    In the rewards' precision (float32 for half types); for float32 rewards paired row dot products (`_row_dots`),
    for float64 one bmm per row (exact for denormal rewards), no (bs, T) temporary. A row whose fast sum cannot be
    trusted is summed again exactly by `_exact_row_scores`: see `_rows_to_refit`.
    """
    mask = response_mask if response_mask.dtype == out.dtype else out
    if token_level_rewards.dtype == torch.float32:
        return _row_dots(token_level_rewards, mask).to(torch.float64)
    if token_level_rewards.dtype == torch.float64:  # one product per row: BLAS's paired product flushes denormals
        return torch.bmm(token_level_rewards.unsqueeze(1), mask.unsqueeze(2)).reshape(-1)
    return (token_level_rewards.float() * out.float()).sum(-1).to(torch.float64)


def _row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_t a[i, t] * b[i, t] (bs,) for two (bs, T) tensors of one dtype, without a (bs, T) temporary.

    Rows go through bmm in pairs, (2, T) @ (T, 2) keeping the diagonal (several times faster on CPU than one bmm
    per row); an odd last row is paired with its neighbour, so every row is summed by the same (2, T) product.
    """
    bs = a.shape[0]
    head = bs - bs % 2
    dots = torch.bmm(a[:head].unflatten(0, (-1, 2)), b[:head].unflatten(0, (-1, 2)).transpose(1, 2))
    dots = dots.diagonal(dim1=1, dim2=2).reshape(-1)
    if bs % 2:
        a2, b2 = (a[-2:], b[-2:]) if bs > 1 else (a.expand(2, -1), b.expand(2, -1))
        dots = torch.cat([dots, torch.bmm(a2.unsqueeze(0), b2.unsqueeze(0).transpose(1, 2))[0, 1, 1:]])
    return dots


def _rows_to_refit(token_level_rewards: torch.Tensor, scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(bs,) rows whose fast sum cannot decide |score| <= MAX_ABS_SCORE: not finite (an overflow of the
    low-precision sum, or a NaN/inf reward *outside* the mask, since 0 * inf = NaN) or, for float64 rewards (the
    only dtype whose values reach the bound), a reward beyond MAX_ABS_SCORE / (2T), where cancellation can hide a
    score beyond the bound ([1.8e308, -1e101, -1.8e308] sums to 0). Below that every |reward| <= bound / (2T), so
    the exact and the fast score are both within the bound. Two fast row reductions, for float64 only."""
    refit = valid & ~torch.isfinite(scores)
    if token_level_rewards.dtype == torch.float64 and token_level_rewards.shape[-1] > 0:
        limit = MAX_ABS_SCORE / (2 * token_level_rewards.shape[-1])
        big = (token_level_rewards.amax(dim=-1) > limit) | (token_level_rewards.amin(dim=-1) < -limit)
        refit |= valid & big
    return refit


def _finish(out: torch.Tensor, response_mask: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """The output adv[:, None] * mask (bs, T), written into `out` (which holds the mask as 0/1 floats, or is
    scratch when the mask has the output's dtype)."""
    if response_mask.dtype == out.dtype and out.dtype in (torch.float32, torch.float64):
        return torch.mul(response_mask, adv.unsqueeze(-1), out=out)
    return out.mul_(adv.unsqueeze(-1))


def _exact_row_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Scores of `rows` (k,), the rewards inside the (0/1) mask summed exactly (`Fraction`) then rounded to float64:
    +-inf beyond its range, NaN for a NaN or for inf and -inf together (rare path: a Python loop over these rows)."""
    r = token_level_rewards.index_select(0, rows).to(torch.float64)
    inside = response_mask.index_select(0, rows) != 0
    values = torch.where(inside, r, torch.zeros((), dtype=torch.float64, device=r.device)).tolist()
    return torch.tensor([_exact_sum(row) for row in values], dtype=torch.float64, device=r.device)


def _exact_sum(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    odd = {math.copysign(1.0, v) if math.isinf(v) else 0.0 for v in values if not math.isfinite(v)}
    if odd:  # NaN (0.0 here) or both infinities: NaN; one infinity: it
        return odd.pop() * math.inf if len(odd) == 1 and 0.0 not in odd else math.nan
    total = sum((Fraction(v) for v in finite), Fraction(0))
    try:
        return float(total)
    except OverflowError:
        return math.inf if total > 0 else -math.inf


def _mask_as_output(response_mask: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The (bs, T) buffer that becomes the output, the rows holding a 1 (bs,) and whether the mask holds a value
    other than 0/1 (a 0-d bool tensor, no host sync).

    No full-size temporary, and no row-wise aminmax (slow on CPU). The buffer holds the mask as 0/1 in `dtype`,
    except for a float32/float64 mask of `dtype` itself, which is checked in it with one write (then it is
    scratch): m - m*m is +-0 exactly when m is 0, -0 or 1. Any other m has fl(m*m) != m (< m for a fraction, > m
    outside [0, 1]) and a nonzero difference never rounds to 0, fused multiply-add or not; NaN/inf give NaN/-inf.
    An integer mask is converted and checked by the converted values' min and
    max: the conversion is monotone and 0, 1, 2 and -1 are exact in every float dtype, so an integer other than
    0/1 becomes a float outside [0, 1] (or +-inf). Another float mask is written as `mask != 0` and compared with
    itself (`torch.equal`: any fraction, NaN, inf or negative differs); a bool mask needs no check.
    """
    out = torch.empty(response_mask.shape, dtype=dtype, device=response_mask.device)
    no = torch.zeros((), dtype=torch.bool, device=out.device)
    if out.numel() == 0:
        return out, torch.zeros(out.shape[0], dtype=torch.bool, device=out.device), no
    if response_mask.dtype == torch.bool:
        out.copy_(response_mask)
        return out, out.amax(dim=-1) > 0, no
    if response_mask.dtype == dtype and dtype in (torch.float32, torch.float64):
        torch.addcmul(response_mask, response_mask, response_mask, value=-1, out=out)  # m - m*m
        lo, hi = torch.aminmax(out)  # one pass (here faster than amin and amax)
        return out, response_mask.amax(dim=-1) > 0, (lo != 0) | (hi != 0)  # NaN != 0
    if response_mask.is_floating_point():
        torch.ne(response_mask, 0, out=out)
        bad = no if torch.equal(out, response_mask) else ~no
        return out, out.amax(dim=-1) > 0, bad
    out.copy_(response_mask)
    hi = out.amax(dim=-1)
    return out, hi > 0, ~(out.amin() >= 0) | ~(hi.amax() <= 1)


def _mask_error(response_mask: torch.Tensor) -> ValueError:
    """The error for a mask holding values other than 0/1 (error path: (bs, T) temporaries are fine)."""
    odd = ~((response_mask == 0) | (response_mask == 1))
    rows = torch.nonzero(odd.any(dim=-1)).reshape(-1)
    row = int(rows[0])
    value = response_mask[row][odd[row]][0].item()
    return ValueError(
        f"ebpo: response_mask must hold only 0 and 1, but {rows.numel()} row(s) hold other values (e.g. row {row} "
        f"holds {value!r}; rows {rows[:_SHOW].tolist()}); another value would scale that token's share of the "
        "score and of the advantage. Pass a 0/1 (or bool) mask"
    )


def _diagnostics(prior: EBPOPrior, n_pad: int, n_skip: int, batch_stats: dict | None = None) -> dict:
    d = {
        "ebpo/prior_mean": prior.mu_glob,
        "ebpo/sigma2": prior.sigma2,
        "ebpo/tau2": prior.tau2,
        "ebpo/prior_weight": prior.reward.weight,
        "ebpo/padding_rows": float(n_pad),
        "ebpo/skipped_rows": float(n_skip),
        "ebpo/saturated_rows": 0.0,
    }
    d.update(batch_stats or {})
    return d


def _batch_diagnostics(
    stats: GroupStats, s: torch.Tensor, adv: torch.Tensor, valid: torch.Tensor, k: int, saturated: torch.Tensor
) -> dict:
    """Shrinkage over the batch's groups, share of all-equal groups, share of zero advantages, saturated rows
    (one sync)."""
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
            saturated.sum().to(torch.float64),
        ]
    ).tolist()
    keys = ("shrinkage_mean", "shrinkage_min", "shrinkage_max", "equal_reward_group_frac", "zero_adv_frac",
            "saturated_rows")
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
        token_level_rewards: (bs, T) float rewards (float16/bfloat16/float32/float64); a row's score is
            sum_t rewards * mask, taken in float64 when the fast sum in the rewards' precision is not finite.
        response_mask: (bs, T) 0/1 mask (bool, int or float; any other value is an error). A row with no 1 is
            padding.
        index: (bs,) group labels (verl's uid), all str or all int. Rows sharing a label are one prompt's answers.
        prior: the running prior; with options.prior_scope == "batch" it is reset first.
        options: EBPOOptions.
    Returns:
        advantages (bs, T) in rewards' dtype, = A[:, None] * mask (exactly 0 on padding/skipped rows and on
        tokens outside the mask), and a dict of float diagnostics (keys "ebpo/...").
        Never NaN/inf: an advantage beyond the rewards' dtype range (possible with normalize=center/none in
        float16/bfloat16/float32) is clamped to that dtype's largest finite value and counted in
        "ebpo/saturated_rows".
    Raises:
        ValueError on bad shapes/types, a mask value other than 0/1, missing or mixed-kind labels, or a row
        whose score is NaN/inf or beyond MAX_ABS_SCORE (1e100) with on_nonfinite="error"; the prior is then
        exactly as before.

    Works on any device; the few host syncs are batched (counts, batch moments, diagnostics; the check of a float
    mask whose dtype differs from the rewards' is one more).
    """
    _check_inputs(token_level_rewards, response_mask)
    bs = token_level_rewards.shape[0]
    labels = check_labels(index, bs)
    out, valid, bad_mask = _mask_as_output(response_mask, token_level_rewards.dtype)  # out becomes the output
    zero_rows = torch.zeros(bs, dtype=torch.bool, device=out.device)
    scores = _row_scores(token_level_rewards, response_mask, out)
    refit = _rows_to_refit(token_level_rewards, scores, valid)
    rejected = valid & ~(scores.abs() <= MAX_ABS_SCORE)
    n_marked, n_refit, n_skip, n_bad_mask = (
        int(x) for x in torch.stack([valid.sum(), refit.sum(), rejected.sum(), bad_mask.sum()]).tolist()
    )
    if n_bad_mask:
        raise _mask_error(response_mask)
    if n_refit:  # rare: an overflowed low-precision sum, NaN/inf outside the mask, float64 rewards beyond 1e100/2T
        rows = torch.nonzero(refit).reshape(-1)
        scores = scores.index_copy(0, rows, _exact_row_scores(token_level_rewards, response_mask, rows))
        rejected = valid & ~(scores.abs() <= MAX_ABS_SCORE)
        n_skip = int(rejected.sum())
    n_pad = bs - n_marked

    if n_skip:
        if options.on_nonfinite == "error":
            raise ValueError(
                f"ebpo: {n_skip} row(s) have a non-finite score (NaN/inf reward) or |score| > {MAX_ABS_SCORE:g} "
                f"(beyond what the prior's float64 moments hold), e.g. rows "
                f"{torch.nonzero(rejected).reshape(-1)[:_SHOW].tolist()}; the prior was not updated. "
                "Set +algorithm.ebpo.on_nonfinite=skip to drop such rows instead."
            )
        valid = valid & ~rejected  # skipped rows get advantage 0 below, like padding
    k = n_marked - n_skip

    if options.prior_scope == "batch":
        prior.reset()
    if k == 0:
        return out.zero_(), _diagnostics(prior, n_pad, n_skip)

    gid, n_groups = group_ids(labels)
    stats = group_stats(scores, valid, gid, n_groups)
    moments = torch.cat([moments_tensor(scores[valid]), moments_tensor(stats.mean[stats.present])]).tolist()
    updated = prior.merged(Moments(*moments[:3]), Moments(*moments[3:]), options.prior_decay)
    updated.shaping = options.prior_shaping()
    if not updated.is_finite():  # stays: one check, after the merge (a loaded prior of huge weight could overflow)
        raise ValueError(
            f"ebpo: merging this batch would make the prior non-finite ({updated.state_dict()}); "
            "the prior was not updated"
        )
    adv, s = ebpo_scalar_advantage(
        scores, valid, stats, updated.mu_glob, updated.sigma2, updated.tau2, options.normalize, options.epsilon
    )
    if out.dtype == torch.float64:
        saturated = zero_rows
    else:  # the float64 advantage may not fit the output dtype: clamp to its largest finite value, count it
        top = torch.finfo(out.dtype).max
        saturated = valid & (adv.abs() > top)
        adv = adv.clamp(-top, top)
    batch_stats = _batch_diagnostics(stats, s, adv, valid, k, saturated)
    prior.assign(updated)  # commit only after everything above succeeded
    return _finish(out, response_mask, adv.to(out.dtype)), _diagnostics(prior, n_pad, n_skip, batch_stats)
