"""A small persistent pool of verifier processes that can be killed on timeout.

verl calls a sync reward function from worker threads, where math-verify's `signal.alarm` timeout cannot
work. Here math-verify runs in child processes (`python -m verl_ebpo.rewards._worker`, a fresh interpreter:
no fork of a threaded parent, no re-import of the parent's `__main__`):

- a caller thread takes an idle process, sends one job and waits at most `timeout + grace` seconds; a job of
  `compute_score` carries the whole model output: extraction and normalisation run in the child, inside that bound;
- inside the child an interval timer stops the job after `timeout` (soft bound, the process lives on);
- if no reply came back in time (a C-level computation that ignores signals, a hang) the process is killed
  and a replacement is started in the background; the job counts as a timeout;
- a process that dies mid-job is replaced and the job retried once on a fresh process;
- a job that timed out is remembered (bounded LRU): the same answer again is a timeout at once;
- a caller waits at most `acquire_timeout` (default 600 s) for a free process, then `VerifierUnavailable`;
- on any other exception while a job is out (an interrupt, a bug) the process is replaced, never lost to the pool;
- processes start lazily, up to `size`, and only while callers wait for one (at most one start per waiting
  caller); `size` is the largest `processes` any caller asked for, capped by `MAX_PROCESSES` (the CPUs this
  process may run on): one global bound on live verifier processes, whatever the number of waiting threads;
- `shutdown()` lets calls in flight finish (their process is stopped when they hand it back); a call still
  waiting for a process then fails with `VerifierUnavailable` ("shut down");
- processes exit when their pipe closes (`shutdown()`, run at interpreter
  exit) or when the parent process dies, even mid-job. A forked child of the parent forgets the pool and
  starts its own.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import logging
import os
import subprocess
import threading
import time
from collections import OrderedDict
from typing import Optional

from verl_ebpo.rewards._process import WORKER_MODULE, VerifierUnavailable, _Worker

logger = logging.getLogger(__name__)

# A timed-out job is remembered this long, so one group's repeated answer costs one timeout, not G; after
# that it is tried again (a timeout caused by a loaded machine must not mark that answer wrong for a whole run).
TIMEOUT_MEMORY_S = 120.0
# How long a caller waits for a free verifier process before VerifierUnavailable (a pool whose every process is
# stuck must not hang verl's reward threads forever).
ACQUIRE_TIMEOUT_S = 600.0



def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# The most verifier processes a pool runs, whatever `processes` asks for: more than the CPUs only queue for them
# (6 threads asking for 64 processes started 24 in 4 s on a 2-core machine; 8 asking for 256 started hundreds).
MAX_PROCESSES = _cpus()
# The kind of job that carries a whole model output (extracted and normalised inside the verifier, see _worker).
OUTPUT_KIND = "output:"


def _bounded(size: int) -> int:
    return max(1, min(int(size), MAX_PROCESSES))


class VerifierPool:
    """Up to `size` verifier processes shared by all threads of this process."""

    def __init__(
        self,
        size: int = 2,
        memory_limit_mb: int = 4096,
        startup_timeout: float = 120.0,
        worker_module: str = WORKER_MODULE,
        acquire_timeout: float = ACQUIRE_TIMEOUT_S,
    ):
        self.size = _bounded(size)
        self.acquire_timeout = float(acquire_timeout)
        self.worker_module = worker_module
        # Jobs that timed out, so a repeated pathological answer (a policy repeats itself within a group)
        # costs one timeout, not one per sample. Keyed by the job and its timeout; bounded.
        self._timed_out: OrderedDict = OrderedDict()
        # Answers (verifier inputs) that timed out, per (golds, timeout): a whole output's job carries them, so the
        # same answer at the end of another output is a timeout at once (inside the verifier, after extraction).
        self._slow: OrderedDict = OrderedDict()
        self.memory_limit_mb = int(memory_limit_mb)
        self.startup_timeout = float(startup_timeout)
        self._cv = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._live = 0  # started or starting, counted against size
        self._starting = 0  # of those, still starting
        self._waiting = 0  # callers waiting for a free process
        self._busy = 0  # processes out with a job
        self._start_failures = 0
        self._last_error: Optional[BaseException] = None
        self._closed = False
        self._ids = itertools.count(1)
        self.counters = {
            "started": 0,
            "killed": 0,
            "crashed": 0,
            "recycled": 0,
            "start_failures": 0,
            "timeouts_remembered": 0,
        }

    # --- process management -------------------------------------------------------------------------
    def _spawn_async(self) -> None:  # called with self._cv held
        self._live += 1
        self._starting += 1
        threading.Thread(target=self._spawn, name="verl_ebpo-verifier-start", daemon=True).start()

    def _spawn(self) -> None:
        try:
            w = _Worker.start(self.memory_limit_mb, self.startup_timeout, self.worker_module)
        except BaseException as e:  # noqa: BLE001 - reported to the waiting callers
            with self._cv:
                self._live -= 1
                self._starting -= 1
                self._start_failures += 1
                self.counters["start_failures"] += 1
                self._last_error = e
                self._cv.notify_all()
            logger.warning("verl_ebpo.rewards: a verifier process failed to start: %s", e)
            return
        with self._cv:
            self._starting -= 1
            if self._closed:
                self._live -= 1
                closed = True
            else:
                closed = False
                self._start_failures = 0
                self.counters["started"] += 1
                self._all.add(w)
                self._idle.append(w)
                self._cv.notify()
        if closed:
            w.kill()

    def _acquire(self) -> _Worker:
        deadline = time.monotonic() + self.acquire_timeout
        with self._cv:
            self._waiting += 1
            try:
                while True:
                    if self._closed:
                        raise VerifierUnavailable(
                            "the verifier pool is closed (shutdown() ran while this call waited for a verifier process)"
                        )
                    if self._idle:
                        self._busy += 1
                        return self._idle.pop()
                    if self._start_failures >= 3 and self._live == 0:
                        err = self._last_error
                        self._start_failures = 0  # a later call tries again
                        raise VerifierUnavailable(f"no verifier process could be started: {err}") from err
                    # One global bound (size) and at most one start per waiting caller.
                    if self._live < self.size and self._starting < self._waiting:
                        self._spawn_async()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise VerifierUnavailable(
                            f"no verifier process became free within {self.acquire_timeout:g} s ({self.size} busy)"
                        )
                    self._cv.wait(timeout=min(1.0, left))
            finally:
                self._waiting -= 1

    def _release(self, w: _Worker, healthy: bool) -> None:
        with self._cv:
            self._busy -= 1
            if healthy and not self._closed and self._live <= self.size:
                self._idle.append(w)
                self._cv.notify()
                return
            self._all.discard(w)
            self._live -= 1
            if not self._closed and not healthy and self._live < self.size:
                self._spawn_async()  # keep the pool warm: the replacement starts now, in the background
            self._cv.notify_all()
        w.kill()

    # --- public ---------------------------------------------------------------------------------------
    def run(self, golds: list[str], pred: str, kind: str, timeout: float, grace: float) -> str:
        """The verdict of one job: "correct" | "wrong" | "timeout" | "error". Takes at most the wait for a
        free process plus `timeout + grace` (twice that if a process dies mid-job); raises only
        VerifierUnavailable."""
        return self.run_job(golds, pred, kind, timeout, grace)[0]

    def score_output(self, golds: list[str], output: str, max_answer_chars: int, timeout: float,
                     grace: float) -> tuple[str, str]:
        """(verdict, extracted answer) of a whole model output: extraction, normalisation and math-verify all run
        in the verifier, inside the same `timeout + grace` bound. Verdicts: also "no_answer" and "too_long"."""
        return self.run_job(golds, output, f"{OUTPUT_KIND}{int(max_answer_chars)}", timeout, grace)

    def _slow_inputs(self, golds: tuple, timeout: float) -> tuple:
        """The answers that timed out within TIMEOUT_MEMORY_S against these golds (called with self._cv held)."""
        answers = self._slow.get((golds, timeout))
        if not answers:
            return ()
        now = time.monotonic()
        for answer in [a for a, since in answers.items() if now - since > TIMEOUT_MEMORY_S]:
            del answers[answer]  # forgotten after a while: a timeout under load is not final
        return tuple(answers)

    def _remember_slow(self, golds: tuple, timeout: float, answer: str) -> None:  # called with self._cv held
        answers = self._slow.setdefault((golds, timeout), OrderedDict())
        self._slow.move_to_end((golds, timeout))
        answers[answer] = time.monotonic()
        if len(answers) > 16:
            answers.popitem(last=False)
        if len(self._slow) > 256:
            self._slow.popitem(last=False)

    def run_job(self, golds: list[str], pred: str, kind: str, timeout: float, grace: float) -> tuple[str, str]:
        # A long output is remembered by its digest (the memory holds up to 1024 keys).
        ident = pred if len(pred) <= 4096 else hashlib.blake2b(pred.encode("utf-8", "replace")).hexdigest()
        key = (tuple(golds), ident, kind, timeout)
        output = kind.startswith(OUTPUT_KIND)
        with self._cv:
            since = self._timed_out.get(key)
            if since is not None and time.monotonic() - since <= TIMEOUT_MEMORY_S:
                self._timed_out.move_to_end(key)
                self.counters["timeouts_remembered"] += 1
                return "timeout", ""
            self._timed_out.pop(key, None)  # forgotten after a while: a timeout under load is not final
            extra = (self._slow_inputs(tuple(golds), timeout),) if output else ()
        verdict, extracted, answer, remembered = self._run(golds, pred, kind, timeout, grace, extra)
        if verdict == "timeout":
            with self._cv:
                if remembered:
                    self.counters["timeouts_remembered"] += 1
                else:
                    self._timed_out[key] = time.monotonic()
                    if len(self._timed_out) > 1024:
                        self._timed_out.popitem(last=False)
                if output and answer:
                    self._remember_slow(tuple(golds), timeout, answer)
        return verdict, extracted

    def _run(self, golds: list[str], pred: str, kind: str, timeout: float, grace: float,
             extra: tuple = ()) -> tuple[str, str, str, bool]:
        """(verdict, extracted answer, its verifier input, whether the verifier remembered it as slow)."""
        for _attempt in range(2):
            w = self._acquire()
            job = (next(self._ids), golds, pred, kind, timeout, *extra)
            try:
                reply = w.request(job, timeout + grace)
            except (EOFError, OSError):
                # The process died (during this job, or while idle). Retry once on a fresh one.
                with self._cv:
                    self.counters["crashed"] += 1
                self._release(w, healthy=False)
                continue
            except BaseException:
                # Anything else (an interrupt, a bug): the job's state is unknown, so the process is replaced.
                self._release(w, healthy=False)
                raise
            if reply is None:
                with self._cv:
                    self.counters["killed"] += 1
                logger.warning(
                    "verl_ebpo.rewards: a verifier process gave no answer within %.1f s and was killed "
                    "(counted as a wrong answer)",
                    timeout + grace,
                )
                answer = w.normalised or ""
                self._release(w, healthy=False)
                return "timeout", "", answer, False
            verdict, recycle = reply[1], reply[2]
            if recycle:
                with self._cv:
                    self.counters["recycled"] += 1
            self._release(w, healthy=not recycle)
            if len(reply) >= 6:
                return verdict, reply[3], reply[4], bool(reply[5])
            return verdict, "", "", False
        return "error", "", "", False

    def resize(self, size: int) -> None:
        with self._cv:
            self.size = _bounded(size)
            extra = []
            while self._idle and self._live > self.size:
                w = self._idle.pop()
                self._all.discard(w)
                self._live -= 1
                extra.append(w)
        for w in extra:
            w.kill()

    def pids(self) -> list[int]:
        with self._cv:
            return sorted(w.proc.pid for w in self._all)

    def close(self, wait_s: float = 1.0) -> None:
        """Stop every process. Idle ones exit now (their pipe closes); a call in flight keeps its process and
        finishes (the process is stopped when the call hands it back); a call waiting for a process gets
        VerifierUnavailable. Waits up to `wait_s` for the calls in flight and the idle processes."""
        deadline = time.monotonic() + wait_s
        with self._cv:
            self._closed = True
            idle = list(self._idle)
            self._idle.clear()
            for w in idle:
                self._all.discard(w)
            self._cv.notify_all()
        for w in idle:
            w.close_pipe()
        with self._cv:
            while self._busy > 0 and time.monotonic() < deadline:
                self._cv.wait(timeout=max(0.0, deadline - time.monotonic()))
        for w in idle:
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            w.kill()

    def _forget_after_fork(self) -> None:
        with self._cv:  # the lock is fresh enough: register_at_fork runs with one thread in the child
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._closed = True
        for w in workers:
            w.forget()


_POOL: Optional[VerifierPool] = None
_POOL_LOCK = threading.Lock()


def get_pool(size: int, memory_limit_mb: int) -> VerifierPool:
    """The process-wide pool (created on first use). Its size is the largest `size` any caller asked for (capped
    by MAX_PROCESSES): callers asking for different sizes never shrink it under each other. A changed memory
    limit applies to the processes started from then on."""
    global _POOL
    pool = _POOL
    if pool is None:
        with _POOL_LOCK:
            pool = _POOL
            if pool is None:
                pool = _POOL = VerifierPool(size=size, memory_limit_mb=memory_limit_mb)
    if _bounded(size) > pool.size:
        pool.resize(size)
    if pool.memory_limit_mb != memory_limit_mb:
        pool.memory_limit_mb = int(memory_limit_mb)
    return pool


def current_pool() -> Optional[VerifierPool]:
    return _POOL


def shutdown(wait_s: float = 1.0) -> None:
    """Stop the verifier processes of this process (also runs at interpreter exit). A later call starts new ones."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.close(wait_s)


def _after_fork_in_child() -> None:
    global _POOL, _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    pool, _POOL = _POOL, None
    if pool is not None:
        pool._cv = threading.Condition()
        pool._forget_after_fork()


atexit.register(shutdown, 0.5)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
