"""The tools around the plugin: nothing here is loaded by verl on a GPU cluster.

- `cli`: the `verl-ebpo` console script (demo, simulate, compare, inspect, label-topics, label-difficulty).
- `cpu`: verl's real trainer on a CPU machine (`cpu.backend` is the module verl imports; `cpu.launch` runs it).
- `tiny`: the tiny model, tokenizer, data and successor task of the CPU runs.
- `demo`, `simulate`, `stats`, `verl_logs`, `inspect_prior`, `labeling`: the commands and what they share.

The plugin — what verl imports and runs — is `verl_ebpo.plugin`, `verl_ebpo.advantage`, `verl_ebpo.checkpoint`,
`verl_ebpo.rewards` and `verl_ebpo.samplers`; it never imports this package.
"""
