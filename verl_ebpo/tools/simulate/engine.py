"""One run: an estimator at one G, all rows (seeds x learning rates) at once.

A step, for S seeds in parallel (loops only over steps and, inside EBPO's per-seed calls, seeds):
1. Draw the next prompts of each seed's stream: B = answers_per_step / G of them (DAPO: up to
   `max_gen_batches` batches of B, all drawn at once -- the policy does not change within a step).
2. Sample G answers per prompt: y ~ Bernoulli(sigmoid(z_q)).
3. DAPO keeps the first B groups whose rewards are not all equal, and counts every answer of the
   batches it needed (up to the one that completed its B groups) as generated; the others keep every group.
4. Advantages from verl's registered function (`AdvantageCaller`), J = mean_i A_i log pi(y_i), one optimizer step.
A run ends when its answer budget (steps * answers_per_step, the same for everyone) is spent.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from verl_ebpo.tools.simulate.estimators import AdvantageCaller, EstimatorSpec
from verl_ebpo.tools.simulate.options import SimOptions
from verl_ebpo.tools.simulate.task import SCORE_NOISE, F64, Optimizer, Task, expected_success, logits, param_grad, stream


@dataclass
class RunResult:
    """Per-seed outcomes of one (estimator, G) run; arrays have the seeds in their first dimension."""

    estimator: str
    G: int
    final: np.ndarray  # (S,) expected success on the training prompts when the budget is spent
    curve: np.ndarray  # (S, steps + 1) success after k * answers_per_step answers generated
    generated: np.ndarray  # (S,) answers generated
    trained: np.ndarray  # (S,) answers trained on
    updates: np.ndarray  # (S,) optimizer steps taken
    short_batches: np.ndarray  # (S,) DAPO steps that hit max_gen_batches with fewer than B groups


def _uniforms(rngs, rounds: np.ndarray, B: int, G: int, width: int) -> torch.Tensor:
    """(S, width, G) uniforms; seed s draws only its rounds[s] * B rows (so a seed never depends on others)."""
    out = np.full((len(rngs), width, G), 2.0)  # 2.0: never a success; those slots are masked out anyway
    for s, rng in enumerate(rngs):
        n = int(rounds[s]) * B
        if n:
            out[s, :n] = rng.random((n, G))
    return torch.from_numpy(out)


def _score_noise(rngs, adv, group_seed, group_pid, per_seed, S, P, n_shared) -> torch.Tensor:
    """(S, n_params) sum_i A_i zeta_i / N_s, zeta_i ~ N(0, I) the part of answer i's score not about success.

    Drawn exactly as a Gaussian with variance sum_i A_i^2 / N_s^2 per coordinate: over all answers of the seed
    on the shared coordinates, over the answers of prompt q on q's own coordinate b_q.
    """
    sq = (adv * adv).sum(1)  # (n_groups,)
    n = torch.from_numpy(np.maximum(per_seed, 1)).to(F64)
    shared_var = torch.zeros(S, dtype=F64).index_add_(0, group_seed, sq) / n**2  # (S,)
    own_var = torch.zeros(S, P, dtype=F64).index_put_((group_seed, group_pid), sq, accumulate=True) / n[:, None] ** 2
    z = np.zeros((S, n_shared + P))
    for s in np.flatnonzero(per_seed):  # only seeds that train this step draw (a seed never depends on others)
        z[s] = rngs[s].standard_normal(n_shared + P)
    z = torch.from_numpy(z)
    return torch.cat([z[:, :n_shared] * shared_var.sqrt()[:, None], z[:, n_shared:] * own_var.sqrt()], dim=1)


def dapo_select(y: torch.Tensor, drawn: torch.Tensor, rounds: np.ndarray, B: int, gen: int | None = None):
    """DAPO's dynamic sampling over pre-drawn generation batches of `gen` groups (default B).

    Args:
        y: (S, W, G) rewards of W = max(rounds) * gen groups per seed, in generation order.
        drawn: (S, W) bool, the groups seed s actually drew (its first rounds[s] * gen).
        rounds: (S,) batches each seed may generate this step.
        B: groups a training batch holds.
    Returns:
        keep (S, W) bool: the first B groups whose rewards are not all equal (fewer if there are not B);
        used (S,) int: batches generated -- up to the one that completed B groups, else rounds[s];
        full (S,) bool: whether B groups were found.
    """
    gen = B if gen is None else gen
    informative = drawn & (y.amax(-1) != y.amin(-1))
    rank = informative.cumsum(1)
    keep = informative & (rank <= B)
    full = rank[:, -1] >= B
    used = torch.where(full, torch.argmax((rank >= B).to(torch.int8), dim=1) // gen + 1,
                       torch.from_numpy(np.asarray(rounds, dtype=np.int64)))
    return keep, used.numpy(), full.numpy()


def run_one(task: Task, spec: EstimatorSpec, G: int, options: SimOptions, seeds, lrs) -> RunResult:
    """Train S policies (one per row: a seed, at learning rate lrs[row]) with `spec` at group size G until the
    answer budget is spent. seeds: (S,) seed values (a seed may repeat with another lr: same task, same samples
    until the policies differ); lrs: (S,) learning rates."""
    S, P = task.shape
    N = options.answers_per_step
    B = N // G
    budget = options.budget
    rounds_cap = options.max_gen_batches if spec.dynamic_sampling else 1
    prompts = stream(task, budget // G + rounds_cap * B, seeds)
    rngs = [np.random.default_rng(np.random.SeedSequence([int(seed), G, 0x5A])) for seed in seeds]
    noise_rngs = [np.random.default_rng(np.random.SeedSequence([int(seed), G, 0x401])) for seed in seeds]
    n_shared = task.n_params - P

    theta = torch.zeros(S, task.n_params, dtype=F64)
    lr = torch.as_tensor(np.asarray(lrs, dtype=np.float64)).reshape(S, 1)
    opt = Optimizer(lr, theta.shape, weight_decay=options.weight_decay)
    warm = options.lr_warmup * budget  # answers over which the lr rises linearly (verl's lr_warmup_steps_ratio)
    caller = AdvantageCaller(spec, S)
    cursor, generated, trained, updates, short = (np.zeros(S, dtype=np.int64) for _ in range(5))
    curve = np.full((S, options.steps + 1), np.nan)
    curve[:, 0] = expected_success(task, theta).numpy()
    seed_ids = torch.arange(S)

    with torch.no_grad():
        for _ in range(options.steps):
            remaining = budget - generated
            rounds = np.minimum(rounds_cap, remaining // (B * G))  # batches each seed may still generate
            if not rounds.any():
                break
            width = int(rounds.max()) * B
            slots = torch.from_numpy(cursor)[:, None] + torch.arange(width)
            pid = torch.gather(prompts, 1, slots)  # (S, width)
            p = torch.gather(torch.sigmoid(logits(task, theta)), 1, pid)  # (S, width)
            y = (_uniforms(rngs, rounds, B, G, width) < p.unsqueeze(-1)).to(F64)  # (S, width, G)
            drawn = torch.arange(width)[None, :] < torch.from_numpy(rounds * B)[:, None]  # (S, width)
            if spec.dynamic_sampling:
                keep, used, full = dapo_select(y, drawn, rounds, B)
                short += ((~full) & (rounds > 0)).astype(np.int64)
            else:
                keep, used = drawn, rounds
            generated += used * B * G
            cursor += used * B

            group_seed = seed_ids[:, None].expand_as(keep)[keep]  # (n_groups,) sorted by seed
            n_groups = int(group_seed.numel())
            if n_groups:
                scores = y[keep]  # (n_groups, G)
                adv = caller(scores, group_seed, G).reshape(n_groups, G)
                per_seed = torch.bincount(group_seed, minlength=S).numpy() * G
                trained += per_seed
                # J = (1/N_s) sum_i A_i log pi(y_i); dJ/dz_q = (1/N_s) sum_{i in q} A_i (y_i - p_q)
                p_g = p[keep]  # (n_groups,)
                g_rows = (adv * (scores - p_g[:, None])).sum(1) / torch.from_numpy(per_seed)[group_seed].to(F64)
                g_z = torch.zeros(S, P, dtype=F64).index_put_((group_seed, pid[keep]), g_rows, accumulate=True)
                step = torch.from_numpy(per_seed > 0)
                grad = param_grad(task, g_z, theta) + SCORE_NOISE * _score_noise(
                    noise_rngs, adv, group_seed, pid[keep], per_seed, S, P, n_shared)
                ramp = np.minimum(1.0, generated / warm) if warm > 0 else None  # generated: this step's included
                theta = opt.step(theta, grad, step, ramp)
                updates += step.numpy()
            success = expected_success(task, theta).numpy()
            moved = used > 0
            curve[moved, np.minimum(generated[moved] // N, options.steps)] = success[moved]

    # a seed's success stays what it was between its updates (DAPO skips grid points)
    for k in range(1, curve.shape[1]):
        gap = np.isnan(curve[:, k])
        curve[gap, k] = curve[gap, k - 1]
    return RunResult(spec.label, G, expected_success(task, theta).numpy(), curve, generated, trained, updates, short)


@contextlib.contextmanager
def one_torch_thread():
    """Small tensors: one intra-op thread is faster, and does not fight a busy machine's other processes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
