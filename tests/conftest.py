import os

import pytest
import torch

# verl's groupwise helpers pick devices from this; our tests are CPU-only.
os.environ.setdefault("VERL_FORCE_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _torch_grad_mode_is_not_leaked():
    """A test (or a script it runs in-process) must not leave torch's global grad mode switched off:
    later tests that train (the CPU trainer, the warm-start) would then fail far from the cause."""
    yield
    assert torch.is_grad_enabled(), "this test left torch.set_grad_enabled(False) behind"


def pytest_collection_modifyitems(config, items):
    """Tests marked `recipe_smoke` (extra SMOKE=cpu recipe runs, a few minutes each) run only when asked for by
    name: `pytest -m recipe_smoke tests/test_recipes_smoke.py` (under flock /tmp/verl-trainer.lock)."""
    if "recipe_smoke" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="extra recipe smoke: run with -m recipe_smoke")
    for item in items:
        if "recipe_smoke" in item.keywords:
            item.add_marker(skip)
