"""A verifier process: `verl_ebpo.rewards._worker READ_FD WRITE_FD MEMORY_LIMIT_MB` (run by the pool as __main__).

Started and killed by `verl_ebpo.rewards.pool`. It runs math-verify in its own main thread, so a real-time
interval timer (signal) can interrupt it: each job gets `timeout` seconds of wall-clock time (soft bound);
the parent kills the process if no answer comes back shortly after that (hard bound).

Protocol (pickled tuples over two pipes):
  child  -> parent: ("ready", pid)
  parent -> child : (job_id, gold_inputs, pred_input, pred_kind, timeout_s)
  child  -> parent: (job_id, verdict, recycle)   verdict in {"correct", "wrong", "timeout", "error"}
  or, for a whole model output (pred_kind "output:MAX_ANSWER_CHARS", pred_input the output's text):
  parent -> child : (job_id, gold_inputs, output, pred_kind, timeout_s, slow_inputs)
  child  -> parent: ("normalised", job_id, answer_input)   just before math-verify reads it
  child  -> parent: (job_id, verdict, recycle, extracted, answer_input, remembered)
                    verdict also "no_answer" or "too_long"; an answer_input in slow_inputs (answers that timed
                    out recently against these golds) is a "timeout" at once (remembered=True)

A whole output is extracted (`verl_ebpo.rewards.extract`) and normalised here, inside the job's timer, so the
reward's time bound covers every step that reads model output, whatever its size or shape.
gold_inputs and pred_input are `verl_ebpo.rewards.normalize.verifier_input` strings: one inline
formula each. They are all read the same way (pred_kind is only part of the job's identity): math-verify's
LaTeX extraction with `extraction_mode="first_match"`, so the one formula is parsed whole or not at all (no
number picked out of it); an unparsed answer is compared as a string.
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


_WARM_UP = [
    ("$\\frac{1}{2}$", "$0.5$"),
    ("$x^2+2x+1$", "$(x+1)^2$"),
    ("$(1,2]$", "$(1, 2]$"),
    ("$\\{1,2\\}$", "$\\{2,1\\}$"),
    ("$(3,-1)$", "$\\left(3, -1\\right)$"),
    ("$2\\sqrt{3}$", "$\\sqrt{12}$"),
    ("$\\frac{\\pi}{3}$", "$\\pi/3$"),
    ("$5$", "$x=5$"),
    ("$\\begin{pmatrix}1\\\\2\\end{pmatrix}$", "$\\begin{pmatrix}1\\\\2\\end{pmatrix}$"),
    ("$\\text{(B)}$", "$B$"),
    ("$10$\\%", "$0.1$"),
    ("$x \\geq 5$", "$5$"),
]


def _exact_numbers_differ(gold, pred) -> bool:
    """True when both are exact numbers (no decimals, no percent) that differ: math-verify compares numbers
    after rounding to 6 decimals, so `1/2004!` and `1/2005!`, or `2^{-99}` and `2^{-98}`, would be equal.
    Compared at 60 significant digits; equal exact numbers agree there to far better than 1e-40."""
    import sympy

    try:
        if not (isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr)):
            return False
        if not (gold.is_number and pred.is_number):
            return False
        if any(e.has(sympy.Float, sympy.UnevaluatedExpr) for e in (gold, pred)):
            return False
        g, p = gold.evalf(60), pred.evalf(60)
        scale = max(abs(g), abs(p))
        return bool(scale > 0 and abs(g - p) > sympy.Float("1e-40") * scale)
    except Exception:  # not comparable this way (zoo, nan, ...): leave math-verify's verdict alone
        return False


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


OUTPUT_KIND = "output:"  # pred_kind prefix of a whole model output (see the module doc)
EXTRACTED_CHARS = 1000  # how much of the extracted answer goes back to the caller (for its log)


NOTE_CHARS = 4096  # answers up to this long are named back to the parent (its timeout memory)


def _send_unalarmed(tx, message) -> None:
    """Send with the job's timer signal held back, so it cannot cut a message in half mid-write."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        tx.send(message)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})


def _caller_package_first() -> None:
    """Import `verl_ebpo` from the tree this file belongs to (the caller's copy), not from the working directory
    or another install."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isfile(os.path.join(root, "verl_ebpo", "rewards", "extract.py")):
        if root in sys.path:
            sys.path.remove(root)
        sys.path.insert(0, root)


def main(argv: list[str]) -> int:
    read_fd, write_fd, mem_mb = int(argv[0]), int(argv[1]), int(argv[2])
    _caller_package_first()
    from verl_ebpo.rewards.extract import extract_answer
    from verl_ebpo.rewards.normalize import EMPTY_INPUT, verifier_input

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    _watch_parent(os.getppid())
    from multiprocessing.connection import Connection

    rx = Connection(read_fd, writable=False)
    tx = Connection(write_fd, readable=False)

    warnings.filterwarnings("ignore")
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)
    from math_verify import LatexExtractionConfig, parse, verify

    # Only the LaTeX extractor, and only its first (= the whole formula) match: see the module doc.
    config = (LatexExtractionConfig(boxed_match_priority=-1),)

    @lru_cache(maxsize=8192)
    def parse_text(text: str):
        return parse(text, config, extraction_mode="first_match", parsing_timeout=None)

    @lru_cache(maxsize=16384)
    def judge(golds: tuple, pred: str) -> bool:
        pred_parsed = parse_text(pred)
        if not pred_parsed:
            return False
        for gold in golds:
            for g in parse_text(gold):
                for p in pred_parsed:
                    if verify(g, p, allow_set_relation_comp=True, timeout_seconds=None) and not _exact_numbers_differ(g, p):
                        return True
        return False

    signal.signal(signal.SIGALRM, _on_alarm)
    # Warm up: the LaTeX parser and sympy's lazily loaded parts (simplification, sets, intervals, matrices,
    # relations) load on first use and can take ~0.5 s, which must not count against the first answers.
    for gold, pred in _WARM_UP:
        try:
            judge((gold,), pred)
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
        job_id, golds, pred, kind, timeout_s = job[:5]
        slow = job[5] if len(job) > 5 else ()
        recycle = remembered = False
        extracted = pred_input = ""
        try:
            signal.setitimer(signal.ITIMER_REAL, max(float(timeout_s), 1e-3))
            try:
                if kind.startswith(OUTPUT_KIND):  # a whole model output: extraction inside the time bound
                    found = extract_answer(pred)
                    extracted = "" if found is None else found.text[:EXTRACTED_CHARS]
                    if found is None:
                        verdict = "no_answer"
                    elif len(found.text) > int(kind[len(OUTPUT_KIND):]):
                        verdict = "too_long"
                    else:
                        pred_input = verifier_input(found.text)
                        if pred_input == EMPTY_INPUT:  # `Answer: .`, `Answer: $ $`: nothing to grade
                            verdict = "no_answer"
                        elif pred_input in golds:  # the very same formula: no need to ask math-verify
                            verdict = "correct"
                        elif pred_input in slow:  # timed out recently: the same answer in another output
                            verdict, remembered = "timeout", True
                        else:
                            if len(pred_input) <= NOTE_CHARS:  # the parent remembers it if this job is killed
                                _send_unalarmed(tx, ("normalised", job_id, pred_input))
                            verdict = "correct" if judge(tuple(golds), pred_input) else "wrong"
                else:
                    verdict = "correct" if judge(tuple(golds), pred) else "wrong"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Deadline:
            verdict = "timeout"
        except MemoryError:
            verdict, recycle = "error", True
        except Exception:  # RecursionError, a sympy bug, ...: counted as an error (wrong)
            verdict = "error"
        try:
            if kind.startswith(OUTPUT_KIND):
                answer = pred_input if len(pred_input) <= NOTE_CHARS else ""  # a longer one is not remembered
                tx.send((job_id, verdict, recycle, extracted, answer, remembered))
            else:
                tx.send((job_id, verdict, recycle))
        except (OSError, EOFError):
            os._exit(0)
        if recycle:
            os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
