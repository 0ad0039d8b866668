"""CPU backend for verl 0.9.1 (opt-in): run verl's real trainer on a machine without accelerators.

Importing this module registers, in verl's own registries,
- a `cpu` platform (`verl.plugin.platform.PlatformRegistry`; selected by `VERL_PLATFORM=cpu`),
- an `hf` rollout (`actor_rollout_ref.rollout.name=hf`): a transformers model in a Ray actor,
- a wrap that starts the training workers' process group with `gloo` on the `cpu` platform.
None of it is active unless selected, and the `ebpo` plugin entry point never imports it. verl imports
it in every process when asked to: `VERL_USE_EXTERNAL_MODULES=verl_ebpo.cpu VERL_PLATFORM=cpu`.
`verl_ebpo.cpu.launch` has the environment and Hydra overrides of a CPU run; `python -m verl_ebpo.cpu.run`
runs a 2-step job. Importing ANY module under `verl_ebpo.cpu` runs this file, so imports verl: the verl-free
pieces other parts of the package share live outside it (`verl_ebpo.tiny`: the tiny model, tokenizer, data
and task; `verl_ebpo.verl_logs`: reading verl's metrics file and rollout dumps).
"""

from verl_ebpo.cpu.registration import register

register()

__all__ = ["register"]
