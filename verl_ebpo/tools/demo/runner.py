"""The demo job: per seed the tiny assets, one verl run per algorithm on one shared Ray cluster, then the report."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import signal
from dataclasses import dataclass
from pathlib import Path

from verl_ebpo.tools.demo.options import DemoOptions
from verl_ebpo.tools.provenance import environment
from verl_ebpo.tools.folders import claim_folder


class PeakMemory(threading.Thread):
    """Peak memory of this process and all its descendants (Ray's processes included, when the cluster is
    started from this process), sampled every `interval` s while running (`stop` ends it): the sum of PSS (shared
    pages split between the processes that map them, the fair total) and, for comparison, the sum of RSS."""

    def __init__(self, interval: float = 5.0):
        super().__init__(daemon=True)
        self.interval, self.peak_pss, self.peak_rss, self.stop = interval, 0, 0, threading.Event()

    def run(self):
        import psutil

        while True:
            pss = rss = 0
            with contextlib.suppress(psutil.Error):
                root = psutil.Process()
                for proc in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):  # a process that ended meanwhile
                        info = proc.memory_full_info()
                        pss, rss = pss + getattr(info, "pss", info.rss), rss + info.rss
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
            if self.stop.wait(self.interval):
                return


# compare's files in the demo's folder (its report.md is the demo's report): its reward figure is the demo's own
# `reward_curves.png` (the same curves, with the share without signal), so compare draws validation accuracy only
COMPARE_VIEWS = ("validation_accuracy",)
COMPARE_FILES = ("comparison.json", "validation_accuracy.png")
OWNED = ("runs", "assets")  # the sub-folders a re-run replaces (a stale checkpoint in runs/ would be resumed)
MARKER_TOOL = "verl-ebpo demo"


@dataclass
class Job:
    algo: str
    seed: int
    run_dir: Path
    wall_s: float | None = None


def _say(options: DemoOptions, message: str) -> None:
    """A line on stdout (not with --quiet), above the progress bar when one is shown."""
    if not options.quiet:
        from tqdm import tqdm

        tqdm.write(message, file=sys.stdout)
        sys.stdout.flush()


def build_assets(options: DemoOptions, seed: int, folder: Path) -> dict:
    """Tiny model, tokenizer, train/val parquet for one seed (offline, deterministic given the seed)."""
    from verl_ebpo.tools.tiny import assets, task

    spec = assets.TinyModelSpec()
    if options.rollout == "vllm":  # vLLM-CPU's attention needs a head size of at least 32
        from verl_ebpo.tools.cpu.vllm_rollout import vllm_model_spec

        spec = vllm_model_spec()
    model = assets.build_model(folder / "model", seed=seed, spec=spec)
    train = assets.write_rl_parquet(task.iter_rows(options.train_rows, seed), folder / "train.parquet")
    val = assets.write_rl_parquet(task.validation_rows(), folder / "val.parquet")
    return {"model": str(model), "train": str(train), "val": str(val), "parameters": assets.count_parameters(model)}


def make_run(options: DemoOptions, job: Job, assets_info: dict, ray_address: str | None, ray_env: dict | None = None):
    from verl_ebpo.tools.cpu.launch import CPURun

    return CPURun(
        model_path=assets_info["model"], train_files=assets_info["train"], val_files=assets_info["val"],
        out_dir=str(job.run_dir), steps=options.steps, train_batch_size=options.batch_size, n=options.group_size,
        max_response_length=options.max_response_length, lr=options.lr, temperature=options.temperature,
        seed=job.seed, val_before_train=True, test_freq=options.steps, rollout=options.rollout,
        experiment_name=f"demo_{job.algo}_seed{job.seed}", ray_address=ray_address, ray_env=dict(ray_env or {}),
        reward_function=("pkg://verl_ebpo.tools.tiny.task", "compute_score"),
        extra=[*options.overrides(job.algo), f"trainer.rollout_data_dir={job.run_dir / 'rollouts'}",
               *checkpoint_overrides(options, job)])


def checkpoint_overrides(options: DemoOptions, job: Job) -> list[str]:
    """The run named by `DemoOptions.checkpoint_run` saves its last step only (one checkpoint kept, its EBPO prior
    with it, for `verl-ebpo inspect`); every other run saves none."""
    if (job.algo, job.seed) != options.checkpoint_run:
        return []
    return [f"trainer.save_freq={options.steps}", "trainer.max_actor_ckpt_to_keep=1"]


def schedule(options: DemoOptions, jobs: list[Job]) -> list[Job]:
    """The order the runs start in: longest estimated first (DAPO), so the lanes finish close together; ties keep
    the order given (seed, then algorithm)."""
    return sorted(jobs, key=lambda job: -options.job_seconds(job.algo))


def steps_done(job: Job) -> int:
    """Training steps verl has logged so far for `job` (0 before its first; a line being written is skipped)."""
    from verl_ebpo.tools import verl_logs

    try:
        metrics = verl_logs.read_metrics(job.run_dir / "metrics.jsonl")
    except (OSError, ValueError):  # not there yet
        return 0
    return max((s for s in metrics if s >= 1 and verl_logs.SCORE in metrics[s]), default=0)


def time_left(options: DemoOptions, jobs: list[Job], elapsed: float, steps: dict) -> float | None:
    """Seconds left: the elapsed time x (work left / work done), the work of each run weighted by its estimate
    (`DemoOptions.run_seconds`: a finished run counts whole, a running one its start-up and the steps it logged,
    `steps[(algo, seed)]`); before any run has logged a step, the demo's estimate minus the elapsed time (None once
    that is past: not known yet)."""
    total = done = 0.0
    for job in jobs:
        startup, step = options.run_seconds(job.algo)
        work = startup + options.steps * step
        total += work
        if job.wall_s is not None:
            done += work
        elif steps.get((job.algo, job.seed), 0) > 0:
            done += startup + steps[(job.algo, job.seed)] * step
    if done <= 0:
        left = options.cost_estimate()[0] - elapsed
        return left if left > 0 else None
    return elapsed * (total - done) / done


def steps_logged(options: DemoOptions, jobs: list[Job], steps: dict) -> int:
    """Training steps logged over all runs: a finished run counts all its steps, a running one what verl logged."""
    return sum(options.steps if job.wall_s is not None else steps.get((job.algo, job.seed), 0) for job in jobs)


class _Progress(threading.Thread):
    """The demo's progress on stderr (quiet: none): a tqdm bar of the training steps logged out of all runs' steps,
    with the time left (`time_left`), refreshed from verl's metrics files every `interval` s (30 s when stderr is
    not a terminal: a log file)."""

    def __init__(self, options: DemoOptions, jobs: list[Job], started: float, interval: float = 3.0):
        from tqdm import tqdm

        super().__init__(daemon=True)
        self.options, self.jobs, self.started = options, jobs, started
        self.interval = interval if sys.stderr.isatty() else max(interval, 30.0)
        self.steps: dict[tuple, int] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.bar = tqdm(total=len(jobs) * options.steps, desc=f"verl-ebpo demo, {len(jobs)} runs", unit="step",
                        file=sys.stderr, disable=options.quiet, mininterval=0, dynamic_ncols=True,
                        bar_format="{desc}: {n_fmt}/{total_fmt} steps |{bar}| {elapsed}{postfix}")
        self.refresh()

    def refresh(self) -> None:
        left = time_left(self.options, self.jobs, time.time() - self.started, self.steps)
        with self.lock:
            self.bar.n = steps_logged(self.options, self.jobs, self.steps)
            self.bar.set_postfix_str("time left not known yet" if left is None else f"about {left / 60:.1f} min left",
                                     refresh=False)
            self.bar.refresh()

    def job_done(self, job: Job) -> None:
        _say(self.options, f"  [{job.algo} seed {job.seed}] done in {job.wall_s:.0f} s")
        self.refresh()

    def close(self) -> None:
        self.stop.set()
        self.refresh()
        with self.lock:
            self.bar.close()

    def run(self):
        while not self.stop.wait(self.interval):
            self.steps.update({(job.algo, job.seed): steps_done(job) for job in self.jobs if job.wall_s is None})
            self.refresh()


def _run_lanes(options: DemoOptions, jobs: list[Job], assets_by_seed: dict, progress: _Progress, started: float) -> None:
    """Run the jobs on `options.parallel` lanes, each with its own Ray cluster (verl's TransferQueue controller is
    one named actor per cluster, so runs at once need a cluster each); a lane takes the next job when its run ends.
    A failure (or an interrupt of this thread) sets `stop`, which kills the other lanes' runs (`TrainerStopped`),
    and the first real error is raised here."""
    import queue

    from verl_ebpo.tools.cpu.launch import TrainerStopped, ray_cluster, run_main_ppo

    todo: "queue.Queue[Job]" = queue.Queue()
    for job in schedule(options, jobs):
        todo.put(job)
    failed: list[BaseException] = []
    stop = threading.Event()

    def lane(number: int) -> None:
        try:
            with ray_cluster() as (address, auth):
                _say(options, f"  Ray cluster {number + 1} up at {address} ({time.time() - started:.0f} s)")
                while not stop.is_set():
                    try:
                        job = todo.get_nowait()
                    except queue.Empty:
                        return
                    run = make_run(options, job, assets_by_seed[job.seed], address, auth)
                    job.wall_s = run_main_ppo(run, timeout_s=options.timeout, stop=stop)
                    progress.job_done(job)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failed.append(exc)
            stop.set()

    lanes = [threading.Thread(target=lane, args=(i,), daemon=True) for i in range(min(options.parallel, len(jobs)))]
    for t in lanes:
        t.start()
    try:
        while any(t.is_alive() for t in lanes):
            for t in lanes:
                t.join(timeout=0.5)
    except BaseException:
        stop.set()
        for t in lanes:
            t.join(timeout=60)
        raise
    if failed:
        raise next((e for e in failed if not isinstance(e, TrainerStopped)), failed[0])


def run_demo(options: DemoOptions) -> dict:
    """Run the whole demo; returns the summary (also written to `<out>/summary.json`)."""
    from verl_ebpo.tools import verl_logs
    from verl_ebpo.tools.compare import compare
    from verl_ebpo.tools.demo import report
    from verl_ebpo.tools.files import atomic_write_text, check_output_path

    started = time.time()
    out = Path(options.out).resolve()
    figure = f"reward_curves.{options.figure_format}"
    compare_files = [n.replace(".png", f".{options.figure_format}") for n in COMPARE_FILES]
    for name in ("summary.json", "report.md", figure, "steps.csv", *compare_files):
        check_output_path(out / name)
    # refuses, before any change, a folder whose runs/ or assets/ the demo did not make; else marks the folder
    # and removes this demo's own runs/ and assets/ of an earlier run
    claim_folder(out, OWNED, MARKER_TOOL)
    seeds = options.seed_list
    jobs = [Job(algo, seed, out / "runs" / algo / f"seed{seed}") for seed in seeds for algo in options.algos]
    lanes = min(options.parallel, len(jobs))
    _say(options, f"verl-ebpo demo -> {out}: {', '.join(options.algos)} x seeds {seeds} x {options.steps} steps "
         f"({len(jobs)} runs of verl's trainer, {lanes} at once, one Ray cluster each)")
    assets_by_seed = {seed: build_assets(options, seed, out / "assets" / f"seed{seed}") for seed in seeds}
    parameters = next(iter(assets_by_seed.values()))["parameters"]
    _say(options, f"  tiny Llama with {parameters:,} parameters per seed; task 'n+1=' -> first digit n+1")

    def stop_on_sigterm(signum, frame):  # a killed demo stops its runs (run_main_ppo cleans up on the way out)
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop_on_sigterm)
    memory, progress = PeakMemory(), _Progress(options, jobs, started)
    memory.start()
    progress.start()
    try:
        _run_lanes(options, jobs, assets_by_seed, progress, started)
    finally:
        progress.close()
        memory.stop.set()
        memory.join(timeout=10)
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
    summary.update({
        "seconds": seconds,
        "settings": settings,
        "environment": environment(),  # what computed it: per-seed numbers move with it (docs/demo.md)
        "timings": {"peak_pss_gib": memory.peak_pss / 2**30, "peak_rss_sum_gib": memory.peak_rss / 2**30,
                    "per_algo": report.time_rows(runs)},
    })
    atomic_write_text(out / "steps.csv", report.steps_csv(runs))
    report.plot(runs, out / figure)
    for fmt in ("png", "pdf", "svg"):  # an earlier demo's figure in another format: not this run's
        stale = out / f"reward_curves.{fmt}"
        if fmt != options.figure_format and stale.is_file() and not stale.is_symlink():
            stale.unlink()
    atomic_write_text(out / "summary.json", json.dumps(report.json_safe(summary), indent=2, sort_keys=True, allow_nan=False) + "\n")
    # the report: verl-ebpo compare over the same runs (verl's own metrics: critic/score/mean is the trained-on reward)
    compare({(job.algo, str(job.seed)): [str(job.run_dir / "metrics.jsonl")] for job in jobs}, {}, out,
            batch_size=options.batch_size, group_size=options.group_size,
            warn=lambda message: _say(options, f"  compare: {message}"), views=COMPARE_VIEWS,
            dapo=tuple(a for a in options.algos if a == "dapo"), fmt=options.figure_format)

    print(f"done in {seconds:.0f} s (peak memory {memory.peak_pss / 2**30:.1f} GiB PSS); results in {out}")
    for algo, a in summary["algos"].items():
        lo, hi = a["final_reward_ci95"]
        ci = "" if lo is None else f" [{lo:.3f}, {hi:.3f}]"
        greedy = "n/a" if a["greedy_accuracy_mean"] is None else f"{a['greedy_accuracy_mean']:.2f}"
        print(f"  {report.NAMES.get(algo, algo):8s} final reward {a['final_reward_mean']:.3f}{ci}  greedy accuracy "
              f"{greedy}  answers generated {a['answers_generated']:,}")
    from verl_ebpo.tools.compare.markdown import verdict_lines

    for line in verdict_lines([c["verdict"] for c in summary["comparisons"].values()]):
        print(f"  {line}")
    print(f"  report: {out / 'report.md'}  figures: {out / figure} and compare's beside it")
    if options.checkpoint_run:
        algo, seed = options.checkpoint_run
        print(f"  checkpoint kept (last step, EBPO's prior in it): verl-ebpo inspect {out / 'runs' / algo / f'seed{seed}' / 'checkpoints'}")
    sys.stdout.flush()
    return summary
