"""Options of the tools' commands: frozen dataclasses whose fields carry their documentation (`help_field`), checked
by `validate` (values as a command line gives them) and rendered for the docs by `markdown_table`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field

from verl_ebpo.advantage.options import as_number, from_mapping

__all__ = ["from_mapping", "help_field", "markdown_table", "validate"]


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
                x = as_number(value)
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
