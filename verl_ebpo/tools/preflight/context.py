"""What every preflight check shares: the report, the run's context, config and path helpers (verl-free)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from verl_ebpo.tools.preflight import estimates as est

GT = "reward_model.ground_truth"
METRICS_KEY = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
ORDERED = {"TopicOrderedDataset": "topic", "DifficultyOrderedDataset": "difficulty"}
STATUS = ("ok", "warn", "FAIL", "n/a")


class InputError(ValueError):
    """A key of the composed config that preflight cannot read (wrong type or range): one line naming the key."""


@dataclass
class Report:
    """One row per check: (check, status, figure); `blocking` lists every FAIL in one line (None when none)."""

    rows: list = field(default_factory=list)

    def add(self, check: str, status: str, figure: str) -> None:
        assert status in STATUS, status
        self.rows.append((check, status, figure))

    @property
    def fails(self) -> list:
        return [f"{c}: {f}" for c, s, f in self.rows if s == "FAIL"]

    @property
    def blocking(self) -> Optional[str]:
        fails = self.fails
        if not fails:
            return None
        return fails[0] if len(fails) == 1 else f"{len(fails)} FAIL: " + " | ".join(fails)

    def status(self, check: str) -> Optional[str]:
        return next((s for c, s, _ in self.rows if c == check), None)

    def closing(self) -> str:
        """The last line: every FAIL, else the warnings by name, else ok (never a plain ok over a warning)."""
        if self.blocking:
            return self.blocking
        warned = list(dict.fromkeys(c for c, s, _ in self.rows if s == "warn"))
        skipped = list(dict.fromkeys(c for c, s, _ in self.rows if s == "n/a"))
        tail = f"; not checked: {', '.join(skipped)}" if skipped else ""
        if warned:
            return f"no blocking problem; {len(warned)} warning(s) to read: {', '.join(warned)}{tail}"
        return "ok: every check passed" + (f" (not checked: {', '.join(skipped)})" if skipped else "")

    def table(self) -> str:
        width = max([len(c) for c, _, _ in self.rows] + [5])
        lines = [f"{'check':<{width}}  {'status':<6}  figure"]
        lines += [f"{c:<{width}}  {s:<6}  {f}" for c, s, f in self.rows]
        return "\n".join(lines)


def _gb(nbytes: float) -> str:
    return f"{nbytes / est.GB:,.1f} GB" if nbytes < 1e12 else f"{nbytes / 1e12:,.2f} TB"


def _sel(cfg, key: str, default=None):
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key, default=default)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _describe(kind: type, low, high, none_ok: bool) -> str:
    what = "an integer" if kind is int else "a number"
    if low is not None and high is not None:
        what += f" in [{low:g}, {high:g}]" if kind is int else f" in ({low:g}, {high:g}]"
    elif low is not None:
        what += f" >= {low:g}"
    return what + (" or null" if none_ok else "")


def num(cfg, key: str, kind: type = int, low=None, high=None, none_ok: bool = False):
    """The int (or float) at `key`, or InputError naming the key, its value and what it accepts. Floats: (low, high];
    integers: [low, high]. None (a missing key or `null`) only when `none_ok`."""
    value = _sel(cfg, key)
    if value is None and none_ok:
        return None
    good = not isinstance(value, bool) and (isinstance(value, int) if kind is int else isinstance(value, (int, float)))
    if good and kind is float:
        import math

        good = math.isfinite(value) and (low is None or value > low) and (high is None or value <= high)
    elif good:
        good = (low is None or value >= low) and (high is None or value <= high)
    if not good:
        raise InputError(f"{key}={value!r}: must be {_describe(kind, low, high, none_ok)}")
    return float(value) if kind is float else value


A, R, F = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"
# every integer / float preflight reads: (key, kind, low, high, None allowed)
NUMBERS = (
    ("data.train_batch_size", int, 1, None, False), ("data.max_prompt_length", int, 1, None, False),
    ("data.max_response_length", int, 1, None, False), ("data.gen_batch_size", int, 1, None, True),
    ("data.train_max_samples", int, None, None, True), ("data.val_max_samples", int, None, None, True),
    ("trainer.total_epochs", int, 1, None, False), ("trainer.total_training_steps", int, 1, None, True),
    ("trainer.save_freq", int, None, None, False), ("trainer.test_freq", int, None, None, True),
    ("trainer.max_actor_ckpt_to_keep", int, None, None, True), ("trainer.nnodes", int, 1, None, False),
    ("trainer.n_gpus_per_node", int, 1, None, False), (f"{R}.gpu_memory_utilization", float, 0, 1, False),
    (f"{R}.n", int, 1, None, False), (f"{R}.val_kwargs.n", int, 1, None, True),
    (f"{R}.tensor_model_parallel_size", int, 1, None, True),
    (f"{A}.ppo_max_token_len_per_gpu", int, 1, None, True), (f"{A}.ppo_micro_batch_size_per_gpu", int, 1, None, True),
    (f"{R}.log_prob_max_token_len_per_gpu", int, 1, None, True),
    (f"{R}.log_prob_micro_batch_size_per_gpu", int, 1, None, True),
    (f"{F}.log_prob_max_token_len_per_gpu", int, 1, None, True),
    (f"{F}.log_prob_micro_batch_size_per_gpu", int, 1, None, True),
    (f"{A}.entropy_from_logits_chunk_size", int, 1, None, True), (f"{A}.entropy_coeff", float, None, None, True),
    (f"{A}.ulysses_sequence_parallel_size", int, 1, None, True), (f"{F}.ulysses_sequence_parallel_size", int, 1, None, True),
    (f"{A}.megatron.tensor_model_parallel_size", int, 1, None, True),
    (f"{A}.megatron.pipeline_model_parallel_size", int, 1, None, True),
    (f"{A}.megatron.context_parallel_size", int, 1, None, True),
)


def check_numbers(cfg) -> None:
    """Every key of NUMBERS read once before anything uses it: the first bad one is an InputError."""
    for key, kind, low, high, none_ok in NUMBERS:
        num(cfg, key, kind, low, high, none_ok)


def _files(value) -> list:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str, working_dir: str) -> str:
    path = os.path.expanduser(path.removeprefix("file://"))
    return path if os.path.isabs(path) else os.path.join(working_dir, path)


@dataclass
class Context:
    cfg: Any
    working_dir: str
    gpu_bytes: float
    free_disk_gb: Optional[float]
    shared_dir: Optional[str]
    gpu_source: str = "declared"  # declared (--gpu-memory-gb) | detected (how) | assumed
    cluster: Any = None  # cluster.Cluster
    uses_ref: bool = False  # verl's need_reference_policy
    train_plan_len: Optional[int] = None  # the ordered datasets' plan length over the train files
    train_len: Optional[int] = None  # len(train_dataset) as verl will see it (ordered: the padded plan)
    first_row: Optional[dict] = None
    model_cfg: Optional[dict] = None
    model_dir: Optional[str] = None
    params: Optional[int] = None
