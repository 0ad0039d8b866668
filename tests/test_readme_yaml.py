"""EBPO's keys in a verl YAML config (recipes/config/ebpo.yaml, shown in the README) compose through verl's own
entry point with `--config-path/--config-name` and pass verl's `validate_config`, as overrides do."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "recipes" / "config"


def _compose(*overrides: str):
    from test_readme import _composed_config  # verl's own entry point's `--cfg job`

    return _composed_config(["-m", "verl.trainer.main_ppo", f"--config-path={CONFIG_DIR}", "--config-name=ebpo",
                             *overrides])


def test_the_yaml_config_composes_and_passes_verls_checks():
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    cfg = _compose("trainer.n_gpus_per_node=8", "data.train_batch_size=64", "actor_rollout_ref.rollout.n=4",
                   "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                   "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                   "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                   "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4")
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Disabled critic")
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert cfg.algorithm.adv_estimator == "ebpo"
    assert cfg.algorithm.ebpo.prior_scope == "running"
    assert cfg.trainer.checkpoint_callback_class == "verl_ebpo.EBPOCheckpointCallback"
    # everything else is verl's own default config, untouched
    assert cfg.actor_rollout_ref.rollout.n == 4 and cfg.trainer.n_gpus_per_node == 8


def test_overrides_still_win_over_the_yaml():
    """The file creates the `ebpo` node, so its keys are overridden without verl's `+`."""
    cfg = _compose("algorithm.ebpo.prior_scope=batch", "algorithm.adv_estimator=grpo")
    assert cfg.algorithm.ebpo.prior_scope == "batch" and cfg.algorithm.adv_estimator == "grpo"
