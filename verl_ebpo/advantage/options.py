"""EBPO's options, read from `config.ebpo` of verl's `algorithm` config (`+algorithm.ebpo.KEY=VALUE` on the command
line: the `+` because verl's schema has no `ebpo` node). Each option is documented once, beside its field."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from verl_ebpo.advantage.core import NORMALIZE_MODES

ESTIMATOR_NAME = "ebpo"  # algorithm.adv_estimator=ebpo: the name registered in verl and checked by the callback


def config_get(node, key: str, default=None):
    """`node[key]` of a dict / DictConfig / verl dataclass config, or `default` (also when `node` is None)."""
    return default if node is None else node.get(key, default) if hasattr(node, "get") else getattr(node, key, default)


def from_mapping(cls, mapping=None, prefix: str = "", **defaults):
    """`cls(**mapping)` for a dict / DictConfig / None (a None value: the default; `defaults`: what the mapping's keys
    win over); an unknown key is a ValueError listing the known ones."""
    if mapping is not None and not hasattr(mapping, "items"):
        raise ValueError(f"{prefix or 'options'} must be a mapping of options, got {type(mapping).__name__}")
    raw, known = dict(mapping.items()) if mapping is not None else {}, [f.name for f in dataclasses.fields(cls)]
    if unknown := sorted(str(k) for k in raw if k not in known):
        raise ValueError(f"unknown {prefix + ' ' if prefix else ''}option(s) {unknown}; known options: {known}")
    return cls(**{**defaults, **{k: v for k, v in raw.items() if v is not None}})


def help_field(default, help: str, default_doc: str | None = None):
    """A dataclass field documented beside it (`default_doc`: how its default reads in the table)."""
    return field(default=default, metadata={"help": help, "default_doc": default_doc})


def markdown_table(cls, key_header: str = "key") -> str:
    """| key | default | effect | rows from the fields' `help` (and `default_doc`, how a default reads)."""
    show = lambda v: str(v).lower() if isinstance(v, bool) else str(v)  # noqa: E731
    return "\n".join([f"| {key_header} | default | effect |", "|---|---|---|"] + [
        f"| `{f.name}` | {f.metadata.get('default_doc') or f'`{show(f.default)}`'} | {f.metadata['help']} |"
        for f in dataclasses.fields(cls)])


def validate(obj, prefix: str, numbers: dict = {}, choices: dict = {}, checks: dict = {}, bools=()) -> None:  # noqa: B006
    """Check and normalise a frozen dataclass's fields in place ("0.5" -> 0.5, "true" -> True, as a command line
    gives them): `numbers` {name: (lo, hi, lo_open, integer)} a finite number in [lo, hi] ((lo, hi] with lo_open);
    `choices` {name: allowed}; `checks` {name: fn(value) -> value, or ValueError("must be ...")}; `bools` names.
    A bad value is a ValueError naming `prefix.name`, what it accepts and what it got."""
    for name in [*numbers, *choices, *checks, *bools]:
        value = getattr(obj, name)
        try:
            if name in numbers:
                lo, hi, lo_open, integer = numbers[name]
                try:
                    x = math.nan if isinstance(value, bool) else float(value)
                except (TypeError, ValueError):
                    x = math.nan
                if not (math.isfinite(x) and (x > lo if lo_open else x >= lo) and x <= hi and (not integer or x == int(x))):
                    raise ValueError(f"must be {'a whole' if integer else 'a finite'} number in "
                                     f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if math.isinf(hi) else ']'}")
                new = int(x) if integer else x
            elif name in choices:
                if value not in choices[name]:
                    raise ValueError(f"must be one of {list(choices[name])}")
                new = value
            elif name in checks:
                new = checks[name](value)
            elif isinstance(value, bool) or str(value).strip().lower() in ("true", "false"):
                new = value if isinstance(value, bool) else str(value).strip().lower() == "true"
            else:
                raise ValueError("must be true or false")
        except ValueError as e:
            raise ValueError(f"{prefix + '.' if prefix else ''}{name} {e}, got {value!r}") from None
        object.__setattr__(obj, name, new)


@dataclass(frozen=True)
class EBPOOptions:
    prior_scope: str = field(default="running", metadata={"help": (
        "`running`: statistics accumulate over the whole run (the paper). `batch`: reset every call, so the prior is "
        "the current batch only (what the authors' public code does).")})
    prior_decay: float = field(default=1.0, metadata={"help": (
        "λ in (0, 1]: both accumulators' weight and M2 are multiplied by λ before each merge (λ = 1 is plain "
        "Welford; λ < 1 forgets with a horizon of about 1/(1-λ) steps).")})
    normalize: str = field(default="batch", metadata={"help": (
        "`batch`: `(raw - mean) / (std + eps)` (the paper); `center`: `raw - mean` (the default when "
        "`algorithm.norm_adv_by_std_in_grpo=false`, as in the authors' code); `none`: `raw`. Fewer than two "
        "valid rows give 0 for `batch`/`center`.")})
    epsilon: float = field(default=1e-6, metadata={"help": (
        "in (0, 1]: S = 1 when `sigma2/G + tau2 <= epsilon·(sigma2+tau2)`; `batch` divides by "
        "`std + epsilon·max(abs(raw - mean))`. Both unit-free.")})
    on_nonfinite: str = field(default="error", metadata={"help": (
        "a NaN/inf score, or one whose absolute value exceeds 1e100 (beyond what the prior's float64 moments hold): "
        "`error` raises `ValueError` with the row count and leaves the prior exactly as it was; `skip` treats those "
        "rows as padding and counts them in `ebpo/skipped_rows`.")})
    allow_missing_state: bool = field(default=False, metadata={"help": (
        "on resume, start a fresh prior (with a warning) when the checkpoint holds none "
        "([docs/checkpoint.md](docs/checkpoint.md)).")})

    def __post_init__(self):
        validate(self, "algorithm.ebpo", numbers={"prior_decay": (0.0, 1.0, True, False), "epsilon": (0.0, 1.0, True, False)},
                 choices={"prior_scope": ("running", "batch"), "normalize": NORMALIZE_MODES,
                          "on_nonfinite": ("error", "skip")}, bools=("allow_missing_state",))

    def prior_shaping(self) -> dict:
        """The options that shape the accumulated prior (saved with it, compared on resume)."""
        return {"prior_scope": self.prior_scope, "prior_decay": self.prior_decay}

    @classmethod
    def from_algorithm_config(cls, config) -> "EBPOOptions":
        """Read `config.ebpo` (DictConfig, dict, verl's AlgoConfig or None); `normalize` defaults to `center` when
        `norm_adv_by_std_in_grpo` is false."""
        center = config_get(config, "norm_adv_by_std_in_grpo", True) is False
        return from_mapping(cls, config_get(config, "ebpo"), "algorithm.ebpo", **({"normalize": "center"} if center else {}))

    from_mapping = classmethod(lambda cls, mapping=None, **defaults: from_mapping(cls, mapping, "algorithm.ebpo", **defaults))
    markdown_table = classmethod(markdown_table)
