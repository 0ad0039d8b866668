"""How close is each baseline to a prompt's true success rate? EBPO's V_q vs GRPO's group mean.

Simulates an RLVR stream: every step draws `--prompts` prompts with true success rate p ~ Beta(a, b) and
G Bernoulli(p) answers each, runs EBPO (running prior, `ebpo_advantage`) and records
    MSE(group mean) = mean_q (m_q - p_q)^2      (GRPO's baseline)
    MSE(EBPO)       = mean_q (V_q - p_q)^2
over all steps after the first (the prior needs one step to exist). EBPO runs with normalize=none so that
V = r - raw can be read back (the baseline V is the same under every `normalize`; only the advantage's centring
and scale differ). The paper's theorem says MSE(V_EB) = (1 - S*) * E[p(1-p)] / G under its model, with the
*oracle* shrinkage
    S* = (E[p(1-p)] / G) / (E[p(1-p)] / G + Var(p))          (from the Beta(a, b) law of p)
while EBPO uses the *plug-in* S = (sigma2 / G) / (sigma2 / G + tau2), sigma2 the variance of all rewards
(= E[p(1-p)] + Var(p)) and tau2 that of the group means (= Var(p) + E[p(1-p)] / G): larger than S*. The table
prints the measured ratio MSE(EBPO) / MSE(mean) beside 1 - S (plug-in, mean over calls) and 1 - S* (oracle).

    python benchmarks/bench_baseline_mse.py [--prompts 512 --steps 50 --alpha 0.5 --beta 1.5 --seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from verl_ebpo.advantage import EBPOOptions, EBPOPrior, ebpo_advantage


def simulate(G: int, prompts: int, steps: int, alpha: float, beta: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    prior = EBPOPrior()
    opts = EBPOOptions(normalize="none")  # raw = r - V, so V = r - raw
    index = np.repeat(np.arange(prompts), G)
    mask = torch.ones(prompts * G, 1)
    se_mean, se_ebpo, s_means = [], [], []
    for step in range(steps):
        p = rng.beta(alpha, beta, size=prompts)
        r = (rng.random((prompts, G)) < p[:, None]).astype(np.float64)
        raw, diag = ebpo_advantage(torch.from_numpy(r.reshape(-1, 1)), mask, index, prior, opts)
        v = (r.reshape(-1) - raw[:, 0].numpy()).reshape(prompts, G)[:, 0]
        if step == 0:
            continue
        m = r.mean(axis=1)
        se_mean.append(np.mean((m - p) ** 2))
        se_ebpo.append(np.mean((v - p) ** 2))
        s_means.append(diag["ebpo/shrinkage_mean"])
    mse_mean, mse_ebpo, s = float(np.mean(se_mean)), float(np.mean(se_ebpo)), float(np.mean(s_means))
    return {"G": G, "mse_mean": mse_mean, "mse_ebpo": mse_ebpo, "ratio": mse_ebpo / mse_mean, "S": s}


def oracle_shrinkage(G: int, alpha: float, beta: float) -> float:
    """S* of p ~ Beta(alpha, beta): within-prompt variance E[p(1-p)]/G against the prompts' variance Var(p)."""
    n = alpha + beta
    within = alpha * beta / (n * (n + 1))  # E[p (1 - p)]
    between = alpha * beta / (n * n * (n + 1))  # Var(p)
    return (within / G) / (within / G + between)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--beta", type=float, default=1.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--groups", type=int, nargs="+", default=[4, 8, 16, 32])
    args = ap.parse_args(argv)
    print(f"p ~ Beta({args.alpha}, {args.beta}); {args.prompts} prompts x {args.steps} steps; running prior, "
          "normalize=none")
    print(f"{'G':>4}{'MSE(mean)':>12}{'MSE(EBPO)':>12}{'ratio':>8}{'1-S plug-in':>12}{'1-S* oracle':>12}")
    for G in args.groups:
        r = simulate(G, args.prompts, args.steps, args.alpha, args.beta, args.seed)
        s_star = oracle_shrinkage(G, args.alpha, args.beta)
        print(f"{r['G']:>4}{r['mse_mean']:>12.5f}{r['mse_ebpo']:>12.5f}{r['ratio']:>8.3f}{1 - r['S']:>12.3f}"
              f"{1 - s_star:>12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
