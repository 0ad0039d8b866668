"""What every preflight check shares: the report, the run's context, config and path helpers (verl-free)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from verl_ebpo.tools.preflight.estimates import GB

GT = "reward_model.ground_truth"
STATUS = ("ok", "warn", "FAIL", "n/a", "est")  # est: a figure, not a check
WIDTH = 100  # the widest line of the default output


class InputError(ValueError):
    """A key of the composed config that preflight cannot read (wrong type or range): one line naming the key."""


@dataclass
class Report:
    """One row per check: (check, status, headline, detail, fix); the headline fits a line, the rest is --verbose."""

    rows: list = field(default_factory=list)

    def add(self, check: str, status: str, headline: str, detail: str = "", fix: str = "") -> None:
        assert status in STATUS, status
        self.rows.append((check, status, headline, detail, fix))

    @property
    def blocking(self) -> Optional[str]:
        """Every FAIL with its fix, in one line (None when none)."""
        fails = [f"{c}: {h}" + (f"; {fix}" if fix else "") for c, s, h, _, fix in self.rows if s == "FAIL"]
        return (f"{len(fails)} FAIL: " if len(fails) > 1 else "") + " | ".join(fails) if fails else None

    def table(self, verbose: bool = False) -> str:
        width = max(len(r[0]) for r in self.rows)
        lines = []
        for check, status, headline, detail, fix in self.rows:
            line = f"{check:<{width}}  {status:<4}  {headline}"
            lines.append(line if verbose or len(line) <= WIDTH else line[:WIDTH - 3] + "...")
            lines += [f"{'':<{width + 8}}{text}" for text in (detail, fix and f"fix: {fix}") if verbose and text]
        return "\n".join(lines)

    def closing(self) -> str:
        """The last line when nothing blocks: the warnings and the rows not checked, by name."""
        named = {s: ", ".join(dict.fromkeys(r[0] for r in self.rows if r[1] == s)) for s in ("warn", "n/a")}
        return f"no FAIL; {sum(r[1] == 'warn' for r in self.rows)} warning(s)" + (
            f"; read: {named['warn']} (--verbose)" if named["warn"] else "") + (
            f"; not checked: {named['n/a']}" if named["n/a"] else "")


def gb(nbytes: float) -> str:
    return f"{nbytes / GB:,.1f} GB" if nbytes < 1e12 else f"{nbytes / 1e12:,.2f} TB"


def sel(cfg, key: str, default=None):
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key, default=default)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def num(cfg, key: str, kind: type = int, low=None, high=None, none_ok: bool = False):
    """The int (or float) at `key`, or InputError naming the key, its value and what it accepts. Floats: (low, high];
    integers: [low, high]. None (a missing key or `null`) only when `none_ok`."""
    value = sel(cfg, key)
    if value is None and none_ok:
        return None
    good = not isinstance(value, bool) and isinstance(value, int if kind is int else (int, float))
    if good and kind is float:
        good = math.isfinite(value) and (low is None or value > low) and (high is None or value <= high)
    elif good:
        good = (low is None or value >= low) and (high is None or value <= high)
    if not good:  # floats with a range: (0, 1] (gpu_memory_utilization); integers: >= low
        what = ("an integer" if kind is int else "a number") + (f" in ({low:g}, {high:g}]" if high is not None else
                                                                 f" >= {low:g}" if low is not None else "")
        raise InputError(f"{key}={value!r}: must be {what}" + (" or null" if none_ok else ""))
    return float(value) if kind is float else value


A, R, F = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"
# every integer / float preflight reads, by what it accepts
POSITIVE = ("data.train_batch_size", "data.max_prompt_length", "data.max_response_length", "trainer.total_epochs",
            "trainer.nnodes", "trainer.n_gpus_per_node", f"{R}.n")
POSITIVE_OR_NULL = ("data.gen_batch_size", "trainer.total_training_steps", f"{R}.val_kwargs.n",
                    f"{A}.ppo_max_token_len_per_gpu", f"{A}.ppo_micro_batch_size_per_gpu",
                    f"{A}.entropy_from_logits_chunk_size", *(f"{A}.megatron.{k}_parallel_size" for k in
                                                             ("tensor_model", "pipeline_model", "context")),
                    *(f"{p}.log_prob_{k}_per_gpu" for p in (R, F) for k in ("max_token_len", "micro_batch_size")))
INT_OR_NULL = ("data.train_max_samples", "data.val_max_samples", "trainer.test_freq", "trainer.max_actor_ckpt_to_keep")


def check_numbers(cfg) -> None:
    """Every number preflight reads, read once before anything uses it: the first bad one is an InputError."""
    for keys, low, none_ok in ((POSITIVE, 1, False), (POSITIVE_OR_NULL, 1, True), (INT_OR_NULL, None, True)):
        for key in keys:
            num(cfg, key, int, low, none_ok=none_ok)
    num(cfg, "trainer.save_freq", int)
    num(cfg, f"{R}.gpu_memory_utilization", float, 0, 1)
    num(cfg, f"{A}.entropy_coeff", float, none_ok=True)


def files(value) -> list:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def local(path: str, working_dir: str) -> str:
    path = os.path.expanduser(path.removeprefix("file://"))
    return path if os.path.isabs(path) else os.path.join(working_dir, path)


def backend(cfg) -> str:
    return "megatron" if str(sel(cfg, f"{A}.strategy")) == "megatron" else "fsdp"


@dataclass
class Context:
    cfg: Any
    working_dir: str
    free_disk_gb: Optional[float]
    shared_dir: Optional[str]
    cluster: Any  # cluster.Cluster
    creates: tuple = ()  # folders the launcher makes before the run (--creates)
    nnodes: int = 1  # trainer.nnodes, trainer.n_gpus_per_node (run_checks reads them)
    per_node: int = 1
    gpu_bytes: float = 80e9  # one GPU's memory as the estimates use it (check_cluster sets it)
    gpu_source: str = "80 GB (assumed)"  # declared (--gpu-memory-gb), detected or assumed
    uses_ref: bool = False  # verl's need_reference_policy
    train_len: Optional[int] = None  # len(train_dataset) as verl will see it (ordered: the padded plan)
    val_rows: Optional[int] = None  # validation prompts after data.val_max_samples
    first_row: Optional[dict] = None
    model_cfg: Optional[dict] = None
    params: Optional[int] = None
