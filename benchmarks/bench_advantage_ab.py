"""A/B of `ebpo_advantage` against the version at a git ref (default cc438fe, before issue 40), in one process.

The old package is exported with `git archive` into a temporary folder and renamed `verl_ebpo_old`, so both can be
imported side by side; each is timed in interleaved pairs on bench_advantage.py's batch (float32 rewards, uuid
uids) for verl's int64 mask and a float32 mask, and the outputs are compared bit for bit.

    python benchmarks/bench_advantage_ab.py [--ref cc438fe --prompts 256 --pairs 15]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def export_old(ref: str, into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "verl_ebpo"], check=True, capture_output=True)
    subprocess.run(["tar", "x", "-C", str(into)], input=archive.stdout, check=True)
    (into / "verl_ebpo").rename(into / "verl_ebpo_old")
    for path in (into / "verl_ebpo_old").rglob("*.py"):
        path.write_text(re.sub(r"\bverl_ebpo\b", "verl_ebpo_old", path.read_text()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="cc438fe")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--pairs", type=int, default=15)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_advantage import make_batch

    from verl_ebpo.advantage import EBPOOptions, EBPOPrior, ebpo_advantage

    with tempfile.TemporaryDirectory() as tmp:
        export_old(args.ref, Path(tmp))
        sys.path.insert(0, tmp)
        from verl_ebpo_old.advantage import EBPOOptions as OldOptions, EBPOPrior as OldPrior
        from verl_ebpo_old.advantage import ebpo_advantage as old_advantage

        rewards, mask, uids = make_batch(args.prompts, 16, 2048)
        torch.set_grad_enabled(False)
        for label, m in (("int64 mask", mask), ("float32 mask", mask.float())):
            calls = {"old": lambda: old_advantage(rewards, m, uids, OldPrior(), OldOptions()),
                     "new": lambda: ebpo_advantage(rewards, m, uids, EBPOPrior(), EBPOOptions())}
            same = torch.equal(calls["old"]()[0], calls["new"]()[0])
            ratios = []
            for i in range(args.pairs):
                t = {}
                for name in (("new", "old") if i % 2 == 0 else ("old", "new")):
                    t0 = time.perf_counter()
                    calls[name]()
                    t[name] = time.perf_counter() - t0
                ratios.append(t["new"] / t["old"])
            print(f"{label}: new / {args.ref} = {statistics.median(ratios):.3f} (median of {args.pairs} pairs); "
                  f"outputs {'bit-identical' if same else 'DIFFER'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
