"""Time `adv_estimator=ebpo` against verl's grpo, grpo_vectorized and rloo_vectorized on one batch.

Default: 512 prompts x 16 answers x 2048 response tokens (float32 rewards, int64 mask, uuid-string uids,
as verl's trainer passes them), all in one process, one thread count. Prints the median time of each
estimator and its ratio to grpo_vectorized, then ebpo / grpo_vectorized measured in interleaved pairs (one
ebpo call, one grpo_vectorized call, repeated; the median of the per-pair ratios, robust to a machine whose
load changes during the run) for verl's int64 mask (target <= 1.0) and a float32 mask (target <= 1.25),
plus the large (>= bs*T*itemsize/2) buffers each allocates, from torch's profiler (target: ebpo allocates
only its output).

    python benchmarks/bench_advantage.py [--prompts 512 --answers 16 --tokens 2048 --repeats 7 --pairs 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import numpy as np
import torch


def make_batch(prompts: int, answers: int, tokens: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    bs = prompts * answers
    lengths = torch.randint(1, tokens + 1, (bs,), generator=gen)
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).to(torch.int64)
    rewards = torch.zeros(bs, tokens, dtype=torch.float32)
    p = torch.rand(prompts, generator=gen).repeat_interleave(answers)
    rewards[torch.arange(bs), lengths - 1] = (torch.rand(bs, generator=gen) < p).float()
    uids = np.array([str(uuid.UUID(int=int(i) + 1)) for i in range(prompts)], dtype=object).repeat(answers)
    return rewards, mask, uids


def estimators():
    import verl  # noqa: F401  (loads the plugin that registers ebpo)
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from verl_ebpo.advantage import reset_prior

    config = OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True})
    names = ["grpo", "grpo_vectorized", "rloo_vectorized", "ebpo"]

    def call(name):
        fn = get_adv_estimator_fn(name)
        return lambda r, m, u: fn(token_level_rewards=r, response_mask=m, index=u, config=config)

    return {n: call(n) for n in names}, reset_prior


def time_it(fn, args, repeats: int) -> float:
    fn(*args)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def paired_ratio(fn, ref, args, pairs: int) -> float:
    """Median over `pairs` of time(fn) / time(ref), each pair timed back to back (alternating order), and the
    median time of each."""
    fn(*args), ref(*args)  # warm-up
    ratios, times = [], {"fn": [], "ref": []}
    for i in range(pairs):
        t = {}
        for name, f in ((("fn", fn), ("ref", ref)) if i % 2 == 0 else (("ref", ref), ("fn", fn))):
            t0 = time.perf_counter()
            f(*args)
            t[name] = time.perf_counter() - t0
            times[name].append(t[name])
        ratios.append(t["fn"] / t["ref"])
    return statistics.median(ratios), statistics.median(times["fn"]), statistics.median(times["ref"])


def large_allocations(fn, args, threshold: int) -> list[int]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(*args)
    return sorted(
        (e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage >= threshold and not e.cpu_children),
        reverse=True,
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--answers", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=15)
    args = ap.parse_args(argv)
    with torch.no_grad():
        return run(args)


def run(args) -> int:
    batch = make_batch(args.prompts, args.answers, args.tokens)
    fns, reset_prior = estimators()
    bs, T = batch[1].shape
    print(f"batch: {args.prompts} prompts x {args.answers} answers x {T} tokens (bs={bs}), "
          f"torch threads={torch.get_num_threads()}")
    results = {}
    for name, fn in fns.items():
        reset_prior()
        results[name] = time_it(fn, batch, args.repeats)
    ref = results["grpo_vectorized"]
    print(f"{'estimator':<18}{'median s':>10}{'x grpo_vectorized':>20}")
    for name, t in results.items():
        print(f"{name:<18}{t:>10.4f}{t / ref:>20.2f}")
    threshold = bs * T * 4 // 2
    print(f"large buffers (>= {threshold / 2**20:.0f} MiB) allocated per call, output size = "
          f"{bs * T * 4 / 2**20:.0f} MiB:")
    for name in ("grpo_vectorized", "ebpo"):
        sizes = large_allocations(fns[name], batch, threshold)
        print(f"  {name:<16} {len(sizes)} buffer(s): {[round(s / 2**20) for s in sizes]} MiB")
    rewards, mask, uids = batch
    for label, m, target in (("int64 mask", mask, 1.0), ("float32 mask", mask.to(torch.float32), 1.25)):
        reset_prior()
        ratio, t_ebpo, t_ref = paired_ratio(fns["ebpo"], fns["grpo_vectorized"], (rewards, m, uids), args.pairs)
        print(f"ebpo / grpo_vectorized, {label}: {ratio:.2f} (median of {args.pairs} pairs; target <= {target}; "
              f"median {t_ebpo * 1e3:.0f} ms vs {t_ref * 1e3:.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
