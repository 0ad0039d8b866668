"""A verifier process, started by `verl_ebpo.rewards.pool` as a fresh interpreter: `main(memory_limit_mb)`.

Protocol (`multiprocessing.connection` messages on two pipes of their own, never stdin/stdout, which a
`sitecustomize` or a library may write to):
  child  -> parent: "ready"                                  after importing and warming up math-verify
  parent -> child : (gold_inputs, output, max_answer_chars, timeout_s)
  child  -> parent: (verdict, extracted answer, recycle)     recycle: the child exits after this reply

The whole output is read here, under the job's timer: extraction (`verl_ebpo.rewards.extract`), normalisation
(`verl_ebpo.rewards.normalize.verifier_input`) and math-verify, in the main thread, where a real-time interval
timer can stop a job after `timeout_s` (soft bound: the process lives on). The parent kills the process when no
reply came within timeout + kill_grace (hard bound). Every answer and ground truth is one inline formula, read
with math-verify's LaTeX extraction and `extraction_mode="first_match"`: parsed whole or not at all.
An answer that timed out is a timeout at once for TIMEOUT_MEMORY_S in this process (a group repeats answers).
The process exits on EOF (the parent closed its end or died) and, mid-job, when its parent is gone: a watchdog
process (`sh`) kills it then, since a thread of this interpreter may not get the GIL while a job computes.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
import warnings
from functools import lru_cache
from multiprocessing.connection import Connection

TIMEOUT_MEMORY_S = 120.0  # after that a slow answer is tried again: a timeout on a loaded machine is not final
EXTRACTED_CHARS = 1000  # how much of the extracted answer goes back to the caller (for its log)
# sympy loads parts lazily (~0.5 s on first use): warm them up before taking jobs, so it is not a job's time.
_WARM_UP = [("$\\frac{1}{2}$", "$0.5$"), ("$x^2+2x+1$", "$(x+1)^2$"), ("$(1,2]$", "$(1, 2]$"), ("$\\{1,2\\}$", "$\\{2,1\\}$"),
            ("$(3,-1)$", "$\\left(3, -1\\right)$"), ("$2\\sqrt{3}$", "$\\sqrt{12}$"), ("$\\frac{\\pi}{3}$", "$\\pi/3$"),
            ("$5$", "$x=5$"), ("$\\begin{pmatrix}1\\\\2\\end{pmatrix}$", "$\\begin{pmatrix}1\\\\2\\end{pmatrix}$"),
            ("$\\text{(B)}$", "$B$"), ("$10$\\%", "$0.1$"), ("$x \\geq 5$", "$5$")]  # the previous version's twelve
_armed = False  # whether the timer may still stop the job (its signal can arrive after the job's end)


class _Deadline(BaseException):
    """Raised by the interval timer. A BaseException, so math-verify's and sympy's `except Exception` let it through."""


def _on_alarm(signum, frame):
    if _armed:
        raise _Deadline()


def _exact_numbers_differ(gold, pred) -> bool:
    """True when both are exact numbers (no decimals, no percent) that differ: math-verify compares numbers
    after rounding to 6 decimals, so `1/2004!` and `1/2005!`, or `2^{-99}` and `2^{-98}`, would be equal.
    Compared at 60 significant digits; equal exact numbers agree there to far better than 1e-40."""
    import sympy

    try:
        if not (isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr) and gold.is_number and pred.is_number):
            return False
        if any(e.has(sympy.Float, sympy.UnevaluatedExpr) for e in (gold, pred)):
            return False
        g, p = gold.evalf(60), pred.evalf(60)
        scale = max(abs(g), abs(p))
        return bool(scale > 0 and abs(g - p) > sympy.Float("1e-40") * scale)
    except Exception:  # not comparable this way (zoo, nan, ...): leave math-verify's verdict alone
        return False


def _limit_growth(mem_mb: int) -> None:
    """Cap the address space at its size now (after imports and warm-up) plus `mem_mb` MiB, so a job that builds
    a huge object gets a MemoryError instead of eating the machine. Linux only; best effort."""
    try:
        import resource

        with open("/proc/self/status") as f:
            vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = vm_kb * 1024 + (mem_mb << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    except (ImportError, OSError, ValueError, StopIteration):
        pass


_WATCHDOG = ('while read -r _ _ _ ppid _ < "/proc/$0/stat" && [ "$ppid" = "$1" ]; do sleep 0.5; done 2>/dev/null; '
             'kill -9 "$0" 2>/dev/null')


def _exit_with_parent() -> None:
    """Exit when the parent dies, even in the middle of a job (between jobs, EOF on the pipe does it). The watch runs
    in a small `sh` process: a thread here would need the GIL, which a long C-level computation (a huge power in
    sympy) holds. It ends by itself when this process ends; where `sh` is missing, a thread watches instead."""
    parent, me = os.getppid(), os.getpid()
    try:
        subprocess.Popen(["sh", "-c", _WATCHDOG, str(me), str(parent)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
        return
    except OSError:
        pass

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(memory_limit_mb: int, jobs_fd: int, replies_fd: int) -> None:
    global _armed
    rx, tx = Connection(jobs_fd, writable=False), Connection(replies_fd, readable=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    _exit_with_parent()
    warnings.filterwarnings("ignore")
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    from math_verify import LatexExtractionConfig, parse, verify

    from verl_ebpo.rewards.extract import extract_answer
    from verl_ebpo.rewards.normalize import EMPTY_INPUT, verifier_input

    config = (LatexExtractionConfig(boxed_match_priority=-1),)  # only the LaTeX extractor, its first (whole) match

    @lru_cache(maxsize=8192)
    def parse_text(text: str):
        return parse(text, config, extraction_mode="first_match", parsing_timeout=None)

    @lru_cache(maxsize=16384)
    def judge(golds: tuple, pred: str) -> bool:
        preds = parse_text(pred)
        return any(verify(g, p, allow_set_relation_comp=True, timeout_seconds=None) and not _exact_numbers_differ(g, p)
                   for gold in golds if preds for g in parse_text(gold) for p in preds)

    slow: dict = {}  # (golds, answer) -> when it timed out
    job: dict = {}

    def grade(golds: tuple, output: str, max_chars: int) -> str:
        found = extract_answer(output)
        if found is None:
            return "no_answer"
        job["extracted"] = found.text[:EXTRACTED_CHARS]
        if len(found.text) > max_chars:
            return "too_long"
        answer = verifier_input(found.text)
        if answer == EMPTY_INPUT:  # `Answer: .`, `Answer: $ $`: nothing to grade
            return "no_answer"
        if answer in golds:  # the very same formula: no need to ask math-verify
            return "correct"
        if time.monotonic() - slow.get((golds, answer), -TIMEOUT_MEMORY_S) < TIMEOUT_MEMORY_S:
            return "timeout"
        job["answer"] = (golds, answer)
        return "correct" if judge(golds, answer) else "wrong"

    signal.signal(signal.SIGALRM, _on_alarm)
    for gold, pred in _WARM_UP:
        judge((gold,), pred)
    judge.cache_clear(), parse_text.cache_clear()
    if memory_limit_mb > 0:
        _limit_growth(memory_limit_mb)
    tx.send("ready")
    while True:
        try:
            golds, output, max_chars, timeout = rx.recv()
        except (EOFError, OSError):
            os._exit(0)  # fast: no interpreter teardown of sympy's many objects
        job.clear()
        recycle = False
        try:
            try:
                _armed = True
                signal.setitimer(signal.ITIMER_REAL, max(float(timeout), 1e-3))
                verdict = grade(tuple(golds), output, max_chars)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                _armed = False
        except _Deadline:
            verdict = "timeout"
            if "answer" in job:
                if len(slow) >= 4096:
                    slow.clear()
                slow[job["answer"]] = time.monotonic()
        except MemoryError:
            verdict, recycle = "error", True
        except Exception:  # RecursionError, a sympy bug, ...: counted as an error (wrong)
            verdict = "error"
        try:
            tx.send((verdict, job.get("extracted", ""), recycle))
        except OSError:
            os._exit(0)
        if recycle:
            os._exit(0)
