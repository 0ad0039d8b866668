"""EBPO vs verl's grpo_vectorized / rloo_vectorized on a CUDA device (machines without verl installed).

verl imports Ray at top level, so a bare GPU box without verl cannot `import verl`. This script therefore
works in two steps:

1. Where verl is installed: `python benchmarks/bench_advantage_gpu.py --extract .gpu/verl_ref.py` writes a
   standalone module with verl's OWN source text of `verl.utils.groupwise` and of the two estimator
   functions (decorators dropped, the device helper pinned to "cuda") -- verl's code, not a rewrite.
2. On the GPU machine: `python benchmarks/bench_advantage_gpu.py --ref .gpu/verl_ref.py` checks that EBPO on
   CUDA equals EBPO on CPU, then times all three on 512 x 16 x 2048 with CUDA events and prints ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def extract(out_path: str) -> None:
    import verl.utils.groupwise as groupwise
    from verl.trainer.ppo import core_algos

    src = inspect.getsource(groupwise).replace(
        "from verl.utils.device import get_device_name", "def get_device_name():\n    return 'cuda'"
    )
    parts = [src, "AlgoConfig = object\n"]
    for fn in (core_algos.compute_grpo_vectorized_outcome_advantage,
               core_algos.compute_rloo_vectorized_outcome_advantage):
        lines = inspect.getsource(fn).splitlines(keepends=True)
        parts.append("".join(line for line in lines if not line.startswith("@")))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        f.write("# Extracted verbatim from verl (see benchmarks/bench_advantage_gpu.py)\n")
        f.write(textwrap.dedent("\n\n".join(parts)))
    print(f"wrote {out_path}")


def bench(ref_path: str, prompts: int, answers: int, tokens: int, repeats: int) -> None:
    import torch

    from bench_advantage import make_batch
    from verl_ebpo.advantage import EBPOOptions, EBPOPrior, ebpo_advantage

    spec = importlib.util.spec_from_file_location("verl_ref", ref_path)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    assert torch.cuda.is_available(), "no CUDA device"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    r_cpu, m_cpu, uid = make_batch(prompts, answers, tokens)
    r, m = r_cpu.cuda(), m_cpu.cuda()

    a_cpu, _ = ebpo_advantage(r_cpu, m_cpu, uid, EBPOPrior(), EBPOOptions())
    a_gpu, _ = ebpo_advantage(r, m, uid, EBPOPrior(), EBPOOptions())
    err = (a_gpu.cpu() - a_cpu).abs().max().item()
    print(f"ebpo CUDA vs CPU: max |diff| = {err:.2e} ({'OK' if err < 1e-5 else 'MISMATCH'})")

    fns = {
        "grpo_vectorized": lambda: ref.compute_grpo_vectorized_outcome_advantage(r, m, uid),
        "rloo_vectorized": lambda: ref.compute_rloo_vectorized_outcome_advantage(r, m, uid),
        "ebpo": lambda: ebpo_advantage(r, m, uid, EBPOPrior(), EBPOOptions()),
    }
    times = {}
    for name, fn in fns.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 1000)
        times[name] = sorted(samples)[len(samples) // 2]
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        print(f"{name:<16} median {times[name] * 1e3:8.2f} ms   peak extra memory {peak:7.1f} MiB")
    out_mib = r.numel() * r.element_size() / 2**20
    print(f"(output tensor = {out_mib:.0f} MiB)")
    print(f"ebpo / grpo_vectorized = {times['ebpo'] / times['grpo_vectorized']:.2f} (target <= 1.25)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extract", metavar="OUT")
    ap.add_argument("--ref", metavar="FILE")
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--answers", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args(argv)
    if args.extract:
        extract(args.extract)
    if args.ref:
        bench(args.ref, args.prompts, args.answers, args.tokens, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
