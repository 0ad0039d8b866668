"""Run verl's trainer for a `CPURun` as a subprocess and watch it: `run_main_ppo` streams its output to a log
file and, on failure or timeout, raises `TrainerFailed` with the tail of the output and of Ray's worker error
logs (`ray_worker_errors`: verl's agent-loop and reward workers die without a traceback in the driver)."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from verl_ebpo.tools.cpu.cluster import SHARED_RAY_PREFIX, _kill_group
from verl_ebpo.tools.cpu.overrides import CPURun

RAY_LOG_GLOBS = (
    "/tmp/ray/session_latest/logs/worker-*.err",
    os.path.join(tempfile.gettempdir(), SHARED_RAY_PREFIX + "*", "session_latest", "logs", "worker-*.err"),
)


class TrainerStopped(RuntimeError):
    """The trainer was stopped on request (`run_main_ppo(stop=...)`): another run failed or the job was interrupted."""


class TrainerFailed(RuntimeError):
    """verl's trainer exited with an error (message: exit code, output tail, Ray worker errors)."""

    def __init__(self, message: str, returncode: Optional[int] = None, log_file: Optional[Path] = None):
        super().__init__(message)
        self.returncode = returncode
        self.log_file = log_file


def ray_worker_errors(since: float, max_chars: int = 6000) -> str:
    """Tracebacks/errors from Ray's worker logs modified after `since` (epoch seconds)."""
    chunks = []
    for path in sorted(p for pattern in RAY_LOG_GLOBS for p in glob.glob(pattern)):
        try:
            if os.path.getmtime(path) < since:
                continue
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        if "Traceback" in text or re.search(r"\bError\b", text):
            start = text.rfind("Traceback")
            chunks.append(f"--- {path}\n{text[start if start >= 0 else -2000:][-2000:]}")
    return "\n".join(chunks)[-max_chars:]


def run_main_ppo(
    run: CPURun,
    *,
    timeout_s: float = 900,
    on_line: Optional[Callable[[str], None]] = None,
    env: Optional[dict] = None,
    stop: Optional[threading.Event] = None,
) -> float:
    """Run verl's trainer for `run`; returns the wall time in seconds. Raises `TrainerFailed`.

    The trainer runs in its own process group in `run.out_dir` (Hydra's outputs land there); its
    output goes to `run.log_file` and, line by line, to `on_line`. Setting `stop` (from another thread) kills it
    and raises `TrainerStopped`.
    """
    Path(run.out_dir).mkdir(parents=True, exist_ok=True)
    started = time.time()
    tail: list[str] = []

    def pump(stream, log) -> None:
        for line in stream:
            log.write(f"[{time.time() - started:7.1f}s] {line}")
            log.flush()
            tail[:] = [*tail[-79:], line]
            if on_line is not None:
                on_line(line.rstrip("\n"))

    def failed(headline: str, **kw) -> TrainerFailed:  # the output's tail and Ray's worker tracebacks
        return TrainerFailed(f"{headline} (log: {run.log_file})\n" + "".join(tail[-40:]) + "\nRay worker errors:\n"
                             + ray_worker_errors(started), log_file=run.log_file, **kw)

    from verl_ebpo.tools.cpu import vllm_rollout  # vLLM's shared memory outlives its killed workers

    with open(run.log_file, "w") as log, (vllm_rollout.segments_removed_at_exit() if run.rollout == "vllm"
                                          else contextlib.nullcontext()):
        proc = subprocess.Popen(run.command(), cwd=run.out_dir, env=env if env is not None else run.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                start_new_session=True)
        reader = threading.Thread(target=pump, args=(proc.stdout, log), daemon=True)
        reader.start()
        deadline = time.time() + timeout_s
        try:
            while proc.poll() is None:
                if stop is not None and stop.is_set():
                    raise TrainerStopped(f"verl trainer stopped on request (log: {run.log_file})")
                if time.time() >= deadline:
                    raise failed(f"verl trainer timed out after {timeout_s:.0f} s")
                time.sleep(0.2)
        except BaseException:
            _kill_group(proc)
            reader.join(timeout=10)
            raise
        reader.join(timeout=30)
    if proc.returncode != 0:
        raise failed(f"verl trainer exited with {proc.returncode}", returncode=proc.returncode)
    return time.time() - started
