"""Put the CPU backend into verl's registries (called by `import verl_ebpo.tools.cpu.backend`).

Everything added here is inert until selected: the `cpu` platform needs `VERL_PLATFORM=cpu`, the
`hf` rollout needs `actor_rollout_ref.rollout.name=hf`, and the process-group wrap changes nothing
unless the selected platform is `cpu`. Nothing registered by verl itself is replaced.
"""

from __future__ import annotations

import functools
import importlib
import sys

ROLLOUT_CLASS_FQN = "verl_ebpo.tools.cpu.rollout.HFServerAdapter"


def register_rollout() -> None:
    """`rollout.name=hf`: the trainer-side adapter and the server replica."""
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    # verl 0.9.1 has no public registration function for rollout adapters: its
    # `get_rollout_class` reads the private dict `_ROLLOUT_REGISTRY` (tested in tests/test_cpu_backend.py).
    rollout_base._ROLLOUT_REGISTRY.setdefault(("hf", "async"), ROLLOUT_CLASS_FQN)
    try:
        RolloutReplicaRegistry.get("hf")
    except ValueError:
        RolloutReplicaRegistry.register("hf", lambda: importlib.import_module("verl_ebpo.tools.cpu.rollout").HFReplica)


def _gloo_when_cpu(original):
    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if backend is None:
            from verl.plugin.platform import get_platform

            if get_platform().device_name == "cpu":
                backend = "gloo"  # verl's default "cpu:gloo,cpu:gloo" names the CPU twice
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray._verl_ebpo_cpu = True
    return initialize_global_process_group_ray


def wrap_process_group_init() -> None:
    """Let the training workers' process group start with `gloo` alone on the CPU platform.

    verl 0.9.1 builds the backend string f"cpu:gloo,{device}:{backend}" in
    `verl.utils.distributed.initialize_global_process_group_ray` (a public function, imported by name
    into `verl.workers.engine_workers`); we wrap it there and in that importer.
    """
    import verl.utils.distributed as dist_utils

    if not getattr(dist_utils.initialize_global_process_group_ray, "_verl_ebpo_cpu", False):
        dist_utils.initialize_global_process_group_ray = _gloo_when_cpu(dist_utils.initialize_global_process_group_ray)
    importer = sys.modules.get("verl.workers.engine_workers")
    if importer is not None and not getattr(importer.initialize_global_process_group_ray, "_verl_ebpo_cpu", False):
        importer.initialize_global_process_group_ray = dist_utils.initialize_global_process_group_ray


def unpin_offload_on_cpu() -> None:
    """verl's forward-only FSDP2 engine (the reference policy of a run with a KL loss) shards with
    `CPUOffloadPolicy(pin_memory=True)`; pinning needs an accelerator. On the `cpu` platform the policy is
    built with pin_memory=False (a subclass, so verl's isinstance checks still hold); elsewhere unchanged."""
    import verl.workers.engine.fsdp.transformer_impl as impl

    base = impl.CPUOffloadPolicy
    if base is None or getattr(base, "_verl_ebpo_cpu", False):
        return

    class CPUOffloadPolicyOnCPU(base):
        _verl_ebpo_cpu = True

        def __init__(self, pin_memory: bool = True):
            from verl.plugin.platform import get_platform

            super().__init__(pin_memory=pin_memory and get_platform().device_name != "cpu")

    impl.CPUOffloadPolicy = CPUOffloadPolicyOnCPU


def register() -> None:
    """Register the `cpu` platform, the `hf` rollout and the gloo process-group wrap (idempotent); on a run of
    verl's vLLM rollout, the vLLM-CPU fixes of `verl_ebpo.tools.cpu.vllm_rollout`."""
    from verl_ebpo.tools.cpu.platform import register_platform

    register_platform()
    wrap_process_group_init()
    unpin_offload_on_cpu()
    register_rollout()
    from verl_ebpo.tools.cpu.vllm_rollout import register_vllm

    register_vllm()  # only on a CPU run of verl's vLLM rollout (VERL_EBPO_CPU_ROLLOUT=vllm): vllm_rollout.py
