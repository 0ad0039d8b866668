"""Stand-ins for the preflight tests: config.json files with the real shapes of the recipes' three models, and
tiny verl RL parquet files with every column the recipes read (17,398 rows, the size of DAPO-Math-17k
deduplicated, so the checkpoint plans have the real number of steps)."""

from __future__ import annotations

import json
from pathlib import Path

SHAPES = {
    # the published config.json values (bf16, untied embeddings)
    "qwen3_8b": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], num_hidden_layers=36, hidden_size=4096,
                     intermediate_size=12288, vocab_size=151936, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, tie_word_embeddings=False, torch_dtype="bfloat16", max_position_embeddings=40960),
    "qwen3_14b": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], num_hidden_layers=40, hidden_size=5120,
                      intermediate_size=17408, vocab_size=151936, num_attention_heads=40, num_key_value_heads=8,
                      head_dim=128, tie_word_embeddings=False, torch_dtype="bfloat16", max_position_embeddings=40960),
    "llama3_8b": dict(model_type="llama", architectures=["LlamaForCausalLM"], num_hidden_layers=32, hidden_size=4096,
                      intermediate_size=14336, vocab_size=128256, num_attention_heads=32, num_key_value_heads=8,
                      tie_word_embeddings=False, torch_dtype="bfloat16", max_position_embeddings=131072),
}
TRAIN_ROWS = 17398


def model_dir(root: Path, model: str) -> Path:
    folder = root / "models" / model
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(SHAPES[model]))
    return folder


def rows(n: int, drop: str | None = None) -> list[dict]:
    out = []
    for i in range(n):
        extra = {"index": i, "topic": i % 9, **{f"difficulty_{m}": (i % 17) / 16 for m in SHAPES}}
        row = {"prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "data_source": "math_dapo",
               "reward_model": {"style": "rule", "ground_truth": str(i + 1)}, "extra_info": extra}
        if drop:
            row.pop(drop)
        out.append(row)
    return out


def write(path: Path, n: int, drop: str | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows(n, drop)), path)
    return path


def data_dir(folder: Path, train_rows: int = TRAIN_ROWS) -> Path:
    """What recipes/data/prepare_data.py (+ label_data.sh) writes, for both protocols' validation files."""
    write(folder / "dapo_math_17k.parquet", train_rows)
    for name in ("dapo_math_holdout", "aime24", "math500"):
        write(folder / f"{name}.parquet", 30)
    return folder


def table_rows(out: str) -> dict:
    """Preflight's output as {check: its line and, with --verbose, its indented detail and fix lines joined}."""
    rows, last = {}, None
    for line in out.splitlines():
        if line.startswith(" ") and last is not None:
            rows[last] += " " + line.strip()
        elif not line.startswith("verl-ebpo preflight:"):
            last = line.split("  ")[0].strip()
            rows[last] = line
    return rows
