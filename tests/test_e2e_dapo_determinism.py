"""End to end: two DAPO runs of the same code and seed (`verl-ebpo demo`, verl's real V1 trainer on the CPU
backend, the replay buffer's `deterministic` on) draw, score and train on the same answers at every step.

Two extra trainer launches (about 2 min each on 2 cores), one after the other: run with
`python -m pytest -m "e2e and on_demand" tests/test_e2e_dapo_determinism.py` (the default suite skips them; the
rules are tested without a trainer in tests/test_deterministic.py).
"""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ebpo.tools import verl_logs

pytestmark = [pytest.mark.e2e, pytest.mark.on_demand]

REPO = Path(__file__).resolve().parents[1]
STEPS = 3
DEMO_ARGS = ["--algos", "dapo", "--quick", "--steps", str(STEPS), "--batch-size", "8", "--parallel", "1", "--quiet"]
# per step: what was drawn, dropped and kept, and the rewards (verl's, the buffer's, the demo's)
SAME = (verl_logs.SCORE, "critic/score/max", "critic/score/min", verl_logs.DAPO_EVICTED_GROUPS,
        verl_logs.DAPO_SURPLUS_GROUPS, verl_logs.DISCARDED_ANSWERS, verl_logs.DISCARDED_REWARD_SUM,
        "replay/prompts_consumed", "response_length/mean",
        # the batch in draw order: the loss sums the same answers in the same order (before: last float32 digits)
        "actor/pg_loss", "critic/advantages/mean")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    outs = []
    for i in range(2):
        out = tmp_path_factory.mktemp(f"dapo{i}") / "out"
        proc = subprocess.run([sys.executable, "-m", "verl_ebpo.tools.cli", "demo", *DEMO_ARGS, "--out", str(out)],
                              cwd=REPO, capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        outs.append(out)
    return outs


def _steps(out):
    with open(out / "steps.csv") as f:
        return [{k: v for k, v in row.items() if k != "step_time_s"} for row in csv.DictReader(f)]


def _run(out):
    run = out / "runs" / "dapo" / "seed0"
    return verl_logs.read_metrics(run / "metrics.jsonl"), verl_logs.read_rollout_dumps(run / "rollouts")


def test_two_dapo_runs_of_one_seed_generate_score_and_train_on_the_same_answers(two_runs):
    first, second = two_runs
    rows = _steps(first)
    assert [int(r["step"]) for r in rows] == list(range(1, STEPS + 1))
    assert rows == _steps(second)  # answers generated, reward_generated, reward_trained, no-signal share per step
    (m1, d1), (m2, d2) = _run(first), _run(second)
    assert any(m1[s].get(verl_logs.DAPO_EVICTED_GROUPS, 0) > 0 for s in m1 if s >= 1)  # DAPO did drop groups
    for step in range(1, STEPS + 1):
        for key in SAME:
            assert m1[step].get(key) == m2[step].get(key), (step, key)
        # the same answers with the same scores (verl dumps them sorted by their random uid: compared as sets)
        answers = [sorted((a["input"], a["output"], a["score"]) for a in d[step]) for d in (d1, d2)]
        assert answers[0] == answers[1], step
    assert verl_logs.validation_accuracy(m1) == verl_logs.validation_accuracy(m2)
