"""The recipes resized by variables: every script under both protocols with SEED=2,
MODEL_PATH=Qwen/Qwen3-0.6B, MAX_RESPONSE_LENGTH=2048, ROLLOUT=sglang (and BACKEND=megatron) composes and passes
verl's validate_config; derived keys follow MAX_RESPONSE_LENGTH whether set by variable or by a trailing override;
the seed and the model name the run and its folder; one metrics file per attempt; the presets; the algorithm keys
are the ones `verl_ebpo.tools.algorithms` writes, the same the demo and the CPU smoke use; `SMOKE=cpu` dry runs
swap only hardware keys. Compositions go through verl's real main_ppo (`--cfg job`), as in test_recipes_scripts.py.
"""

from __future__ import annotations

import re
import subprocess

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_recipes_scripts import (ALGOS, METRICS_KEY, PROTOCOLS, compose, dry_command, dry_run, flatten,
                                        recipe_env, script, validate)  # noqa: E402
from verl_ebpo.tools import algorithms  # noqa: E402

SMALL = {"SEED": "2", "MODEL_PATH": "Qwen/Qwen3-0.6B", "MAX_RESPONSE_LENGTH": "2048", "ROLLOUT": "sglang"}


def _algo(algo: str) -> str:
    return algo.removesuffix("_diff").removesuffix("_topic")


@pytest.mark.parametrize("backend", ["fsdp", pytest.param("megatron", marks=pytest.mark.slow)])  # megatron: test_recipes_scripts
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_recipe_resized_composes_and_passes_verls_checks(protocol, backend):
    for algo in ALGOS:
        cfg = compose(dry_run("qwen3_8b", algo, {**SMALL, "PROTOCOL": protocol, "BACKEND": backend}))
        flat = flatten(cfg)
        assert flat["actor_rollout_ref.model.path"] == "Qwen/Qwen3-0.6B"
        assert (flat["data.seed"], flat["actor_rollout_ref.rollout.seed"]) == (2, 2)
        assert flat["actor_rollout_ref.rollout.name"] == "sglang"
        assert flat["data.max_response_length"] == 2048
        assert flat["actor_rollout_ref.rollout.max_num_batched_tokens"] == 4096 + 2048
        assert flat["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == (4096 + 2048) * 2
        name = f"qwen3-0.6b-{algo}-g4-s2" + ("" if protocol == "paper" else "-authors")
        assert flat["trainer.experiment_name"] == name, algo
        assert flat["trainer.default_local_dir"] == f"/home/researcher/ckpts/verl_ebpo/{name}"
        assert flat["actor_rollout_ref.actor.strategy"] == ("fsdp2" if backend == "fsdp" else "megatron")
        if protocol == "paper" and _algo(algo) == "dapo":
            assert flat["reward.reward_kwargs.max_resp_len"] == 2048
            assert flat["reward.reward_kwargs.overlong_buffer_cfg.len"] == 1024
        if protocol == "paper" and _algo(algo) == "drgrpo":
            assert flat["actor_rollout_ref.actor.loss_scale_factor"] == 2048
        validate(cfg)


@pytest.mark.parametrize("how", ["variable", "trailing override"])
def test_derived_keys_follow_the_response_length(how):
    env, args = ({"MAX_RESPONSE_LENGTH": "2048"}, ()) if how == "variable" else ({}, ("data.max_response_length=2048",))
    dapo = flatten(compose(dry_run("qwen3_8b", "dapo", env, args)))
    assert dapo["data.max_response_length"] == 2048
    assert dapo["reward.reward_kwargs.max_resp_len"] == 2048
    assert 0 < dapo["reward.reward_kwargs.overlong_buffer_cfg.len"] < 2048  # so 2048-token answers are shaped
    assert dapo["actor_rollout_ref.rollout.max_num_batched_tokens"] == 4096 + 2048
    assert dapo["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"] == (4096 + 2048) * 4
    drgrpo = flatten(compose(dry_run("qwen3_8b", "drgrpo", env, args)))
    assert drgrpo["actor_rollout_ref.actor.loss_scale_factor"] == 2048
    # at the paper's scale: 8192 with a 4096 buffer
    paper = flatten(compose(dry_run("qwen3_8b", "dapo")))
    assert (paper["reward.reward_kwargs.max_resp_len"], paper["reward.reward_kwargs.overlong_buffer_cfg.len"]) == (8192, 4096)


def test_seed_and_model_name_the_run_by_variable_or_override():
    def name(env=None, args=()):
        argv = dry_run("qwen3_8b", "ebpo", env, args)
        return next(a.split("=", 1)[1] for a in argv if a.startswith("trainer.default_local_dir="))

    base = name()
    assert base.endswith("/qwen3-8b-ebpo-g4-s42")
    assert name({"SEED": "2"}).endswith("/qwen3-8b-ebpo-g4-s2")
    assert name(args=("data.seed=3",)).endswith("/qwen3-8b-ebpo-g4-s3")
    assert name({"MODEL_PATH": "Qwen/Qwen3-0.6B"}).endswith("/qwen3-0.6b-ebpo-g4-s42")
    assert name(args=("actor_rollout_ref.model.path=Qwen/Qwen3-1.7B",)).endswith("/qwen3-1.7b-ebpo-g4-s42")
    assert len({base, name({"SEED": "2"}), name({"MODEL_PATH": "Qwen/Qwen3-0.6B"})}) == 3


def test_one_metrics_file_per_attempt_under_the_checkpoint_folder():
    first, second = (next(a for a in dry_run("qwen3_8b", "ebpo") if a.startswith("+" + METRICS_KEY)) for _ in range(2))
    assert first != second  # a resume never opens (verl: "wb") the earlier attempt's file
    assert re.fullmatch(r"\+" + re.escape(METRICS_KEY) + r"=/home/researcher/ckpts/verl_ebpo/qwen3-8b-ebpo-g4-s42/"
                        r"metrics/attempt-\d{8}T\d{6}Z-\d+\.jsonl", first)
    cfg = flatten(compose(dry_run("qwen3_8b", "ebpo")))
    assert "file" in cfg["trainer.logger"]


@pytest.mark.parametrize("preset, gpus, model", [("1gpu", 1, "Qwen/Qwen3-0.6B"), ("1node", 8, "Qwen/Qwen3-1.7B")])
def test_presets_compose_and_pass_verls_checks(preset, gpus, model):
    for algo in ("grpo", "dapo", "ebpo", "ebpo_diff"):
        flat_cfg = compose(dry_run("qwen3_8b", algo, {"PRESET": preset, "SEED": "1"}))
        flat = flatten(flat_cfg)
        assert (flat["trainer.nnodes"], flat["trainer.n_gpus_per_node"]) == (1, gpus)
        assert flat["actor_rollout_ref.model.path"] == model + ("-Base" if algo.endswith("_diff") else "")
        assert flat["data.train_batch_size"] % flat["actor_rollout_ref.actor.ppo_mini_batch_size"] == 0
        if algo.endswith("_diff"):
            assert (flat["trainer.total_epochs"], flat["trainer.total_training_steps"]) == (1, None)
        else:
            assert flat["trainer.total_training_steps"] <= 300
        validate(flat_cfg)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_recipes_run_the_keys_of_the_one_algorithm_definition(protocol):
    for algo in ALGOS:
        argv = dry_run("qwen3_8b", algo, {"PROTOCOL": protocol, "MAX_RESPONSE_LENGTH": "4"})
        keys = algorithms.overrides(_algo(algo), protocol, max_response_length=4)
        i = argv.index(keys[0])
        assert argv[i:i + len(keys)] == keys, algo


def test_the_demo_compares_what_the_recipes_run():
    from verl_ebpo.tools.demo.options import ALGORITHMS, DemoOptions

    from verl_ebpo.tools.cpu.deterministic import DETERMINISTIC_OVERRIDES

    options = DemoOptions()
    n = len(DETERMINISTIC_OVERRIDES)
    for algo in ALGORITHMS:
        # the demo's keys are the recipe's, plus the deterministic replay buffer (a CPU demo's choice, not a
        # recipe's: docs/ordering.md#deterministic)
        demo = options.overrides(algo)
        assert tuple(demo[-n:]) == DETERMINISTIC_OVERRIDES, algo
        argv = dry_run("qwen3_8b", algo, {"MAX_RESPONSE_LENGTH": str(options.max_response_length), "OVERLONG_PENALTY": "0"})
        assert not set(DETERMINISTIC_OVERRIDES) & set(argv), algo
        recipe_keys = argv[argv.index(demo[0]):][:len(demo) - n]
        assert recipe_keys == demo[:-n], algo
    assert "actor_rollout_ref.actor.loss_scale_factor=${data.max_response_length}" in options.overrides("drgrpo")


def test_algorithm_definition_refuses_bad_values_in_one_line():
    with pytest.raises(ValueError, match="overlong buffer"):
        algorithms.overrides("dapo", max_response_length=100, overlong_buffer_len=100)
    with pytest.raises(ValueError, match="unknown algorithm"):
        algorithms.overrides("ppo")
    out = subprocess.run(["python3", "-m", "verl_ebpo.tools.algorithms", "dapo", "--max-response-length", "1"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "max_response_length must be >= 2" in out.stderr


SWAPPED = {"actor_rollout_ref.rollout.name": "hf", "trainer.device": "cpu", "trainer.n_gpus_per_node": 1,
           "trainer.nnodes": 1, "data.train_batch_size": 8, "data.max_response_length": 8}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("algo", ["dapo", "ebpo_topic", "drgrpo_diff"])
def test_smoke_swaps_only_hardware_keys(tmp_path, protocol, algo):
    env = {"PROTOCOL": protocol, "CKPTS_ROOT": str(tmp_path), "BACKEND": "megatron"}
    real = flatten(compose(dry_run("qwen3_8b", algo, env)))
    smoke_cfg = compose(dry_run("qwen3_8b", algo, {**env, "SMOKE": "cpu"}))
    smoke = flatten(smoke_cfg)
    for key, value in SWAPPED.items():
        assert smoke[key] == value, key
    assert (smoke["actor_rollout_ref.actor.strategy"], smoke["model_engine"]) == ("fsdp2", "dp")  # megatron swapped
    # what makes the algorithm, its reward manager, data order, checkpoint callback, KL and protocol stay
    kept = [k for k in real if k.startswith(("algorithm.", "data.custom_cls", "data.ordering", "data.shuffle",
                                             "reward.reward_manager", "trainer.checkpoint_callback_class"))
            or k in ("actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.actor.kl_loss_coef",
                     "actor_rollout_ref.actor.loss_agg_mode", "actor_rollout_ref.actor.clip_ratio_high",
                     "actor_rollout_ref.rollout.n", "data.seed", "trainer.total_epochs", "trainer.resume_mode")]
    for key in kept:
        if key in ("actor_rollout_ref.actor.loss_scale_factor", "reward.reward_kwargs.max_resp_len",
                   "reward.reward_kwargs.overlong_buffer_cfg.len"):
            continue  # sizes: follow the tiny response length
        assert smoke.get(key) == real[key], key
    assert smoke["trainer.default_local_dir"].startswith(str(tmp_path))
    assert "smoke_cpu-qwen3_8b" in smoke["trainer.experiment_name"]
    if protocol == "paper" and algo == "dapo":
        assert smoke["reward.reward_kwargs.max_resp_len"] == 8  # the interpolation follows the swapped length
        assert smoke["reward.reward_kwargs.overlong_buffer_cfg.len"] == 4  # and the buffer with it (< 8)


def test_smoke_dry_run_prints_the_swapped_command_and_launches_nothing(tmp_path):
    cmd = dry_command("qwen3_8b", "ebpo", {"SMOKE": "cpu", "CKPTS_ROOT": str(tmp_path)})
    assert cmd[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert "actor_rollout_ref.rollout.name=hf" in cmd
    assert "trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback" in cmd
    assert not list(tmp_path.iterdir())  # no assets, no folders: nothing ran


@pytest.mark.parametrize("env, message", [
    ({"SMOKE": "cpu", "SEED": "x"}, "SEED must be a non-negative integer"),
    ({"SMOKE": "yes"}, "SMOKE must be cpu (or unset), got 'yes'"),
])
def test_bad_smoke_input_fails_before_anything(tmp_path, env, message):
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], capture_output=True, text=True, timeout=600,
                         env=recipe_env({**env, "CKPTS_ROOT": str(tmp_path)}))
    assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1
    assert not list(tmp_path.iterdir())
