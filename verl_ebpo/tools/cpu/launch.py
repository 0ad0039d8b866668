"""Launch verl's real trainer (`python -m verl.trainer.main_ppo`, V1) on a CPU-only machine: one import for the three
parts (verl-free, like each of them):

- `verl_ebpo.tools.cpu.overrides`: `CPURun` (a small CPU job -> Hydra overrides, environment, command), `cpu_env`,
  `merge_overrides`; why each CPU-specific override is needed;
- `verl_ebpo.tools.cpu.cluster`: `ray_cluster` (a local Ray cluster of its own, for one run or several one after the
  other: `with ray_cluster() as (address, auth): CPURun(..., ray_address=address, ray_env=auth)`);
- `verl_ebpo.tools.cpu.supervise`: `run_main_ppo` (the trainer as a subprocess, its log, `TrainerFailed` with the
  output's tail and Ray's worker errors), `ray_worker_errors`.
"""

from verl_ebpo.tools.cpu.cluster import SHARED_RAY_PREFIX, _kill_group, ray_cluster
from verl_ebpo.tools.cpu.overrides import CPURun, cpu_env, merge_overrides
from verl_ebpo.tools.cpu.supervise import TrainerFailed, TrainerStopped, ray_worker_errors, run_main_ppo

__all__ = ["CPURun", "SHARED_RAY_PREFIX", "TrainerFailed", "TrainerStopped", "cpu_env", "merge_overrides",
           "ray_cluster", "ray_worker_errors", "run_main_ppo"]
