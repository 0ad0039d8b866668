"""verl plugin entry point (group `verl.plugins`): `import verl` imports this module in every process.

It registers `adv_estimator=ebpo` and does nothing else (the CPU backend is never loaded from here).
"""

from verl_ebpo.advantage.verl_glue import register

register()
