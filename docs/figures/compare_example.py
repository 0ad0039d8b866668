"""The example figures of docs/compare.md: `verl-ebpo compare` over synthetic verl metrics (GRPO and EBPO, three
seeds each, rewards between 0.3 and 0.6, validation `mean@16` every 5 steps in seeds 1 and 3 and every 4 in seed 2).

    python docs/figures/compare_example.py     # writes docs/figures/compare_{training_reward,validation_accuracy}.png
"""

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from verl_ebpo.tools.cli import main

HERE = Path(__file__).parent
rng = np.random.default_rng(0)
with tempfile.TemporaryDirectory() as tmp:
    for algo, level in (("grpo", 0.33), ("ebpo", 0.36)):
        for seed, every in ((1, 5), (2, 4), (3, 5)):
            lines = []
            for s in range(1, 21):
                data = {"critic/score/mean": level + 0.01 * s + rng.normal(0, 0.02)}
                if s % every == 0:
                    data["val-core/math/acc/mean@16"] = level + 0.009 * s + rng.normal(0, 0.01)
                lines.append(json.dumps({"step": s, "data": data}) + "\n")
            run = Path(tmp, "runs", algo, f"seed{seed}")
            run.mkdir(parents=True)
            (run / "metrics.jsonl").write_text("".join(lines))
    assert main(["compare", "--runs", f"{tmp}/runs", "--batch-size", "512", "--group-size", "8",
                 "--out", f"{tmp}/out", "--quiet"]) == 0
    for name in ("training_reward", "validation_accuracy"):
        shutil.copyfile(Path(tmp, "out", f"{name}.png"), HERE / f"compare_{name}.png")
