"""Launch verl's real trainer (`python -m verl.trainer.main_ppo`, V1) on a CPU-only machine.

`CPURun` holds what a small CPU job needs (model, data, batch, steps, ...) and turns it into the Hydra
overrides (`overrides()`) and environment (`cpu_env()`) that make stock verl 0.9.1 run on CPUs;
`run_main_ppo` starts the trainer as a subprocess, streams its output to a log file, and on failure
raises `TrainerFailed` with the tail of the output and of Ray's worker error logs (verl's agent-loop
and reward workers die without a traceback in the driver).

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
- `trainer.v1.sampler.custom_sampler` = `verl_ebpo.tools.cpu.replay.CPUReplayBuffer` (polls for finished
  rollouts every 0.2 s instead of 2 s: a CPU step of 32 answers drops from ~2.3 s to ~0.9 s), with
  `sampler_kwargs.verl.*` linked to the config nodes DAPO's group filtering is derived from.
Several runs, one after the other, can share one Ray cluster: `with shared_ray_cluster() as address:
CPURun(..., ray_address=address)`.
Environment: `VERL_USE_EXTERNAL_MODULES=verl_ebpo.tools.cpu.backend` (imported by verl in every process; registers
the platform and rollout), `VERL_PLATFORM=cpu`, `VERL_ENGINE_DEVICE=cuda` (verl's FSDP engine is
registered for cuda/npu only and runs unchanged on CPU tensors).
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

CPU_MODULE = "verl_ebpo.tools.cpu.backend"
SHARED_RAY_PREFIX = "verl_ebpo_ray_"  # temp dir of a `shared_ray_cluster`
RAY_LOG_GLOBS = (
    "/tmp/ray/session_latest/logs/worker-*.err",
    os.path.join(os.environ.get("TMPDIR", "/tmp"), SHARED_RAY_PREFIX + "*", "session_latest", "logs", "worker-*.err"),
)


class TrainerFailed(RuntimeError):
    """verl's trainer exited with an error (message: exit code, output tail, Ray worker errors)."""

    def __init__(self, message: str, returncode: Optional[int] = None, log_file: Optional[Path] = None):
        super().__init__(message)
        self.returncode = returncode
        self.log_file = log_file


def cpu_env(base: Optional[dict] = None, metrics_file: Optional[os.PathLike] = None) -> dict:
    """Environment for a CPU run of verl (a copy of `base`, default `os.environ`, plus our variables)."""
    env = dict(os.environ if base is None else base)
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if CPU_MODULE not in modules:
        modules.append(CPU_MODULE)
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join(modules)
    env["VERL_PLATFORM"] = "cpu"
    env["VERL_ENGINE_DEVICE"] = "cuda"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HYDRA_FULL_ERROR", "1")
    env.setdefault("RAY_DEDUP_LOGS", "0")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.setdefault("PYTHONUNBUFFERED", "1")
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


# sampler_kwargs.verl.<name> -> the verl config node it links to (a Hydra interpolation, resolved by verl's
# TaskRunner before the trainer builds its replay buffer); read by `verl_ebpo.tools.cpu.replay.filter_arguments`.
VERL_CONFIG_LINKS = {
    "filter_groups": "algorithm.filter_groups",
    "train_batch_size": "data.train_batch_size",
    "gen_batch_size": "data.gen_batch_size",
    "sync_refill_failed_groups": "trainer.v1.sampler.sync_refill_failed_groups",
    "reward_model_enable": "reward.reward_model.enable",
    "reward_model_enable_resource_pool": "reward.reward_model.enable_resource_pool",
}


def sampler_link_overrides() -> list[str]:
    """Hydra overrides that hand `CPUReplayBuffer` the config nodes verl derives its buffer's DAPO arguments
    from (`verl_ebpo.tools.cpu.replay.VERL_CONFIG_LINKS`), as interpolations verl resolves before building it."""
    return [f"+trainer.v1.sampler.sampler_kwargs.verl.{name}=${{{node}}}" for name, node in VERL_CONFIG_LINKS.items()]


# What a run that joins a running cluster must still give its Ray job (the cluster's processes may have been
# started with another environment): the CPU backend's variables, and the run's own metrics file.
_JOB_ENV = ("VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VERL_FILE_LOGGER_PATH",
            "TOKENIZERS_PARALLELISM")


def _quoted(value: str) -> str:
    """A Hydra override value as a quoted string (commas, brackets and spaces stay literal)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def shared_ray_cluster(num_cpus: int = 16, num_gpus: int = 1, timeout_s: float = 180) -> Iterator[str]:
    """Start one local Ray cluster for several CPU runs of verl; yields its address for `CPURun(ray_address=)`.

    verl's driver joins it (`ray_kwargs.ray_init.address`) instead of starting and stopping a cluster per
    run. Runs must join it one at a time: verl 0.9.1's TransferQueue controller is a single named actor per
    cluster (`TransferQueueController` in namespace `transfer_queue`), so two runs at once would share it and
    mix their data. `num_cpus` and `num_gpus` are logical (see the module docstring). The cluster (`ray start --head --block`, its own
    process group, free ports) gets the CPU backend's environment and its own authentication token, which
    the runs started inside the block inherit (Ray's default token file, ~/.ray/auth_token, is rewritten by
    every other cluster started on the machine). It is stopped when the block ends, also on error.
    """
    import secrets
    import shutil as _shutil
    import tempfile

    ray_cli = _shutil.which("ray", path=os.path.dirname(sys.executable)) or _shutil.which("ray")
    if ray_cli is None:
        raise RuntimeError("shared_ray_cluster: the `ray` command is not installed next to this Python")
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    port = _free_port()
    # A private temp dir: `ray start` records its address in <temp dir>/ray_current_cluster, and a plain
    # `ray.init()` elsewhere on the machine (verl's default) would try to join whatever /tmp/ray's copy names.
    temp_dir = tempfile.mkdtemp(prefix=SHARED_RAY_PREFIX)
    command = [
        ray_cli, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
        f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", "--include-dashboard=false", "--disable-usage-stats",
        f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
    ]
    proc = subprocess.Popen(command, env={**cpu_env(), **auth}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    saved = {k: os.environ.get(k) for k in auth}
    try:
        output: list[str] = []
        ready = threading.Event()

        def read() -> None:
            for line in proc.stdout:
                output.append(line)
                if "Ray runtime started" in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.time() + timeout_s
        while not ready.wait(0.5):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("shared_ray_cluster: `ray start` failed:\n" + "".join(output[-30:]))
        os.environ.update(auth)  # the runs started in the block join with the cluster's token
        yield f"127.0.0.1:{port}"
    finally:
        _kill_group(proc)
        _shutil.rmtree(temp_dir, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


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
    fast_poll: bool = True  # verl_ebpo.tools.cpu.replay.CPUReplayBuffer (DAPO's group filtering kept)
    ray_address: Optional[str] = None  # join this running Ray cluster (see `shared_ray_cluster`) instead of starting one
    extra: list[str] = field(default_factory=list)

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
            "actor_rollout_ref.actor.use_kl_loss=False",
            "actor_rollout_ref.actor.entropy_coeff=0",
            f"actor_rollout_ref.actor.data_loader_seed={self.seed}",
            "actor_rollout_ref.rollout.name=hf",
            f"actor_rollout_ref.rollout.n={self.n}",
            f"actor_rollout_ref.rollout.temperature={self.temperature}",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={responses}",
            "actor_rollout_ref.rollout.agent.num_workers=1",
            f"actor_rollout_ref.rollout.seed={self.seed}",
            "reward.num_workers=1",
            "algorithm.use_kl_in_reward=False",
            "trainer.device=cpu",
            "trainer.nnodes=1",
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
            base += [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={_quoted(env[k])}" for k in _JOB_ENV if k in env]
        if self.fast_poll:
            base += [
                "trainer.v1.sampler.custom_sampler.path=pkg://verl_ebpo.tools.cpu.replay",
                "trainer.v1.sampler.custom_sampler.name=CPUReplayBuffer",
                *sampler_link_overrides(),
            ]
        if self.reward_function is not None:
            path, name = self.reward_function
            base += [f"reward.custom_reward_function.path={path}", f"reward.custom_reward_function.name={name}"]
        return merge_overrides(base, self.extra)

    def env(self, base: Optional[dict] = None) -> dict:
        return cpu_env(base, metrics_file=self.metrics_file)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "verl.trainer.main_ppo", *self.overrides()]


def ray_worker_errors(since: float, max_chars: int = 6000) -> str:
    """Tracebacks/errors from Ray's worker logs modified after `since` (epoch seconds)."""
    chunks = []
    for path in sorted(p for pattern in RAY_LOG_GLOBS for p in glob.glob(pattern)):
        try:
            if os.path.getmtime(path) < since:
                continue
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        if "Traceback" in text or re.search(r"\bError\b", text):
            start = text.rfind("Traceback")
            chunks.append(f"--- {path}\n{text[start if start >= 0 else -2000:][-2000:]}")
    return "\n".join(chunks)[-max_chars:]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    except ProcessLookupError:
        pass


def run_main_ppo(
    run: CPURun,
    *,
    timeout_s: float = 900,
    on_line: Optional[Callable[[str], None]] = None,
    env: Optional[dict] = None,
) -> float:
    """Run verl's trainer for `run`; returns the wall time in seconds. Raises `TrainerFailed`.

    The trainer runs in its own process group in `run.out_dir` (Hydra's outputs land there); its
    output goes to `run.log_file` and, line by line, to `on_line`.
    """
    out_dir = Path(run.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    tail: list[str] = []

    def pump(stream, log) -> None:
        for line in stream:
            log.write(f"[{time.time() - started:7.1f}s] {line}")
            log.flush()
            tail.append(line)
            del tail[:-80]
            if on_line is not None:
                try:
                    on_line(line.rstrip("\n"))
                except Exception:  # a progress printer must not kill the run
                    pass

    def _report(headline: str) -> str:  # the output's tail and Ray's worker tracebacks, for both failures
        return (
            f"{headline} (log: {run.log_file})\n" + "".join(tail[-40:])
            + "\nRay worker errors:\n" + ray_worker_errors(started)
        )

    with open(run.log_file, "w") as log:
        proc = subprocess.Popen(
            run.command(),
            cwd=out_dir,
            env=env if env is not None else run.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        reader = threading.Thread(target=pump, args=(proc.stdout, log), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            reader.join(timeout=10)
            raise TrainerFailed(_report(f"verl trainer timed out after {timeout_s:.0f} s"), log_file=run.log_file) from None
        except BaseException:
            _kill_group(proc)
            raise
        reader.join(timeout=30)
    elapsed = time.time() - started
    if proc.returncode != 0:
        raise TrainerFailed(
            _report(f"verl trainer exited with {proc.returncode}"), returncode=proc.returncode, log_file=run.log_file
        )
    return elapsed
