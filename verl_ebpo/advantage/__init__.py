"""EBPO advantage estimator: pure math (`core`), the prior state (`prior`), options, the call, and verl glue."""

from verl_ebpo.advantage.estimator import ebpo_advantage
from verl_ebpo.advantage.options import EBPOOptions
from verl_ebpo.advantage.prior import EBPOPrior, get_prior, reset_prior

__all__ = ["EBPOOptions", "EBPOPrior", "ebpo_advantage", "get_prior", "reset_prior"]
