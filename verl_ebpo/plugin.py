"""verl plugin entry point (group `verl.plugins`): `import verl` imports this module in every process; it registers
`adv_estimator=ebpo` and does nothing else."""

from verl_ebpo.advantage.verl_glue import register

register()
