"""The simulated task and policy: pure tensor math, seeds as the leading batch dimension (no verl here).

Prompts (per seed s; S seeds, P prompts, d features):
    p0_q ~ Beta(A, B)                                             (the regime's difficulty law)
    z0_q = logit(clip(p0_q, 1e-3, 1 - 1e-3))                      fixed base logit (the prompt's difficulty)
    e_q ~ N(0, I_d / d)                                           fixed random feature vector

Policy (parameters theta = [w_glob, w_topic, w_feat (d), b (P)], all 0 at the start):
    z_q(theta) = z0_q + sqrt(c_glob) w_glob + sqrt(c_topic) w_topic + sqrt(c_feat) w_feat . e_q + sqrt(c_own) b_q
               - kappa mean_j theta_j^2                                (erosion)
    pi(success | q) = sigmoid(z_q)

So the logit is linear in theta with feature map phi_q, and one gradient step on prompt q moves prompt q'
through the kernel  k(q, q') = phi_q . phi_q' = c_glob + c_topic + c_feat e_q . e_q' + c_own [q = q']: two skills
every prompt shares (the prompts form one topic; Adam scales w_glob and w_topic each on its own), a random-feature
part whose transfer can be negative, and a prompt's own part (memorisation); (c_glob, c_topic, c_feat, c_own) =
`TRANSFER`. Erosion (kappa = `SimOptions.erosion`): drifting parameters cost every prompt success, so a random
walk of the parameters (Adam at a large lr, driven by the score noise) lowers success instead of pushing it toward
1/2; its derivative is 0 at theta = 0.

Training signal (REINFORCE on the Bernoulli success y of each answer i of prompt q_i, one-token answers,
token-mean loss):  J = (1 / N) sum_i A_i log pi(y_i | q_i),  dJ/dz_q = (1 / N) sum_{i: q_i = q} A_i (y_i - p_q),
plus the score noise `SCORE_NOISE` (sigma_n; docs/simulator.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

F64 = torch.float64
P0_CLIP = 1e-3
TRANSFER = (0.3, 0.3, 0.2, 0.2)  # (c_glob, c_topic, c_feat, c_own)
SCORE_NOISE = 10.0  # sigma_n: each answer's score also carries sigma_n * zeta_i, zeta_i ~ N(0, I), unrelated to success
# a seed's generator also draws one topic mean before the prompts and 128 held-out prompts after them (both
# discarded; the study has one topic and no held-out set), so that every seed's task is what the committed results had
_DISCARDED_BEFORE, _DISCARDED_AFTER = 1, 128


@dataclass(frozen=True)
class Task:
    """The prompts of S seeds (fixed for a seed: every estimator and G sees the same task)."""

    z0: torch.Tensor  # (S, P) float64 base logits
    feats: torch.Tensor  # (S, P, d) float64
    erosion: float = 0.0  # kappa: every logit loses kappa * mean_j theta_j^2 (see the module docstring)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.z0.shape)  # type: ignore[return-value]

    @property
    def n_params(self) -> int:
        return 2 + self.feats.shape[-1] + self.z0.shape[1]


def make_task(seeds, prompts: int, beta, features: int, erosion: float = 0.0) -> Task:
    """Draw the task of each seed from its own generator (a seed's task does not depend on the others)."""
    z0, ft = [], []
    for seed in seeds:
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x7A5C]))
        p0 = rng.beta(beta[0], beta[1], size=_DISCARDED_BEFORE + prompts + _DISCARDED_AFTER)[_DISCARDED_BEFORE:][:prompts]
        p0 = np.clip(p0, P0_CLIP, 1 - P0_CLIP)
        z0.append(np.log(p0) - np.log1p(-p0))
        ft.append(rng.standard_normal((prompts, features)) / np.sqrt(max(features, 1)))
    return Task(torch.from_numpy(np.stack(z0)), torch.from_numpy(np.stack(ft).astype(np.float64)), float(erosion))


def _split(task: Task, theta: torch.Tensor):
    d = task.feats.shape[-1]
    return theta[:, :1], theta[:, 1:2], theta[:, 2 : 2 + d], theta[:, 2 + d :]


def logits(task: Task, theta: torch.Tensor) -> torch.Tensor:
    """z (S, P) from theta (S, n_params)."""
    cg, ct, cf, co = (x**0.5 for x in TRANSFER)
    w_glob, w_topic, w_feat, b = _split(task, theta)
    z = task.z0 + cg * w_glob + ct * w_topic + cf * torch.einsum("spd,sd->sp", task.feats, w_feat)
    if task.erosion:
        z = z - task.erosion * (theta * theta).mean(1, keepdim=True)
    return z + co * b


def param_grad(task: Task, g_z: torch.Tensor, theta: torch.Tensor | None = None) -> torch.Tensor:
    """dJ/dtheta (S, n_params) from dJ/dz (S, P) (the chain rule through `logits`); theta (S, n_params) is needed
    only with `task.erosion` > 0 (None: theta = 0, where the erosion term's derivative vanishes)."""
    cg, ct, cf, co = (x**0.5 for x in TRANSFER)
    g_topic = g_z.cumsum(1)[:, -1:]  # the sum over prompts, added in prompt order (as the committed results were)
    g_feat = torch.einsum("spd,sp->sd", task.feats, g_z)
    grad = torch.cat([cg * g_z.sum(1, keepdim=True), ct * g_topic, cf * g_feat, co * g_z], dim=1)
    if task.erosion and theta is not None:
        grad = grad - (2 * task.erosion / theta.shape[1]) * theta * g_z.sum(1, keepdim=True)
    return grad


def expected_success(task: Task, theta: torch.Tensor) -> torch.Tensor:
    """Mean over prompts of pi(success | q) (S,), exact (not sampled)."""
    return torch.sigmoid(logits(task, theta)).mean(1)


def stream(task: Task, length: int, seeds) -> torch.Tensor:
    """The prompt ids each seed presents, in order, (S, length) long: epochs of fresh permutations (verl's
    `data.shuffle=True`), from the seed's own generator (the same for every estimator and G)."""
    P = task.shape[1]
    epochs = -(-length // P)
    out = []
    for seed in seeds:
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E0]))
        out.append(np.concatenate([rng.permutation(P) for _ in range(epochs)])[:length])
    return torch.from_numpy(np.stack(out).astype(np.int64))


class Optimizer:
    """Adam (verl's actor default), ascending J, per-seed masked steps, optional decay toward theta = 0.

    Elementwise, so seeds batched in the leading dimension are exactly independent runs.
    """

    def __init__(self, lr: float, shape, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        self.base_lr, self.betas, self.eps = lr, betas, eps
        # each active step first multiplies theta by (1 - weight_decay): decay toward the initial policy theta = 0,
        # decoupled from the gradient as in AdamW, but not scaled by the lr (so one value means the same drift
        # horizon, about 1 / weight_decay steps, at every lr of a grid)
        self.weight_decay = weight_decay
        self.lr = lr
        self.m = torch.zeros(shape, dtype=F64)
        self.v = torch.zeros(shape, dtype=F64)
        self.t = torch.zeros(shape[0], dtype=F64)

    def step(self, theta: torch.Tensor, grad: torch.Tensor, active: torch.Tensor, scale=None) -> torch.Tensor:
        """New theta (S, n): rows where `active` (S,) bool is False are left exactly as they were. scale: (S,)
        factors on each row's lr this step (a warmup), default 1."""
        a = active.unsqueeze(1)
        if self.weight_decay:
            theta = torch.where(a, theta * (1.0 - self.weight_decay), theta)
        self.t = self.t + active.to(F64)
        self.lr = self.base_lr if scale is None else self.base_lr * torch.as_tensor(scale, dtype=F64).reshape(-1, 1)
        b1, b2 = self.betas
        self.m = torch.where(a, b1 * self.m + (1 - b1) * grad, self.m)
        self.v = torch.where(a, b2 * self.v + (1 - b2) * grad * grad, self.v)
        t = self.t.clamp_min(1.0).unsqueeze(1)
        m_hat = self.m / (1 - b1**t)
        v_hat = self.v / (1 - b2**t)
        return torch.where(a, theta + self.lr * m_hat / (v_hat.sqrt() + self.eps), theta)
