import os

import pytest
import torch
from hypothesis import settings

# verl's groupwise helpers pick devices from this; our tests are CPU-only.
os.environ.setdefault("VERL_FORCE_DEVICE", "cpu")

# Hypothesis: the default profile draws the same examples on every machine (derandomized, no example database), so a
# machine never fails on an example another never saw; HYPOTHESIS_PROFILE=explore draws new ones, 10x as many.
# No deadline in either: an example's wall-clock time is no test's business (a loaded machine must not fail one).
settings.register_profile("fixed", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("explore", derandomize=False, max_examples=1000, print_blob=True, deadline=None)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fixed")
settings.load_profile(HYPOTHESIS_PROFILE)


@pytest.fixture(autouse=True)
def _torch_grad_mode_is_not_leaked():
    """A test (or a script it runs in-process) must not leave torch's global grad mode switched off:
    later tests that train (the CPU trainer, the warm-start) would then fail far from the cause."""
    yield
    assert torch.is_grad_enabled(), "this test left torch.set_grad_enabled(False) behind"


ON_DEMAND = ("slow", "recipe_smoke", "on_demand", "vllm")  # vllm: tests/test_cpu_vllm.py, in the vLLM venv


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups and before `-m` deselects
def pytest_collection_modifyitems(config, items):
    """Tests marked `slow` (trainer launches beyond one per capability, and other slow tests: `pytest -m slow`, what
    .ci/run runs after the README command), `recipe_smoke` (extra SMOKE=cpu recipe runs) or `on_demand` (extra trainer
    launches; neither is run by CI) run only when their marker is named in `-m`, e.g.
    `pytest -m recipe_smoke tests/test_recipes_smoke.py`: the README's test command stays within 10 minutes."""
    # Under `-n 2 --dist loadgroup` (the README's command) the trainer launches take turns on one worker, first,
    # while the other worker runs the rest: two Ray clusters never share the 2 cores.
    items.sort(key=lambda item: "e2e" not in item.keywords)  # stable: the e2e tests first, in their order
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("trainer"))
    if HYPOTHESIS_PROFILE == "explore":  # a test's own @settings(max_examples=N) wins over a profile's: 10 N
        for test in {id(f): f for f in (getattr(item, "obj", None) for item in items)}.values():
            own = getattr(test, "_hypothesis_internal_use_settings", None)
            if own is not None and own.max_examples < 1000:
                test._hypothesis_internal_use_settings = settings(own, max_examples=10 * own.max_examples)
    selected = config.getoption("-m") or ""
    for item in items:
        # a marker, not a keyword (a folder may be named vllm)
        markers = [m for m in ON_DEMAND if item.get_closest_marker(m) is not None]
        if markers and not any(m in selected for m in markers):
            item.add_marker(pytest.mark.skip(reason=f"on demand: run with -m {markers[0]}"))


def pytest_configure(config):
    """The known case of the check below, with a readable message (a worker's error is an INTERNALERROR)."""
    if config.getoption("dist", "no") == "loadgroup" and pytest.version_tuple[:2] >= (9, 2):
        raise pytest.UsageError("pytest 9.2 with pytest-xdist 3.8 ignores --dist loadgroup: install the test extra's "
                                "pytest (pytest<9.2), or run without -n")


@pytest.hookimpl(wrapper=True)
def pytest_collection_finish(session):
    """After xdist named the groups: under `--dist loadgroup` every trainer launch must be in the `trainer` group
    (pytest 9.2 with pytest-xdist 3.8 silently drops the groups, and two Ray clusters then share the cores)."""
    result = yield
    argv = " ".join(getattr(session.config, "workerinput", {}).get("mainargv", []))
    if "loadgroup" in argv:
        loose = [item.nodeid for item in session.items if "e2e" in item.keywords and "@trainer" not in item.nodeid]
        if loose:
            raise pytest.UsageError(f"pytest-xdist did not group the trainer launches ({loose[0]}, ...): "
                                    "install the test extra's pytest (pytest<9.2)")
    return result
