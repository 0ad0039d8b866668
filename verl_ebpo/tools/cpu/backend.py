"""The CPU backend's entry module: importing it registers, in verl's own registries,

- a `cpu` platform (`verl.plugin.platform.PlatformRegistry`; selected by `VERL_PLATFORM=cpu`),
- an `hf` rollout (`actor_rollout_ref.rollout.name=hf`): a transformers model in a Ray actor,
- a wrap that starts the training workers' process group with `gloo` on the `cpu` platform.

None of it is active unless selected, and the `ebpo` plugin entry point never imports it. verl imports it in
every process when asked to: `VERL_USE_EXTERNAL_MODULES=verl_ebpo.tools.cpu.backend VERL_PLATFORM=cpu`.
"""

from verl_ebpo.tools.cpu.registration import register

register()

__all__ = ["register"]
