"""The benchmark scripts still run (tiny sizes; their numbers are reported by running them in full)."""

import runpy
import sys

import pytest


def run_script(path, args, capsys):
    argv = sys.argv
    sys.argv = [path, *args]
    try:
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = argv
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_bench_advantage_runs(capsys):
    out = run_script("benchmarks/bench_advantage.py", ["--prompts", "8", "--answers", "4", "--tokens", "16",
                                                       "--repeats", "1", "--pairs", "3"], capsys)
    assert "rloo_vectorized" in out
    for mask in ("int64 mask", "float32 mask"):
        ratio = [line for line in out.splitlines() if line.startswith(f"ebpo / grpo_vectorized, {mask}: ")]
        assert len(ratio) == 1 and float(ratio[0].split(": ")[1].split()[0]) > 0, out


def test_bench_baseline_mse_shrinkage_helps_at_small_g(capsys):
    out = run_script("benchmarks/bench_baseline_mse.py", ["--prompts", "256", "--steps", "6", "--groups", "4"],
                     capsys)
    row = [line.split() for line in out.splitlines() if line.strip().startswith("4 ")][0]
    mse_mean, mse_ebpo = float(row[1]), float(row[2])
    assert mse_ebpo < mse_mean  # the theorem: shrinkage lowers the baseline's error


@pytest.mark.parametrize("extra", [[], ["--threads", "4", "--processes", "2"]])
def test_bench_reward_runs_and_agrees_with_its_labels(capsys, extra):
    out = run_script("benchmarks/bench_reward.py", ["--n", "48", "--group", "8", *extra], capsys)
    assert "answers/s/core" in out
    assert "disagreements with the generator's labels: 0 " in out


def test_bench_reward_prints_answers_per_second_at_each_worker_count(capsys):
    """Answers/s at 1, 2 and 4 workers (threads = verifier processes, capped at the CPUs)."""
    from verl_ebpo.rewards.pool import MAX_PROCESSES

    out = run_script("benchmarks/bench_reward.py", ["--n", "32", "--group", "8", "--workers", "1,2,4"], capsys)
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 4]
    assert [int(r[1]) for r in rows] == [min(w, MAX_PROCESSES) for w in (1, 2, 4)]  # live verifier processes
    assert all(float(r[2]) > 0 and r[4] == "0" for r in rows)  # answers/s; no disagreement with the labels
