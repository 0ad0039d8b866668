"""The demo job: per seed the tiny assets, one verl run per algorithm on one shared Ray cluster, then the report."""

from __future__ import annotations

import json
import sys
import threading
import time
import signal
from dataclasses import dataclass
from pathlib import Path

from verl_ebpo.tools.demo.options import DemoOptions
from verl_ebpo.tools.folders import claim_folder, owned_subfolders


class PeakMemory:
    """Peak memory of this process and all its descendants (Ray's processes included, when the cluster is
    started from this process), sampled every `interval` s: the sum of PSS (shared pages split between the
    processes that map them, the fair total) and, for comparison, the sum of RSS."""

    def __init__(self, interval: float = 5.0):
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


COMPARE_FILES = ("comparison.json", "comparison.md", "training_reward.png", "validation_accuracy.png")
OWNED = ("runs", "assets")  # the sub-folders a re-run replaces (a stale checkpoint in runs/ would be resumed)
MARKER_TOOL = "verl-ebpo demo"


def owned_folders(out: Path) -> list[Path]:
    """The demo's `runs/` and `assets/` in `out` that a re-run may delete (`verl_ebpo.tools.folders.owned_subfolders`:
    only under the marker an earlier demo wrote; otherwise `FolderNotOurs`, nothing touched)."""
    return owned_subfolders(out, OWNED, MARKER_TOOL)


def claim_out_folder(out: Path) -> None:
    """Make `out` the demo's (`verl_ebpo.tools.folders.claim_folder`): checked, marked, its stale runs/ and assets/ gone."""
    claim_folder(out, OWNED, MARKER_TOOL)


@dataclass
class Job:
    algo: str
    seed: int
    run_dir: Path
    wall_s: float | None = None


def _say(options: DemoOptions, message: str) -> None:
    if not options.quiet:
        print(message, flush=True)


def build_assets(options: DemoOptions, seed: int, folder: Path) -> dict:
    """Tiny model, tokenizer, train/val parquet for one seed (offline, deterministic given the seed)."""
    from verl_ebpo.tools.tiny import assets, task

    model = assets.build_model(folder / "model", seed=seed)
    train = assets.write_rl_parquet(task.iter_rows(options.train_rows, seed), folder / "train.parquet")
    val = assets.write_rl_parquet(task.validation_rows(), folder / "val.parquet")
    return {"model": str(model), "train": str(train), "val": str(val), "parameters": assets.count_parameters(model)}


def make_run(options: DemoOptions, job: Job, assets_info: dict, ray_address: str | None):
    from verl_ebpo.tools.cpu.launch import CPURun

    return CPURun(
        model_path=assets_info["model"],
        train_files=assets_info["train"],
        val_files=assets_info["val"],
        out_dir=str(job.run_dir),
        steps=options.steps,
        train_batch_size=options.batch_size,
        n=options.group_size,
        max_response_length=options.max_response_length,
        lr=options.lr,
        temperature=options.temperature,
        seed=job.seed,
        val_before_train=True,
        test_freq=options.steps,
        experiment_name=f"demo_{job.algo}_seed{job.seed}",
        reward_function=("pkg://verl_ebpo.tools.tiny.task", "compute_score"),
        ray_address=ray_address,
        extra=[*options.overrides(job.algo), f"trainer.rollout_data_dir={job.run_dir / 'rollouts'}"],
    )


class _Progress(threading.Thread):
    """Prints each running job's progress from its verl metrics file (every ~10% of the steps)."""

    def __init__(self, options: DemoOptions, jobs: list[Job], started: float):
        super().__init__(daemon=True)
        self.options, self.jobs, self.started = options, jobs, started
        self.every = max(1, options.steps // 6)
        self.shown: dict[tuple, int] = {}
        self.stop = threading.Event()

    def run(self):
        from verl_ebpo.tools import verl_logs

        while not self.stop.wait(3.0):
            for job in self.jobs:
                path = job.run_dir / "metrics.jsonl"
                if job.wall_s is not None or not path.exists():
                    continue
                try:
                    metrics = verl_logs.read_metrics(path)
                except (OSError, ValueError):
                    continue  # a line being written
                done = [s for s in metrics if s >= 1 and verl_logs.SCORE in metrics[s]]
                if not done:
                    continue
                step = max(done)
                key = (job.algo, job.seed)
                if step // self.every > self.shown.get(key, 0) // self.every or step == self.options.steps:
                    if self.shown.get(key) == step:
                        continue
                    self.shown[key] = step
                    _say(self.options, f"  [{job.algo} seed {job.seed}] step {step:3d}/{self.options.steps}  trained-on "
                         f"reward {metrics[step][verl_logs.SCORE]:.3f}  ({time.time() - self.started:4.0f} s)")


def run_demo(options: DemoOptions) -> dict:
    """Run the whole demo; returns the summary (also written to `<out>/summary.json`)."""
    from verl_ebpo.tools import verl_logs
    from verl_ebpo.tools.cpu.launch import run_main_ppo, shared_ray_cluster
    from verl_ebpo.tools.compare import compare
    from verl_ebpo.tools.demo import report
    from verl_ebpo.files import atomic_write_text, check_output_path

    started = time.time()
    out = Path(options.out).resolve()
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a folder")
    for name in ("summary.json", "report.md", "reward_curves.png", "steps.csv", *COMPARE_FILES):
        check_output_path(out / name)
    # refuses, before any change, a folder whose runs/ or assets/ the demo did not make; else marks the folder
    # and removes this demo's own runs/ and assets/ of an earlier run
    claim_out_folder(out)
    seeds = options.seed_list
    jobs = [Job(algo, seed, out / "runs" / algo / f"seed{seed}") for seed in seeds for algo in options.algos]
    _say(options, f"verl-ebpo demo -> {out}: {', '.join(options.algos)} x seeds {seeds} x {options.steps} steps "
         f"({len(jobs)} runs of verl's trainer, one Ray cluster)")
    assets_by_seed = {seed: build_assets(options, seed, out / "assets" / f"seed{seed}") for seed in seeds}
    parameters = next(iter(assets_by_seed.values()))["parameters"]
    _say(options, f"  tiny Llama with {parameters:,} parameters per seed; task 'n+1=' -> first digit n+1")

    def stop_on_sigterm(signum, frame):  # a killed demo stops its run (run_main_ppo cleans up on the way out)
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop_on_sigterm)
    try:
        with PeakMemory() as memory, shared_ray_cluster() as address:
            _say(options, f"  Ray cluster up at {address} ({time.time() - started:.0f} s)")
            progress = _Progress(options, jobs, started)
            progress.start()
            try:
                for job in jobs:  # one at a time: TransferQueue's controller is one named actor per cluster
                    run = make_run(options, job, assets_by_seed[job.seed], address)
                    job.wall_s = run_main_ppo(run, timeout_s=options.timeout)
                    _say(options, f"  [{job.algo} seed {job.seed}] done in {job.wall_s:.0f} s")
            finally:
                progress.stop.set()
    finally:
        signal.signal(signal.SIGTERM, previous)

    runs: dict[str, list] = {algo: [] for algo in options.algos}
    for job in jobs:
        metrics = verl_logs.read_metrics(job.run_dir / "metrics.jsonl")
        dumps = verl_logs.read_rollout_dumps(job.run_dir / "rollouts")
        series = report.run_series(job.algo, job.seed, metrics, dumps, options.batch_size, options.group_size,
                                   wall_s=job.wall_s)
        if series.steps != options.steps:
            raise ValueError(f"{job.algo} seed {job.seed}: verl logged {series.steps} steps, expected {options.steps}")
        runs[job.algo].append(series)

    summary = report.summarize(runs)
    seconds = time.time() - started
    settings = {**options.to_mapping(), "algos": list(options.algos), "seeds": seeds, "parameters": parameters,
                "train_rows": options.train_rows,
                "overrides": {a: options.overrides(a) for a in options.algos}}
    rows = report.time_rows(runs)
    summary.update({
        "seconds": seconds,
        "settings": settings,
        "timings": {"peak_pss_gib": memory.peak_pss / 2**30, "peak_rss_sum_gib": memory.peak_rss / 2**30,
                    "per_algo": rows},
    })
    atomic_write_text(out / "steps.csv", report.steps_csv(runs))
    report.plot(runs, out / "reward_curves.png")
    atomic_write_text(out / "report.md", report.markdown_report(summary, settings, rows))
    atomic_write_text(out / "summary.json", json.dumps(report.json_safe(summary), indent=2, sort_keys=True, allow_nan=False) + "\n")
    # verl-ebpo compare over the same runs (verl's own metrics: critic/score/mean is the trained-on reward)
    compare({(job.algo, str(job.seed)): [str(job.run_dir / "metrics.jsonl")] for job in jobs}, {}, out,
            batch_size=options.batch_size, group_size=options.group_size, report_name="comparison.md",
            warn=lambda message: _say(options, f"  compare: {message}"))

    print(f"done in {seconds:.0f} s (peak memory {memory.peak_pss / 2**30:.1f} GiB PSS); results in {out}")
    for algo, a in summary["algos"].items():
        lo, hi = a["final_reward_ci95"]
        ci = "" if lo is None else f" [{lo:.3f}, {hi:.3f}]"
        greedy = "n/a" if a["greedy_accuracy_mean"] is None else f"{a['greedy_accuracy_mean']:.2f}"
        print(f"  {report.NAMES.get(algo, algo):8s} final reward {a['final_reward_mean']:.3f}{ci}  greedy accuracy "
              f"{greedy}  answers generated {a['answers_generated']:,}")
    for c in summary["comparisons"].values():
        print(f"  {c['verdict']}")
    print(f"  report: {out / 'report.md'}  plot: {out / 'reward_curves.png'}")
    sys.stdout.flush()
    return summary
