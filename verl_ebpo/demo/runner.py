"""The demo job: assets, two runs of verl's trainer (GRPO, EBPO), then table, plot and report."""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from verl_ebpo.demo import DEFAULTS

_STEP = re.compile(r"\bstep:(\d+) - ")
_SCORE = re.compile(r"critic/score/mean:([0-9.eE+-]+)")
_ZERO = re.compile(r"ebpo/zero_adv_frac:([0-9.eE+-]+)")


@dataclass
class DemoConfig:
    out: str = DEFAULTS["out"]
    steps: int = DEFAULTS["steps"]
    batch_size: int = DEFAULTS["batch_size"]
    group_size: int = DEFAULTS["group_size"]
    lr: float = DEFAULTS["lr"]
    seed: int = DEFAULTS["seed"]
    max_response_length: int = DEFAULTS["max_response_length"]
    temperature: float = DEFAULTS["temperature"]
    train_rows: int = DEFAULTS["train_rows"]
    algorithms: tuple = ("grpo", "ebpo")
    timeout_s: float = DEFAULTS["timeout"]
    verbose: bool = True
    extra_overrides: list = field(default_factory=list)

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.batch_size < 1 or self.group_size < 2:
            raise ValueError(f"need batch_size >= 1 and group_size >= 2, got {self.batch_size}, {self.group_size}")
        if not self.algorithms:
            raise ValueError("no algorithm to run")
        if self.train_rows < self.batch_size * self.steps:
            self.train_rows = self.batch_size * self.steps  # one epoch covers the run: no data reuse


class PeakMemory:
    """Peak memory of this process and all its descendants (Ray's processes included), sampled every
    `interval` s: the sum of PSS (proportional set size: shared pages split between the processes that
    map them, the fair total) and, for comparison, the sum of RSS (counts shared pages once per process)."""

    def __init__(self, interval: float = 1.0):
        self.interval = interval
        self.peak_pss = 0
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> tuple[int, int]:
        import psutil

        root = psutil.Process()
        pss = rss = 0
        for proc in [root, *root.children(recursive=True)]:
            try:
                info = proc.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
        return pss, rss

    def _loop(self):
        while not self._stop.is_set():
            try:
                pss, rss = self.sample()
                self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
            except Exception:
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def peak_gib(self) -> float:
        return self.peak_pss / 2**30

    @property
    def peak_rss_gib(self) -> float:
        return self.peak_rss / 2**30


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _say(config: DemoConfig, message: str) -> None:
    if config.verbose:
        print(message, flush=True)


def build_assets(config: DemoConfig, folder: Path) -> dict:
    """Tiny model, tokenizer, train/val parquet (offline, deterministic given the seed)."""
    from verl_ebpo.cpu import assets
    from verl_ebpo.demo import task

    model = assets.build_model(folder / "model", seed=config.seed)
    train = assets.write_rl_parquet(task.make_rows(config.train_rows, config.seed), folder / "train.parquet")
    val = assets.write_rl_parquet(task.validation_rows(), folder / "val.parquet")
    return {"model": str(model), "train": str(train), "val": str(val), "parameters": assets.count_parameters(model)}


def make_run(config: DemoConfig, algorithm: str, assets_info: dict, out: Path):
    from verl_ebpo.cpu.launch import CPURun

    run_dir = out / algorithm
    return CPURun(
        model_path=assets_info["model"],
        train_files=assets_info["train"],
        val_files=assets_info["val"],
        out_dir=str(run_dir),
        adv_estimator=algorithm,
        steps=config.steps,
        train_batch_size=config.batch_size,
        n=config.group_size,
        max_response_length=config.max_response_length,
        lr=config.lr,
        temperature=config.temperature,
        seed=config.seed,
        val_before_train=True,
        test_freq=config.steps,
        experiment_name=f"demo_{algorithm}",
        reward_function=("pkg://verl_ebpo.demo.task", "compute_score"),
        extra=[f"trainer.rollout_data_dir={run_dir / 'rollouts'}", *config.extra_overrides],
    )


def _progress_printer(config: DemoConfig, algorithm: str, started: float):
    every = max(1, config.steps // 12)

    def on_line(line: str) -> None:
        match = _STEP.search(line)
        if not match or "critic/score/mean" not in line:
            return
        step = int(match.group(1))
        if step % every and step != config.steps and step != 1:
            return
        score = _SCORE.search(line)
        zero = _ZERO.search(line)
        extra = f"  zero-adv {float(zero.group(1)):.2f}" if zero else ""
        _say(
            config,
            f"  [{algorithm}] step {step:3d}/{config.steps}  reward {float(score.group(1)):.3f}{extra}"
            f"  ({time.time() - started:4.0f} s)",
        )

    return on_line


def run_demo(config: DemoConfig) -> dict:
    """Run the whole demo; returns the summary (also written to `<out>/summary.json`)."""
    from verl_ebpo.cpu.launch import run_main_ppo
    from verl_ebpo.demo import report

    started = time.time()
    out = Path(config.out).resolve()
    for algorithm in config.algorithms:
        shutil.rmtree(out / algorithm, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict = {}
    with PeakMemory() as memory:
        _say(config, f"verl-ebpo demo -> {out}")
        _say(config, "building the tiny model, tokenizer and data (offline) ...")
        assets_info = build_assets(config, out / "assets")
        _say(config, f"  tiny Llama with {assets_info['parameters']:,} parameters; task: 'n+1=' -> first digit n+1")
        for algorithm in config.algorithms:
            run = make_run(config, algorithm, assets_info, out)
            _say(
                config,
                f"training with algorithm.adv_estimator={algorithm}: {config.steps} steps x {config.batch_size} "
                f"prompts x G={config.group_size} (verl + Ray start-up takes about a minute) ...",
            )
            t0 = time.time()
            timings[algorithm] = run_main_ppo(
                run, timeout_s=config.timeout_s, on_line=_progress_printer(config, algorithm, t0)
            )
            _say(config, f"  [{algorithm}] done in {timings[algorithm]:.0f} s (log: {run.log_file})")

    rows_by_algorithm, summaries, all_rows = {}, {}, []
    for algorithm in config.algorithms:
        run_dir = out / algorithm
        metrics = report.load_metrics(run_dir / "metrics.jsonl")
        rows = report.step_rows(algorithm, metrics, report.load_rollouts(run_dir / "rollouts"))
        if len(rows) != config.steps:
            raise RuntimeError(f"{algorithm}: expected {config.steps} logged steps, found {len(rows)} in {run_dir}")
        missing = [r["step"] for r in rows if r["zero_adv_frac"] is None]
        if missing:
            raise RuntimeError(f"{algorithm}: no zero-advantage share for steps {missing[:10]} (rollout dumps missing?)")
        rows_by_algorithm[algorithm] = rows
        summaries[algorithm] = report.summarize(algorithm, rows, metrics)
        all_rows += rows
    timings["total"] = time.time() - started
    timings["peak_pss_gib"] = memory.peak_gib
    timings["peak_rss_sum_gib"] = memory.peak_rss_gib
    settings = {**asdict(config), "parameters": assets_info["parameters"]}
    settings["algorithms"] = list(config.algorithms)

    report.write_csv(all_rows, out / "steps.csv")
    report.plot(rows_by_algorithm, out / "reward_curves.png")
    (out / "report.md").write_text(report.markdown_report(summaries, settings, timings))
    summary = {"settings": settings, "timings": timings, "summaries": summaries}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")

    print(f"done in {timings['total']:.0f} s (peak memory {timings['peak_pss_gib']:.1f} GiB); results in {out}")
    for algorithm, s in summaries.items():
        print(
            f"  {algorithm.upper():5s} training reward: first 10 steps {s['reward_first']:.3f}, "
            f"last 10 steps {s['reward_last']:.3f}; greedy accuracy on the 9 questions "
            f"{_pct(s['val_acc_before'])} -> {_pct(s['val_acc_after'])}"
        )
    print(f"  report: {out / 'report.md'}  plot: {out / 'reward_curves.png'}")
    sys.stdout.flush()
    return summary
