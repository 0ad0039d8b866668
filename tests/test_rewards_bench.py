"""The reward benchmark still runs and agrees with its own labels (tiny size; README numbers come from the
full run `python benchmarks/bench_reward.py`)."""

import runpy
import sys

import pytest


def test_bench_reward_runs(capsys):
    argv = sys.argv
    sys.argv = ["benchmarks/bench_reward.py", "--n", "48", "--group", "8"]
    try:
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path("benchmarks/bench_reward.py", run_name="__main__")
    finally:
        sys.argv = argv
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "answers/s/core" in out
    assert "disagreements with the generator's labels: 0 " in out
