"""verl_ebpo: EBPO (Empirical Bayes Policy Optimization) for verl.

- `algorithm.adv_estimator=ebpo` (registered on `import verl` through the `verl.plugins` entry point)
- `trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback` (saves/restores the prior)
- `verl_ebpo.samplers` (topic / difficulty ordering), `verl_ebpo.rewards` (math verifier)
"""

__version__ = "0.1.0"


def __getattr__(name):  # lazy, so `import verl_ebpo` stays light and free of import cycles with verl
    if name == "EBPOCheckpointCallback":
        from verl_ebpo.checkpoint import EBPOCheckpointCallback

        return EBPOCheckpointCallback
    raise AttributeError(f"module 'verl_ebpo' has no attribute {name!r}")


__all__ = ["EBPOCheckpointCallback", "__version__"]
