"""Launch verl's real trainer (`python -m verl.trainer.main_ppo`, V1) on a CPU-only machine: one import for the three
parts (verl-free, like each of them):

- `verl_ebpo.tools.cpu.overrides`: `CPURun` (a small CPU job -> Hydra overrides, environment, command), `cpu_env`,
  `merge_overrides`; why each CPU-specific override is needed;
- `verl_ebpo.tools.cpu.cluster`: `shared_ray_cluster` (one Ray cluster for several runs, one after the other:
  `with shared_ray_cluster() as address: CPURun(..., ray_address=address)`);
- `verl_ebpo.tools.cpu.supervise`: `run_main_ppo` (the trainer as a subprocess, its log, `TrainerFailed` with the
  output's tail and Ray's worker errors), `ray_worker_errors`.
"""

from verl_ebpo.tools.cpu.cluster import SHARED_RAY_PREFIX, _free_port, _kill_group, ray_cluster, shared_ray_cluster
from verl_ebpo.tools.cpu.overrides import (
    _JOB_ENV,
    CPU_MODULE,
    CPURun,
    _override_key,
    _quoted,
    cpu_env,
    merge_overrides,
)
from verl_ebpo.tools.cpu.supervise import RAY_LOG_GLOBS, TrainerFailed, TrainerStopped, ray_worker_errors, run_main_ppo

__all__ = [
    "CPU_MODULE",
    "CPURun",
    "RAY_LOG_GLOBS",
    "SHARED_RAY_PREFIX",
    "TrainerFailed",
    "TrainerStopped",
    "cpu_env",
    "merge_overrides",
    "ray_cluster",
    "ray_worker_errors",
    "run_main_ppo",
    "shared_ray_cluster",
]
