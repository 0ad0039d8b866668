"""The Hydra overrides that give verl's stock trainer a prompt order: one source for docs, recipes and tests.

    >>> overrides("topic")
    ['data.shuffle=False', 'data.custom_cls.path=pkg://verl_ebpo.samplers.dataset', 'data.custom_cls.name=TopicOrderedDataset']

The list is for an argv (`subprocess.run(["python", "-m", "verl.trainer.main_ppo", *ovr])` or Hydra's
`compose(overrides=ovr)`): values are quoted for Hydra's grammar, not for a shell.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

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


def overrides(
    order: str,
    *,
    field: str | None = None,
    seed: int | None = None,
    cluster_order: str | Sequence[Any] | None = None,
    difficulty_field: str | None = None,
    align: str | None = None,
    batch_size: int | None = None,
    direction: str | None = None,
    higher_is_easier: bool | None = None,
    unlabelled: str | None = None,
    passes: int | None = None,
    total_epochs: int | None = None,
) -> list[str]:
    """Overrides for `python -m verl.trainer.main_ppo` that select a prompt order.

    order: "random" (EBPO-naive: verl's own data.shuffle=True), "topic" (EBPO-topic) or
      "difficulty" (EBPO-diff; the paper runs one epoch: pass total_epochs=1).
    Every other argument is a `data.ordering.*` option (None = the default, not written);
    seed goes to data.seed (verl's own key, also used by data.shuffle); total_epochs to trainer.total_epochs.
    """
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not one of {list(ORDERS)}")
    out: list[str] = []
    if order == "random":
        ignored = {
            k: v
            for k, v in dict(
                field=field, cluster_order=cluster_order, difficulty_field=difficulty_field, align=align,
                batch_size=batch_size, direction=direction, higher_is_easier=higher_is_easier,
                unlabelled=unlabelled, passes=passes,
            ).items()
            if v is not None
        }
        if ignored:
            raise ValueError(f"order='random' takes no ordering options, got {sorted(ignored)}")
        out.append("data.shuffle=True")
    else:
        out += [
            "data.shuffle=False",
            f"data.custom_cls.path={DATASET_MODULE}",
            f"data.custom_cls.name={DATASET_CLASS[order]}",
        ]
        topic_only = dict(cluster_order=cluster_order, difficulty_field=difficulty_field, align=align, batch_size=batch_size)
        diff_only = dict(direction=direction)
        wrong = topic_only if order == "difficulty" else diff_only
        given = sorted(k for k, v in wrong.items() if v is not None)
        if given:
            raise ValueError(f"order={order!r} does not use {given}")
        options = dict(
            field=field,
            cluster_order=cluster_order,
            difficulty_field=difficulty_field,
            align=align,
            batch_size=batch_size,
            direction=direction,
            higher_is_easier=higher_is_easier,
            unlabelled=unlabelled,
            passes=passes,
        )
        for key, value in options.items():
            if value is not None:
                out.append(f"++data.ordering.{key}={hydra_value(value)}")
    if seed is not None:
        out.append(f"data.seed={int(seed)}")
    if total_epochs is not None:
        out.append(f"trainer.total_epochs={int(total_epochs)}")
    return out
