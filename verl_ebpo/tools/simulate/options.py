"""The simulator's options: one dataclass (`SimOptions`), each option documented beside its field (the CLI and the
table of docs/simulator.md come from it), its rules in `__post_init__`."""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass
from typing import Any

from verl_ebpo.tools.options import from_mapping, help_field, markdown_table, validate

DEFAULT_ESTIMATORS = ("grpo", "drgrpo", "rfpp_baseline", "rloo", "dapo", "js", "ebpo")
LR_GRID = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)  # the learning rates each estimator is tuned over (Adam)
REGIME_NAMES = ALL_REGIMES = ("shared", "per_prompt", "hard")
# what a named regime fixes; with a named regime (or `all`) these must stay at their defaults
REGIME_KNOBS = ("beta", "transfer", "score_noise")


def _ints(value: Any, what: str, lo: int) -> tuple[int, ...]:
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    out = []
    for item in items:
        try:
            x = float(item)
        except (TypeError, ValueError):
            raise ValueError(f"must be {what}") from None
        if not math.isfinite(x) or x != int(x) or x < lo:
            raise ValueError(f"must be {what}")
        out.append(int(x))
    if not out:
        raise ValueError(f"must be {what} (none given)")
    if len(set(out)) != len(out):
        raise ValueError("lists a value twice")
    return tuple(out)


def _group_sizes(value: Any) -> tuple[int, ...]:
    return _ints(value, "whole numbers >= 2", 2)


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
    if not items:
        raise ValueError("must name at least one estimator")
    if len(set(items)) != len(items):
        raise ValueError("lists an estimator twice")
    from verl_ebpo.tools.simulate.estimators import parse_estimator

    for item in items:
        parse_estimator(item)  # raises ValueError naming what is wrong
    return tuple(items)


def _beta(value: Any) -> tuple[float, float]:
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    try:
        a, b = (float(v) for v in items)
    except (TypeError, ValueError):
        raise ValueError("must be two numbers A B (the Beta distribution's parameters)") from None
    if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
        raise ValueError("must be two finite numbers > 0")
    return (a, b)


def _lr_grid(value: Any):
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    try:
        grid = tuple(float(v) for v in items)
    except (TypeError, ValueError):
        raise ValueError("must be learning rates > 0") from None
    if not grid or not all(math.isfinite(x) and 0 < x <= 1e3 for x in grid) or len(set(grid)) != len(grid):
        raise ValueError("must be distinct learning rates in (0, 1000]")
    return grid


def _regime(value: Any) -> str:
    name = str(value).strip().lower()
    if name not in ("all", "custom", *REGIME_NAMES):
        raise ValueError(f"must be `all`, `custom` or one of {list(REGIME_NAMES)}")
    return name


def _transfer(value: Any) -> tuple[float, float, float, float]:
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    try:
        c = tuple(float(v) for v in items)
    except (TypeError, ValueError):
        raise ValueError("must be four numbers (global, topic, features, own)") from None
    if len(c) != 4 or not all(math.isfinite(x) and x >= 0 for x in c) or sum(c) <= 0:
        raise ValueError("must be four finite numbers >= 0 (global, topic, features, own), not all 0")
    return c  # type: ignore[return-value]


@dataclass(frozen=True)
class SimOptions:
    """Everything a simulation sweep depends on (with the seeds, it determines every number)."""

    G: tuple = help_field((2, 8, 16),
        "group sizes to sweep (answers per prompt); each must divide `answers_per_step`.",
        "`2 8 16`")
    regime: str = help_field("all",
        "`all`: `shared`, `per_prompt`, `hard` (docs/simulator.md); one of those names: that one; `custom`: the model "
        "knobs as given. A named regime fixes `beta`, `transfer`, `score_noise`: set those only with `custom`.")
    seeds: int = help_field(5,
        "reporting seeds per estimator and G (seeds `seed`, `seed+1`, ...); one seed gives no interval.")
    tune_seeds: int = help_field(5,
        "tuning seeds (`seed+seeds`, ...; disjoint from the reporting seeds): each estimator's learning rate is the "
        "grid value with the highest mean AUC on these, chosen before the reporting seeds are looked at.")
    lr_grid: tuple = help_field(LR_GRID,
        "learning rates each estimator is tuned over (Adam); one value: no tuning.",
        "`" + " ".join(f"{x:g}" for x in LR_GRID) + "`")
    negligible: float = help_field(0.005,
        "practical threshold: a resolved difference in final success smaller than this is reported as negligible "
        "(0.005 = half a point of success).")
    grad_draws: int = help_field(32,
        "the mechanism: one-step gradient estimates drawn per reporting seed, estimator and G at the initial policy, "
        'against the exact gradient (docs/simulator.md, "Gradient"); 0: not measured.')
    grad_warmup: int = help_field(8,
        "batches fed to each estimator before the measured draws (they fill EBPO's running prior).")
    seed: int = help_field(0, "first seed.")
    estimators: tuple = help_field(DEFAULT_ESTIMATORS,
        "estimators to compare (table below); `NAME:key=value,...` sets options, e.g. `ebpo:prior_decay=0.9`.",
        "`" + " ".join(DEFAULT_ESTIMATORS) + "`")
    prompts: int = help_field(512, "training prompts per seed.")
    heldout: int = help_field(128,
        "held-out prompts (never trained on; they improve only by transfer through the shared parameters).")
    beta: tuple = help_field((0.5, 1.5),
        "initial success rates p0 ~ Beta(A, B) (mean A/(A+B)); with `topics` > 1 this is the law of the topics' mean "
        "success rates.",
        "`0.5 1.5`")
    topics: int = help_field(1,
        "number of topics K (clustered difficulties: topic k has mean success m_k ~ Beta(A, B), its prompts p0 ~ "
        "Beta(c m_k, c (1 - m_k))).")
    concentration: float = help_field(8.0, "c above: how tightly a topic's prompts cluster around its mean.")
    order: str = help_field("auto",
        "presentation order. `random`: a fresh permutation every epoch (verl's `data.shuffle=True`). `topic`: topic by"
        " topic, the same order every epoch (a topic-sorted file with `data.shuffle=False`). `auto`: `topic` when "
        "`topics` > 1, else `random`.")
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
    score_noise: float = help_field(3.0,
        "sigma_n: each answer's log-probability gradient also carries sigma_n * zeta_i, zeta_i ~ N(0, I), unrelated to"
        " success (the rest of its tokens); the update adds sum_i A_i zeta_i / N.")
    erosion: float = help_field(0.1,
        "kappa: every logit loses kappa x mean_j theta_j^2, the mean square of the policy's parameters (their drift "
        "from the initial policy): moving the weights where the task does not need them erodes what every prompt "
        "relies on, so a random walk of the parameters lowers success (without it, it raises a hard prompt's success "
        "toward 1/2, and the largest learning rates win by coin flips). 0: the model before it (docs/simulator.md "
        "shows both).")
    weight_decay: float = help_field(0.0,
        "another drift penalty than `erosion`: every optimizer step first multiplies the parameters by (1 - "
        "weight_decay), pulling the policy back toward the initial one (theta = 0) with a horizon of about "
        "1/weight_decay steps (AdamW's decoupled decay, not scaled by the lr). 0: none. Range [0, 0.5].")
    features: int = help_field(16, "dimension d of each prompt's random feature vector e_q.")
    transfer: tuple = help_field((0.3, 0.3, 0.2, 0.2),
        "(c_glob, c_topic, c_feat, c_own): how a logit is made from shared and own parameters, i.e. how much learning "
        "on one prompt moves another (see the model).",
        "`0.3 0.3 0.2 0.2`")

    def __post_init__(self) -> None:
        whole = {"seeds": (1, 10_000), "tune_seeds": (1, 1_000), "grad_draws": (0, 100_000), "grad_warmup": (0, 100_000),
                 "seed": (0, 2**31 - 1), "prompts": (2, 1_000_000), "heldout": (0, 1_000_000), "topics": (1, 10_000),
                 "steps": (1, 1_000_000), "answers_per_step": (2, 1_000_000), "max_gen_batches": (1, 1_000_000),
                 "features": (0, 10_000)}
        real = {"negligible": (0.0, 1.0), "lr_warmup": (0.0, 1.0), "score_noise": (0.0, math.inf), "erosion": (0.0, 100.0),
                "weight_decay": (0.0, 0.5)}
        validate(self, "simulate", numbers={**{k: (lo, hi, False, True) for k, (lo, hi) in whole.items()},
                                            **{k: (lo, hi, False, False) for k, (lo, hi) in real.items()},
                                            "concentration": (0.0, math.inf, True, False)},
                 choices={"order": ("auto", "random", "topic")},
                 checks={"G": _group_sizes, "regime": _regime, "lr_grid": _lr_grid, "estimators": _names, "beta": _beta,
                         "transfer": _transfer})
        if self.regime != "custom":
            fixed = [k for k in REGIME_KNOBS if getattr(self, k) != getattr(type(self), k)]
            if fixed:
                raise ValueError(f"simulate.{fixed[0]} is fixed by regime={self.regime}; set it with regime=custom")
        bad = [g for g in self.G if self.answers_per_step % g]
        if bad:
            raise ValueError(
                f"simulate.answers_per_step={self.answers_per_step} is not a multiple of G={bad}; "
                "choose group sizes that divide it (or change --answers-per-step)"
            )

    @property
    def resolved_order(self) -> str:
        if self.order == "auto":
            return "topic" if self.topics > 1 else "random"
        return self.order

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

    @property
    def lrs(self) -> tuple:
        return self.lr_grid

    @property
    def regime_names(self) -> tuple:
        return ALL_REGIMES if self.regime == "all" else (self.regime,)

    from_mapping = classmethod(lambda cls, mapping=None, **defaults: from_mapping(cls, mapping, "simulate", **defaults))
    markdown_table = classmethod(markdown_table)
    to_mapping = dataclasses.asdict
