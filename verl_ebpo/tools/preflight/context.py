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


@dataclass
class Report:
    """One row per check: (check, status, figure); `blocking` is the first FAIL's one-line problem."""

    rows: list = field(default_factory=list)
    blocking: Optional[str] = None

    def add(self, check: str, status: str, figure: str) -> None:
        assert status in STATUS, status
        self.rows.append((check, status, figure))
        if status == "FAIL" and self.blocking is None:
            self.blocking = f"{check}: {figure}"

    def status(self, check: str) -> Optional[str]:
        return next((s for c, s, _ in self.rows if c == check), None)

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
    train_rows: Optional[int] = None
    first_row: Optional[dict] = None
    model_cfg: Optional[dict] = None
    model_dir: Optional[str] = None
    params: Optional[int] = None
