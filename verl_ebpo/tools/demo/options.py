"""The demo's options (one dataclass, each option documented beside its field: the CLI and the docs table come from
it) and the algorithms it compares, each as the verl overrides that define it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from verl_ebpo.tools.options import from_mapping, help_field, markdown_table, validate
from verl_ebpo.tools import algorithms as _algorithms

# name -> what it is. The verl keys of each come from `verl_ebpo.tools.algorithms` (paper protocol), the one
# definition the recipes use too; everything else is identical between the algorithms.
ALGORITHMS: dict[str, str] = dict(_algorithms.DESCRIPTIONS)
DEFAULT_ALGOS = ("grpo", "dapo", "ebpo")
# refused without --force past these (docs/demo.md, "Cost")
MAX_SECONDS = 12 * 3600.0
MAX_BYTES = 16 * 2**30
PARALLEL_SLOWDOWN = 0.4  # a run's slowdown per other run at once (2 cores; measured, docs/demo.md "Speed")
# one run alone (docs/demo.md "Cost"): the committed default run's per-run times (two lanes) divided by 1.4
STARTUP_S = 78.0  # verl's start-up and shut-down
STEP_S = 0.25  # a step's fixed part
STEP_PER_ANSWER_S = 0.023  # per answer of 4 tokens
DAPO_STEP_FACTOR = 3.4  # DAPO's step (its extra generation, refills waiting with `deterministic`)
OVERHEAD_S = 30.0  # assets, Ray clusters, the report
TRAIN_ROWS_CAP = 100_000  # beyond it verl starts another epoch over the same rows (total_training_steps is set)


def _algo_list(value) -> tuple[str, ...]:
    names = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(dict.fromkeys(n.strip().lower() for n in names if str(n).strip()))
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown or not names:
        raise ValueError(f"must be a comma-separated list of {sorted(ALGORITHMS)}")
    return names


@dataclass(frozen=True)
class DemoOptions:
    algos: tuple = help_field(DEFAULT_ALGOS,
        "algorithms to compare, any of `grpo`, `drgrpo`, `dapo`, `ebpo` (comma-separated)",
        "`grpo,dapo,ebpo`")
    seeds: int = help_field(3,
        "seeds per algorithm (0..N-1); seed s gives every algorithm the same initial model, data order and sampling "
        "seed, so the runs are compared in pairs")
    quick: bool = help_field(False, "one seed per algorithm, for a first look (no intervals)")
    steps: int = help_field(60, "training steps per run")
    batch_size: int = help_field(16, "prompts per training step")
    group_size: int = help_field(4, "answers per prompt (G)")
    lr: float = help_field(2.5e-3, "actor learning rate")
    max_response_length: int = help_field(4, "answer length limit (tokens)")
    temperature: float = help_field(1.0, "sampling temperature of the rollout")
    parallel: int = help_field(2,
        "verl runs at once, each on its own Ray cluster (on 2 cores two do the work about 1.4x as fast as one; each "
        "about 4.6 GiB)")
    timeout: float = help_field(3600.0, "seconds allowed per run before it is stopped as hung (DAPO runs take longest)")
    rollout: str = help_field("hf",
        "the main job's rollout: `hf` (the CPU backend's, faster here) or `vllm` (verl's own vLLM rollout; needs the "
        "venv of `verl_ebpo/tools/cpu/vllm_env.sh`, docs/cpu_backend.md)")
    out: str = help_field("runs/demo",
        "output folder (new, empty or an earlier demo's: a re-run replaces its `runs/` and `assets/` only when the "
        "demo's `.verl-ebpo-owner` marker is there)")
    figure_format: str = help_field("png", "format of the figures (`png` at 150 dpi; `pdf` and `svg` are vector)")
    quiet: bool = help_field(False, "print only the result")
    force: bool = help_field(False, "run even when the time or memory estimate is past the bound (12 h, 16 GiB)")

    def __post_init__(self):
        whole = {"seeds": (1, 1000), "steps": (1, 100000), "batch_size": (1, 4096), "group_size": (2, 64),
                 "max_response_length": (2, 64), "parallel": (1, 8)}
        validate(self, "", numbers={**{k: (lo, hi, False, True) for k, (lo, hi) in whole.items()},
                                    "lr": (0.0, 1.0, True, False), "temperature": (0.0, 10.0, True, False),
                                    "timeout": (1.0, 86400.0, False, False)},
                 choices={"rollout": ("hf", "vllm"), "figure_format": ("png", "pdf", "svg")},
                 checks={"algos": _algo_list}, bools=("quick", "quiet", "force"))

    from_mapping = classmethod(from_mapping)
    markdown_table = classmethod(markdown_table)
    to_mapping = dataclasses.asdict

    @property
    def seed_list(self) -> list[int]:
        return [0] if self.quick else list(range(self.seeds))

    @property
    def train_rows(self) -> int:
        """Rows per seed's training file: room for DAPO's extra prompts without repeating rows, at most
        TRAIN_ROWS_CAP (verl then reshuffles the same rows into a new epoch)."""
        return min(max(4096, 4 * self.batch_size * self.steps), TRAIN_ROWS_CAP)

    def run_seconds(self, algo: str) -> tuple[float, float]:
        """(start-up, seconds per step) of one run of `algo` alone on the machine: `STARTUP_S`, and `STEP_S` +
        `STEP_PER_ANSWER_S` x batch_size x group_size x max_response_length / 4, x `DAPO_STEP_FACTOR` for DAPO's
        extra generation (calibrated on the committed default run, docs/demo.md "Cost")."""
        step = STEP_S + STEP_PER_ANSWER_S * self.batch_size * self.group_size * self.max_response_length / 4
        return STARTUP_S, step * (DAPO_STEP_FACTOR if algo == "dapo" else 1.0)

    def job_seconds(self, algo: str) -> float:
        """Estimated wall time of one run of `algo` alone: start-up + steps x seconds per step."""
        startup, step = self.run_seconds(algo)
        return startup + self.steps * step

    @property
    def checkpoint_run(self) -> tuple[str, int] | None:
        """The run that keeps its last checkpoint (EBPO's prior with it), for `verl-ebpo inspect`: EBPO's first
        seed; None without EBPO."""
        return ("ebpo", self.seed_list[0]) if "ebpo" in self.algos else None

    def cost_estimate(self) -> tuple[float, float]:
        """(seconds, bytes) of the whole demo, from the options alone.

        time = `OVERHEAD_S` + the runs (`job_seconds`, each alone) laid out longest first on `parallel` lanes (the
        demo's order: a lane takes the next run when its run ends), sharing the CPU: while k lanes are busy each
        runs at 1 / (1 + `PARALLEL_SLOWDOWN` (k - 1)) of its speed alone, so a lane left alone at the end runs at
        full speed; memory = 4.6 GiB per lane (Ray, verl, one trainer) + 2 KiB per training row."""
        costs = sorted((self.job_seconds(a) for a in self.algos for _ in self.seed_list), reverse=True)
        n_lanes = min(self.parallel, len(costs))
        left = [0.0] * n_lanes  # work left of each lane's current run (0: idle)
        queue, clock = list(costs), 0.0
        while True:
            for i in range(n_lanes):
                if left[i] <= 0 and queue:
                    left[i] = queue.pop(0)
            busy = [i for i in range(n_lanes) if left[i] > 0]
            if not busy:
                break
            speed = 1.0 / (1.0 + PARALLEL_SLOWDOWN * (len(busy) - 1))
            first = min(left[i] for i in busy)  # until the first busy lane's run ends
            clock += first / speed
            for i in busy:
                left[i] -= first
        return OVERHEAD_S + clock, 4.6 * 2**30 * n_lanes + 2048.0 * self.train_rows

    def cost_line(self) -> tuple[str, bool]:
        """The printed estimate and whether it is within the bound."""
        seconds, nbytes = self.cost_estimate()
        ok = seconds <= MAX_SECONDS and nbytes <= MAX_BYTES
        return (f"estimated {seconds / 60:,.0f} min, {nbytes / 2**30:.1f} GiB peak (bound {MAX_SECONDS / 3600:g} h, "
                f"{MAX_BYTES / 2**30:g} GiB)"), ok

    def overrides(self, algo: str) -> list[str]:
        """The recipes' keys of `algo` (paper protocol), sized to this demo's response length, with DAPO's overlong
        penalty at 0 (the recipes' `OVERLONG_PENALTY=0`): at a budget of a few tokens nearly every answer is "overlong"
        by DAPO's rule (longer than half the budget), so the penalty would shift DAPO's logged reward by about -1 and
        the report would compare shaped against unshaped rewards. Every run sets the plugin's replay buffer (which
        `CPURun` plugs in for its fast poll) the deterministic one (`tools.cpu.deterministic`): DAPO's refills no longer depend on timing, and every
        algorithm's batch is laid out in draw order instead of the order its answers finished, so the loss sums in
        the same order and a seed repeats a run (docs/demo.md#reproducibility)."""
        from verl_ebpo.tools.cpu.deterministic import DETERMINISTIC_OVERRIDES  # here: the samplers load numpy

        keys = _algorithms.overrides(algo, "paper", max_response_length=self.max_response_length, overlong_penalty=0.0)
        return [*keys, *DETERMINISTIC_OVERRIDES]


def algorithms_table() -> str:
    rows = ["| algorithm | what it is | verl overrides |", "|---|---|---|"]
    for name, doc in ALGORITHMS.items():
        overrides = DemoOptions().overrides(name)
        rows.append(f"| `{name}` | {doc} | {', '.join(f'`{o}`' for o in overrides)} |")
    return "\n".join(rows)
