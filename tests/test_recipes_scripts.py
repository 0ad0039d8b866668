"""recipes/<model>/run_<algo>.sh under PROTOCOL=paper and PROTOCOL=authors: every script composes against
verl's real config (Hydra `--cfg job` through verl.trainer.main_ppo's own entry point) and passes verl's own
pre-flight `validate_config`; the keys each protocol promises are in the composed config (the authors'
per-batch EBPO prior and 10-step checkpoints, their token-mean Dr.GRPO and un-normalised DAPO without the
keys their verl ignored; the paper's true Dr.GRPO; the curriculum runs on the -Base models, ordered by
difficulty, unshuffled, one epoch); a model's runs differ only in their algorithm's keys; environment
variables and extra arguments reach the config; `ray job submit` gets the exact arguments.

Each script is run in dry-run mode (bash only) to get its exact argv; the `--cfg job` compositions then
run in this process (one verl import for all), and one script is also run literally as
`bash ... --cfg job` in a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

# on the trainer launches' worker after them (`-n 2 --dist loadgroup`): the configs fixture (~1 min) is composed once
pytestmark = pytest.mark.xdist_group("trainer")
ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
MODELS = ("llama3_8b", "qwen3_8b", "qwen3_14b")
QWEN = ("qwen3_8b", "qwen3_14b")
PROTOCOLS = ("paper", "authors")
TABLE1_ALGOS = ("grpo", "drgrpo", "dapo", "ebpo", "ebpo_topic")
DIFF_ALGOS = ("grpo_diff", "drgrpo_diff", "dapo_diff", "ebpo_diff")
ALGOS = TABLE1_ALGOS + DIFF_ALGOS
# the run name's model part: the basename of the model actually used, lower-case
MODEL_NAMES = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b-instruct", "Qwen/Qwen3-8B": "qwen3-8b",
               "Qwen/Qwen3-14B": "qwen3-14b", "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
               "Qwen/Qwen3-8B-Base": "qwen3-8b-base", "Qwen/Qwen3-14B-Base": "qwen3-14b-base"}
METRICS_KEY = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
MODEL_PATHS = {"llama3_8b": "meta-llama/Llama-3.1-8B-Instruct", "qwen3_8b": "Qwen/Qwen3-8B", "qwen3_14b": "Qwen/Qwen3-14B"}
BASE_MODEL_PATHS = {"llama3_8b": "meta-llama/Llama-3.1-8B", "qwen3_8b": "Qwen/Qwen3-8B-Base",
                    "qwen3_14b": "Qwen/Qwen3-14B-Base"}
# the compositions (about 1.3 s each): every script under both protocols, except LLaMA under `authors`
# (the authors published no LLaMA scripts; two of its scripts show that the protocol applies there too)
COMPOSED = [(p, m, a) for p in PROTOCOLS for m in MODELS for a in ALGOS
            if p == "paper" or m != "llama3_8b" or a in ("drgrpo", "ebpo_diff")]
# variables the recipes read: removed from the test environment so a developer's shell cannot leak in
RECIPE_VARS = (
    "MODEL_PATH MODEL_TAG DATA_DIR TRAIN_FILE VAL_FILES NNODES N_GPUS_PER_NODE GROUP_SIZE PROJECT_NAME "
    "EXPERIMENT_NAME BACKEND ORDER CKPTS_ROOT TOTAL_STEPS TOTAL_EPOCHS SAVE_FREQ TEST_FREQ KEEP_CKPTS VAL_N "
    "VAL_BEFORE_TRAIN LOGGER ROLLOUT_TP SP_SIZE MEGATRON_TP MEGATRON_PP GPU_MEM_UTIL OFFLOAD EBPO_PRIOR_SCOPE "
    "OVERLONG_BUFFER_LEN OVERLONG_PENALTY PYTHON RECIPE_DRY_RUN DIFFICULTY_MODEL DIFFICULTY_FIELD "
    "ACTOR_MAX_TOKENS_PER_GPU INFER_MAX_TOKENS_PER_GPU PROTOCOL LAUNCH RAY_ADDRESS WORKING_DIR RUNTIME_ENV "
    "RAY_JOB_ARGS POSTTRAINED_MODEL_PATH BASE_MODEL_PATH SEED TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE LR "
    "MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH ROLLOUT PRESET SMOKE SMOKE_STEPS METRICS_FILE RECIPE_PYTHON ALGO_KEYS "
    "WEIGHT_DECAY KL_LOSS_COEF CLIP_RATIO SHARED_DIR GPU_MEMORY_GB FREE_DISK_GB SKIP_PREFLIGHT MEGATRON_CP CKPT_CONTENTS GPU_MEM_UTIL_80GB"
).split()
# the cluster the recipes were written for (4 nodes x 8 H200), declared: without these the recipes detect the cluster
# (nvidia-smi, Ray) and default to one node of unknown memory (tests/test_recipes_preflight.py tests that);
# recipe_env(extra) drops a key whose value is None
PAPER_CLUSTER = {"NNODES": "4", "N_GPUS_PER_NODE": "8", "GPU_MEMORY_GB": "141"}


def script(model: str, algo: str) -> Path:
    return RECIPES / model / f"run_{algo}.sh"


def recipe_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in RECIPE_VARS}
    env["HOME"] = "/home/researcher"
    if not (extra or {}).get("PRESET"):  # a preset sets its own cluster
        env.update(PAPER_CLUSTER)
    env.update(extra or {})
    return {k: v for k, v in env.items() if v is not None}


def dry_command(model: str, algo: str, env: dict | None = None, args: tuple = ()) -> list[str]:
    """The whole command line the script would run (RECIPE_DRY_RUN=1: one argument a line)."""
    out = subprocess.run(
        ["bash", str(script(model, algo)), *args],
        env=recipe_env({**(env or {}), "RECIPE_DRY_RUN": "1"}),
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def dry_run(model: str, algo: str, env: dict | None = None, args: tuple = ()) -> list[str]:
    """The trainer argv after `python -m verl.trainer.main_ppo` (behind `ray job submit ... --` or not)."""
    argv = dry_command(model, algo, env, args)
    i = argv.index("verl.trainer.main_ppo")
    assert argv[i - 1] == "-m", argv[: i + 1]
    return argv[i + 1:]


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
    from omegaconf import OmegaConf

    # resolved, as verl resolves it: keys that derive from another (${data.max_response_length}) show their value
    return OmegaConf.to_container(OmegaConf.create(yaml.safe_load(buf.getvalue())), resolve=True)


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
    """(protocol, model, algo) -> composed config, default environment."""
    return {(p, m, a): compose(dry_run(m, a, {"PROTOCOL": p})) for p, m, a in COMPOSED}


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
_PAPER = {
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
_AUTHORS = {
    "grpo": _PAPER["grpo"],
    # drgrpo_fsdp_math_17k_*.sh: std normalisation off, loss_agg_mode="token-mean"
    "drgrpo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": False,
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    },
    # dapo_fsdp_math_17k_*.sh: what their verl ran (no filtering, no overlong shaping: naive reward manager)
    "dapo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": False,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    },
    "ebpo": {**_PAPER["ebpo"], "algorithm.ebpo.prior_scope": "batch", "data.shuffle": False},
}
TOPIC = {"data.shuffle": False, "data.custom_cls.path": "pkg://verl_ebpo.samplers.dataset",
         "data.custom_cls.name": "TopicOrderedDataset"}


def algo_keys(protocol: str, model: str, algo: str) -> dict:
    table = _PAPER if protocol == "paper" else _AUTHORS
    base = algo.removesuffix("_diff").removesuffix("_topic")
    keys = dict(table[base])
    if algo == "ebpo_topic":
        keys.update(TOPIC)
    if protocol == "paper" and base == "dapo":  # DAPO's dropped groups logged by the replay buffer
        keys.update({"trainer.v1.sampler.custom_sampler.path": "pkg://verl_ebpo.samplers.replay",
                     "trainer.v1.sampler.custom_sampler.name": "TrackedReplayBuffer"})
    if algo.endswith("_diff"):  # the curriculum: the base model, ordered by its own pass rates, one epoch
        keys.update({
            "actor_rollout_ref.model.path": BASE_MODEL_PATHS[model],
            "data.shuffle": False,
            "data.custom_cls.path": "pkg://verl_ebpo.samplers.dataset",
            "data.custom_cls.name": "DifficultyOrderedDataset",
            "data.ordering.field": f"extra_info.difficulty_{model}",
            "trainer.total_epochs": 1,
            "trainer.total_training_steps": None,
            # one pass over the curriculum (the plugin's replay buffer, docs/ordering.md#one-pass)
            "trainer.v1.sampler.custom_sampler.path": "pkg://verl_ebpo.samplers.replay",
            "trainer.v1.sampler.custom_sampler.name": "TrackedReplayBuffer",
            "trainer.v1.sampler.sampler_kwargs.one_pass": True,
        })
    return keys


def differing_keys(base: dict, flat: dict) -> set:
    """Keys whose values differ (a missing key differs)."""
    return {k for k in set(base) | set(flat) if base.get(k, "<missing>") != flat.get(k, "<missing>")}


def schedule(protocol: str, algo: str) -> dict:
    """(total_epochs, total_training_steps, save_freq) of each run."""
    if protocol == "paper":
        epochs, steps, save = (1, None, 100) if algo.endswith("_diff") else (100, 1000, 100)
    elif algo.endswith("_diff"):
        epochs, steps, save = 1, None, 10  # *_sorted_*_base_multi_nodes.sh: total_epochs=1, save_freq=10
    elif algo.startswith("ebpo"):
        # ebpo_..._naive / _bertopic: total_epochs=20, save_freq=10; every step's weights kept, not its optimizer
        contents = ["model", "extra"]
        return {"trainer.total_epochs": 20, "trainer.total_training_steps": None, "trainer.save_freq": 10,
                "actor_rollout_ref.actor.checkpoint.save_contents": contents,
                "actor_rollout_ref.actor.checkpoint.load_contents": contents}
    else:
        epochs, steps, save = 6, None, 50  # _gen_random_scripts.py: total_epochs=6, save_freq=50
    return {"trainer.total_epochs": epochs, "trainer.total_training_steps": steps, "trainer.save_freq": save}


# keys that may differ from the GRPO run of the same model and protocol (beyond the algorithm's keys)
# (plus the keys verl's config copies from them by interpolation, visible in the resolved composition: the trace's
# experiment name and served model name, and the critic's loss aggregation, which mirrors the actor's: no critic runs here)
RUN_IDENTITY = {"trainer.experiment_name", "trainer.default_local_dir", METRICS_KEY,
                "actor_rollout_ref.rollout.trace.experiment_name", "critic.loss_agg_mode", "critic.loss_scale_factor",
                "actor_rollout_ref.rollout.prometheus.served_model_name"}


def shared_settings(protocol: str, model: str) -> dict:
    """The settings both protocols share (the paper's) and each protocol's own shared ones."""
    data = "/home/researcher/data/verl_ebpo" + ("" if protocol == "paper" else "_authors")
    out = {
        "actor_rollout_ref.rollout.n": 4,
        "data.train_batch_size": 512,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 128,
        "data.max_prompt_length": 4096,
        "data.max_response_length": 8192,
        "actor_rollout_ref.actor.optim.lr": 1e-6,
        "actor_rollout_ref.actor.optim.weight_decay": 0.01,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.001,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "algorithm.use_kl_in_reward": False,
        "actor_rollout_ref.actor.clip_ratio_low": 0.2,
        "actor_rollout_ref.actor.strategy": "fsdp2",
        "actor_rollout_ref.actor.fsdp_config.strategy": "fsdp2",
        "actor_rollout_ref.rollout.name": "vllm",
        "trainer.logger": ["console", "wandb", "file"],
        "actor_rollout_ref.rollout.temperature": 1.0,
        "actor_rollout_ref.rollout.top_p": 1.0,
        "data.train_files": f"{data}/dapo_math_17k.parquet",
        "reward.reward_manager.name": "naive",
        "trainer.nnodes": 4,
        "trainer.n_gpus_per_node": 8,
        "model_engine": "dp",
    }
    if protocol == "paper":
        out.update({
            "data.val_files": [f"{data}/dapo_math_holdout.parquet"],  # Maj@16 on a held-out split
            "actor_rollout_ref.rollout.val_kwargs.n": 16,
            "actor_rollout_ref.rollout.val_kwargs.temperature": 1.0,
            "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
            "data.seed": 42,
            "reward.custom_reward_function.path": "pkg://verl_ebpo.rewards",
            "reward.custom_reward_function.name": "compute_score",
            "trainer.test_freq": 50,
        })
    else:
        out.update({
            "data.val_files": [f"{data}/aime24.parquet"],  # their data.val_files=aime-2024.parquet
            "actor_rollout_ref.rollout.val_kwargs.n": 8,
            "actor_rollout_ref.rollout.val_kwargs.temperature": 0,
            "actor_rollout_ref.rollout.val_kwargs.do_sample": False,
            "data.seed": 1,
            # their verl's math_dapo; relative: the job runs in its copy of WORKING_DIR (this repository)
            "reward.custom_reward_function.path": "recipes/eval/authors_scorer.py",
            "reward.custom_reward_function.name": "compute_score",
            "trainer.test_freq": 5,
        })
    return out


@pytest.mark.parametrize("protocol, model, algo", COMPOSED)
def test_composed_config_has_the_protocols_settings_and_algorithm_keys(configs, protocol, model, algo):
    cfg = configs[(protocol, model, algo)]
    flat = flatten(cfg)
    expected = {
        "actor_rollout_ref.model.path": MODEL_PATHS[model],
        **shared_settings(protocol, model),
        **schedule(protocol, algo),
        **algo_keys(protocol, model, algo),
    }
    if protocol == "paper" and algo in ("dapo", "dapo_diff"):
        expected["reward.reward_manager.name"] = "dapo"
    wrong = {k: (flat.get(k, "<missing>"), v) for k, v in expected.items() if flat.get(k, "<missing>") != v}
    assert not wrong, f"(got, expected): {wrong}"
    if not (protocol == "paper" and algo.startswith("drgrpo")):
        assert flat["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
        assert flat["actor_rollout_ref.actor.loss_scale_factor"] is None
    if not algo.startswith("dapo"):
        assert flat["actor_rollout_ref.actor.clip_ratio_high"] == 0.2
    if not (protocol == "paper" and algo.startswith("dapo")):
        assert flat["reward.reward_manager.name"] == "naive"
        assert flat["algorithm.filter_groups.enable"] is False
        assert not any(k.startswith("reward.reward_kwargs.") for k in flat), "overlong keys outside paper DAPO"
    if algo in ("grpo", "drgrpo", "dapo") or (algo == "ebpo" and protocol == "paper"):
        assert flat["data.shuffle"] is True and flat["data.custom_cls.path"] is None
    suffix = "" if protocol == "paper" else "-authors"
    name = f"{MODEL_NAMES[flat['actor_rollout_ref.model.path']]}-{algo}-g4-s{flat['data.seed']}{suffix}"
    assert flat["trainer.experiment_name"] == name
    assert flat["trainer.default_local_dir"] == f"/home/researcher/ckpts/verl_ebpo/{name}"
    assert flat["actor_rollout_ref.rollout.seed"] == flat["data.seed"]
    # one metrics file per attempt, under the checkpoint folder
    assert re.fullmatch(rf"/home/researcher/ckpts/verl_ebpo/{re.escape(name)}/metrics/attempt-\d{{8}}T\d{{6}}Z-\d+\.jsonl",
                        flat[METRICS_KEY])
    validate(cfg)


# ---- each protocol's defining keys per algorithm, one named test each ----------------------------------


@pytest.mark.parametrize("model", QWEN)
def test_authors_ebpo_prior_is_the_batch_and_checkpoints_exist_every_10_steps(configs, model):
    for algo in ("ebpo", "ebpo_topic", "ebpo_diff"):
        flat = flatten(configs[("authors", model, algo)])
        assert flat["algorithm.adv_estimator"] == "ebpo"
        assert flat["algorithm.ebpo.prior_scope"] == "batch", algo
        # steps 300 (8B), 260 (14B), 200 (topic) and 34 (-diff) were evaluated: they must be saved
        assert flat["trainer.save_freq"] <= 10 and all(s % flat["trainer.save_freq"] == 0 for s in (300, 260, 200)), algo


def test_a_run_keeps_its_last_two_checkpoints_and_the_authors_ebpo_runs_all(configs):
    """10 full 8B checkpoints are ~983 GB: a run keeps 2 (verl's rotation), except the authors' EBPO runs, whose
    evaluated step is picked afterwards from every 10th step's weights."""
    for (protocol, model, algo), cfg in configs.items():
        all_kept = protocol == "authors" and algo in ("ebpo", "ebpo_topic")
        assert cfg["trainer"]["max_actor_ckpt_to_keep"] == (None if all_kept else 2), (protocol, model, algo)
    assert "trainer.max_actor_ckpt_to_keep=5" in dry_run("qwen3_8b", "ebpo", {"KEEP_CKPTS": "5", "PROTOCOL": "authors"})


@pytest.mark.parametrize("model", QWEN)
def test_authors_drgrpo_is_token_mean_without_std_normalisation(configs, model):
    for algo in ("drgrpo", "drgrpo_diff"):
        flat = flatten(configs[("authors", model, algo)])
        assert flat["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
        assert flat["algorithm.norm_adv_by_std_in_grpo"] is False
        assert flat["actor_rollout_ref.actor.loss_scale_factor"] is None


@pytest.mark.parametrize("model", QWEN)
def test_authors_dapo_has_no_std_normalisation_and_none_of_the_keys_their_verl_ignored(configs, model):
    for algo in ("dapo", "dapo_diff"):
        flat = flatten(configs[("authors", model, algo)])
        assert flat["algorithm.norm_adv_by_std_in_grpo"] is False
        assert flat["actor_rollout_ref.actor.clip_ratio_high"] == 0.28
        # verl 0.9.1 honours these; their verl did not read them, so `authors` must not pass them
        assert flat["algorithm.filter_groups.enable"] is False
        assert flat["reward.reward_manager.name"] == "naive"
        assert not any(k.startswith("reward.reward_kwargs.") for k in flat)
    argv = dry_run(model, "dapo", {"PROTOCOL": "authors"})
    assert not [a for a in argv if "filter_groups" in a or "overlong_buffer" in a or "reward_kwargs" in a], argv


@pytest.mark.parametrize("model", MODELS)
def test_paper_drgrpo_is_true_drgrpo(configs, model):
    for algo in ("drgrpo", "drgrpo_diff"):
        flat = flatten(configs[("paper", model, algo)])
        assert flat["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-sum-norm"
        assert flat["algorithm.norm_adv_by_std_in_grpo"] is False


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", QWEN)
def test_all_four_curriculum_runs_train_the_base_model_in_difficulty_order_for_one_epoch(configs, protocol, model):
    for algo in DIFF_ALGOS:
        flat = flatten(configs[(protocol, model, algo)])
        assert flat["actor_rollout_ref.model.path"].endswith("-Base"), algo
        assert flat["actor_rollout_ref.model.path"] == BASE_MODEL_PATHS[model]
        assert flat["data.custom_cls.name"] == "DifficultyOrderedDataset"
        assert flat["data.ordering.field"] == f"extra_info.difficulty_{model}"
        assert flat["data.shuffle"] is False
        assert (flat["trainer.total_epochs"], flat["trainer.total_training_steps"]) == (1, None)
        # one pass over the curriculum whatever the algorithm draws per step (docs/ordering.md#one-pass)
        assert flat["trainer.v1.sampler.custom_sampler.name"] == "TrackedReplayBuffer", algo
        assert flat["trainer.v1.sampler.sampler_kwargs.one_pass"] is True, algo
    # the four differ from one another only in their algorithm's keys
    base = flatten(configs[(protocol, model, "grpo_diff")])
    for algo in DIFF_ALGOS:
        flat = flatten(configs[(protocol, model, algo)])
        differing = differing_keys(base, flat)
        table = _PAPER if protocol == "paper" else _AUTHORS
        allowed = set(table[algo.removesuffix("_diff")]) | set(table["grpo"]) | RUN_IDENTITY
        assert differing <= allowed, (algo, sorted(differing - allowed))


@pytest.mark.parametrize("protocol", ["Paper", "author", "both", "paper "])
def test_an_unknown_protocol_fails_naming_the_choices(protocol):
    for model, algo in (("qwen3_8b", "ebpo"), ("qwen3_14b", "dapo_diff"), ("llama3_8b", "grpo")):
        out = subprocess.run(["bash", str(script(model, algo))],
                             env=recipe_env({"PROTOCOL": protocol, "RECIPE_DRY_RUN": "1"}),
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 2
        assert f"PROTOCOL must be paper or authors, got '{protocol}'" in out.stderr
        assert out.stdout == "" and out.stderr.count("\n") == 1


# ---- the rest: both protocols ------------------------------------------------------------------------


@pytest.mark.parametrize("protocol, model", sorted({(p, m) for p, m, a in COMPOSED if a == "grpo"}))
def test_runs_of_a_model_differ_only_in_their_algorithm_keys_and_schedule(configs, protocol, model):
    base = flatten(configs[(protocol, model, "grpo")])
    for algo in ALGOS:
        if (protocol, model, algo) not in configs:
            continue
        flat = flatten(configs[(protocol, model, algo)])
        differing = differing_keys(base, flat)
        allowed = set(algo_keys(protocol, model, algo)) | set(schedule(protocol, algo)) | RUN_IDENTITY
        if protocol == "paper" and algo.startswith("dapo"):
            allowed.add("reward.reward_manager.name")
        if protocol == "authors" and algo in ("ebpo", "ebpo_topic"):
            allowed.add("trainer.max_actor_ckpt_to_keep")  # every 10th step's weights kept (the evaluated one is picked after)
        assert differing <= allowed, f"run_{algo}.sh changes shared settings: {sorted(differing - allowed)}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_models_differ_only_in_model_and_parallelism(configs, protocol):
    base = flatten(configs[(protocol, "qwen3_8b", "ebpo")])
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
        if (protocol, model, "ebpo") not in configs:
            continue
        flat = flatten(configs[(protocol, model, "ebpo")])
        differing = {k for k in set(base) | set(flat) if base.get(k) != flat.get(k)}
        assert differing <= allowed, sorted(differing - allowed)


def test_environment_reaches_the_config(tmp_path):
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text("{}")
    env = {
        "MODEL_PATH": str(tmp_path / "q"), "DATA_DIR": "/d", "NNODES": "1", "N_GPUS_PER_NODE": "2", "GROUP_SIZE": "8",
        "PROJECT_NAME": "proj", "EXPERIMENT_NAME": "exp1", "CKPTS_ROOT": "/ck", "LOGGER": "[console]",
        "SAVE_FREQ": "7", "VAL_N": "2", "TOTAL_STEPS": "11",
    }
    cfg = flatten(compose(dry_run("qwen3_8b", "ebpo", env)))
    assert cfg["actor_rollout_ref.model.path"] == str(tmp_path / "q")
    assert cfg["data.train_files"] == "/d/dapo_math_17k.parquet"
    assert cfg["data.val_files"] == ["/d/dapo_math_holdout.parquet"]
    assert (cfg["trainer.nnodes"], cfg["trainer.n_gpus_per_node"]) == (1, 2)
    assert cfg["actor_rollout_ref.rollout.n"] == 8
    assert (cfg["trainer.project_name"], cfg["trainer.experiment_name"]) == ("proj", "exp1")
    assert cfg["trainer.default_local_dir"] == "/ck/proj/exp1"
    assert cfg["trainer.logger"] == ["console"]
    assert (cfg["trainer.save_freq"], cfg["actor_rollout_ref.rollout.val_kwargs.n"]) == (7, 2)
    assert cfg["trainer.total_training_steps"] == 11
    # G and the protocol appear in the default experiment name, so such runs do not share checkpoints
    default = flatten(compose(dry_run("qwen3_8b", "grpo", {"GROUP_SIZE": "16", "PROTOCOL": "authors"})))
    assert default["trainer.experiment_name"] == "qwen3-8b-grpo-g16-s1-authors"
    # an explicit MODEL_PATH wins over the curriculum's base model too
    assert dry_run("qwen3_14b", "grpo_diff", {"MODEL_PATH": "m/b"}).count("actor_rollout_ref.model.path=m/b") == 1


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
    for k, v in algo_keys("paper", "qwen3_14b", algo).items():
        assert flat[k] == v, k
    validate(cfg)


def test_extra_arguments_are_forwarded_and_win():
    argv = dry_run("qwen3_14b", "ebpo", args=("trainer.total_training_steps=10", "actor_rollout_ref.actor.optim.lr=2e-6"))
    assert argv[-2:] == ["trainer.total_training_steps=10", "actor_rollout_ref.actor.optim.lr=2e-6"]
    flat = flatten(compose(argv))
    assert flat["trainer.total_training_steps"] == 10
    assert flat["actor_rollout_ref.actor.optim.lr"] == 2e-6


def test_hydra_flags_go_last_whatever_their_position_and_run_here():
    cmd = dry_command("qwen3_8b", "ebpo", args=("--cfg", "job", "a.b=1", "--resolve", "--info", "defaults", "c=2"))
    assert cmd[-7:] == ["a.b=1", "c=2", "--cfg", "job", "--resolve", "--info", "defaults"]
    assert cmd[:3] == ["python3", "-m", "verl.trainer.main_ppo"]  # printing a config never submits a job


def test_ray_job_submit_is_the_default_launch_and_local_runs_here():
    cmd = dry_command("qwen3_8b", "ebpo", {"RAY_ADDRESS": "http://head:8265", "RAY_JOB_ARGS": "--no-wait"})
    sep = cmd.index("--")
    assert cmd[:sep] == ["ray", "job", "submit", "--address", "http://head:8265", "--runtime-env",
                         str(RECIPES / "runtime_env.yaml"), "--working-dir", str(ROOT), "--no-wait"]
    metrics = next(a for a in cmd if a.startswith("+" + METRICS_KEY)).split("=", 1)[1]
    assert cmd[sep + 1:sep + 8] == ["bash", "-c", 'mkdir -p "$(dirname "$0")" && exec "$@"', metrics,
                                    "python3", "-m", "verl.trainer.main_ppo"]
    local = dry_command("qwen3_8b", "ebpo", {"LAUNCH": "local", "PROTOCOL": "authors"})
    assert local[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    # run here, the authors' reward is reached by its absolute path; in a job, relative to the working dir
    assert f"reward.custom_reward_function.path={RECIPES}/eval/authors_scorer.py" in local


def test_ray_job_submit_gets_every_argument_intact(tmp_path):
    """A stand-in `ray` joins the entrypoint with shlex.join and runs it through /bin/sh, as `ray job submit`
    does (Ray 2.60: dashboard/modules/job/cli.py); the trainer (a stand-in python) must receive exactly the
    arguments of the dry run."""
    fake_ray = tmp_path / "ray"
    fake_ray.write_text(f"#!{sys.executable}\nimport os, shlex, sys\nargs = sys.argv[sys.argv.index('--') + 1:]\n"
                        "os.execv('/bin/sh', ['/bin/sh', '-c', shlex.join(args)])\n")
    fake_python = tmp_path / "fakepython"
    fake_python.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "$ARGS_OUT"\n')
    for f in (fake_ray, fake_python):
        f.chmod(0o755)
    dashboard = socket.create_server(("127.0.0.1", 0))  # something answers at RAY_ADDRESS: the job is submitted
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHON": str(fake_python),
           "RAY_ADDRESS": f"http://127.0.0.1:{dashboard.getsockname()[1]}",
           "ARGS_OUT": str(tmp_path / "args.txt"), "DATA_DIR": "/data dir/with space",
           "LOGGER": "[console,wandb]", "PROTOCOL": "authors", "CKPTS_ROOT": str(tmp_path / "ck"),
           "METRICS_FILE": str(tmp_path / "ck" / "m" / "attempt.jsonl"), "SKIP_PREFLIGHT": "1",
           "SHARED_DIR": str(tmp_path)}
    extra = ("trainer.experiment_name=it's $HOME", "+x.y=[a,b]")
    with dashboard:
        out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo")), *extra], env=recipe_env(env),
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    received = (tmp_path / "args.txt").read_text().splitlines()
    assert received[:2] == ["-m", "verl.trainer.main_ppo"]
    assert received[2:] == dry_run("qwen3_8b", "ebpo", env, extra)
    assert (tmp_path / "ck" / "m").is_dir()  # the job's entrypoint makes the metrics folder first
    assert "data.train_files=/data dir/with space/dapo_math_17k.parquet" in received
    assert received[-2:] == list(extra)


@pytest.mark.parametrize("skip_preflight", ["0", "1"])
def test_with_no_ray_cluster_to_submit_to_the_recipe_stops_in_one_line_naming_both_fixes(tmp_path, skip_preflight):
    """NNODES=1, LAUNCH=ray-job (the default) and nothing listening at RAY_ADDRESS: exit 2 and one line naming
    LAUNCH=local and `ray start --head`, before the preflight; `ray` (a stand-in that records a call) never runs."""
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]  # nothing listens here once closed
    called = tmp_path / "ray_called"
    for name in ("ray", "fakepython"):
        (tmp_path / name).write_text(f"#!/bin/sh\ntouch {called}\n")
        (tmp_path / name).chmod(0o755)
    env = recipe_env({"PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHON": str(tmp_path / "fakepython"),
                      "NNODES": "1", "RAY_ADDRESS": f"http://127.0.0.1:{port}", "SKIP_PREFLIGHT": skip_preflight,
                      "CKPTS_ROOT": str(tmp_path / "ck")})
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    assert f"no Ray cluster answers at http://127.0.0.1:{port}" in out.stderr
    assert "LAUNCH=local" in out.stderr and "`ray start --head`" in out.stderr and "Traceback" not in out.stderr
    assert not called.exists() and not (tmp_path / "ck").exists()


def test_runtime_env_is_a_valid_ray_runtime_env():
    from ray.runtime_env import RuntimeEnv

    spec = yaml.safe_load((RECIPES / "runtime_env.yaml").read_text())
    RuntimeEnv(**spec)  # Ray's own validation
    env = spec["env_vars"]
    assert env["VLLM_USE_V1"] == "1" and env["NCCL_DEBUG"] == "WARN"
    assert all(isinstance(v, str) for v in env.values())
    assert "working_dir" not in spec  # given by --working-dir (WORKING_DIR)


def test_grpo_diff_uses_the_same_order_keys_as_ebpo_diff():
    grpo = flatten(compose(dry_run("qwen3_8b", "grpo_diff")))
    ebpo = flatten(compose(dry_run("qwen3_8b", "ebpo_diff")))
    for key in ("data.shuffle", "data.custom_cls.name", "data.ordering.field", "trainer.total_epochs",
                "trainer.total_training_steps", "data.train_files", "actor_rollout_ref.model.path"):
        assert grpo[key] == ebpo[key], key
    assert ebpo["data.ordering.field"] == "extra_info.difficulty_qwen3_8b"
    assert grpo["trainer.experiment_name"] == "qwen3-8b-base-grpo_diff-g4-s42"
    # the older spelling still works: the post-trained model in difficulty order, named apart
    old = dry_run("qwen3_8b", "grpo", {"ORDER": "diff", "TOTAL_EPOCHS": "1", "TOTAL_STEPS": "null"})
    assert "trainer.experiment_name=qwen3-8b-grpo-g4-s42-diff" in old and "actor_rollout_ref.model.path=Qwen/Qwen3-8B" in old


def test_order_keys_are_the_documented_ones():
    def order_args(algo, env=None):
        argv = dry_run("qwen3_8b", algo, env)
        return [a for a in argv if a.startswith(("data.shuffle=", "data.custom_cls.", "++data.ordering."))]

    ordered = ["data.shuffle=False", "data.custom_cls.path=pkg://verl_ebpo.samplers.dataset"]  # docs/ordering.md
    assert order_args("ebpo") == ["data.shuffle=True"]
    assert order_args("ebpo_topic") == [*ordered, "data.custom_cls.name=TopicOrderedDataset"]
    for algo in DIFF_ALGOS:
        assert order_args(algo) == [*ordered, "data.custom_cls.name=DifficultyOrderedDataset",
                                    "++data.ordering.field=extra_info.difficulty_qwen3_8b"], algo
    # the authors' EBPO-naive: the file's own order (a SequentialSampler), no ordering class
    assert order_args("ebpo", {"PROTOCOL": "authors"}) == ["data.shuffle=False"]


@pytest.mark.parametrize(
    "env, message",
    [
        ({"BACKEND": "deepspeed"}, "BACKEND must be fsdp or megatron"),
        ({"GROUP_SIZE": "1"}, "GROUP_SIZE must be a decimal integer in [2, 1024]"),
        ({"GROUP_SIZE": "four"}, "GROUP_SIZE must be a decimal integer in [2, 1024]"),
        ({"ORDER": "sorted"}, "ORDER must be random, topic, diff or file"),
        ({"NNODES": "0"}, "NNODES must be a decimal integer in [1, 1024]"),
        ({"EBPO_PRIOR_SCOPE": "global"}, "EBPO_PRIOR_SCOPE must be running or batch"),
        ({"LAUNCH": "slurm"}, "LAUNCH must be ray-job or local"),
        ({"ROLLOUT": "trtllm"}, "ROLLOUT must be vllm or sglang, got 'trtllm'"),
        ({"SEED": "1.5"}, "SEED must be a non-negative integer, got '1.5'"),
        ({"SEED": "abc"}, "SEED must be a non-negative integer"),
        ({"MODEL_PATH": "Qwen3-8B"}, "MODEL_PATH must be an HF id (org/name) or a folder with config.json"),
        ({"MODEL_PATH": "/no/such/model"}, "MODEL_PATH must be an HF id (org/name) or a folder with config.json"),
        ({"MODEL_PATH": "/tmp"}, "MODEL_PATH '/tmp' is a folder without config.json"),
        ({"SMOKE": "gpu"}, "SMOKE must be cpu (or unset), got 'gpu'"),
        ({"SMOKE": "1"}, "SMOKE must be cpu (or unset)"),
        ({"PRESET": "big"}, "PRESET must be 1gpu or 1node"),
        ({"MAX_RESPONSE_LENGTH": "8k"}, "MAX_RESPONSE_LENGTH must be a decimal integer in [2, 1048576]"),
        ({"TRAIN_BATCH_SIZE": "0"}, "TRAIN_BATCH_SIZE must be a decimal integer in [1, 1000000]"),
        ({"LR": "fast"}, "LR must be a decimal number in (0, 1], got 'fast'"),
        # decimal numbers with ranges: no zero learning rate, no bash overflow, no octal
        ({"LR": "0"}, "LR must be a decimal number in (0, 1], got '0'"),
        ({"LR": "0.0"}, "LR must be a decimal number in (0, 1]"),
        ({"LR": "."}, "LR must be a decimal number in (0, 1]"),
        ({"LR": "1.2.3"}, "LR must be a decimal number in (0, 1]"),
        ({"LR": "1e-400"}, "LR must be a decimal number in (0, 1]"),
        ({"LR": "inf"}, "LR must be a decimal number in (0, 1]"),
        ({"GROUP_SIZE": "99999999999999999999"}, "GROUP_SIZE must be a decimal integer in [2, 1024]"),
        ({"TRAIN_BATCH_SIZE": "99999999999999999999"}, "TRAIN_BATCH_SIZE must be a decimal integer in [1, 1000000]"),
        ({"MAX_RESPONSE_LENGTH": "0100"}, "MAX_RESPONSE_LENGTH must be a decimal integer in [2, 1048576] (digits only, no leading zero), got '0100'"),
        ({"TRAIN_BATCH_SIZE": "08"}, "TRAIN_BATCH_SIZE must be a decimal integer in [1, 1000000]"),
        ({"GPU_MEM_UTIL": "1.5"}, "GPU_MEM_UTIL must be a decimal number in (0, 1]"),
        ({"SP_SIZE": "0"}, "SP_SIZE must be a decimal integer in [1, 64]"),
        ({"SKIP_PREFLIGHT": "yes"}, "SKIP_PREFLIGHT must be 1 (skip the preflight) or 0"),
    ],
)
def test_bad_environment_fails_with_a_clear_message(env, message):
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], env=recipe_env({**env, "RECIPE_DRY_RUN": "1"}),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2
    assert message in out.stderr
    assert out.stdout == "" and out.stderr.count("\n") == 1  # one line, nothing launched or printed


@pytest.mark.parametrize("value", ["true", "yes", "TRUE", "on", " 1", "2"])
def test_an_undocumented_dry_run_value_is_refused_and_launches_nothing(tmp_path, value):
    """RECIPE_DRY_RUN accepts 1, preflight and 0 only; anything else stops before anything runs (it never
    launches the real run). The trainer's interpreter is a stand-in that records a launch."""
    marker = tmp_path / "launched"
    fake = tmp_path / "python3"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    env = recipe_env({"RECIPE_DRY_RUN": value, "LAUNCH": "local", "PYTHON": str(fake), "SKIP_PREFLIGHT": "1",
                      "NNODES": "1", "CKPTS_ROOT": str(tmp_path / "ckpts")})
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert f"RECIPE_DRY_RUN must be 1 (print the command), preflight (print the preflight's command) or 0 (launch), " \
           f"got '{value}'" in out.stderr
    assert not marker.exists() and not (tmp_path / "ckpts").exists()


def test_literal_cfg_job_on_cpu():
    """The documented command, as a user types it: prints the composed config and exits 0 (no GPU/model/data,
    no Ray cluster: Hydra's flags never go through `ray job submit`)."""
    out = subprocess.run(
        ["bash", str(script("qwen3_14b", "ebpo_diff")), "--cfg", "job", "trainer.total_training_steps=10"],
        env=recipe_env({"HOME": os.environ.get("HOME", "/root"), "PROTOCOL": "authors",
                        "RAY_ADDRESS": "http://203.0.113.1:8265"}),
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    cfg = yaml.safe_load(out.stdout)
    assert cfg["algorithm"]["adv_estimator"] == "ebpo"
    assert cfg["algorithm"]["ebpo"]["prior_scope"] == "batch"
    assert cfg["trainer"]["total_training_steps"] == 10
    assert cfg["actor_rollout_ref"]["model"]["path"] == "Qwen/Qwen3-14B-Base"


def _reward_of(cfg: dict, response_tokens: int, answer: str, truth: str = "7", tail: str | None = None):
    """Run verl's reward manager, as the composed config builds it, on one response of a given length."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    from verl_ebpo.tools.tiny.assets import build_tokenizer

    conf = OmegaConf.create(cfg)
    tok = build_tokenizer()
    tail = f"\nanswer: {answer}" if tail is None else tail
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
        for algo in ("grpo", "drgrpo", "ebpo", "ebpo_diff"):
            out = _reward_of(configs[("paper", "qwen3_8b", algo)], response_tokens=6144, answer="7")
            assert out["reward_score"] == 1.0 and out["reward_extra_info"]["acc"] is True
            assert _reward_of(configs[("paper", "qwen3_8b", algo)], 100, answer="8")["reward_score"] == 0.0
        dapo = configs[("paper", "qwen3_8b", "dapo")]
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


def test_authors_reward_is_their_math_dapo_through_verls_reward_manager(configs, monkeypatch):
    """The authors' configs, built by verl's own reward loading: +1/-1 on the `Answer:` line, no length
    penalty (even for DAPO) and no \\boxed{} fallback (verl 0.9.1's math_dapo has one, their verl did not)."""
    monkeypatch.chdir(ROOT)  # the job's working directory: the reward path is relative to it
    for algo in ("grpo", "dapo", "ebpo", "ebpo_diff"):
        cfg = configs[("authors", "qwen3_8b", algo)]
        assert _reward_of(cfg, response_tokens=8000, answer="7")["reward_score"] == 1.0
        assert _reward_of(cfg, response_tokens=100, answer="8")["reward_score"] == -1.0
    cfg = configs[("authors", "qwen3_8b", "dapo")]
    out = _reward_of(cfg, response_tokens=50, answer="7", tail="\nso the result is \\boxed{7}")
    assert out["reward_score"] == -1.0 and out["reward_extra_info"]["pred"] == "[INVALID]"
