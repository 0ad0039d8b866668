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


ON_DEMAND = ("recipe_smoke", "on_demand")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Tests marked `recipe_smoke` (extra SMOKE=cpu recipe runs, a few minutes each) or `on_demand` (extra trainer
    launches) run only when asked for by name, e.g. `pytest -m recipe_smoke tests/test_recipes_smoke.py` or
    `pytest -m "e2e and on_demand"` (under flock /tmp/verl-trainer.lock): the default test command stays short."""
    # Under `-n 2 --dist loadgroup` (the README's command) the trainer launches take turns on one worker, first,
    # while the other worker runs the rest: two Ray clusters never share the 2 cores.
    items.sort(key=lambda item: "e2e" not in item.keywords)  # stable: the e2e tests first, in their order
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("trainer"))
    selected = config.getoption("-m") or ""
    for marker in ON_DEMAND:
        if marker in selected:
            continue
        skip = pytest.mark.skip(reason=f"extra trainer launches: run with -m {marker}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
