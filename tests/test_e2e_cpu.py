"""End to end: verl's real trainer (`python -m verl.trainer.main_ppo`, V1) on the CPU backend.

Trainer launches (each ~1 min of start-up), shared by the tests below:
- run A: `adv_estimator=ebpo`, 3 steps, math reward (verl_ebpo.rewards through verl's reward loop),
  difficulty order (verl_ebpo.samplers), EBPOCheckpointCallback, checkpoints at steps 2 and 3;
- run B: resumes run A's checkpoint directory (verl's resume_mode=auto) for step 4;
- run C (`-m slow`): `adv_estimator=grpo`, topic order, the callback configured but inactive, 2 steps;
- the demo (`-m slow`, `python -m verl_ebpo.tools.cli demo`): DAPO and EBPO on two lanes.
The README's test command runs A and B; CI runs the `slow` ones after it.
Every expected number is recomputed here from what verl wrote (rollout dumps, metrics, checkpoints).
Run the fast tests alone with `python -m pytest -m "not e2e"`.
"""

import json
import math
import os
import random
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from verl_ebpo.tools import verl_logs
from verl_ebpo.tools.tiny import assets
from verl_ebpo.tools.cpu.launch import CPURun, run_main_ppo

pytestmark = pytest.mark.e2e

BATCH, GROUP = 8, 4
GROUP_DEMO = 4  # the demo's default G
ANSWERS = BATCH * GROUP
N_ROWS = 32  # 4 topics x 8 rows; 4 steps of BATCH prompts
TOPICS = ("t0", "t1", "t2", "t3")
REWARD_KWARGS = {"no_answer_score": -0.5, "processes": 1}
EBPO_DIAGNOSTICS = (
    "ebpo/prior_mean", "ebpo/sigma2", "ebpo/tau2", "ebpo/shrinkage_mean", "ebpo/shrinkage_min",
    "ebpo/shrinkage_max", "ebpo/equal_reward_group_frac", "ebpo/zero_adv_frac", "ebpo/padding_rows",
    "ebpo/skipped_rows", "ebpo/prior_weight",
)
REPO = Path(__file__).resolve().parents[1]


# -- shared assets and runs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny Llama warm-started to answer `\\boxed{...}` (so math-verify sees right and wrong answers) and
    32 unique questions with a difficulty (a distinct pass rate) and a topic (interleaved in the file)."""
    root = tmp_path_factory.mktemp("e2e")
    rng = random.Random(0)
    difficulty = rng.sample(range(N_ROWS), N_ROWS)
    rows, pairs = [], []
    for i in range(N_ROWS):
        a, b = rng.randrange(5), rng.randrange(5)
        question = f"{i:02d}:{a}+{b}="
        rows.append(assets.rl_row(i, question, str(a + b), "e2e/add",
                                  extra_info={"difficulty": (difficulty[i] + 0.5) / N_ROWS, "topic": TOPICS[i % 4]}))
        pairs.append((question, f"\\boxed{{{a + b}}}"))
    model = assets.build_model(root / "model", seed=0)
    assets.warm_start(model, pairs, steps=40, lr=3e-3, seed=0)
    train = assets.write_rl_parquet(rows, root / "train.parquet")
    val = assets.write_rl_parquet(rows[:4], root / "val.parquet")
    return {"root": root, "model": str(model), "train": str(train), "val": str(val), "rows": rows}


def _make_run(data, name, estimator, order, steps, extra=()):
    out = data["root"] / name
    return CPURun(
        model_path=data["model"],
        train_files=data["train"],
        val_files=data["val"],
        out_dir=str(out),
        adv_estimator=estimator,
        steps=steps,
        train_batch_size=BATCH,
        n=GROUP,
        max_prompt_length=16,
        max_response_length=12,
        lr=1e-3,
        save_freq=2,
        experiment_name=name,
        reward_function=("pkg://verl_ebpo.rewards", "compute_score"),
        extra=[
            "data.shuffle=False", "data.custom_cls.path=pkg://verl_ebpo.samplers.dataset",  # docs/ordering.md
            f"data.custom_cls.name={order.title()}OrderedDataset",
            "trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback",
            f"trainer.rollout_data_dir={out / 'rollouts'}",
            *(f"+reward.custom_reward_function.reward_kwargs.{k}={v}" for k, v in REWARD_KWARGS.items()),
            *extra,
        ],
    )


def _train(run):
    run_main_ppo(run, timeout_s=600)
    return {"run": run, "metrics": _metrics(run.metrics_file), "rollouts": _rollouts(Path(run.out_dir) / "rollouts")}


@pytest.fixture(scope="module")
def run_a(data):
    return _train(_make_run(data, "a", "ebpo", "difficulty", steps=3))


@pytest.fixture(scope="module")
def run_b(data, run_a):
    # same job, one more step, resuming from run A's checkpoints (own logs and dumps)
    ckpt = run_a["run"].checkpoint_dir
    return _train(_make_run(data, "b", "ebpo", "difficulty", steps=4, extra=[f"trainer.default_local_dir={ckpt}"]))


@pytest.fixture(scope="module")
def run_c(data):
    return _train(_make_run(data, "c", "grpo", "topic", steps=2))


def _metrics(path):
    steps = defaultdict(dict)
    for line in Path(path).read_text().splitlines():
        record = json.loads(line)
        steps[record["step"]].update(record["data"])
    return dict(steps)


def _rollouts(folder):
    out = {}
    for path in Path(folder).glob("*.jsonl"):
        out[int(path.stem)] = [json.loads(line) for line in path.read_text().splitlines()]
    return out


def _row_of(answer):
    return int(re.match(r"^(\d\d):", answer["input"]).group(1))


def _groups(answers):
    groups = defaultdict(list)
    for answer in answers:
        groups[answer["uid"].rsplit("_", 2)[0]].append(answer["score"])
    return groups


# -- run A: EBPO trains ------------------------------------------------------------------------------


def test_ebpo_trains_on_cpu_and_logs_its_diagnostics(run_a):
    metrics = run_a["metrics"]
    assert sorted(metrics) == [1, 2, 3]
    for step, m in metrics.items():
        assert math.isfinite(m["critic/score/mean"]) and math.isfinite(m["actor/pg_loss"])
        missing = [k for k in EBPO_DIAGNOSTICS if k not in m]
        assert not missing, f"step {step}: EBPO diagnostics missing from verl's logged metrics: {missing}"
        assert m["ebpo/prior_weight"] == step * ANSWERS
        assert m["ebpo/padding_rows"] == 0 and m["ebpo/skipped_rows"] == 0
        assert 0 <= m["ebpo/shrinkage_min"] <= m["ebpo/shrinkage_mean"] <= m["ebpo/shrinkage_max"] <= 1
        # the hf rollout samples with the trainer's current weights (sent by update_weights every step):
        # its token probabilities equal the actor's recomputed ones; stale weights would differ by far more
        assert m["training/rollout_probs_diff_max"] < 1e-4
    assert max(m["actor/grad_norm"] for m in metrics.values()) > 0  # the policy did move


def test_math_reward_scores_every_answer_through_verls_reward_loop(run_a):
    from verl_ebpo.rewards import compute_score, shutdown

    verdicts = defaultdict(int)
    try:
        for step, answers in run_a["rollouts"].items():
            assert len(answers) == ANSWERS
            for answer in answers:
                result = compute_score("e2e/add", answer["output"], answer["gts"], {}, **REWARD_KWARGS)
                verdicts[result["verdict"]] += 1
                assert answer["score"] == result["score"], answer
            logged = run_a["metrics"][step]["critic/score/mean"]
            assert np.mean([a["score"] for a in answers]) == pytest.approx(logged, abs=1e-6)
    finally:
        shutdown()  # this process's verifier processes
    # the warm-started model gives the verifier real work: right, wrong and unparsable answers
    assert verdicts["correct"] > 0 and verdicts["wrong"] + verdicts["no_answer"] > 0, dict(verdicts)


def test_difficulty_order_feeds_the_trainer_easy_to_hard(data, run_a):
    by_difficulty = sorted(range(N_ROWS), key=lambda i: -data["rows"][i]["extra_info"]["difficulty"])
    for step, answers in run_a["rollouts"].items():
        rows = sorted({_row_of(a) for a in answers})
        assert rows == sorted(by_difficulty[(step - 1) * BATCH : step * BATCH]), f"step {step}"


def _expected_prior(answers_by_step):
    rewards = [a["score"] for answers in answers_by_step for a in answers]
    group_means = [np.mean(g) for answers in answers_by_step for g in _groups(answers).values()]
    return {
        "weight": len(rewards),
        "mu_glob": float(np.mean(rewards)),
        "sigma2": float(np.var(rewards)),
        "tau2": float(np.var(group_means)),
    }


def test_checkpoint_callback_writes_the_prior_into_each_checkpoint(run_a):
    from verl_ebpo.checkpoint import read_prior_file

    ckpt = run_a["run"].checkpoint_dir
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    for step in (2, 3):
        prior, saved_step = read_prior_file(ckpt / f"global_step_{step}" / "ebpo_prior.json")
        assert saved_step == step
        expected = _expected_prior([run_a["rollouts"][s] for s in range(1, step + 1)])
        assert prior.reward.weight == expected["weight"]
        assert prior.mu_glob == pytest.approx(expected["mu_glob"], abs=1e-9)
        assert prior.sigma2 == pytest.approx(expected["sigma2"], abs=1e-9)
        assert prior.tau2 == pytest.approx(expected["tau2"], abs=1e-9)
        assert prior.mu_glob == pytest.approx(run_a["metrics"][step]["ebpo/prior_mean"], abs=1e-6)
    assert not (ckpt / "global_step_1").exists()


# -- run B: resume ------------------------------------------------------------------------------------


def test_resumed_run_restores_the_prior_and_continues(run_a, run_b):
    from verl_ebpo.advantage.prior import Moments
    from verl_ebpo.checkpoint import read_prior_file

    metrics, rollouts = run_b["metrics"], run_b["rollouts"]
    assert sorted(metrics) == [4] and sorted(rollouts) == [4]  # resumed at step 4, nothing redone
    ckpt = run_a["run"].checkpoint_dir
    saved, _ = read_prior_file(ckpt / "global_step_3" / "ebpo_prior.json")
    after, step = read_prior_file(ckpt / "global_step_4" / "ebpo_prior.json")
    assert step == 4
    # the prior after resume = the prior saved at step 3, merged with step 4's batch (Welford, decay 1)
    answers = rollouts[4]
    rewards = np.array([a["score"] for a in answers], dtype=np.float64)
    means = np.array([np.mean(g) for g in _groups(answers).values()], dtype=np.float64)
    expected = saved.merged(
        Moments(len(rewards), rewards.mean(), float(((rewards - rewards.mean()) ** 2).sum())),
        Moments(len(means), means.mean(), float(((means - means.mean()) ** 2).sum())),
        1.0,
    )
    for field in ("weight", "mean", "m2"):
        assert getattr(after.reward, field) == pytest.approx(getattr(expected.reward, field), rel=1e-9, abs=1e-12)
        assert getattr(after.group_mean, field) == pytest.approx(getattr(expected.group_mean, field), rel=1e-9, abs=1e-12)
    assert after.updates == saved.updates + 1 == 4
    assert metrics[4]["ebpo/prior_weight"] == 4 * ANSWERS  # a fresh prior would log 32
    assert metrics[4]["ebpo/prior_mean"] == pytest.approx(
        _expected_prior([*(run_a["rollouts"][s] for s in (1, 2, 3)), answers])["mu_glob"], abs=1e-6
    )


def test_resumed_run_continues_the_data_order(data, run_b):
    by_difficulty = sorted(range(N_ROWS), key=lambda i: -data["rows"][i]["extra_info"]["difficulty"])
    rows = sorted({_row_of(a) for a in run_b["rollouts"][4]})
    assert rows == sorted(by_difficulty[3 * BATCH : 4 * BATCH])


# -- run C: GRPO, topic order, callback inactive ---------------------------------------------------------


@pytest.mark.slow  # a third launch: the README's command runs two (A, B); CI runs this one after it
def test_grpo_trains_with_topic_order_and_the_callback_stays_out(data, run_c):
    metrics = run_c["metrics"]
    assert sorted(metrics) == [1, 2]
    assert not [k for m in metrics.values() for k in m if k.startswith("ebpo/")]
    for step, answers in run_c["rollouts"].items():
        topics = {data["rows"][_row_of(a)]["extra_info"]["topic"] for a in answers}
        # topics first seen in file order (t0, t1, ...), one cluster of 8 rows per batch
        assert topics == {TOPICS[step - 1]}, f"step {step}: {topics}"
        assert np.mean([a["score"] for a in answers]) == pytest.approx(metrics[step]["critic/score/mean"], abs=1e-6)
    ckpt = run_c["run"].checkpoint_dir / "global_step_2"
    assert (ckpt / "actor").is_dir() and not (ckpt / "ebpo_prior.json").exists()


# -- the demo: the smallest run through its real code paths (DAPO's filter, EBPO, compare, plots) -----------------------------------------------


def test_ray_cluster_is_private_and_leaves_nothing_behind():
    """Its address is not published where a plain `ray.init()` looks (/tmp/ray/ray_current_cluster): another
    job on the machine must start its own cluster, not join (or fail to join) ours; its token stays out of this
    process's environment."""
    import glob
    import socket

    from verl_ebpo.tools.cpu.launch import SHARED_RAY_PREFIX, ray_cluster

    default_file = Path("/tmp/ray/ray_current_cluster")
    before = default_file.read_text() if default_file.exists() else None
    leftovers = set(glob.glob(f"/tmp/{SHARED_RAY_PREFIX}*/session_latest"))  # of killed runs before this test
    with ray_cluster() as (address, auth):
        host, port = address.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=10).close()  # the cluster is up
        assert (default_file.read_text() if default_file.exists() else None) == before
        assert len(auth["RAY_AUTH_TOKEN"]) == 64 and os.environ.get("RAY_AUTH_TOKEN") != auth["RAY_AUTH_TOKEN"]
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=5).close()
    assert not set(glob.glob(f"/tmp/{SHARED_RAY_PREFIX}*/session_latest")) - leftovers


# Two trainer launches on one cluster: the statistics over seeds are tested on constructed metrics
# (tests/test_cpu_demo.py, tests/test_compare.py); here one seed, so the report's "one seed" path runs end to end.
STEPS = 4
DEMO_ARGS = ["--algos", "dapo,ebpo", "--seeds", "1", "--steps", str(STEPS), "--batch-size", "8"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    proc = subprocess.run([sys.executable, "-m", "verl_ebpo.tools.cli", "demo", *DEMO_ARGS, "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"out": out, "stdout": proc.stdout, "stderr": proc.stderr,
            "summary": json.loads((out / "summary.json").read_text())}


@pytest.mark.slow  # two more launches; DAPO through the replay buffer: also test_recipes_smoke.py (dapo_diff)
def test_demo_runs_verls_trainer_on_two_lanes_and_writes_the_summary(demo):
    out, summary = demo["out"], demo["summary"]
    assert json.loads((out / ".verl-ebpo-owner").read_text())["tool"] == "verl-ebpo demo"  # a re-run may replace runs/
    assert set(summary["algos"]) == {"dapo", "ebpo"} and set(summary["comparisons"]) == {"ebpo-dapo"}
    for algo, a in summary["algos"].items():
        assert a["seeds"] == [0]
        assert 0 <= a["final_reward_mean"] <= 1 and a["final_reward_ci95"] == [None, None]  # one seed: no interval
        assert isinstance(a["answers_generated"], int) and 0 <= a["greedy_accuracy_mean"] <= 1
        log = (out / "runs" / algo / "seed0" / "trainer.log").read_text()
        assert "Connecting to existing Ray cluster" in log  # joined its lane's cluster, started none
        metrics = verl_logs.read_metrics(out / "runs" / algo / "seed0" / "metrics.jsonl")
        assert [s for s in metrics if verl_logs.SCORE in metrics[s]] == list(range(1, STEPS + 1))
    c = summary["comparisons"]["ebpo-dapo"]
    assert "one seed, no interval" in c["verdict"] and c["verdict"] in demo["stdout"]
    assert "ebpo" in (out / "report.md").read_text()  # compare's report over the demo's runs
    assert summary["seconds"] > 0 and summary["timings"]["peak_pss_gib"] > 0.5
    # the two runs ran at once, a Ray cluster each; progress on stderr: runs done of total, with the time left
    assert "2 at once" in demo["stdout"] and demo["stdout"].count("Ray cluster") >= 2
    # the bar counts training steps (2 runs x STEPS), so it moves before the first run ends
    assert f"verl-ebpo demo, 2 runs: 0/{2 * STEPS} steps" in demo["stderr"]
    assert f"verl-ebpo demo, 2 runs: {2 * STEPS}/{2 * STEPS} steps" in demo["stderr"]
    assert re.search(rf"2 runs: \d+/{2 * STEPS} steps .* about \d+\.\d min left", demo["stderr"])
    assert "trained-on reward" not in demo["stdout"]
    assert (out / "reward_curves.png").read_bytes()[:4] == b"\x89PNG"
    # EBPO's first seed keeps its last checkpoint, the prior in it, for `verl-ebpo inspect`; DAPO's keeps none
    assert (out / "runs" / "ebpo" / "seed0" / "checkpoints" / f"global_step_{STEPS}" / "ebpo_prior.json").is_file()
    assert not (out / "runs" / "dapo" / "seed0" / "checkpoints").exists()
    assert f"verl-ebpo inspect {out / 'runs' / 'ebpo' / 'seed0' / 'checkpoints'}" in demo["stdout"]


@pytest.mark.slow  # two more launches; DAPO through the replay buffer: also test_recipes_smoke.py (dapo_diff)
def test_demo_gives_one_initial_model_and_dapo_filters_through_the_cpu_buffer(demo):
    out, summary = demo["out"], demo["summary"]
    # seed 0: the same initial model for every algorithm (greedy accuracy before training)
    before = {a: verl_logs.validation_accuracy(verl_logs.read_metrics(out / "runs" / a / "seed0" /
                                                                      "metrics.jsonl"))[0] for a in summary["algos"]}
    assert len(set(before.values())) == 1, before
    dropped_total = 0
    run = out / "runs" / "dapo" / "seed0"
    metrics = verl_logs.read_metrics(run / "metrics.jsonl")
    dumps = verl_logs.read_rollout_dumps(run / "rollouts")
    for step in range(1, STEPS + 1):
        m = metrics[step]
        groups = m.get(verl_logs.DAPO_EVICTED_GROUPS, 0) + m.get(verl_logs.DAPO_SURPLUS_GROUPS, 0)
        # verl's own eviction counts (in groups) and the buffer's tally of the answers it cleared agree
        assert m[verl_logs.DISCARDED_ANSWERS] == groups * GROUP_DEMO
        dropped_total += groups
        # verl's filter ran: no group trained on had all answers scoring the same
        assert all(max(v) > min(v) for v in verl_logs.group_scores(dumps[step]).values())
        assert len(dumps[step]) == 8 * GROUP_DEMO
    assert dropped_total > 0  # a random model: most groups all wrong at first
    m = verl_logs.read_metrics(out / "runs" / "ebpo" / "seed0" / "metrics.jsonl")
    assert all(m[s][verl_logs.DISCARDED_ANSWERS] == 0 for s in range(1, STEPS + 1))
    assert summary["algos"]["dapo"]["answers_generated"] > summary["algos"]["ebpo"]["answers_generated"] == STEPS * 8 * 4


@pytest.mark.slow  # two more launches; DAPO through the replay buffer: also test_recipes_smoke.py (dapo_diff)
def test_demo_writes_verl_ebpo_compare_over_the_same_runs(demo):
    """The demo = the runs + `verl-ebpo compare`: comparison.json from verl's metrics files, whose answer counts are
    the demo's, and whose finals are the means of verl's logged values."""
    out, summary = demo["out"], demo["summary"]
    doc = json.loads((out / "comparison.json").read_text())
    assert set(doc["algos"]) == {"dapo", "ebpo"} and set(doc["comparisons"]) == {"ebpo-dapo"}
    for algo, a in doc["algos"].items():
        assert a["seeds"] == ["0"] and a["steps"] == {"0": STEPS}
        answers = a["metrics"]["answers_generated"]["per_seed"]
        assert [answers["0"]] == summary["algos"][algo]["answers_generated_per_seed"]
        for seed in ("0",):
            metrics = verl_logs.read_metrics(out / "runs" / algo / f"seed{seed}" / "metrics.jsonl")
            logged = [metrics[s][verl_logs.SCORE] for s in range(1, STEPS + 1)]
            assert a["metrics"][verl_logs.SCORE]["per_seed"][seed] == pytest.approx(sum(logged) / STEPS)
            val = verl_logs.validation_accuracy(metrics)
            assert a["metrics"]["val-core/verl_ebpo/successor/acc/mean@1"]["per_seed"][seed] == pytest.approx(val[max(val)])
        assert summary["algos"][algo]["greedy_accuracy_mean"] == pytest.approx(
            a["metrics"]["val-core/verl_ebpo/successor/acc/mean@1"]["final_mean"])
    assert "no_signal_share" in doc["algos"]["ebpo"]["metrics"] and "no_signal_share" in doc["algos"]["dapo"]["metrics"]
    # DAPO's trained-on reward covers kept groups only: compare pairs the reward over all generated answers instead
    assert verl_logs.SCORE not in doc["comparisons"]["ebpo-dapo"]
    for algo in ("dapo", "ebpo"):
        assert doc["algos"][algo]["metrics"]["reward_all_answers"]["final_mean"] == pytest.approx(
            summary["algos"][algo]["final_reward_mean"])
    c = doc["comparisons"]["ebpo-dapo"]["reward_all_answers"]
    assert set(c) >= {"diff", "ci95", "n", "verdict"} and c["n"] == 1 and c["verdict"] in (out / "report.md").read_text()
    assert (out / "validation_accuracy.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "training_reward.png").exists()  # the demo's reward_curves.png is that view
