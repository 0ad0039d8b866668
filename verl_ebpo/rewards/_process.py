"""One verifier process (a fresh interpreter running `verl_ebpo.rewards._worker`) and its pipes: start, one request
with a deadline, kill. The pool (`pool.py`) decides when to start, reuse and replace them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Optional

WORKER_MODULE = "verl_ebpo.rewards._worker"
# The parent's own copy of the worker, run by path: a child started from another directory (its `''` on
# sys.path) or with another verl_ebpo installed must not run a different version of the protocol.
_WORKER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")
# A fresh interpreter that runs the worker (a file path, or a module name) as __main__ with the parent's
# import path appended.
_BOOTSTRAP = (
    "import os, sys, runpy\n"
    "for p in os.environ.pop('VERL_EBPO_PARENT_SYS_PATH', '').split(os.pathsep):\n"
    "    if p and p not in sys.path:\n"
    "        sys.path.append(p)\n"
    "target = sys.argv.pop(1)\n"
    "if target.endswith('.py'):\n"
    "    runpy.run_path(target, run_name='__main__')\n"
    "else:\n"
    "    runpy.run_module(target, run_name='__main__', alter_sys=True)\n"
)
_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class VerifierUnavailable(RuntimeError):
    """No verifier process could be started (e.g. math-verify is not importable). Not caused by model output."""



class _Worker:
    def __init__(self, proc: subprocess.Popen, tx: Connection, rx: Connection):
        self.proc = proc
        self.tx = tx
        self.rx = rx
        self.jobs = 0
        self.normalised: Optional[str] = None  # the answer the current output job is verifying (see _worker)

    @classmethod
    def start(cls, memory_limit_mb: int, startup_timeout: float, module: str = WORKER_MODULE) -> "_Worker":
        r_job, w_job = os.pipe()  # parent -> child
        r_res, w_res = os.pipe()  # child -> parent
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        # The child sees the parent's import path (appended: its own stdlib and site-packages come first).
        env["VERL_EBPO_PARENT_SYS_PATH"] = os.pathsep.join([p for p in sys.path if p] + [_PKG_ROOT])
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, _WORKER_FILE if module == WORKER_MODULE else module,
                 str(r_job), str(w_res), str(memory_limit_mb)],
                pass_fds=(r_job, w_res),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        except BaseException:
            for fd in (r_job, w_job, r_res, w_res):
                os.close(fd)
            raise
        os.close(r_job)
        os.close(w_res)
        w = cls(proc, Connection(w_job, readable=False), Connection(r_res, writable=False))
        try:
            if not w.rx.poll(startup_timeout):
                raise VerifierUnavailable(f"verifier process did not start within {startup_timeout:.0f} s")
            msg = w.rx.recv()
            if not (isinstance(msg, tuple) and msg and msg[0] == "ready"):
                raise VerifierUnavailable(f"verifier process sent {msg!r} instead of 'ready'")
        except (EOFError, OSError) as e:
            w.kill()
            code = proc.poll()
            raise VerifierUnavailable(
                f"verifier process exited during start-up (exit code {code}); its error is on stderr above. "
                "Is math-verify installed (`pip install math-verify`)?"
            ) from e
        except BaseException:
            w.kill()
            raise
        return w

    def request(self, job: tuple, wait_s: float) -> Optional[tuple]:
        """Send a job and wait for its reply. None: no reply in time (caller kills). Raises EOFError/OSError if dead."""
        self.normalised = None
        self.tx.send(job)
        self.jobs += 1
        deadline = time.monotonic() + wait_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.rx.poll(left):
                return None
            reply = self.rx.recv()
            if isinstance(reply, tuple) and reply and reply[0] == job[0]:
                return reply
            if isinstance(reply, tuple) and len(reply) == 3 and reply[0] == "normalised" and reply[1] == job[0]:
                self.normalised = reply[2]  # an interim note: keep waiting for the verdict
                continue
            # a stale reply of an earlier job: ignore it and keep waiting

    def kill(self) -> None:
        for conn in (self.tx, self.rx):
            try:
                conn.close()
            except OSError:
                pass
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a zombie the kernel will reap later
            pass

    def close_pipe(self) -> None:
        """Ask the child to exit (EOF on its job pipe)."""
        try:
            self.tx.close()
        except OSError:
            pass

    def forget(self) -> None:
        """In a forked child of the parent: drop our copies of the pipes, leave the process to the parent."""
        for conn in (self.tx, self.rx):
            try:
                conn.close()
            except OSError:
                pass
