"""recipes/<model>/run_<algo>.sh: every script composes against verl's real config (Hydra `--cfg job` through
verl.trainer.main_ppo's own entry point) and passes verl's own pre-flight `validate_config`; a model's runs
differ only in their algorithm's keys; environment variables and extra arguments reach the config.

Each script is run in dry-run mode (bash only) to get its exact argv; the 18 `--cfg job` compositions then
run in this process (one verl import instead of 18), and one script is also run literally as
`bash ... --cfg job` in a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
MODELS = ("llama3_8b", "qwen3_8b", "qwen3_14b")
ALGOS = ("grpo", "drgrpo", "dapo", "ebpo", "ebpo_topic", "ebpo_diff")
MODEL_PATHS = {"llama3_8b": "meta-llama/Llama-3.1-8B-Instruct", "qwen3_8b": "Qwen/Qwen3-8B", "qwen3_14b": "Qwen/Qwen3-14B"}
# variables the recipes read: removed from the test environment so a developer's shell cannot leak in
RECIPE_VARS = (
    "MODEL_PATH MODEL_TAG DATA_DIR TRAIN_FILE VAL_FILES NNODES N_GPUS_PER_NODE GROUP_SIZE PROJECT_NAME "
    "EXPERIMENT_NAME BACKEND ORDER CKPTS_ROOT TOTAL_STEPS TOTAL_EPOCHS SAVE_FREQ TEST_FREQ KEEP_CKPTS VAL_N "
    "VAL_BEFORE_TRAIN LOGGER ROLLOUT_TP SP_SIZE MEGATRON_TP MEGATRON_PP GPU_MEM_UTIL OFFLOAD EBPO_PRIOR_SCOPE "
    "OVERLONG_BUFFER_LEN OVERLONG_PENALTY PYTHON RECIPE_DRY_RUN DIFFICULTY_MODEL DIFFICULTY_FIELD "
    "ACTOR_MAX_TOKENS_PER_GPU INFER_MAX_TOKENS_PER_GPU"
).split()


def script(model: str, algo: str) -> Path:
    return RECIPES / model / f"run_{algo}.sh"


def recipe_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in RECIPE_VARS}
    env["HOME"] = "/home/researcher"
    env.update(extra or {})
    return env


def dry_run(model: str, algo: str, env: dict | None = None, args: tuple = ()) -> list[str]:
    """The trainer argv after `python -m verl.trainer.main_ppo`."""
    out = subprocess.run(
        ["bash", str(script(model, algo)), *args],
        env=recipe_env({**(env or {}), "RECIPE_DRY_RUN": "1"}),
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    argv = out.stdout.splitlines()
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"], argv[:3]
    return argv[3:]


_main = None


def compose(argv: list[str]) -> dict:
    """verl's composed job config for `argv`, as `python -m verl.trainer.main_ppo --cfg job` prints it."""
    global _main
    if _main is None:
        import verl.trainer.main_ppo as main_ppo

        _main = main_ppo.main
    saved = sys.argv
    buf = io.StringIO()
    sys.argv = ["verl.trainer.main_ppo", *argv, "--cfg", "job"]
    try:
        with contextlib.redirect_stdout(buf):
            _main()
    finally:
        sys.argv = saved
    return yaml.safe_load(buf.getvalue())


def validate(cfg: dict) -> None:
    """verl's own pre-flight check, the first thing main_ppo.main does before starting Ray."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    conf = OmegaConf.create(cfg)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Disabled critic")  # expected: no critic for these estimators
        validate_config(conf, use_reference_policy=need_reference_policy(conf), use_critic=need_critic(conf))


def get(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def flatten(cfg, prefix=""):
    if isinstance(cfg, dict):
        out = {}
        for k, v in cfg.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: cfg}


@pytest.fixture(scope="module")
def configs() -> dict:
    """(model, algo) -> composed config, default environment."""
    return {(m, a): compose(dry_run(m, a)) for m in MODELS for a in ALGOS}


# ------------------------------------------------------------------------------------------------


def test_scripts_exist_executable_and_identical_across_models():
    for algo in ALGOS:
        texts = set()
        for model in MODELS:
            path = script(model, algo)
            assert path.is_file() and os.access(path, os.X_OK), path
            texts.add(path.read_text())
        # the scripts carry only algorithm keys; everything model-specific is in model.env
        assert len(texts) == 1, f"run_{algo}.sh differs between models"
    for model in MODELS:
        assert (RECIPES / model / "model.env").is_file()


# the keys each algorithm sets (the rest is shared): value expected in the composed config
ALGO_KEYS = {
    "grpo": {"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": True},
    "drgrpo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": False,
        "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
        "actor_rollout_ref.actor.loss_scale_factor": 8192,
    },
    "dapo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "acc",
        "reward.reward_manager.name": "dapo",
        "reward.reward_kwargs.max_resp_len": 8192,
        "reward.reward_kwargs.overlong_buffer_cfg.enable": True,
        "reward.reward_kwargs.overlong_buffer_cfg.len": 4096,
        "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,
        "reward.reward_kwargs.overlong_buffer_cfg.log": False,
    },
    "ebpo": {
        "algorithm.adv_estimator": "ebpo",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "algorithm.ebpo.prior_scope": "running",
        "trainer.checkpoint_callback_class": "verl_ebpo.EBPOCheckpointCallback",
    },
}
ALGO_KEYS["ebpo_topic"] = {
    **ALGO_KEYS["ebpo"],
    "data.shuffle": False,
    "data.custom_cls.path": "pkg://verl_ebpo.samplers.dataset",
    "data.custom_cls.name": "TopicOrderedDataset",
}
ALGO_KEYS["ebpo_diff"] = {
    **ALGO_KEYS["ebpo"],
    "data.shuffle": False,
    "data.custom_cls.path": "pkg://verl_ebpo.samplers.dataset",
    "data.custom_cls.name": "DifficultyOrderedDataset",
    "trainer.total_epochs": 1,
    "trainer.total_training_steps": None,
}


def algo_keys(model: str, algo: str) -> dict:
    keys = dict(ALGO_KEYS[algo])
    if algo == "ebpo_diff":  # each model is ordered by its own (base) model's pass rates
        keys["data.ordering.field"] = f"extra_info.difficulty_{model}"
    return keys


# keys that may differ from the GRPO run of the same model (beyond the algorithm's keys above)
RUN_IDENTITY = {"trainer.experiment_name", "trainer.default_local_dir"}


def paper_settings(model: str) -> dict:
    return {
        "actor_rollout_ref.model.path": MODEL_PATHS[model],
        "actor_rollout_ref.rollout.n": 4,
        "data.train_batch_size": 512,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 128,
        "data.max_prompt_length": 4096,
        "data.max_response_length": 8192,
        "actor_rollout_ref.actor.optim.lr": 1e-6,
        "actor_rollout_ref.actor.optim.weight_decay": 0.01,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.001,
        "algorithm.use_kl_in_reward": False,
        "actor_rollout_ref.actor.clip_ratio_low": 0.2,
        "actor_rollout_ref.actor.strategy": "fsdp2",
        "actor_rollout_ref.actor.fsdp_config.strategy": "fsdp2",
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.temperature": 1.0,
        "actor_rollout_ref.rollout.top_p": 1.0,
        "data.train_files": "/home/researcher/data/verl_ebpo/dapo_math_17k.parquet",
        "data.val_files": [f"/home/researcher/data/verl_ebpo/{b}.parquet"
                           for b in ("math500", "aime24", "aime25", "amc23", "olympiadbench")],
        "reward.custom_reward_function.path": "pkg://verl_ebpo.rewards",
        "reward.custom_reward_function.name": "compute_score",
        "trainer.nnodes": 4,
        "trainer.n_gpus_per_node": 8,
        "model_engine": "dp",
    }


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("algo", ALGOS)
def test_composed_config_has_paper_settings_and_algorithm_keys(configs, model, algo):
    cfg = configs[(model, algo)]
    flat = flatten(cfg)
    expected = {**paper_settings(model), **algo_keys(model, algo)}
    wrong = {k: (flat.get(k, "<missing>"), v) for k, v in expected.items() if flat.get(k, "<missing>") != v}
    assert not wrong, f"(got, expected): {wrong}"
    if algo != "drgrpo":
        assert flat["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    if algo != "dapo":
        assert flat["actor_rollout_ref.actor.clip_ratio_high"] == 0.2
        assert flat["reward.reward_manager.name"] == "naive"
        assert flat["algorithm.filter_groups.enable"] is False
    if algo in ("grpo", "drgrpo", "dapo", "ebpo"):
        assert flat["data.shuffle"] is True and flat["data.custom_cls.path"] is None
    assert flat["trainer.experiment_name"] == f"{model}-{algo}-g4"
    assert flat["trainer.default_local_dir"] == f"/home/researcher/ckpts/verl_ebpo/{model}-{algo}-g4"
    validate(cfg)


@pytest.mark.parametrize("model", MODELS)
def test_runs_of_a_model_differ_only_in_their_algorithm_keys(configs, model):
    base = flatten(configs[(model, "grpo")])
    for algo in ALGOS:
        flat = flatten(configs[(model, algo)])
        differing = {k for k in set(base) | set(flat) if base.get(k, "<missing>") != flat.get(k, "<missing>")}
        allowed = set(algo_keys(model, algo)) | RUN_IDENTITY
        assert differing <= allowed, f"run_{algo}.sh changes shared settings: {sorted(differing - allowed)}"


def test_models_differ_only_in_model_and_parallelism(configs):
    base = flatten(configs[("qwen3_8b", "ebpo")])
    allowed = RUN_IDENTITY | {
        "actor_rollout_ref.model.path",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
    }
    for model in ("llama3_8b", "qwen3_14b"):
        flat = flatten(configs[(model, "ebpo")])
        differing = {k for k in set(base) | set(flat) if base.get(k) != flat.get(k)}
        assert differing <= allowed, sorted(differing - allowed)


def test_environment_reaches_the_config():
    env = {
        "MODEL_PATH": "/models/q", "DATA_DIR": "/d", "NNODES": "1", "N_GPUS_PER_NODE": "2", "GROUP_SIZE": "8",
        "PROJECT_NAME": "proj", "EXPERIMENT_NAME": "exp1", "CKPTS_ROOT": "/ck", "LOGGER": "[console]",
    }
    cfg = flatten(compose(dry_run("qwen3_8b", "ebpo", env)))
    assert cfg["actor_rollout_ref.model.path"] == "/models/q"
    assert cfg["data.train_files"] == "/d/dapo_math_17k.parquet"
    assert cfg["data.val_files"][0] == "/d/math500.parquet"
    assert (cfg["trainer.nnodes"], cfg["trainer.n_gpus_per_node"]) == (1, 2)
    assert cfg["actor_rollout_ref.rollout.n"] == 8
    assert (cfg["trainer.project_name"], cfg["trainer.experiment_name"]) == ("proj", "exp1")
    assert cfg["trainer.default_local_dir"] == "/ck/proj/exp1"
    assert cfg["trainer.logger"] == ["console"]
    # G appears in the default experiment name, so runs with different G do not share checkpoints
    default = flatten(compose(dry_run("qwen3_8b", "grpo", {"GROUP_SIZE": "16"})))
    assert default["trainer.experiment_name"] == "qwen3_8b-grpo-g16"


@pytest.mark.parametrize("algo", ["dapo", "ebpo_topic"])
def test_megatron_backend(algo):
    env = {"BACKEND": "megatron", "NNODES": "1"}
    cfg = compose(dry_run("qwen3_14b", algo, env))
    flat = flatten(cfg)
    assert flat["model_engine"] == "megatron"
    assert flat["actor_rollout_ref.actor.strategy"] == "megatron"
    assert flat["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == 4
    assert flat["actor_rollout_ref.ref.megatron.tensor_model_parallel_size"] == 4
    assert "actor_rollout_ref.actor.fsdp_config.strategy" not in flat
    for k, v in algo_keys("qwen3_14b", algo).items():
        assert flat[k] == v, k
    validate(cfg)


def test_extra_arguments_are_forwarded_and_win():
    argv = dry_run("qwen3_14b", "ebpo", args=("trainer.total_training_steps=10", "actor_rollout_ref.actor.optim.lr=2e-6"))
    assert argv[-2:] == ["trainer.total_training_steps=10", "actor_rollout_ref.actor.optim.lr=2e-6"]
    flat = flatten(compose(argv))
    assert flat["trainer.total_training_steps"] == 10
    assert flat["actor_rollout_ref.actor.optim.lr"] == 2e-6


def test_hydra_flags_go_last_whatever_their_position():
    argv = dry_run("qwen3_8b", "ebpo", args=("--cfg", "job", "a.b=1", "--resolve", "--info", "defaults", "c=2"))
    assert argv[-7:] == ["a.b=1", "c=2", "--cfg", "job", "--resolve", "--info", "defaults"]


def test_ebpo_prior_scope_and_overlong_knobs():
    flat = flatten(compose(dry_run("llama3_8b", "ebpo", {"EBPO_PRIOR_SCOPE": "batch"})))
    assert flat["algorithm.ebpo.prior_scope"] == "batch"
    flat = flatten(compose(dry_run("llama3_8b", "dapo", {"OVERLONG_BUFFER_LEN": "1024", "OVERLONG_PENALTY": "0.5"})))
    assert flat["reward.reward_kwargs.overlong_buffer_cfg.len"] == 1024
    assert flat["reward.reward_kwargs.overlong_buffer_cfg.penalty_factor"] == 0.5


def test_grpo_diff_uses_the_same_order_keys_as_ebpo_diff():
    env = {"ORDER": "diff", "TOTAL_EPOCHS": "1", "TOTAL_STEPS": "null"}
    grpo = flatten(compose(dry_run("qwen3_8b", "grpo", env)))
    ebpo = flatten(compose(dry_run("qwen3_8b", "ebpo_diff")))
    for key in ("data.shuffle", "data.custom_cls.name", "data.ordering.field", "trainer.total_epochs",
                "trainer.total_training_steps", "data.train_files"):
        assert grpo[key] == ebpo[key], key
    assert ebpo["data.ordering.field"] == "extra_info.difficulty_qwen3_8b"
    assert grpo["trainer.experiment_name"] == "qwen3_8b-grpo-g4-diff"


def test_order_keys_equal_the_samplers_overrides():
    from verl_ebpo.samplers import overrides

    def order_args(algo, env=None):
        argv = dry_run("qwen3_8b", algo, env)
        return [a for a in argv if a.startswith(("data.shuffle=", "data.custom_cls.", "++data.ordering."))]

    assert order_args("ebpo") == overrides("random")
    assert order_args("ebpo_topic") == overrides("topic")
    assert order_args("ebpo_diff") == overrides("difficulty", field="extra_info.difficulty_qwen3_8b")


@pytest.mark.parametrize(
    "env, message",
    [
        ({"BACKEND": "deepspeed"}, "BACKEND must be fsdp or megatron"),
        ({"GROUP_SIZE": "1"}, "GROUP_SIZE must be an integer >= 2"),
        ({"GROUP_SIZE": "four"}, "GROUP_SIZE must be an integer >= 2"),
        ({"ORDER": "sorted"}, "ORDER must be random, topic or diff"),
        ({"NNODES": "0"}, "NNODES must be a positive integer"),
        ({"EBPO_PRIOR_SCOPE": "global"}, "EBPO_PRIOR_SCOPE must be running or batch"),
    ],
)
def test_bad_environment_fails_with_a_clear_message(env, message):
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], env=recipe_env({**env, "RECIPE_DRY_RUN": "1"}),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert message in out.stderr
    assert out.stdout == ""


def test_literal_cfg_job_on_cpu():
    """The documented command, as a user types it: prints the composed config and exits 0 (no GPU/model/data)."""
    out = subprocess.run(
        ["bash", str(script("qwen3_14b", "ebpo")), "--cfg", "job", "trainer.total_training_steps=10"],
        env=recipe_env({"HOME": os.environ.get("HOME", "/root")}), capture_output=True, text=True, timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    cfg = yaml.safe_load(out.stdout)
    assert cfg["algorithm"]["adv_estimator"] == "ebpo"
    assert cfg["trainer"]["total_training_steps"] == 10
    assert cfg["actor_rollout_ref"]["model"]["path"] == "Qwen/Qwen3-14B"


def _reward_of(cfg: dict, response_tokens: int, answer: str, truth: str = "7"):
    """Run verl's reward manager, as the composed config builds it, on one response of a given length."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    from verl_ebpo.cpu.assets import build_tokenizer

    conf = OmegaConf.create(cfg)
    tok = build_tokenizer()
    tail = f"\nanswer: {answer}"
    ids = tok("a" * (response_tokens - len(tail)) + tail, add_special_tokens=False).input_ids
    assert len(ids) == response_tokens
    max_len = conf.data.max_response_length
    prompt = tok("what is 3+4?", add_special_tokens=False).input_ids
    responses = torch.full((1, max_len), tok.pad_token_id)
    responses[0, : len(ids)] = torch.tensor(ids)
    mask = torch.zeros(1, len(prompt) + max_len, dtype=torch.long)
    mask[0, : len(prompt) + len(ids)] = 1
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt]), "responses": responses, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(["math_dapo"], dtype=object),
            "reward_model": np.array([{"ground_truth": truth}], dtype=object),
            "extra_info": np.array([{}], dtype=object),
        },
    )
    manager = resolve_reward_manager_cls(conf)(conf, tok, get_custom_reward_fn(conf))
    return manager.loop.run_until_complete(manager.run_single(data))


def test_same_verifier_for_all_and_dapo_adds_only_its_overlong_shaping(configs):
    from verl_ebpo.rewards import shutdown

    try:
        for algo in ("grpo", "drgrpo", "ebpo"):
            out = _reward_of(configs[("qwen3_8b", algo)], response_tokens=6144, answer="7")
            assert out["reward_score"] == 1.0 and out["reward_extra_info"]["acc"] is True
            assert _reward_of(configs[("qwen3_8b", algo)], 100, answer="8")["reward_score"] == 0.0
        dapo = configs[("qwen3_8b", "dapo")]
        short = _reward_of(dapo, response_tokens=4000, answer="7")
        assert short["reward_score"] == 1.0
        # 6144 tokens: 2048 into the 4096-token buffer before 8192 -> penalty 2048 / 4096 * 1.0
        long = _reward_of(dapo, response_tokens=6144, answer="7")
        assert long["reward_score"] == pytest.approx(0.5)
        wrong_long = _reward_of(dapo, response_tokens=8192, answer="8")
        assert wrong_long["reward_score"] == pytest.approx(-1.0)
        # dynamic sampling groups by algorithm.filter_groups.metric, read from the reward's extra info
        metric = dapo["algorithm"]["filter_groups"]["metric"]
        assert long["reward_extra_info"][metric] is True and wrong_long["reward_extra_info"][metric] is False
    finally:
        shutdown()
