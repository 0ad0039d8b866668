"""The mechanism: each estimator's policy-gradient estimate against the exact gradient, at a fixed policy.

At the initial policy of every seed's task (theta = 0), the exact gradient of the expected success
J(theta) = mean_q sigmoid(z_q) is known: dJ/dz_q = p_q (1 - p_q) / P, mapped to theta by `task.param_grad`.
An estimator's one-step estimate g (the gradient the trainer ascends: g_z[q] = (1/N) sum_{i in q} A_i (y_i - p_q),
plus the score noise sigma_n sum_i A_i zeta_i / N) is drawn `draws` times from fresh batches (B = answers_per_step
/ G distinct prompts drawn uniformly, G answers each; DAPO: generation batches until B informative groups), after
`warmup` batches that only feed EBPO's running prior. The same rewards are used for every estimator of a seed and
G (common random numbers), so differences between estimators are paired. Per seed:

    cos_mean   cos(E[g], grad J): the direction of the expected step (1: no bias in direction; GRPO's std
               division and DAPO's filter reweight prompts, so theirs is below 1)
    noise      tr Cov(g) / |E[g]|^2: the estimate's variance relative to its expected size (scale-free, so an
               advantage's scale -- GRPO's std, EBPO's batch std and scale factor (docs/estimator.md,
               #expectation) -- does not count); the score noise
               adds its exact expectation sigma_n^2 (n_shared + 1) E[sum_i A_i^2] / N^2
    cos_draw   E[cos(g, grad J)] without the score noise: how well one batch's step points uphill
    answers    answers generated per training batch / answers_per_step (1, DAPO more): noise x answers is the
               noise at an equal answer budget (averaging k batches divides the noise by k)

E[g] and tr Cov(g) are the sample mean and variance over the draws (relative Monte Carlo error about
sqrt(2 / draws) on `noise`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from verl_ebpo.tools.simulate.engine import dapo_select
from verl_ebpo.tools.simulate.estimators import AdvantageCaller, EstimatorSpec
from verl_ebpo.tools.simulate.options import SimOptions
from verl_ebpo.tools.simulate.task import SCORE_NOISE, F64, Task, logits, param_grad


@dataclass
class GradientResult:
    """Per-seed gradient statistics of one (estimator, G); arrays of shape (S,)."""

    estimator: str
    G: int
    cos_mean: np.ndarray
    noise: np.ndarray
    cos_draw: np.ndarray
    answers: np.ndarray
    draws: int


def exact_gradient(task: Task, theta: torch.Tensor) -> torch.Tensor:
    """dJ/dtheta (S, n_params) of J = mean_q sigmoid(z_q) over the training prompts."""
    p = torch.sigmoid(logits(task, theta))
    return param_grad(task, p * (1 - p) / p.shape[1], theta)


def _batches(rngs, P: int, width: int) -> torch.Tensor:
    """(S, width) prompt ids: generation batches of distinct prompts, each seed from its own generator."""
    return torch.from_numpy(np.stack([rng.permutation(P)[:width] for rng in rngs]).astype(np.int64))


def measure(task: Task, spec: EstimatorSpec, G: int, options: SimOptions) -> GradientResult:
    """`options.grad_draws` one-step gradient estimates of `spec` at group size G at theta = 0, after
    `options.grad_warmup` batches, per reporting seed (`options.seed_list`, the rows of `task`)."""
    seeds, draws, warmup = options.seed_list, options.grad_draws, options.grad_warmup
    S, P = task.shape
    B = options.answers_per_step // G
    rounds_cap = options.max_gen_batches if spec.dynamic_sampling else 1
    width = min(B, P)
    theta = torch.zeros(S, task.n_params, dtype=F64)
    exact = exact_gradient(task, theta)  # (S, n)
    p_all = torch.sigmoid(logits(task, theta))  # (S, P)
    n_shared = task.n_params - P
    caller = AdvantageCaller(spec, S)
    # the same prompts and rewards for every estimator of a seed and G: generator keyed by (seed, G) only
    prompt_rngs = [np.random.default_rng(np.random.SeedSequence([int(s), G, 0x6AD])) for s in seeds]
    reward_rngs = [np.random.default_rng(np.random.SeedSequence([int(s), G, 0x6AE])) for s in seeds]
    seed_ids = torch.arange(S)
    total = torch.zeros(S, task.n_params, dtype=F64)
    total_sq = torch.zeros(S, dtype=F64)
    noise_sq = torch.zeros(S, dtype=F64)
    cos_sum = torch.zeros(S, dtype=F64)
    generated = np.zeros(S)
    with torch.no_grad():
        for d in range(warmup + draws):
            # every estimator draws max_gen_batches batches (DAPO may use them), so all see the same first batch
            pid = torch.cat([_batches(prompt_rngs, P, width) for _ in range(options.max_gen_batches)], dim=1)
            u = torch.from_numpy(np.stack([rng.random((pid.shape[1], G)) for rng in reward_rngs]))
            p = torch.gather(p_all, 1, pid)  # (S, W)
            y = (u < p.unsqueeze(-1)).to(F64)  # (S, W, G)
            rounds = np.full(S, rounds_cap)
            if spec.dynamic_sampling:
                drawn = (torch.arange(y.shape[1])[None, :] < rounds_cap * width).expand(S, -1)
                keep, used = dapo_select(y, drawn, rounds, B, width)[:2]
            else:
                keep = torch.arange(y.shape[1])[None, :].expand(S, -1) < width
                used = np.ones(S)
            group_seed = seed_ids[:, None].expand_as(keep)[keep]
            n_groups = int(group_seed.numel())
            if n_groups == 0:
                adv = torch.zeros(0, G, dtype=F64)
            else:
                adv = caller(y[keep], group_seed, G).reshape(n_groups, G)
            if d < warmup:
                continue
            generated += used * width * G
            per_seed = torch.bincount(group_seed, minlength=S).to(F64) * G  # (S,)
            n_i = per_seed.clamp_min(1.0)[group_seed]
            g_rows = (adv * (y[keep] - p[keep][:, None])).sum(1) / n_i
            g_z = torch.zeros(S, P, dtype=F64).index_put_((group_seed, pid[keep]), g_rows, accumulate=True)
            g = param_grad(task, g_z)  # (S, n)
            total += g
            total_sq += (g * g).sum(1)
            sq_adv = torch.zeros(S, dtype=F64).index_add_(0, group_seed, (adv * adv).sum(1))
            noise_sq += SCORE_NOISE ** 2 * (n_shared + 1) * sq_adv / per_seed.clamp_min(1.0) ** 2
            norm = g.norm(dim=1) * exact.norm(dim=1)
            cos_sum += torch.where(norm > 0, (g * exact).sum(1) / norm.clamp_min(1e-300), torch.zeros_like(norm))
    mean = total / draws
    var = (total_sq - draws * (mean * mean).sum(1)) / max(draws - 1, 1) + noise_sq / draws  # tr Cov(g) + noise
    mean_sq = (mean * mean).sum(1)
    cos_mean = (mean * exact).sum(1) / (mean.norm(dim=1) * exact.norm(dim=1)).clamp_min(1e-300)
    noise = torch.where(mean_sq > 0, var / mean_sq.clamp_min(1e-300), torch.full_like(var, float("inf")))
    return GradientResult(spec.label, G, cos_mean.numpy(), noise.numpy(), (cos_sum / draws).numpy(),
                          generated / (draws * options.answers_per_step), draws)

