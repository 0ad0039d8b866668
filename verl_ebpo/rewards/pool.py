"""A small pool of verifier processes that can be killed one by one.

verl calls a sync reward function from worker threads, where math-verify's `signal.alarm` timeout cannot work, so
math-verify runs in child processes (`verl_ebpo.rewards._worker`, in a fresh interpreter that puts the caller's
copy of the package first on its path: no fork of a threaded parent, no re-import of its `__main__`). A
`concurrent.futures.ProcessPoolExecutor` cannot kill one stuck worker; here each process has its own pipe:

- a caller takes an idle process, or starts one when fewer than `size` are live (one global bound: the largest
  `processes` any caller asked for, capped by `MAX_PROCESSES`, the CPUs this process may run on); else it waits,
  at most `acquire_timeout` seconds in all (start-up included), then `VerifierUnavailable`;
- it sends one job (a whole model output) and waits at most `timeout + grace` for the verdict; the child stops
  a job itself after `timeout`; a process that gave no verdict in time (a computation that ignores signals) is
  killed and the job is a timeout; a process that died is an error; either way the next caller starts a fresh one;
- on any other exception while a job is out (an interrupt, a bug) the process is killed, never lost to the pool;
- `shutdown()` (also at interpreter exit) stops idle processes; a call in flight keeps its process until it
  returns; a call waiting for one gets `VerifierUnavailable`. Children exit on EOF when their parent dies, even
  mid-job (a watchdog process outside its interpreter kills it); a forked child of the parent forgets the pool and
  starts its own. Jobs and replies travel on two pipes of their own, not on the child's stdin/stdout.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading
import time
from contextlib import suppress
from multiprocessing.connection import Connection
from typing import Optional

logger = logging.getLogger(__name__)

ACQUIRE_TIMEOUT_S = 600.0  # a pool whose every process is stuck must not hang verl's reward threads forever
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds the caller's verl_ebpo
# The child: the caller's package first on its path, then its own, then the caller's (a Ray runtime_env, ...).
_BOOT = ("import os, sys; sys.path.insert(0, sys.argv[1]); sys.path += [p for p in os.environ.pop('VERL_EBPO_SYS_PATH')"
         ".split(os.pathsep) if p and p not in sys.path]; from verl_ebpo.rewards._worker import main; "
         "main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))")


# More processes than the CPUs only queue for them (6 threads asking for 64 started 24 on a 2-core machine).
MAX_PROCESSES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else max(1, os.cpu_count() or 1)


def _bounded(size: int) -> int:
    return max(1, min(int(size), MAX_PROCESSES))


class VerifierUnavailable(RuntimeError):
    """No verifier process could be started or became free in time (e.g. math-verify is not importable)."""


class _Verifier:
    """One verifier process and its two pipes of its own: never its stdin/stdout, which the interpreter, a
    `sitecustomize` or a library may write to."""

    def __init__(self, memory_limit_mb: int):
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),  # Python skips non-str
               "VERL_EBPO_SYS_PATH": os.pathsep.join(p for p in sys.path if isinstance(p, str))}  # sys.path entries
        jobs_r, jobs_w = os.pipe()
        replies_r, replies_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, _ROOT, str(int(memory_limit_mb)), str(jobs_r), str(replies_w)],
                stdin=subprocess.DEVNULL, env=env, pass_fds=(jobs_r, replies_w))
        except BaseException:
            for fd in (jobs_w, replies_r):
                os.close(fd)
            raise
        finally:
            os.close(jobs_r), os.close(replies_w)
        self.tx = Connection(jobs_w, readable=False)
        self.rx = Connection(replies_r, writable=False)

    def kill(self) -> None:
        self.tx.close(), self.rx.close()
        self.proc.kill()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


class VerifierPool:
    """Up to `size` verifier processes shared by all threads of this process."""

    def __init__(self, size: int = 2, memory_limit_mb: int = 4096, acquire_timeout: float = ACQUIRE_TIMEOUT_S):
        self.size = _bounded(size)
        self.memory_limit_mb = int(memory_limit_mb)
        self.acquire_timeout = float(acquire_timeout)
        self._cv = threading.Condition()
        self._idle: list[_Verifier] = []
        self._all: set[_Verifier] = set()  # live: idle, busy or starting
        self._starting = 0
        self._closed = False
        self.counters = {"started": 0, "killed": 0, "crashed": 0, "recycled": 0}

    def _acquire(self) -> _Verifier:
        deadline = time.monotonic() + self.acquire_timeout
        with self._cv:
            while True:
                if self._closed:
                    raise VerifierUnavailable("the verifier pool is closed (shutdown() ran while this call waited "
                                              "for a verifier process)")
                while self._idle:
                    w = self._idle.pop()
                    if w.proc.poll() is None:
                        return w
                    self._all.discard(w)  # it died while idle (killed from outside, out of memory)
                    self.counters["crashed"] += 1
                    w.kill()
                if len(self._all) + self._starting < self.size:
                    self._starting += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise VerifierUnavailable(f"no verifier process became free within {self.acquire_timeout:g} s "
                                              f"({self.size} busy)")
                self._cv.wait(min(left, 1.0))
        w, ready, why = None, False, "it did not start in time"
        try:  # start-up (imports and warm-up, ~1-3 s) is part of the wait, not of a job's bound
            w = _Verifier(self.memory_limit_mb)
            ready = w.rx.poll(max(0.0, deadline - time.monotonic())) and w.rx.recv() == "ready"
        except (EOFError, OSError) as e:
            why = f"{type(e).__name__}: {e}" if w is None else "it exited during start-up; its error is on stderr above"
        finally:
            with self._cv:
                self._starting -= 1
                if ready:
                    self._all.add(w)
                    self.counters["started"] += 1
                self._cv.notify()
            if not ready and w is not None:
                w.kill()  # also on an interrupt during start-up: never left running
        if not ready:
            raise VerifierUnavailable(f"no verifier process could be started ({why}). Is math-verify installed "
                                      "(`pip install math-verify`)?")
        return w

    def _release(self, w: _Verifier, outcome: Optional[str]) -> None:
        """Back to the idle list (outcome "ok"), else killed: counted under `outcome` if it is a counter."""
        with self._cv:
            if outcome in self.counters:
                self.counters[outcome] += 1
            if outcome == "ok" and not self._closed:
                self._idle.append(w)
                self._cv.notify()
                return
            self._all.discard(w)
            self._cv.notify()
        w.kill()

    def score_output(self, golds: list[str], output: str, max_answer_chars: int, timeout: float,
                     grace: float) -> tuple[str, str]:
        """(verdict, extracted answer) of a whole model output, graded in a verifier process within `timeout +
        grace` once one is free. Verdicts: see `verl_ebpo.rewards.VERDICTS`. Raises only VerifierUnavailable."""
        w = self._acquire()
        outcome = None
        try:
            w.tx.send((golds, output, int(max_answer_chars), float(timeout)))
            if not w.rx.poll(timeout + grace):
                outcome = "killed"
                logger.warning("verl_ebpo.rewards: a verifier process gave no answer within %.1f s and was killed "
                               "(counted as a wrong answer)", timeout + grace)
                return "timeout", ""
            verdict, extracted, recycle = w.rx.recv()
            outcome = "recycled" if recycle else "ok"
            return verdict, extracted
        except (EOFError, OSError):  # the process died (during this job, or while idle)
            outcome = "crashed"
            return "error", ""
        finally:
            self._release(w, outcome)

    def pids(self) -> list[int]:
        with self._cv:
            return sorted(w.proc.pid for w in self._all)

    def close(self) -> None:
        """Stop the idle processes now; a call in flight keeps its process until it returns, a call waiting for one
        gets VerifierUnavailable."""
        with self._cv:
            self._closed = True
            idle, self._idle = self._idle, []
            self._all.difference_update(idle)
            self._cv.notify_all()
        for w in idle:
            w.kill()


_POOL: Optional[VerifierPool] = None
_POOL_LOCK = threading.Lock()


def get_pool(size: int, memory_limit_mb: int) -> VerifierPool:
    """The process-wide pool (created on first use), of the largest `size` any caller asked for (capped by
    MAX_PROCESSES). A changed memory limit applies to the processes started from then on."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = VerifierPool(size, memory_limit_mb)
        _POOL.size = max(_POOL.size, _bounded(size))
        _POOL.memory_limit_mb = int(memory_limit_mb)
        return _POOL


def current_pool() -> Optional[VerifierPool]:
    return _POOL


def shutdown() -> None:
    """Stop the verifier processes of this process (also runs at interpreter exit). A later call starts new ones."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.close()


def _forget_in_forked_child() -> None:
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_in_forked_child)
