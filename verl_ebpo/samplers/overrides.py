"""The Hydra overrides that give verl's stock trainer a prompt order: one source for docs, recipes and tests.

    >>> overrides("topic")
    ['data.shuffle=False', 'data.custom_cls.path=pkg://verl_ebpo.samplers.dataset', 'data.custom_cls.name=TopicOrderedDataset']

The list is for an argv (`subprocess.run(["python", "-m", "verl.trainer.main_ppo", *ovr])` or Hydra's
`compose(overrides=ovr)`): values are quoted for Hydra's grammar, not for a shell.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

from verl_ebpo.samplers.options import OPTIONS

DATASET_MODULE = "pkg://verl_ebpo.samplers.dataset"
DATASET_CLASS = {"topic": "TopicOrderedDataset", "difficulty": "DifficultyOrderedDataset"}
ORDERS = ("random", "topic", "difficulty")

_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-/:]*$")


def hydra_value(value: Any) -> str:
    """A Python value written in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    s = str(value)
    if _PLAIN.match(s) and s.lower() not in ("null", "true", "false", "nan", "inf", "-inf") and not _is_number(s):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def overrides(order: str, *, seed: int | None = None, total_epochs: int | None = None, **options: Any) -> list[str]:
    """Overrides for `python -m verl.trainer.main_ppo` that select a prompt order.

    order: "random" (EBPO-naive: verl's own data.shuffle=True), "topic" (EBPO-topic) or
      "difficulty" (EBPO-diff; the paper runs one epoch: pass total_epochs=1).
    options: `data.ordering.*` keys of the order's spec (`TopicOptions` / `DifficultyOptions`), validated by
      it; None = the default, not written. seed goes to data.seed (verl's own key, also used by
      data.shuffle, and the ordering's default seed); total_epochs to trainer.total_epochs.
    """
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not one of {list(ORDERS)}")
    given = {k: v for k, v in options.items() if v is not None}
    if order == "random":
        if given:
            raise ValueError(f"order='random' takes no ordering options, got {sorted(given)}")
        out = ["data.shuffle=True"]
    else:
        spec = OPTIONS[order].from_mapping(given)  # unknown keys and bad values: ValueError
        out = ["data.shuffle=False", f"data.custom_cls.path={DATASET_MODULE}", f"data.custom_cls.name={DATASET_CLASS[order]}"]
        out += [f"++data.ordering.{f.name}={hydra_value(getattr(spec, f.name))}" for f in fields(spec) if f.name in given]
    if seed is not None:
        out.append(f"data.seed={int(seed)}")
    if total_epochs is not None:
        out.append(f"trainer.total_epochs={int(total_epochs)}")
    return out
