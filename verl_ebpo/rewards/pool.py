"""Verifier processes, each killable alone: math-verify under a hard time bound, from any thread.

verl calls the reward from worker threads, where math-verify's `signal.alarm` cannot work, and a
`ProcessPoolExecutor` cannot kill one stuck worker. So each verifier is a fresh interpreter (no fork of a threaded
parent, no re-import of its `__main__`; the caller's copy of the package first on its path) that talks over its own
socket, never stdin/stdout: nothing the interpreter or a library prints can corrupt a message. Every wait on a
verifier is bounded (`poll` before each read; `acquire_timeout` for a free one, start-up included).

A verifier grades a whole output (extraction, normalisation, math-verify) under an interval timer of `timeout` s;
the caller kills it after `timeout + grace` s (a timeout). It dies with its parent (Linux `PR_SET_PDEATHSIG`, sent
by the kernel even while its main thread holds the GIL); the kernel sends it when the starting *thread* ends, so
verifiers are started from one long-lived thread. `shutdown()` (also at exit) stops idle verifiers; a forked child
starts anew.
"""

import atexit
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from functools import lru_cache
from multiprocessing.connection import Connection, Pipe

ACQUIRE_TIMEOUT_S = 600.0  # a pool whose every process is stuck must not hang verl's reward threads forever
START_TIMEOUT_S = 120.0  # imports and warm-up take 1-3 s; a verifier silent this long is not coming
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds the caller's verl_ebpo
_BOOT = ("import json, sys; sys.path[:0] = [sys.argv[1]]; sys.path += [p for p in json.loads(sys.argv[2]) "
         "if p not in sys.path]; from verl_ebpo.rewards.pool import serve; serve(*map(int, sys.argv[3:]))")
# More processes than the CPUs only queue for them.
MAX_PROCESSES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class VerifierUnavailable(RuntimeError):
    """No verifier process could be started or became free in time (e.g. math-verify is not importable)."""


class _Verifier:
    def __init__(self):
        self.conn, child = Pipe()  # a socket pair
        path = [p for p in sys.path if isinstance(p, str)]  # Python ignores other entries
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, _ROOT, json.dumps(path), str(child.fileno()),
                                      str(os.getpid())], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     pass_fds=(child.fileno(),), env={"OMP_NUM_THREADS": "1", **os.environ})
        child.close()

    def kill(self) -> None:
        self.conn.close()
        self.proc.kill()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


class VerifierPool:
    """Up to `size` verifier processes shared by all threads of this process."""

    def __init__(self, size: int = 2, acquire_timeout: float = ACQUIRE_TIMEOUT_S):
        self.size, self.acquire_timeout = max(1, min(size, MAX_PROCESSES)), acquire_timeout
        self._cv = threading.Condition()
        self._idle: list[_Verifier] = []
        self._live = 0  # idle, busy or starting
        self._closed = False

    def _acquire(self) -> _Verifier:
        deadline = time.monotonic() + self.acquire_timeout
        with self._cv:
            free = lambda: self._closed or self._idle or self._live < self.size  # noqa: E731
            if not self._cv.wait_for(free, self.acquire_timeout):
                raise VerifierUnavailable(f"no verifier process became free within {self.acquire_timeout:g} s "
                                          f"({self.size} busy)")
            if self._closed:
                raise VerifierUnavailable("the verifier pool is closed (shutdown() ran while this call waited)")
            if self._idle:
                w = self._idle.pop()
                if w.proc.poll() is None:
                    return w
                w.kill()  # it died while idle (killed from outside, out of memory): a fresh one takes its place
            else:
                self._live += 1
        w = None
        try:  # start-up (imports, warm-up) counts against the wait, not against a job's bound
            w = _STARTER.submit(_Verifier).result()
            wait = min(START_TIMEOUT_S, max(0.0, deadline - time.monotonic()))
            if not (w.conn.poll(wait) and w.conn.recv() == "ready"):
                raise EOFError("it did not start in time")
        except BaseException as e:
            self._release(w, keep=False)
            if not isinstance(e, (EOFError, OSError)):
                raise
            why = str(e) or "it exited during start-up; its error is on stderr above"
            raise VerifierUnavailable(f"no verifier process could be started ({why}). Is math-verify installed "
                                      "(`pip install math-verify`)?") from None
        return w

    def _release(self, w: _Verifier | None, keep: bool) -> None:
        """Back to the idle list, else killed."""
        with self._cv:
            self._cv.notify()
            if keep and not self._closed:
                return self._idle.append(w)
            self._live -= 1
        if w is not None:
            w.kill()

    def score_output(self, golds: list[str], output: str, timeout: float, grace: float) -> tuple[str, str]:
        """(verdict, extracted answer) of a whole model output, graded within `timeout + grace` once a verifier is
        free: "timeout" when it is killed, "error" when it dies. Raises VerifierUnavailable."""
        w, keep = self._acquire(), False
        try:
            w.conn.send((golds, output, float(timeout)))
            if not w.conn.poll(timeout + grace):
                return "timeout", ""  # killed below
            (verdict, extracted), keep = w.conn.recv(), True
            return verdict, extracted
        except (EOFError, OSError):  # it died
            return "error", ""
        finally:
            self._release(w, keep)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cv.notify_all()
        for w in idle:
            self._release(w, keep=False)


_POOL: VerifierPool | None = None
_LOCK = threading.Lock()
# The one thread that starts verifiers (started by its first job): it lives as long as the interpreter.
_STARTER = ThreadPoolExecutor(1, thread_name_prefix="verl-ebpo-verifier-starter")


def get_pool(size: int) -> VerifierPool:
    """The process-wide pool, of the largest `size` any caller asked for."""
    global _POOL
    with _LOCK:
        _POOL = _POOL or VerifierPool(size)
        _POOL.size = max(_POOL.size, min(size, MAX_PROCESSES))
        return _POOL


def shutdown() -> None:
    """Stop the verifier processes of this process (also runs at interpreter exit). A later call starts new ones."""
    global _POOL
    with _LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.close()


def _forget_in_forked_child() -> None:
    global _POOL, _STARTER, _LOCK
    _POOL, _LOCK = None, threading.Lock()
    _STARTER = ThreadPoolExecutor(1, thread_name_prefix="verl-ebpo-verifier-starter")


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_in_forked_child)


# ---- the verifier process: `serve(fd, parent_pid)` ------------------------------------------------------------
class _Deadline(BaseException):
    """Raised by the interval timer; a BaseException, so sympy's `except Exception` lets it through."""


def _exact_numbers_differ(gold, pred) -> bool:
    """True when both are exact numbers that differ at 60 significant digits: math-verify rounds to 6 decimals,
    so `1/2004!` and `1/2005!` would be equal."""
    import sympy

    with suppress(Exception):  # not comparable this way (zoo, nan, ...): math-verify's verdict stands
        if all(isinstance(e, sympy.Expr) and e.is_number and not e.has(sympy.Float, sympy.UnevaluatedExpr)
               for e in (gold, pred)):
            g, p = gold.evalf(60), pred.evalf(60)
            return bool(max(abs(g), abs(p)) > 0 and abs(g - p) > sympy.Float("1e-40") * max(abs(g), abs(p)))
    return False


def serve(fd: int, parent_pid: int) -> None:
    with suppress(OSError, AttributeError):  # Linux: SIGKILL when the starting thread of the parent ends
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        os._exit(0)  # the parent died before the line above
    conn = Connection(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)  # math-verify's warnings about its disabled timeouts, at every call
    from math_verify import LatexExtractionConfig, parse, verify

    from verl_ebpo.rewards.extract import extract_answer
    from verl_ebpo.rewards.normalize import EMPTY_INPUT, verifier_input

    config = (LatexExtractionConfig(boxed_match_priority=-1),)  # the LaTeX extractor only, its first (whole) match
    parse_text = lru_cache(8192)(lambda text: parse(text, config, extraction_mode="first_match", parsing_timeout=None))

    @lru_cache(maxsize=16384)
    def equivalent(golds: tuple, pred: str) -> bool:
        return any(verify(g, p, allow_set_relation_comp=True, timeout_seconds=None) and not _exact_numbers_differ(g, p)
                   for gold in golds for g in parse_text(gold) for p in parse_text(pred))

    extracted = [""]  # of the job in progress, for the log (cut: keeps replies small)

    def grade(golds: tuple, output: str) -> str:
        found = extract_answer(output) or ""
        extracted[0] = found[:1000]
        answer = verifier_input(found)
        if answer == EMPTY_INPUT:  # no answer, or `Answer: .`, `Answer: $ $`: nothing to grade
            return "no_answer"
        return "correct" if answer in golds or equivalent(golds, answer) else "wrong"

    def on_alarm(signum, frame):
        raise _Deadline()

    # sympy loads parts lazily (a first comparison of a kind costs up to ~0.4 s): warmed up before taking jobs, so
    # the first jobs' time is their own.
    equivalent(("$\\frac{1}{2}$",), "$0.5$"), equivalent(("$x^2+2x+1$",), "$(x+1)^2$")
    conn.send("ready")
    while True:
        try:
            golds, output, timeout = conn.recv()
        except (EOFError, OSError):
            os._exit(0)  # the parent closed its end: fast, no teardown of sympy's many objects
        extracted[0] = ""
        try:
            try:
                signal.signal(signal.SIGALRM, on_alarm)
                signal.setitimer(signal.ITIMER_REAL, max(timeout, 1e-3))
                verdict = grade(tuple(golds), output)
            finally:  # a signal still pending is not raised: Python reads the handler when it runs it (and logs it)
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, signal.SIG_IGN)
        except _Deadline:
            verdict = "timeout"
        except Exception:  # RecursionError, MemoryError, a sympy bug, ...: an error (wrong)
            verdict = "error"
        with suppress(OSError):
            conn.send((verdict, extracted[0]))
