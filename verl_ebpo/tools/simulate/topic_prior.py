"""The topic study's per-topic prior, as pure tensor functions over (seed x topic) cells, and the callers that give
the study's estimators their advantages (hierarchical empirical Bayes; see `topics` and docs/simulator.md#topics)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from verl_ebpo.advantage.core import merge_moments, shrinkage

F64 = torch.float64


@dataclasses.dataclass(frozen=True)
class TopicMoments:
    """Per (seed, topic) cell c = seed * K + topic: weighted Welford moments of the rewards (w, mean, m2) and of
    the group means (gw, gmean, gm2), each (C,) float64, C = S * K. All zero at the start."""

    w: torch.Tensor
    mean: torch.Tensor
    m2: torch.Tensor
    gw: torch.Tensor
    gmean: torch.Tensor
    gm2: torch.Tensor

    @classmethod
    def empty(cls, cells: int) -> "TopicMoments":
        z = torch.zeros(cells, dtype=F64)
        return cls(z, z, z, z, z, z)


def _merge(w, mean, m2, bw, bmean, bm2, decay):
    """`verl_ebpo.advantage.core.merge_moments` of batch moments (bw, bmean, bm2) into (w, mean, m2), every (C,)
    cell at once after scaling by `decay` (C,) (a cell without data is only decayed)."""
    return merge_moments(torch.stack([w, mean, m2], -1), torch.stack([bw, bmean, bm2], -1), decay).unbind(-1)


def _cell_moments(values: torch.Tensor, cell: torch.Tensor, cells: int):
    """(count, mean, m2) of `values` (n,) per cell id `cell` (n,), each (cells,), two-pass."""
    n = torch.zeros(cells, dtype=F64).index_add_(0, cell, torch.ones_like(values))
    mean = torch.zeros(cells, dtype=F64).index_add_(0, cell, values) / n.clamp_min(1.0)
    d = values - mean[cell]
    return n, mean, torch.zeros(cells, dtype=F64).index_add_(0, cell, d * d)


def merge_topic_moments(state: TopicMoments, scores: torch.Tensor, cell: torch.Tensor, n_seeds: int,
                        decay: float) -> TopicMoments:
    """`state` with a batch merged in. scores (n, G) 0/1 rewards of n groups, cell (n,) long seed * K + topic.
    Every cell of a seed with rows in the batch is decayed (as EBPO decays its whole prior once per call), so the
    cells of a seed always combine to EBPO's global accumulators."""
    C = state.w.numel()
    K = C // n_seeds
    G = scores.shape[1]
    rows = cell.repeat_interleave(G)
    bw, bmean, bm2 = _cell_moments(scores.reshape(-1).to(F64), rows, C)
    gw, gmean, gm2 = _cell_moments(scores.to(F64).mean(1), cell, C)
    seen = torch.zeros(n_seeds, dtype=torch.bool).index_fill_(0, torch.div(cell, K, rounding_mode="floor"), True)
    d = torch.where(seen.repeat_interleave(K), torch.tensor(float(decay), dtype=F64), torch.ones((), dtype=F64))
    return TopicMoments(*_merge(state.w, state.mean, state.m2, bw, bmean, bm2, d),
                        *_merge(state.gw, state.gmean, state.gm2, gw, gmean, gm2, d))


def _combine(w, mean, m2, S: int):
    """Per seed (S,) moments of the union of its K cells (Chan): weight, mean, m2. Inputs (S * K,)."""
    w, mean, m2 = (x.reshape(S, -1) for x in (w, mean, m2))
    W = w.sum(1)
    mu = (w * mean).sum(1) / W.clamp_min(1e-300)
    return W, mu, (m2 + w * (mean - mu[:, None]) ** 2).sum(1)


def topic_prior(state: TopicMoments, n_seeds: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The per-topic prior of every cell, (C,) each: (mu_k, sigma2_k, tau2_k, lam_k).

    Per seed the global moments are the cells' union (EBPO's prior: mu, sigma2 = reward variance, tau2 = variance
    of group means). Topic k's own: mu_k, sigma2_k, tau2_k from its cell. Hierarchical empirical Bayes shrinks the
    topic's statistics toward the global ones by the weight a topic mean gets against the spread of topic means:

        tau2_w = pooled within-topic variance of group means (sum_k gm2_k / sum_k gw_k)
        omega2 = between-topic variance of the topics' mean group means (weighted by gw_k)
        lam_k  = (tau2_w / gw_k) / (tau2_w / gw_k + omega2)      (1 for an unseen topic or omega2 = tau2_w = 0)
        x~_k   = (1 - lam_k) x_k + lam_k x_global                 for x in (mu, sigma2, tau2)

    With one topic (omega2 = 0) every lam is 1: EBPO's prior exactly."""
    S = n_seeds
    W, mu, M2 = _combine(state.w, state.mean, state.m2, S)
    GW, gmu, GM2 = _combine(state.gw, state.gmean, state.gm2, S)
    sigma2, tau2 = M2 / W.clamp_min(1e-300), GM2 / GW.clamp_min(1e-300)
    gw = state.gw.reshape(S, -1)
    tau2_w = state.gm2.reshape(S, -1).sum(1) / GW.clamp_min(1e-300)
    omega2 = (gw * (state.gmean.reshape(S, -1) - gmu[:, None]) ** 2).sum(1) / GW.clamp_min(1e-300)
    se2 = tau2_w[:, None] / gw.clamp_min(1e-300)
    denom = se2 + omega2[:, None]
    ok = (gw > 0) & (denom > 0)
    lam = torch.where(ok, se2 / torch.where(ok, denom, torch.ones_like(denom)), torch.ones_like(denom)).reshape(-1)
    sk = torch.where(state.w > 0, state.m2 / state.w.clamp_min(1e-300), torch.zeros_like(state.w))
    tk = torch.where(state.gw > 0, state.gm2 / state.gw.clamp_min(1e-300), torch.zeros_like(state.gw))

    def toward(x_k, x_glob):
        return (1 - lam) * x_k + lam * x_glob.repeat_interleave(state.w.numel() // S)

    return toward(state.mean, mu), toward(sk, sigma2), toward(tk, tau2), lam


ROUNDING = 1e-12  # centred values below this share of the largest |raw| are rounding, not signal


def normalize_per_seed(raw: torch.Tensor, seed: torch.Tensor, n_seeds: int, epsilon: float) -> torch.Tensor:
    """EBPO's `normalize=batch` (`advantage.core.normalize_advantage`) over each seed's rows at once: c = raw - the
    seed's mean, then (c / max|c|) / (std_unbiased(c / max|c|) + epsilon); 0 for a seed with one row or with
    max|c| <= ROUNDING x max|raw|. The last rule is the one difference from verl_ebpo's function: when every raw
    advantage of a batch is equal but not exactly representable (an all-fail batch, raw = -S mu for every row),
    the mean's rounding leaves |c| ~ 1e-17 on every row, which verl_ebpo's function scales to +-1/epsilon (1e6;
    docs/simulator.md, "Topics"). raw (n,) float64, seed (n,) long -> (n,)."""
    n = torch.zeros(n_seeds, dtype=F64).index_add_(0, seed, torch.ones_like(raw))
    c = raw - (torch.zeros(n_seeds, dtype=F64).index_add_(0, seed, raw) / n.clamp_min(1.0))[seed]
    top = torch.zeros(n_seeds, dtype=F64).scatter_reduce_(0, seed, c.abs(), "amax", include_self=True)
    scale = torch.zeros(n_seeds, dtype=F64).scatter_reduce_(0, seed, raw.abs(), "amax", include_self=True)
    ok = (top > ROUNDING * scale) & (top > 0) & (n >= 2)
    unit = c / torch.where(ok, top, torch.ones_like(top))[seed]
    um = torch.zeros(n_seeds, dtype=F64).index_add_(0, seed, unit) / n.clamp_min(1.0)
    var = torch.zeros(n_seeds, dtype=F64).index_add_(0, seed, (unit - um[seed]) ** 2) / (n - 1).clamp_min(1.0)
    return torch.where(ok[seed], unit / (var.sqrt() + epsilon)[seed], torch.zeros_like(unit))


def topic_prior_advantage(scores: torch.Tensor, seed: torch.Tensor, topic: torch.Tensor, state: TopicMoments,
                          n_seeds: int, decay: float = 1.0, epsilon: float = 1e-6):
    """EBPO with a per-topic prior, for n groups of G answers of S seeds at once.

    scores (n, G) 0/1, seed (n,) long, topic (n,) long in [0, K), state over C = S * K cells. The prior is updated
    first (as EBPO's), then per group S_q = shrinkage(G, sigma2~_k, tau2~_k), V_q = (1 - S_q) m_q + S_q mu~_k,
    A = normalize_per_seed(r - V_q). Returns (advantages (n * G,), new state, mu~ per group (n,), S per group (n,))."""
    K = state.w.numel() // n_seeds
    cell = seed * K + topic
    new = merge_topic_moments(state, scores, cell, n_seeds, decay)
    mu_k, s2_k, t2_k, _ = topic_prior(new, n_seeds)
    G = scores.shape[1]
    r = scores.to(F64)
    s = shrinkage(torch.full((r.shape[0],), float(G), dtype=F64), s2_k[cell], t2_k[cell], epsilon)
    v = (1 - s) * r.mean(1) + s * mu_k[cell]
    raw = (r - v[:, None]).reshape(-1)
    return normalize_per_seed(raw, seed.repeat_interleave(G), n_seeds, epsilon), new, mu_k[cell], s


class TopicPriorCaller:
    """`gradient.measure`'s caller for the study's `eb_*` estimators: one prior per seed (fresh per run), per topic
    with `n_topics` > 1, one pooled prior (EBPO's) with `n_topics` = 1; decay 0 is `prior_scope=batch`."""

    wants_topic = True

    def __init__(self, n_seeds: int, n_topics: int, decay: float = 1.0, epsilon: float = 1e-6):
        self.n_seeds, self.n_topics, self.decay, self.epsilon = n_seeds, n_topics, decay, epsilon
        self.state = TopicMoments.empty(n_seeds * n_topics)
        self.last_prior_mean = None
        self.blowups = np.zeros(n_seeds)  # never counted here (the rounding rule), kept for the study's tables

    def __call__(self, scores: torch.Tensor, group_seed: torch.Tensor, group_size: int, topic=None) -> torch.Tensor:
        topic = torch.zeros_like(group_seed) if self.n_topics == 1 or topic is None else topic
        adv, self.state, self.last_prior_mean, _ = topic_prior_advantage(
            scores, group_seed, topic, self.state, self.n_seeds, self.decay, self.epsilon)
        return adv


class CountingCaller:
    """verl's `ebpo` through `AdvantageCaller`, counting per seed the batches with max|A| > sqrt(rows): impossible
    for a correct `normalize=batch` (unit std), the mark of the rounding blow-up (`normalize_per_seed`)."""

    def __init__(self, spec, n_seeds: int):
        from verl_ebpo.tools.simulate.estimators import AdvantageCaller

        self.inner = AdvantageCaller(spec, n_seeds)
        self.priors = self.inner.priors
        self.blowups = np.zeros(n_seeds)

    def __call__(self, scores: torch.Tensor, group_seed: torch.Tensor, group_size: int) -> torch.Tensor:
        adv = self.inner(scores, group_seed, group_size)
        seed_rows = group_seed.repeat_interleave(group_size)
        n = torch.bincount(seed_rows, minlength=len(self.blowups)).to(F64)
        top = torch.zeros(len(self.blowups), dtype=F64).scatter_reduce_(0, seed_rows, adv.abs(), "amax",
                                                                        include_self=True)
        self.blowups += (top > n.sqrt()).numpy()
        return adv


def prior_mean_of(caller, group_seed: torch.Tensor):
    """(n,) the prior mean each group's baseline was shrunk toward in the caller's last call; None without a
    prior (not EBPO). EBPO's prior is one per seed (after the call it holds the merged statistics it used)."""
    if getattr(caller, "last_prior_mean", None) is not None:
        return caller.last_prior_mean
    if getattr(caller, "priors", None) is None:
        return None
    return torch.tensor([p.mu_glob for p in caller.priors], dtype=F64)[group_seed]
