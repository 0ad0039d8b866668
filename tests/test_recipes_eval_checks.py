"""Evaluation for any model, everything checked before any work: run_eval.sh takes any recipes/<model>/ folder,
and stops (one line, exit 2) before it merges or generates on a bad argument, a checkpoint without weights, a
missing benchmark file, a bad scorer or a bad output path; score.py takes any model name (the paper's rows only
for Table 1's three) and has --check-only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT / "recipes" / "eval"
sys.path.insert(0, str(EVAL))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmarks  # noqa: E402
from test_recipes_eval import EXPECTED, fake_generations  # noqa: E402


def run_score(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(EVAL / "score.py"), *args], capture_output=True, text=True,
                          timeout=300, env=env)


def write_benchmarks(folder: Path, n: int = 3) -> Path:
    import pandas as pd

    sys.path.insert(0, str(ROOT / "recipes" / "data"))
    import prepare_data

    folder.mkdir(parents=True, exist_ok=True)
    for bench in benchmarks.BENCHMARKS:
        rows = [prepare_data.rl_row(f"what is {i}+{i}?", str(2 * i), bench, "test", i, str(i)) for i in range(n)]
        pd.DataFrame(rows).to_parquet(folder / f"{bench}.parquet")
    return folder


# -- score.py -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["qwen3_0.6b", None])
def test_score_any_model_our_rows_alone(tmp_path, model):
    gens = fake_generations(tmp_path / "gens.jsonl")
    args = (["--model", model] if model else []) + ["--run", f"ebpo={gens}", "--out-json", str(tmp_path / "s.json")]
    out = run_score(*args)
    assert out.returncode == 0, out.stderr
    assert "the paper has no numbers for this model" in out.stdout and "| paper" not in out.stdout
    avg = sum(EXPECTED.values()) / 5
    assert f"| EBPO-naive | ours | " in out.stdout and f"{avg:.2f} |" in out.stdout
    assert json.loads((tmp_path / "s.json").read_text())["model"] == model
    # a Table 1 model still gets the paper's rows
    out = run_score("--model", "qwen3_8b", "--run", f"ebpo={gens}")
    assert out.returncode == 0 and "| EBPO-naive | paper" in out.stdout


def test_score_check_only_checks_everything_but_the_generations(tmp_path):
    data = write_benchmarks(tmp_path / "data")
    later = tmp_path / "out" / "gens.jsonl"  # not generated yet
    (tmp_path / "out").mkdir()
    ok = ("--check-only", "--model", "my_model", "--run", f"ebpo={later}", "--data-dir", str(data),
          "--out-md", str(tmp_path / "out" / "t.md"), "--out-json", str(tmp_path / "out" / "s.json"))
    out = run_score(*ok)
    assert out.returncode == 0, out.stderr
    assert "score: checked: model my_model (no paper rows)" in out.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []  # nothing written


@pytest.mark.parametrize("case, words", [
    ("missing benchmark", "aime25.parquet: it does not exist (recipes/data/prepare_data.py writes it)"),
    ("damaged benchmark", "amc23.parquet"),
    ("no data dir", "--check-only needs --data-dir"),
    ("bad scorer", "no_such_module_xyz"),
    ("output is a folder", "t.md"),
    ("output is the input", "math500.parquet"),
    ("bad model", "--model must be a recipes/<model>/ folder name"),
])
def test_score_check_only_refuses_with_one_line(tmp_path, case, words):
    data = write_benchmarks(tmp_path / "data")
    args = ["--check-only", "--model", "my_model", "--run", f"ebpo={tmp_path / 'gens.jsonl'}",
            "--data-dir", str(data), "--out-md", str(tmp_path / "t.md")]
    if case == "missing benchmark":
        (data / "aime25.parquet").unlink()
    if case == "damaged benchmark":
        (data / "amc23.parquet").write_bytes(b"not parquet")
    if case == "no data dir":
        args = [a for a in args if a not in ("--data-dir", str(data))]
    if case == "bad scorer":
        args += ["--scorer", "no_such_module_xyz:fn"]
    if case == "output is a folder":
        (tmp_path / "t.md").mkdir()
    if case == "output is the input":
        args += ["--out-json", str(data / "math500.parquet")]
    if case == "bad model":
        args[2] = "a b"
    out = run_score(*args)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("score: error:"), out.stderr
    assert words in out.stderr


# -- run_eval.sh with any model folder ------------------------------------------------------------------


@pytest.fixture
def recipes_copy(tmp_path):
    """recipes/eval beside a new model folder whose model.env sets no ROLLOUT_TP (run_eval.sh finds its model
    folders beside its own folder)."""
    recipes = tmp_path / "recipes"
    shutil.copytree(EVAL, recipes / "eval", ignore=shutil.ignore_patterns("__pycache__"))
    (recipes / "qwen3_0p6b").mkdir()
    (recipes / "qwen3_0p6b" / "model.env").write_text(': "${MODEL_TAG:=qwen3_0p6b}"\n')
    return recipes


def run_eval(recipes: Path, tmp_path: Path, *args, **env_extra):
    """run_eval.sh with a python that runs the --check-only calls for real and records the rest (the merge,
    the generation, the scoring), writing generate's --out file."""
    fake = tmp_path / "python"
    fake.write_text(
        '#!/bin/sh\nfor a in "$@"; do [ "$a" = --check-only ] && exec "$REAL_PYTHON" "$@"; done\n'
        'printf "%s\\n" "$*" >> "$CALLS"\n'
        'while [ $# -gt 0 ]; do [ "$1" = --out ] && : > "$2"; shift; done\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("TP", "GPUS", "OUT_DIR", "SCORE_ARGS", "GEN_ARGS")}
    env.update({"PYTHON": str(fake), "REAL_PYTHON": sys.executable, "CALLS": str(tmp_path / "calls.txt"),
                "PYTHONPATH": str(ROOT), "GPUS": "2", "DATA_DIR": str(tmp_path / "data"), **env_extra})
    res = subprocess.run(["bash", str(recipes / "eval" / "run_eval.sh"), *args], env=env, capture_output=True,
                         text=True, timeout=300)
    calls = (tmp_path / "calls.txt").read_text().splitlines() if (tmp_path / "calls.txt").exists() else []
    return res, calls


def _checkpoint(tmp_path: Path, weights=True) -> Path:
    step = tmp_path / "ckpts" / "global_step_20"
    (step / "actor").mkdir(parents=True)
    (step / "data.pt").write_bytes(b"d")
    if weights:
        (step / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w")
    return step


def test_run_eval_takes_a_new_model_folder(tmp_path, recipes_copy):
    write_benchmarks(tmp_path / "data")
    step = _checkpoint(tmp_path)
    res, calls = run_eval(recipes_copy, tmp_path, "qwen3_0p6b", "ebpo", str(step))
    assert res.returncode == 0, res.stderr
    merge, *generate, score_call = calls
    assert "verl.model_merger merge" in merge and f"--local_dir {step}/actor" in merge
    assert len(generate) == 2 and all("--tp 1" in g for g in generate)  # TP defaults to 1: GPUS=2 -> 2 shards
    assert "--model qwen3_0p6b" in score_call and f"--out-json {step}/actor/eval/scores.json" in score_call


@pytest.mark.parametrize("case, words", [
    ("unknown model", "unknown model 'mistral_7b': no recipes/mistral_7b/model.env"),
    ("bad method", "method must be a label"),
    ("rotated checkpoint", "has no actor/ folder: its weights were removed"),
    ("empty actor", "holds no weights"),
    ("missing checkpoint", "no such folder"),
    ("not a model id", "is neither a folder nor a HF model id"),
    ("bad GPUS", "GPUS (3) must be a positive multiple of TP (2)"),
    ("missing benchmark", "aime24.parquet not found"),
    ("bad scorer", "no_such_module_xyz"),
    ("output is a folder", "scores.json"),
])
def test_run_eval_stops_before_merging_or_generating(tmp_path, recipes_copy, case, words):
    write_benchmarks(tmp_path / "data")
    step = _checkpoint(tmp_path, weights=case != "empty actor")
    model, method, ckpt, env = "qwen3_0p6b", "ebpo", str(step), {}
    if case == "unknown model":
        model = "mistral_7b"
    if case == "bad method":
        method = "eb po"
    if case == "rotated checkpoint":
        shutil.rmtree(step / "actor")
    if case == "missing checkpoint":
        ckpt = str(tmp_path / "nowhere" / "global_step_5")
    if case == "not a model id":
        ckpt = "just-a-name"
    if case == "bad GPUS":
        env = {"GPUS": "3", "TP": "2"}
    if case == "missing benchmark":
        (tmp_path / "data" / "aime24.parquet").unlink()
    if case == "bad scorer":
        env = {"SCORE_ARGS": "--scorer no_such_module_xyz:fn"}
    if case == "output is a folder":
        (step / "actor" / "eval" / "scores.json").mkdir(parents=True)
    res, calls = run_eval(recipes_copy, tmp_path, model, method, ckpt, **env)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr
    assert calls == []  # nothing merged, generated or scored
