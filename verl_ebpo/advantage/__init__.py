"""EBPO advantage estimator: the math and the call (`core`), the prior state (`prior`), options, and verl glue."""

from verl_ebpo.advantage.core import ebpo_advantage
from verl_ebpo.advantage.options import EBPOOptions
from verl_ebpo.advantage.prior import EBPOPrior, get_prior, reset_prior

__all__ = ["EBPOOptions", "EBPOPrior", "ebpo_advantage", "get_prior", "reset_prior"]
