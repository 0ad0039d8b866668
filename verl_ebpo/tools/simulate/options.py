"""The simulator's options: one dataclass (`SimOptions`), each option documented beside its field (the CLI comes from
it), its rules in `__post_init__`. The defaults are the committed study's (docs/simulator.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from verl_ebpo.tools.options import from_mapping, help_field, validate

ESTIMATORS = ("grpo", "drgrpo", "rloo", "rfpp_baseline", "ebpo", "ebpo_batch")
EBPO = "ebpo"  # every comparison is EBPO minus a baseline
GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)  # the learning rates each estimator is tuned over (Adam)


def words(value: Any) -> list[str]:
    """How a value reads on the command line: `--lr-grid 0.3 3`, `--G 2 4`."""
    return [f"{v:g}" if isinstance(v, float) else str(v) for v in (value if isinstance(value, tuple) else [value])]


def _group_sizes(value: Any) -> tuple[int, ...]:
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    try:
        out = tuple(int(float(x)) for x in items if float(x) == int(float(x)) and float(x) >= 2)
    except (TypeError, ValueError, OverflowError):
        out = ()
    if not items or len(out) != len(items) or len(set(out)) != len(out):
        raise ValueError("must be distinct whole numbers >= 2")
    return out


def split_estimators(text: str) -> list[str]:
    """'grpo,dapo ebpo:prior_decay=0.9,normalize=none' -> ['grpo', 'dapo', 'ebpo:prior_decay=0.9,normalize=none'].

    Whitespace and commas separate estimators; a comma-separated piece with '=' but no ':' continues the
    options of the estimator before it.
    """
    items: list[str] = []
    for token in text.split():
        for piece in filter(None, token.split(",")):
            if "=" in piece and ":" not in piece and items:
                items[-1] += "," + piece
            else:
                items.append(piece)
    return items


def _names(value: Any) -> tuple[str, ...]:
    items = split_estimators(value) if isinstance(value, str) else [str(v).strip() for v in value]
    items = [i for i in items if i]
    if len(set(items)) != len(items):
        raise ValueError("lists an estimator twice")
    from verl_ebpo.tools.simulate.estimators import parse_estimator

    for item in items:
        parse_estimator(item)  # raises ValueError naming what is wrong
    if EBPO not in items:
        raise ValueError(f"must include {EBPO} (every comparison is {EBPO} minus a baseline)")
    return tuple(items)


def _lr_grid(value: Any):
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    try:
        grid = tuple(float(v) for v in items)
    except (TypeError, ValueError):
        raise ValueError("must be learning rates > 0") from None
    if not grid or not all(math.isfinite(x) and 0 < x <= 1e3 for x in grid) or len(set(grid)) != len(grid):
        raise ValueError("must be distinct learning rates in (0, 1000]")
    return grid


@dataclass(frozen=True)
class SimOptions:
    """Everything the study depends on (with the seeds, it determines every number)."""

    G: tuple = help_field((2, 4, 8),
        "group sizes to sweep (answers per prompt); each must divide `answers_per_step`.")
    seeds: int = help_field(30,
        "reporting seeds per estimator and G (seeds `seed`, `seed+1`, ...); one seed gives no interval.")
    tune_seeds: int = help_field(10,
        "tuning seeds (`seed+seeds`, ...; disjoint from the reporting seeds): each estimator's learning rate is the "
        "grid value with the highest mean AUC on these, chosen before the reporting seeds are looked at.")
    lr_grid: tuple = help_field(GRID,
        "learning rates each estimator is tuned over (Adam); one value: no tuning.")
    negligible: float = help_field(0.005,
        "practical threshold: a resolved difference in final success smaller than this is reported as negligible "
        "(0.005 = half a point of success).")
    grad_draws: int = help_field(32,
        "the mechanism: one-step gradient estimates drawn per reporting seed, estimator and G at the initial policy, "
        'against the exact gradient (docs/simulator.md, "Gradient"); 0: not measured.')
    grad_warmup: int = help_field(8,
        "batches fed to each estimator before the measured draws (they fill EBPO's running prior).")
    seed: int = help_field(0, "first seed.")
    estimators: tuple = help_field(ESTIMATORS,
        "estimators to compare (docs/simulator.md), `ebpo` among them; `NAME:key=value,...` sets options, e.g. "
        "`ebpo:prior_decay=0.9`.")
    prompts: int = help_field(512, "training prompts per seed.")
    steps: int = help_field(100,
        "optimizer steps of the non-resampling estimators; the answer budget is `steps * answers_per_step` for every "
        "estimator.")
    answers_per_step: int = help_field(256, "answers in one training batch (prompts per step = answers_per_step / G).")
    max_gen_batches: int = help_field(10,
        "DAPO: at most this many generation batches per step (verl's `algorithm.filter_groups.max_num_gen_batches`); "
        "when they yield fewer non-degenerate groups than a batch holds, the step trains on those it has (counted as "
        "`short_batches`).")
    lr_warmup: float = help_field(0.1,
        "share of the answer budget over which the lr rises linearly to its value: a step's lr is lr x min(1, answers "
        "generated so far / (lr_warmup x budget)) (verl's `actor.optim.lr_warmup_steps_ratio`, counted in answers so "
        "that DAPO, which takes fewer steps, warms up over the same answers); 0: none. Without it Adam's first step "
        "moves every parameter by the full lr.")
    erosion: float = help_field(0.1,
        "kappa: every logit loses kappa x mean_j theta_j^2, the mean square of the policy's parameters (their drift "
        "from the initial policy): moving the weights where the task does not need them erodes what every prompt "
        "relies on, so a random walk of the parameters lowers success (without it, it raises a hard prompt's success "
        "toward 1/2, and the largest learning rates win by coin flips). 0: none.")
    weight_decay: float = help_field(0.0,
        "another drift penalty than `erosion`: every optimizer step first multiplies the parameters by (1 - "
        "weight_decay), pulling the policy back toward the initial one (theta = 0) with a horizon of about "
        "1/weight_decay steps (AdamW's decoupled decay, not scaled by the lr). 0: none. Range [0, 0.5].")
    features: int = help_field(16, "dimension d of each prompt's random feature vector e_q.")

    def __post_init__(self) -> None:
        whole = {"seeds": (1, 10_000), "tune_seeds": (1, 1_000), "grad_draws": (0, 100_000), "grad_warmup": (0, 100_000),
                 "seed": (0, 2**31 - 1), "prompts": (2, 1_000_000), "steps": (1, 1_000_000),
                 "answers_per_step": (2, 1_000_000), "max_gen_batches": (1, 1_000_000), "features": (0, 10_000)}
        real = {"negligible": (0.0, 1.0), "lr_warmup": (0.0, 1.0), "erosion": (0.0, 100.0), "weight_decay": (0.0, 0.5)}
        validate(self, "simulate", numbers={**{k: (lo, hi, False, True) for k, (lo, hi) in whole.items()},
                                            **{k: (lo, hi, False, False) for k, (lo, hi) in real.items()}},
                 checks={"G": _group_sizes, "lr_grid": _lr_grid, "estimators": _names})
        bad = [g for g in self.G if self.answers_per_step % g]
        if bad:
            raise ValueError(
                f"simulate.answers_per_step={self.answers_per_step} is not a multiple of G={bad}; "
                "choose group sizes that divide it (or change --answers-per-step)"
            )

    @property
    def budget(self) -> int:
        """Answers generated per run, the same for every estimator and G."""
        return self.steps * self.answers_per_step

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))

    @property
    def tune_seed_list(self) -> list[int]:
        return list(range(self.seed + self.seeds, self.seed + self.seeds + self.tune_seeds))

    from_mapping = classmethod(lambda cls, mapping=None: from_mapping(cls, mapping, "simulate"))
