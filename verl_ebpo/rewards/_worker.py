"""A verifier process: `verl_ebpo.rewards._worker READ_FD WRITE_FD MEMORY_LIMIT_MB` (run by the pool as __main__).

Started and killed by `verl_ebpo.rewards.pool`. It runs math-verify in its own main thread, so a real-time
interval timer (signal) can interrupt it: each job gets `timeout` seconds of wall-clock time (soft bound);
the parent kills the process if no answer comes back shortly after that (hard bound).

Protocol (pickled tuples over two pipes):
  child  -> parent: ("ready", pid)
  parent -> child : (job_id, gold_texts, pred_text, pred_kind, timeout_s)
  child  -> parent: (job_id, verdict, recycle)   verdict in {"correct", "wrong", "timeout", "error"}
It exits on EOF (the parent closed its end or died) and, mid-job, when its parent process is gone.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import warnings
from functools import lru_cache


class _Deadline(BaseException):
    """Raised by the interval timer. A BaseException, so math-verify's and sympy's `except Exception` let it through."""


def _on_alarm(signum, frame):
    raise _Deadline()


def _wrap(text: str) -> str:
    # math-verify reads `$...$` best (e.g. `10\%` inside `\boxed{}` is left as a string); a newline or an
    # unescaped `$` inside does not fit the inline-math pattern, so those go in a `\boxed{}`.
    text = text.replace("\n", " ")
    if "$" in text.replace("\\$", ""):
        return "\\boxed{" + text + "}"
    return "$" + text + "$"


_WARM_UP = [
    ("\\frac{1}{2}", "0.5"),
    ("x^2+2x+1", "(x+1)^2"),
    ("(1,2]", "(1, 2]"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("(3,-1)", "\\left(3, -1\\right)"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("\\frac{\\pi}{3}", "\\pi/3"),
    ("5", "x=5"),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("\\text{(B)}", "B"),
]


def _limit_growth(mem_mb: int) -> None:
    """Cap the address space at its size now (after imports and warm-up) plus `mem_mb` MiB, so a job that
    builds a huge object gets a MemoryError instead of eating the machine. Linux only; best effort."""
    try:
        import resource

        with open("/proc/self/status") as f:
            vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
        limit = vm_kb * 1024 + mem_mb * 1024 * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError, StopIteration):
        pass


def _watch_parent(parent: int) -> None:
    """Exit when the parent dies, even in the middle of a job (between jobs, EOF on the pipe does it)."""
    import threading
    import time

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    read_fd, write_fd, mem_mb = int(argv[0]), int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    _watch_parent(os.getppid())
    from multiprocessing.connection import Connection

    rx = Connection(read_fd, writable=False)
    tx = Connection(write_fd, readable=False)

    warnings.filterwarnings("ignore")
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    config = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())

    @lru_cache(maxsize=8192)
    def parse_text(text: str):
        return parse(text, config, parsing_timeout=None)

    @lru_cache(maxsize=16384)
    def judge(golds: tuple, pred: str, kind: str) -> bool:
        pred_parsed = parse_text(_wrap(pred) if kind == "boxed" else pred)
        if not pred_parsed:
            return False
        for gold in golds:
            gold_parsed = parse_text(_wrap(gold))
            if gold_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=None):
                return True
        return False

    signal.signal(signal.SIGALRM, _on_alarm)
    # Warm up: the LaTeX parser and sympy's lazily loaded parts (simplification, sets, intervals, matrices,
    # relations) load on first use and can take ~0.5 s, which must not count against the first answers.
    for gold, pred in _WARM_UP:
        try:
            judge((gold,), pred, "boxed")
        except Exception:  # pragma: no cover - warm-up is best effort
            pass
    judge.cache_clear()
    parse_text.cache_clear()
    if mem_mb > 0:
        _limit_growth(mem_mb)
    try:
        tx.send(("ready", os.getpid()))
    except OSError:  # the parent is gone already
        return 0

    while True:
        try:
            job = rx.recv()
        except (EOFError, OSError):
            os._exit(0)  # fast: no interpreter teardown of sympy's many objects
        job_id, golds, pred, kind, timeout_s = job
        recycle = False
        try:
            signal.setitimer(signal.ITIMER_REAL, max(float(timeout_s), 1e-3))
            try:
                verdict = "correct" if judge(tuple(golds), pred, kind) else "wrong"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Deadline:
            verdict = "timeout"
        except MemoryError:
            verdict, recycle = "error", True
        except Exception:  # RecursionError, a sympy bug, ...: counted as an error (wrong)
            verdict = "error"
        try:
            tx.send((job_id, verdict, recycle))
        except (OSError, EOFError):
            os._exit(0)
        if recycle:
            os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
