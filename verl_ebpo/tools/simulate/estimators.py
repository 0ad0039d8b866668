"""verl glue: the simulator's estimators are verl's registered advantage functions, called as verl's trainer does.

Every advantage the simulator trains on comes from `verl.trainer.ppo.core_algos.get_adv_estimator_fn(name)`
(importing verl registers `ebpo` through this package's plug-in), called with keyword arguments
`token_level_rewards` (n, 1), `response_mask` (n, 1), `index` (n,) (one uid per group) and `config`
(verl's `algorithm` config as a DictConfig) -- and, for the GRPO family, `norm_adv_by_std_in_grpo`, which
verl's trainer passes to its GRPO function explicitly.

| name | verl function | call | notes |
|---|---|---|---|
| `grpo` | `grpo_vectorized` | `norm_adv_by_std_in_grpo=True` | verl's vectorised GRPO (the same numbers as `grpo`, tested) |
| `drgrpo` | `grpo_vectorized` | `norm_adv_by_std_in_grpo=False` | Dr.GRPO: mean-centred, no std |
| `dapo` | `grpo_vectorized` | `norm_adv_by_std_in_grpo=True` | + dynamic sampling (degenerate groups resampled) |
| `rloo` | `rloo_vectorized` | `config` | verl's vectorised RLOO (the same numbers as `rloo`, tested) |
| `rfpp_baseline` | `reinforce_plus_plus_baseline` | (computed by `rfpp_vectorized`) | verl's formula for all seeds in one pass: equal to verl's function called per seed (tested) |
| `ebpo` | `ebpo` | `config.ebpo` = options | running prior, one prior per seed |
| `ebpo_batch` | `ebpo` | `config.ebpo.prior_scope=batch` | the prior is the current batch (the authors' code) |
| `js` | (none: `james_stein_advantage` here) | `config` | James-Stein baseline, arXiv 2511.03710 (not in verl 0.9.1) |

`NAME:key=value,...` sets options: for the `ebpo` family any key of `EBPOOptions` (prior_scope, prior_decay,
normalize, epsilon) and `norm_adv_by_std_in_grpo`; for the GRPO family `norm_adv_by_std_in_grpo`.

Batch-local estimators (GRPO family, RLOO) see all seeds in one call, each group with its own uid, which is
exactly a call per seed (a group's advantages depend on that group only; tested). Estimators with batch-wide
statistics (EBPO's prior and normalisation, RF++'s whitening) are called once per seed, each seed with its
own EBPO prior swapped into the process-wide one that `ebpo` reads (restored afterwards).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


# name -> (verl registry name, per-seed calls?, GRPO-style call?, dynamic sampling?, default options)
_TABLE = {
    "grpo": ("grpo_vectorized", False, True, False, {"norm_adv_by_std_in_grpo": True}),
    "drgrpo": ("grpo_vectorized", False, True, False, {"norm_adv_by_std_in_grpo": False}),
    "dapo": ("grpo_vectorized", False, True, True, {"norm_adv_by_std_in_grpo": True}),
    "rloo": ("rloo_vectorized", False, False, False, {}),
    "rfpp_baseline": ("reinforce_plus_plus_baseline", False, False, False, {}),  # all seeds at once: rfpp_vectorized
    "ebpo": ("ebpo", True, False, False, {}),
    "ebpo_batch": ("ebpo", True, False, False, {"prior_scope": "batch"}),
    "js": (None, True, False, False, {}),
}
_ALIASES = {"reinforce_plus_plus_baseline": "rfpp_baseline", "dr_grpo": "drgrpo", "james_stein": "js", "jspo": "js"}
ESTIMATOR_NAMES = tuple(_TABLE)


def _parse_value(text: str):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return float(text) if any(c in low for c in ".e") else int(text)
    except ValueError:
        return text.strip()


@dataclass(frozen=True)
class EstimatorSpec:
    """One estimator of the comparison, resolved and validated."""

    label: str  # as the user wrote it (the key in summary.json)
    base: str  # a key of the table
    verl_name: str | None  # the registry name passed to get_adv_estimator_fn (None: `james_stein_advantage`)
    per_seed: bool
    grpo_call: bool
    dynamic_sampling: bool
    options: dict = field(default_factory=dict)

    @property
    def is_ebpo(self) -> bool:
        return self.verl_name == "ebpo"

    def algorithm_config(self):
        """verl's `algorithm` config for this estimator (what the trainer passes as `config`)."""
        from omegaconf import OmegaConf

        norm = bool(self.options.get("norm_adv_by_std_in_grpo", True))
        cfg = {"adv_estimator": self.verl_name, "norm_adv_by_std_in_grpo": norm}
        ebpo = {k: v for k, v in self.options.items() if k != "norm_adv_by_std_in_grpo"}
        if self.is_ebpo:
            cfg["ebpo"] = ebpo
        return OmegaConf.create(cfg)


def parse_estimator(text: str) -> EstimatorSpec:
    """`NAME` or `NAME:key=value,...` -> EstimatorSpec. ValueError names what is wrong and what is accepted."""
    label = text.strip()
    name, _, rest = label.partition(":")
    name = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in _TABLE:
        raise ValueError(f"unknown estimator {label!r}; known: {', '.join(ESTIMATOR_NAMES)}")
    verl_name, per_seed, grpo_call, ds, defaults = _TABLE[name]
    options = dict(defaults)
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"estimator {label!r}: options are key=value, got {item!r}")
        options[key.strip()] = _parse_value(value)
    spec = EstimatorSpec(label, name, verl_name, per_seed, grpo_call, ds, options)
    if spec.is_ebpo:
        from verl_ebpo.advantage.options import EBPOOptions

        if "norm_adv_by_std_in_grpo" in options and not isinstance(options["norm_adv_by_std_in_grpo"], bool):
            raise ValueError(f"estimator {label!r}: norm_adv_by_std_in_grpo must be true or false")
        try:
            EBPOOptions.from_algorithm_config(spec.algorithm_config())
        except ValueError as e:
            raise ValueError(f"estimator {label!r}: {e}") from None
    else:
        allowed = {"norm_adv_by_std_in_grpo"} if grpo_call else set()
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(
                f"estimator {label!r}: unknown option(s) {unknown}; "
                f"{'allowed: norm_adv_by_std_in_grpo' if allowed else 'it takes no options'}"
            )
        if grpo_call and not isinstance(options["norm_adv_by_std_in_grpo"], bool):
            raise ValueError(f"estimator {label!r}: norm_adv_by_std_in_grpo must be true or false")
    return spec


class AdvantageCaller:
    """Calls verl's registered function for one estimator over a batch of S seeds' groups.

    Holds the per-seed EBPO priors (fresh per run), so one caller is one run of S seeds.
    """

    def __init__(self, spec: EstimatorSpec, n_seeds: int):
        import verl  # noqa: F401  (registers `ebpo` through the verl.plugins entry point)
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        if spec.is_ebpo:  # also when verl's plug-in entry point is not installed (a plain source checkout)
            from verl_ebpo.advantage.verl_glue import register

            register()
        self.spec = spec
        self.fn = james_stein_advantage if spec.verl_name is None else get_adv_estimator_fn(spec.verl_name)
        self.config = spec.algorithm_config()
        self.kwargs = (
            {"norm_adv_by_std_in_grpo": bool(spec.options["norm_adv_by_std_in_grpo"])} if spec.grpo_call else {}
        )
        self.priors = None
        if spec.is_ebpo:
            from verl_ebpo.advantage.prior import EBPOPrior

            self.priors = [EBPOPrior() for _ in range(n_seeds)]

    def _call(self, rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
        mask = torch.ones_like(rewards)
        if self.spec.grpo_call:  # verl's trainer: compute_grpo_outcome_advantage(..., norm_adv_by_std_in_grpo=)
            adv, _ = self.fn(token_level_rewards=rewards, response_mask=mask, index=index, config=self.config,
                             **self.kwargs)
        else:  # verl's trainer: fn(token_level_rewards=, response_mask=, config=, index=)
            adv, _ = self.fn(token_level_rewards=rewards, response_mask=mask, config=self.config, index=index)
        return adv[:, 0].to(torch.float64)

    def __call__(self, scores: torch.Tensor, group_seed: torch.Tensor, group_size: int) -> torch.Tensor:
        """Advantages (n_groups * G,) float64 for `scores` (n_groups, G) in {0, 1}.

        group_seed: (n_groups,) long, the seed slot of each group, sorted (groups of seed 0 first).
        """
        n_groups = scores.shape[0]
        rewards = scores.reshape(-1, 1).to(torch.float64)
        index = np.repeat(np.arange(n_groups, dtype=np.int64), group_size)
        if self.spec.base == "rfpp_baseline":
            return rfpp_vectorized(scores, group_seed, len(self.priors or []) or int(group_seed.max()) + 1)
        if not self.spec.per_seed:
            return self._call(rewards, index)
        counts = torch.bincount(group_seed, minlength=len(self.priors or [])).tolist()
        out, start = [], 0
        for slot, count in enumerate(counts):
            if count == 0:
                continue
            rows = slice(start * group_size, (start + count) * group_size)
            if self.priors is None:
                out.append(self._call(rewards[rows], index[rows]))
            else:
                out.append(self._ebpo_call(slot, rewards[rows], index[rows]))
            start += count
        return torch.cat(out) if out else rewards.new_zeros(0)

    def _ebpo_call(self, slot: int, rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
        """EBPO's advantage with this seed's own prior, passed explicitly (nothing process-wide is touched)."""
        from verl_ebpo.advantage import EBPOOptions, ebpo_advantage

        options = EBPOOptions.from_algorithm_config(self.config)
        adv, _ = ebpo_advantage(rewards, torch.ones_like(rewards), index, self.priors[slot], options)
        return adv[:, 0].to(torch.float64)


def rfpp_vectorized(scores: torch.Tensor, group_seed: torch.Tensor, n_seeds: int) -> torch.Tensor:
    """verl 0.9.1's `reinforce_plus_plus_baseline` (outcome rewards, one token) for every seed at once, each seed's
    rows whitened over that seed's batch -- the same arithmetic as verl's function called once per seed:
    c = r - mean of the group (0 for a group of one), then `masked_whiten`: (c - m) / sqrt(v + 1e-8), with
    m = sum c / (n + 1e-8) and v the Bessel-corrected variance sum (c - m)^2 / (n + 1e-8) * n / (n - 1).
    scores (n_groups, G), group_seed (n_groups,) sorted; returns (n_groups * G,) float64."""
    r = scores.to(torch.float64)
    G = r.shape[1]
    c = r - (r.mean(1, keepdim=True) if G > 1 else torch.zeros_like(r))
    seed_rows = group_seed.repeat_interleave(G)  # (n,)
    flat = c.reshape(-1)
    n = torch.zeros(n_seeds, dtype=torch.float64).index_add_(0, seed_rows, torch.ones_like(flat))
    m = torch.zeros(n_seeds, dtype=torch.float64).index_add_(0, seed_rows, flat) / (n + 1e-8)
    d = flat - m[seed_rows]
    v = torch.zeros(n_seeds, dtype=torch.float64).index_add_(0, seed_rows, d * d) / (n + 1e-8)
    v = v * n / (n - 1).clamp_min(1.0)  # n = 1 is an error in verl; the simulator's batches hold >= 2 rows
    return d * torch.rsqrt(v[seed_rows] + 1e-8)


def james_stein_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index, config=None,
                          epsilon: float = 1e-6, **_) -> tuple[torch.Tensor, torch.Tensor]:
    """The James-Stein baseline of Zeng, Zhou, Arora, Zanette, "Shrinking the Variance: Shrinkage Baselines for
    Reinforcement Learning with Verifiable Rewards" (arXiv 2511.03710), as in the authors' code
    (github.com/guanning03/JSPO-Official, `compute_jspo_outcome_advantage`), vectorised, with verl's estimator
    signature. Outcome rewards, n prompts x m answers (equal group sizes, m >= 2), r_ij the score of answer i of
    prompt j, mu_j its group mean; every statistic of prompt j leaves prompt j out (so the baseline of r_ij does
    not depend on r_ij and the gradient stays unbiased):

        mbar_-j = mean_{k != j} mu_k                                   (the batch mean without prompt j)
        v2_-j   = mean_{k != j} var_k / m,  var_k the unbiased variance of prompt k's rewards
        s2_-j   = mean_{k != j} (mu_k - mbar_-j)^2
        lam_j   = v2_-j / (v2_-j + s2_-j + epsilon)
        b_ij    = (1 - lam_j) (m mu_j - r_ij) / (m - 1) + lam_j mbar_-j     (RLOO's mean shrunk to the batch)
        A_ij    = r_ij - b_ij

    With one prompt (n = 1) there is nothing to shrink toward: lam = 0 (RLOO). Shapes: token_level_rewards and
    response_mask (n m, T); index (n m,) labels, each group's rows contiguous (as the simulator calls it)."""
    scores = (token_level_rewards * response_mask).sum(-1).to(torch.float64)  # (n m,)
    labels = np.asarray(index)
    starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
    n, total = len(starts), scores.numel()
    m = total // max(n, 1)
    if n == 0:
        return scores.new_zeros(token_level_rewards.shape), scores.new_zeros(token_level_rewards.shape)
    if m < 2 or n * m != total or len(np.unique(labels)) != n:
        raise ValueError(f"james_stein_advantage needs equal groups of >= 2 answers in contiguous rows, got {total} "
                         f"rows in {n} runs of labels")
    r = scores.reshape(n, m)
    mu = r.mean(1)  # (n,)
    var = r.var(1, unbiased=True) / m  # (n,)
    if n == 1:
        lam = torch.zeros(1, dtype=torch.float64)
        mbar = mu.clone()
    else:
        k = n - 1
        mbar = (mu.sum() - mu) / k
        v2 = (var.sum() - var) / k
        s2 = ((mu * mu).sum() - mu * mu) / k - mbar * mbar
        s2 = s2.clamp_min(0.0)  # cancellation can leave -1e-17
        lam = v2 / (v2 + s2 + epsilon)
    rloo = (r.sum(1, keepdim=True) - r) / (m - 1)  # (n, m)
    adv = r - ((1 - lam)[:, None] * rloo + (lam * mbar)[:, None])
    out = adv.reshape(-1, 1).to(token_level_rewards.dtype) * response_mask
    return out, out

