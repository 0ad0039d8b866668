"""CPU backend for verl 0.9.1 (opt-in): run verl's real trainer on a machine without accelerators.

Importing this package registers nothing. `verl_ebpo.tools.cpu.backend` is the module verl imports in every
process when asked to (`VERL_USE_EXTERNAL_MODULES=verl_ebpo.tools.cpu.backend VERL_PLATFORM=cpu`); importing
it registers, in verl's own registries, a `cpu` platform, an `hf` rollout and a gloo process-group wrap.
`verl_ebpo.tools.cpu.launch` (verl-free; the demo and the recipes' `SMOKE=cpu` use it) re-exports the three parts
of a CPU run: `overrides` (environment and Hydra overrides), `cluster` (a shared Ray cluster), `supervise` (the
trainer subprocess and its logs); `python -m verl_ebpo.tools.cpu.run` runs a 2-step job.
"""
