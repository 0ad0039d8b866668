"""recipes/eval: Pass@1 over k samples from a generations JSONL (scored by this package's reward), the
markdown table with the paper's numbers beside ours, and generate.py's file handling (tiny model, CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT / "recipes" / "eval"
sys.path.insert(0, str(EVAL))
import benchmarks  # noqa: E402
import score  # noqa: E402

# per benchmark: number of correct samples of each problem (k = the paper's: 16, OlympiadBench 4)
CORRECT = {
    "math500": [16, 8, 0, 4],
    "aime24": [1, 0],
    "aime25": [16, 16],
    "amc23": [3, 5, 7],
    "olympiadbench": [4, 1, 2],
}
# hand-computed Pass@1 (%): mean over problems of correct / k
EXPECTED = {
    "math500": (100 + 50 + 0 + 25) / 4,  # 43.75
    "aime24": (100 / 16 + 0) / 2,  # 3.125
    "aime25": 100.0,
    "amc23": 100 * (3 + 5 + 7) / 16 / 3,  # 31.25
    "olympiadbench": (100 + 25 + 50) / 3,  # 58.333...
}


def fake_generations(path: Path, correct=CORRECT, drop=None, duplicate=False) -> Path:
    lines = []
    for bench, counts in correct.items():
        k = benchmarks.SAMPLES[bench]
        for i, c in enumerate(counts):
            truth = f"\\frac{{{i + 1}}}{{7}}"
            for j in range(k):
                if drop == (bench, i, j):
                    continue
                # right answers in the forms the reward accepts; wrong ones, and one with no answer at all
                if j < c:
                    response = f"Thinking...\nAnswer: \\frac{{{i + 1}}}{{7}}" if j % 2 else f"so \\boxed{{{i + 1}/7}}"
                else:
                    response = "I do not know." if j == k - 1 else f"Answer: {i + 2}/7"
                lines.append({"benchmark": bench, "data_source": bench, "problem_index": i, "index": i,
                              "sample_index": j, "ground_truth": truth, "response": response,
                              "finish_reason": "length" if j == 0 else "stop", "response_tokens": 10 + j})
    if duplicate:
        lines.append(dict(lines[0]))
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def run_score(*args):
    return subprocess.run([sys.executable, str(EVAL / "score.py"), *args], capture_output=True, text=True, timeout=300)


def test_pass_at_1_and_table_from_generations(tmp_path):
    gens = fake_generations(tmp_path / "gens.jsonl")
    out = run_score("--model", "qwen3_8b", "--run", f"ebpo_topic={gens}", "--run", f"my_variant={gens}",
                    "--out-md", str(tmp_path / "t.md"), "--out-json", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "s.json").read_text())["runs"]["ebpo_topic"]
    for bench, value in EXPECTED.items():
        got = result["benchmarks"][bench]
        assert got["pass@1"] == pytest.approx(value), bench
        assert got["k"] == benchmarks.SAMPLES[bench] and got["problems"] == len(CORRECT[bench])
        assert got["truncated"] == pytest.approx(1 / benchmarks.SAMPLES[bench])
    assert result["average"] == pytest.approx(sum(EXPECTED.values()) / 5)

    table = (tmp_path / "t.md").read_text()
    assert out.stdout == table
    lines = table.splitlines()
    assert lines[2] == "| method | numbers | MATH-500 | AIME24 | AIME25 | AMC23 | OlympiadBench | average |"
    assert "| GRPO | paper | 65.60 | 50.21 | 42.29 | 89.53 | 45.99 | 58.72 |" in lines
    assert "| EBPO-topic | paper | 76.80 | 56.04 | 47.92 | 86.25 | 54.93 | 64.39 |" in lines
    ours = "| EBPO-topic | ours | 43.75 | 3.12 | 100.00 | 31.25 | 58.33 | 47.29 |"
    assert ours in lines
    # our row sits right under the paper's row of the same method; unknown keys come last
    assert lines.index(ours) == lines.index("| EBPO-topic | paper | 76.80 | 56.04 | 47.92 | 86.25 | 54.93 | 64.39 |") + 1
    assert lines[lines.index(ours) + 1].startswith("| my_variant | ours | 43.75")
    # the paper's own inconsistency is shown, not hidden
    assert any(line.startswith("| Dr.GRPO | paper [1] |") for line in lines)
    assert "[1] the five scores average 56.27; the paper states 56.67" in lines


def test_paper_rows_for_each_model():
    table = score.markdown_table("qwen3_14b", {})
    assert "| DAPO | paper | 67.68 | 57.29 | 51.46 | 84.22 | 46.03 | 61.34 |" in table
    assert "| EBPO-topic | paper [1] | – | – | – | – | – | 61.35 |" in table
    llama = score.markdown_table("llama3_8b", {"grpo": {"math500": 20.0}})
    assert "| GRPO | ours | 20.00 | – | – | – | – | – |" in llama  # no average unless all five are there


def test_paper_results_file_is_consistent():
    data = json.loads((EVAL / "paper_results.json").read_text())
    assert data["columns"] == list(benchmarks.BENCHMARKS)
    assert set(data["models"]) == set(benchmarks.MODEL_TITLES)
    for model, rows in data["models"].items():
        for method, row in rows.items():
            assert method in benchmarks.METHODS
            if row["scores"] is not None:
                assert len(row["scores"]) == 5
                mean = sum(row["scores"]) / 5
                # a stated average that is not the mean of the stated scores must carry a note
                assert abs(mean - row["average"]) < 0.006 or "note" in row, (model, method)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"drop": ("aime24", 1, 3)}, "aime24: samples per problem [15, 16], expected 16"),
        ({"duplicate": True}, "math500 problem 0 sample 0 appears twice"),
    ],
)
def test_incomplete_or_duplicated_generations_are_errors(tmp_path, kwargs, message):
    gens = fake_generations(tmp_path / "g.jsonl", **kwargs)
    out = run_score("--model", "qwen3_8b", "--run", f"grpo={gens}")
    assert out.returncode == 2
    assert message in out.stderr
    if "drop" in kwargs:
        ok = run_score("--model", "qwen3_8b", "--run", f"grpo={gens}", "--allow-partial")
        assert ok.returncode == 0, ok.stderr


def test_problem_count_checked_against_the_benchmark_files(tmp_path):
    import pandas as pd

    pd.DataFrame({"x": range(5)}).to_parquet(tmp_path / "math500.parquet")  # 5 problems, 4 answered
    gens = fake_generations(tmp_path / "g.jsonl")
    out = run_score("--model", "qwen3_8b", "--run", f"grpo={gens}", "--data-dir", str(tmp_path))
    assert out.returncode == 2
    assert "math500: 4 problems, the benchmark has 5" in out.stderr


def test_bad_lines_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"benchmark": "math500"}\n')
    out = run_score("--model", "qwen3_8b", "--run", f"grpo={bad}")
    assert out.returncode == 2 and f"{bad}:1: missing field(s)" in out.stderr
    bad.write_text('{"benchmark": "gsm8k", "problem_index": 0, "sample_index": 0, "ground_truth": "1", "response": ""}\n')
    out = run_score("--model", "qwen3_8b", "--run", f"grpo={bad}")
    assert out.returncode == 2 and "unknown benchmark 'gsm8k'" in out.stderr
    out = run_score("--model", "qwen2", "--run", f"grpo={bad}")
    assert out.returncode == 2 and "--model must be one of" in out.stderr


def test_run_eval_generates_in_shards_and_scores(tmp_path):
    """run_eval.sh end to end on CPU: a tiny random HF model, transformers' engine, 2 shards (2 "GPUs"),
    benchmark files written by prepare_data.py's row builder."""
    import os

    import pandas as pd

    sys.path.insert(0, str(ROOT / "recipes" / "data"))
    import prepare_data
    from verl_ebpo.cpu.assets import build_model

    data = tmp_path / "data"
    data.mkdir()
    for bench in benchmarks.BENCHMARKS:
        rows = [prepare_data.rl_row(f"what is {i}+{i}?", str(2 * i), bench, "test", i, str(i)) for i in range(3)]
        pd.DataFrame(rows).to_parquet(data / f"{bench}.parquet")
    model = build_model(tmp_path / "tiny")
    env = {**os.environ, "DATA_DIR": str(data), "GPUS": "2", "TP": "1", "ENGINE": "hf", "PYTHON": sys.executable,
           "GEN_ARGS": "--device cpu --max-tokens 3 --benchmarks math500,olympiadbench --samples math500=2",
           "SCORE_ARGS": "--samples math500=2", "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(["bash", str(EVAL / "run_eval.sh"), "qwen3_8b", "grpo", str(model)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    out_dir = model / "eval"  # inside the HF model folder
    rows = [json.loads(line) for line in (out_dir / "generations.jsonl").read_text().splitlines()]
    keys = sorted((r["benchmark"], r["problem_index"], r["sample_index"]) for r in rows)
    # the two shards together answer every problem k times (2 for MATH-500 here, the paper's 4 for OlympiadBench)
    assert keys == sorted([("math500", i, j) for i in range(3) for j in range(2)]
                          + [("olympiadbench", i, j) for i in range(3) for j in range(4)])
    assert all(r["ground_truth"] == str(2 * r["problem_index"]) and 1 <= r["response_tokens"] <= 3 for r in rows)
    meta = json.loads((out_dir / "generations.jsonl.shard1.meta.json").read_text())
    assert (meta["temperature"], meta["top_p"], meta["shard"]) == (1.0, 1.0, "1/2")
    scores = json.loads((out_dir / "scores.json").read_text())["runs"]["grpo"]["benchmarks"]
    assert set(scores) == {"math500", "olympiadbench"} and scores["math500"]["problems"] == 3
    table = (out_dir / "table.md").read_text()
    assert "| GRPO | ours |" in table and table in res.stdout


def test_measure_update_tool_runs_on_cpu():
    sys.path.insert(0, str(ROOT / "recipes" / "tools"))
    import measure_update

    out = measure_update.measure("tiny", "cpu", iters=2)
    assert (out["batch"], out["seq_len"], out["tokens"]) == (2, 32, 64)
    # the median is printed rounded to 4 decimals, tokens/s from the unrounded median
    median = out["fwd_bwd_s_median"]
    assert median > 0 and 64 / (median + 5e-5) - 1 <= out["tokens_per_s"] <= 64 / max(median - 5e-5, 1e-9) + 1
    # the recipes' per-GPU token budgets: 24576 tokens for the 8B models, 12288 (sequence parallel 2) for 14B
    assert measure_update.SHAPES["qwen3_8b"][1] == (3, 8192) and measure_update.SHAPES["qwen3_14b"][1] == (3, 4096)
