"""EBPO through verl's real pieces: plugin registration, compute_advantage with DataProto + Hydra config,
agreement with verl's own estimators where the math says they must agree, and metrics in verl's logger."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

import verl
from verl import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl_ebpo.advantage import EBPOPrior, get_prior, reset_prior
from verl_ebpo.advantage import core
from verl_ebpo.advantage import verl_glue


@pytest.fixture(scope="module")
def compose():
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")

    def _compose(*overrides):
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return hydra_compose("ppo_trainer", overrides=list(overrides))

    return _compose


@pytest.fixture(autouse=True)
def fresh_prior():
    reset_prior()
    verl_glue.drain_metrics()
    yield
    reset_prior()
    verl_glue.drain_metrics()


def make_data(scores_per_group, T=5, pad_rows=0, seed=0):
    """A verl DataProto with right-padded responses of random lengths and the score on the last token."""
    gen = torch.Generator().manual_seed(seed)
    rows = [(f"uid-{g}", s) for g, group in enumerate(scores_per_group) for s in group]
    n = len(rows) + pad_rows
    mask = torch.zeros(n, T, dtype=torch.int64)
    tlr = torch.zeros(n, T, dtype=torch.float32)
    for i, (_, s) in enumerate(rows):
        length = int(torch.randint(1, T + 1, (1,), generator=gen))
        mask[i, :length] = 1
        tlr[i, length - 1] = s
    uids = np.array([u for u, _ in rows] + [f"pad_{k}" for k in range(pad_rows)], dtype=object)
    return DataProto.from_dict(
        tensors={"token_level_rewards": tlr, "response_mask": mask}, non_tensors={"uid": uids}
    )


def test_registered_through_import_verl_alone_in_fresh_process():
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "fn = get_adv_estimator_fn('ebpo')\n"
        "print(fn.__module__ + '.' + fn.__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("verl_ebpo.advantage.verl_glue.compute_ebpo_outcome_advantage")


def test_registry_returns_our_function():
    assert get_adv_estimator_fn("ebpo") is verl_glue.compute_ebpo_outcome_advantage


def test_compute_advantage_with_hydra_config_and_padding(compose):
    cfg = compose("algorithm.adv_estimator=ebpo", "+algorithm.ebpo.normalize=none")
    data = make_data([[1, 0, 0, 0], [0, 0, 0, 0]], pad_rows=2)
    out = compute_advantage(data, adv_estimator=cfg.algorithm.adv_estimator, config=cfg.algorithm)
    adv = out.batch["advantages"]
    mask = out.batch["response_mask"].bool()
    assert torch.equal(out.batch["returns"], adv)
    assert torch.count_nonzero(adv[~mask]) == 0 and torch.count_nonzero(adv[8:]) == 0
    per_row = (adv * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    # hand-computed in test_estimator: S = 7/11, V_A = 15/88, V_B = 7/88
    expected = torch.tensor([1 - 15 / 88] + [-15 / 88] * 3 + [-7 / 88] * 4 + [0, 0])
    torch.testing.assert_close(per_row, expected, rtol=0, atol=1e-6)
    assert get_prior().reward.weight == 8  # padding rows touched no statistic
    metrics = verl_glue.drain_metrics()
    assert metrics["ebpo/padding_rows"] == 2.0 and metrics["ebpo/shrinkage_mean"] == pytest.approx(7 / 11)


def test_v1_trainer_path_matches_direct_call(compose):
    """The V1 trainer goes through compute_advantage_for_multi_trajectories; it must hand ebpo the batch as is."""
    cfg = compose("algorithm.adv_estimator=ebpo")
    data = make_data([[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 0]], seed=3)
    keys = [f"{u}_0_0" for u in data.non_tensor_batch["uid"]]
    v1 = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator="ebpo", num_repeat=4, config=cfg.algorithm
    ).batch["advantages"]
    direct, _ = ebpo_math_reference(data)
    torch.testing.assert_close(v1, direct)


def ebpo_math_reference(data):
    tlr, mask = data.batch["token_level_rewards"], data.batch["response_mask"]
    return verl_glue.compute_ebpo_outcome_advantage(tlr, mask, data.non_tensor_batch["uid"], config=None)


def test_errors_surface_through_verl(compose):
    cfg = compose("algorithm.adv_estimator=ebpo", "+algorithm.ebpo.prior_scope=everything")
    with pytest.raises(ValueError, match="ebpo.prior_scope must be one of"):
        compute_advantage(make_data([[1, 0]]), adv_estimator="ebpo", config=cfg.algorithm)
    data = make_data([[1, 0]])
    data.non_tensor_batch.pop("uid")
    with pytest.raises(ValueError, match="needs `index`"):
        compute_advantage(data, adv_estimator="ebpo", config=compose().algorithm)


def test_dr_grpo_setting_selects_center(compose):
    cfg = compose("algorithm.adv_estimator=ebpo", "algorithm.norm_adv_by_std_in_grpo=false")
    data = make_data([[1, 0, 0, 0], [0, 0, 0, 0]])
    adv = compute_advantage(data, adv_estimator="ebpo", config=cfg.algorithm).batch["advantages"]
    mask = data.batch["response_mask"].bool()
    per_row = (adv * mask).sum(-1) / mask.sum(-1)
    raw = torch.tensor([1 - 15 / 88] + [-15 / 88] * 3 + [-7 / 88] * 4)
    torch.testing.assert_close(per_row, raw - raw.mean(), rtol=0, atol=1e-6)


def scalar_advantage(scores, valid, uid, mu_glob, sigma2, tau2):
    """EBPO's raw advantage (normalize=none) under given prior statistics, from the pure math (core)."""
    codes, uniques = pd.factorize(np.asarray(uid))
    gid = torch.from_numpy(codes.astype(np.int64))
    count, mean, _ = core.group_stats(scores, valid, gid, len(uniques))
    s = core.shrinkage(count, sigma2, tau2, 1e-6)
    return core.normalize_advantage(scores - ((1 - s) * mean + s * mu_glob)[gid], valid, "none", 1e-6), s


@pytest.mark.parametrize("seed", range(5))
def test_zero_shrinkage_equals_verl_dr_grpo(seed):
    """With S = 0 (sigma2 = 0, tau2 > 0) the baseline is the group mean: EBPO's raw advantage must equal
    verl's GRPO without std scaling (Dr.GRPO), row for row."""
    rng = np.random.default_rng(seed)
    groups = [list(rng.integers(0, 2, size=rng.integers(2, 6)).astype(float)) for _ in range(6)]
    data = make_data(groups, seed=seed)
    tlr, mask, uid = data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"]
    scores = (tlr * mask).sum(-1).double()
    valid = mask.any(-1)
    adv, s = scalar_advantage(scores, valid, uid, 0.3, sigma2=0.0, tau2=1.0)
    assert torch.count_nonzero(s) == 0
    grpo, _ = compute_grpo_outcome_advantage(tlr, mask, uid, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close((adv.float()[:, None] * mask), grpo, rtol=0, atol=1e-6)


def test_full_shrinkage_to_zero_prior_equals_verl_reinforce_baseline_free():
    """With S = 1 and mu_glob = 0 the baseline vanishes: raw advantage = score, i.e. verl's REINFORCE++
    returns before whitening (checked through verl's own estimator with gamma=1 on outcome rewards)."""
    from verl.trainer.ppo.core_algos import compute_reinforce_plus_plus_outcome_advantage

    data = make_data([[1, 0, 1], [0, 0, 1]], seed=7)
    tlr, mask, uid = data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"]
    scores = (tlr * mask).sum(-1).double()
    valid = mask.any(-1)
    adv, s = scalar_advantage(scores, valid, uid, 0.0, sigma2=1.0, tau2=0.0)
    assert torch.all(s == 1)
    _, returns = compute_reinforce_plus_plus_outcome_advantage(tlr, mask, config=OmegaConf.create({"gamma": 1.0}))
    first_token_return = returns[:, 0]  # discounted-to-go sum with gamma = 1 = the row's score
    torch.testing.assert_close(adv.float(), first_token_return, rtol=0, atol=1e-6)


def test_metrics_reach_verls_tracking_logger(tmp_path, monkeypatch):
    from verl.utils.tracking import Tracking

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "metrics.jsonl"))
    tracking = Tracking(project_name="p", experiment_name="e", default_backend=["file"])
    tracking.log({"critic/score/mean": 0.5}, step=1)  # before any ebpo call: nothing added
    verl_glue.compute_ebpo_outcome_advantage(*ebpo_inputs(), config=None)
    verl_glue.compute_ebpo_outcome_advantage(*ebpo_inputs(pad=3), config=None)
    tracking.log({"critic/score/mean": 0.25}, step=2)
    tracking.log({"critic/score/mean": 0.0}, step=3)  # drained: nothing more to add
    tracking.finish()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [sorted(k for k in ln["data"] if k.startswith("ebpo/")) for ln in lines][0] == []
    step2 = lines[1]["data"]
    assert step2["critic/score/mean"] == 0.25
    assert step2["ebpo/padding_rows"] == 3.0  # counts are summed over the two calls
    assert step2["ebpo/prior_weight"] == 16.0  # prior statistics are the latest call's
    assert {"ebpo/prior_mean", "ebpo/sigma2", "ebpo/tau2", "ebpo/shrinkage_mean", "ebpo/shrinkage_min",
            "ebpo/shrinkage_max", "ebpo/equal_reward_group_frac", "ebpo/zero_adv_frac",
            "ebpo/skipped_rows"} <= set(step2)
    assert not any(k.startswith("ebpo/") for k in lines[2]["data"])


def ebpo_inputs(pad=0):
    data = make_data([[1, 0, 0, 0], [0, 1, 1, 1]], pad_rows=pad)
    return data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"]


def test_wrapped_verl_api_still_exists():
    """We wrap verl.utils.tracking.Tracking.log(self, data, step, backend=None) for metrics: pin its shape."""
    import inspect

    from verl.utils.tracking import Tracking

    params = list(inspect.signature(Tracking.log).parameters)
    assert params[:3] == ["self", "data", "step"]
    assert getattr(Tracking.log, "_ebpo_wrapped", False) or verl_glue.install_metrics_hook()
    assert Tracking.log._ebpo_wrapped


def test_prior_object_reachable_and_resettable():
    verl_glue.compute_ebpo_outcome_advantage(*ebpo_inputs(), config=None)
    prior = get_prior()
    assert prior is get_prior() and prior.reward.weight == 8
    saved = prior.state_dict()
    reset_prior()
    assert get_prior().reward.weight == 0 and get_prior() is prior
    restored = EBPOPrior()
    restored.load_state_dict(json.loads(json.dumps(saved)))
    assert restored.state_dict() == saved
