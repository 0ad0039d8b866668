"""Cost of the prompt orderings at start-up, against verl's own RLHFDataset read in the same run.

    python benchmarks/bench_ordering.py                  # 100k rows, 50 topics, 17 pass-rate levels
    python benchmarks/bench_ordering.py --rows 1000000

Reported (best of --repeats): the pure orderings (`plan_epoch` for verl's train loader, which drops an incomplete last batch), and building
`TopicOrderedDataset` / `DifficultyOrderedDataset` (read + order + content fingerprint + select) next to
verl's plain `RLHFDataset` over the same parquet file (no length filter, no tokenizer work), and the time
to read one row in file order against the reordered order.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time

import numpy as np


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=64, help="train batch (a remainder is completed when it does not divide)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from verl_ebpo.samplers.ordering import DifficultyOptions, TopicOptions, plan_epoch
    from verl_ebpo.samplers.dataset import DifficultyOrderedDataset, TopicOrderedDataset

    n, rng = args.rows, np.random.default_rng(0)
    topics = [f"topic{t}" for t in rng.integers(0, 50, n)]
    rates = (rng.integers(0, 17, n) / 16).tolist()
    t_topic = best(lambda: plan_epoch(topics, TopicOptions(), loader_batch=args.batch), args.repeats)
    t_diff = best(lambda: plan_epoch(rates, DifficultyOptions(), loader_batch=args.batch), args.repeats)
    print(f"pure orderings over {n} rows: topic {t_topic:.3f} s, difficulty {t_diff:.3f} s")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "train.parquet")
        rows = [{"data_source": "bench", "prompt": [{"role": "user", "content": f"question {i}: " + "x" * 100}],
                 "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(i)},
                 "extra_info": {"index": i, "topic": topics[i], "difficulty": rates[i]}} for i in range(n)]
        pq.write_table(pa.Table.from_pylist(rows), path)
        cfg = OmegaConf.create({"train_files": [path], "filter_overlong_prompts": False, "shuffle": False,
                                "train_batch_size": args.batch, "cache_dir": os.path.join(d, "cache")})
        built = {}

        def build(cls):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                built[cls] = cls(path, None, cfg)

        base = best(lambda: build(RLHFDataset), args.repeats)
        for cls in (TopicOrderedDataset, DifficultyOrderedDataset):
            t = best(lambda cls=cls: build(cls), args.repeats)
            print(f"{cls.__name__}: {t:.3f} s = verl's RLHFDataset {base:.3f} s + {t - base:.3f} s ({t / base:.1f}x)")
        k = min(n, 2000)
        plain, ordered = built[RLHFDataset].dataframe, built[TopicOrderedDataset].dataframe
        r_plain = best(lambda: [plain[i] for i in range(k)], 3) / k * 1e6
        r_ordered = best(lambda: [ordered[i] for i in range(k)], 3) / k * 1e6
        print(f"one row read: {r_plain:.0f} us in file order, {r_ordered:.0f} us reordered ({r_ordered / r_plain:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
