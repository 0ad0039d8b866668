"""The verifier pool's hard time bound, crash handling and clean exit.

Hangs and crashes that the soft timer cannot stop are hard to produce on purpose with math-verify, so most
tests here run the real pool (`VerifierPool`) with a tiny stand-in verifier that speaks the same protocol and
hangs, crashes or asks to be recycled on command. The exit tests run the real verifier in a subprocess."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from verl_ebpo.rewards.pool import VerifierPool, VerifierUnavailable

FAKE_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from multiprocessing.connection import Connection

    rx = Connection(int(sys.argv[1]), writable=False)
    tx = Connection(int(sys.argv[2]), readable=False)
    tx.send(("ready", os.getpid()))
    while True:
        try:
            job_id, golds, pred, kind, timeout = rx.recv()
        except EOFError:
            os._exit(0)
        if pred == "hang":  # ignores its timeout, like a C-level computation that never checks signals
            time.sleep(3600)
        if pred == "crash":
            os._exit(3)
        if pred == "recycle":
            tx.send((job_id, "error", True))
            os._exit(0)
        if pred.startswith("sleep"):
            time.sleep(float(pred[5:]))
        tx.send((job_id, "correct" if pred in golds else "wrong", False))
    """
)


@pytest.fixture
def fake_pool(tmp_path, monkeypatch):
    (tmp_path / "fake_verifier.py").write_text(FAKE_WORKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    pools = []

    def make(size=2):
        pool = VerifierPool(size=size, memory_limit_mb=0, startup_timeout=60, worker_module="fake_verifier")
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def wait_gone(pids, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def test_hang_is_killed_within_the_bound_and_replaced(fake_pool):
    pool = fake_pool(size=1)
    assert pool.run(["1"], "1", "boxed", timeout=0.3, grace=0.3) == "correct"
    (pid,) = pool.pids()
    t = time.monotonic()
    assert pool.run(["1"], "hang", "boxed", timeout=0.3, grace=0.3) == "timeout"
    assert time.monotonic() - t < 0.6 + 5  # timeout + grace, loosely
    assert pool.counters["killed"] == 1
    assert wait_gone([pid]) == []
    assert pool.run(["2"], "2", "boxed", timeout=0.3, grace=0.3) == "correct"  # a fresh process took over
    assert pool.pids() != [pid]
    # the same hanging job again is remembered: no second wait, no second kill
    t = time.monotonic()
    assert pool.run(["1"], "hang", "boxed", timeout=0.3, grace=0.3) == "timeout"
    assert time.monotonic() - t < 0.3
    assert pool.counters["killed"] == 1 and pool.counters["timeouts_remembered"] == 1


def test_a_remembered_timeout_is_tried_again_later(fake_pool, monkeypatch):
    """A timeout may come from a loaded machine: after TIMEOUT_MEMORY_S the same answer is verified again."""
    from verl_ebpo.rewards import pool as pool_module

    pool = fake_pool(size=1)
    assert pool.run(["1"], "hang", "boxed", timeout=0.3, grace=0.3) == "timeout"
    assert pool.run(["1"], "hang", "boxed", timeout=0.3, grace=0.3) == "timeout"
    assert pool.counters["killed"] == 1 and pool.counters["timeouts_remembered"] == 1
    monkeypatch.setattr(pool_module, "TIMEOUT_MEMORY_S", 0.0)
    time.sleep(0.01)
    assert pool.run(["1"], "hang", "boxed", timeout=0.3, grace=0.3) == "timeout"
    assert pool.counters["killed"] == 2 and pool.counters["timeouts_remembered"] == 1


def test_crash_is_retried_once_then_counted_as_error(fake_pool):
    pool = fake_pool(size=1)
    assert pool.run(["1"], "crash", "boxed", timeout=1, grace=1) == "error"
    assert pool.counters["crashed"] == 2  # the job and its one retry
    assert pool.run(["1"], "1", "boxed", timeout=1, grace=1) == "correct"


def test_a_process_that_asks_to_be_recycled_is_replaced(fake_pool):
    pool = fake_pool(size=1)
    assert pool.run(["1"], "recycle", "boxed", timeout=1, grace=1) == "error"
    assert pool.counters["recycled"] == 1
    assert pool.run(["1"], "1", "boxed", timeout=1, grace=1) == "correct"


def test_many_threads_mixed_jobs(fake_pool):
    """64 threads on 3 processes, a few jobs hanging: every answer right, no exception, bounded."""
    pool = fake_pool(size=3)
    jobs = []
    for i in range(400):
        if i % 100 == 7:
            jobs.append((["x"], "hang", f"t{i}"))  # distinct kinds: each hang is a new job (not remembered)
        elif i % 3 == 0:
            jobs.append(([str(i)], "sleep0.01", "boxed"))
        else:
            jobs.append(([str(i)], str(i if i % 2 else i + 1), "boxed"))

    def run(job):
        golds, pred, kind = job
        return pool.run(golds, pred, kind, timeout=0.5, grace=0.5)

    t = time.monotonic()
    with ThreadPoolExecutor(64) as ex:
        verdicts = list(ex.map(run, jobs))
    elapsed = time.monotonic() - t
    for (golds, pred, _), verdict in zip(jobs, verdicts):
        expected = "timeout" if pred == "hang" else ("correct" if pred in golds else "wrong")
        assert verdict == expected
    assert pool.counters["killed"] == 4
    assert elapsed < 60  # ~0.5 s of work per process plus 4 kills and restarts; loose


def test_start_failure_raises_a_clear_error(tmp_path):
    pool = VerifierPool(size=1, memory_limit_mb=0, startup_timeout=30, worker_module="no_such_verifier_module")
    try:
        with pytest.raises(VerifierUnavailable, match="could not be started|exited during start-up"):
            pool.run(["1"], "1", "boxed", timeout=1, grace=1)
        assert pool.counters["start_failures"] >= 3
    finally:
        pool.close()


def test_closed_pool_refuses(fake_pool):
    pool = fake_pool(size=1)
    assert pool.run(["1"], "1", "boxed", timeout=1, grace=1) == "correct"
    pids = pool.pids()
    pool.close()
    assert wait_gone(pids) == []
    with pytest.raises(VerifierUnavailable, match="closed"):
        pool.run(["1"], "1", "boxed", timeout=1, grace=1)


EXIT_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from concurrent.futures import ThreadPoolExecutor
    from verl_ebpo.rewards import compute_score
    from verl_ebpo.rewards.pool import current_pool

    kw = dict(timeout=1.0, kill_grace=1.0, processes=2)
    sols = ["\\\\boxed{0.5}", "\\\\boxed{9^{9^{9^{9}}}}", "Answer: 1/2", "none"] * 4
    with ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(lambda s: compute_score("m", s, "\\\\frac12", **kw), sols))
    assert [o["acc"] for o in outs] == [True, False, True, False] * 4, outs
    print("PIDS", *current_pool().pids(), flush=True)
    if sys.argv[1] == "fork":
        pid = os.fork()
        if pid == 0:  # the child forgets the parent's processes and starts its own
            ok = compute_score("m", "\\\\boxed{2.0}", "2", **kw)["acc"]
            print("CHILD", *current_pool().pids(), flush=True)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        assert compute_score("m", "\\\\boxed{3.0}", "3", **kw)["acc"]  # the parent's pool still works
    if sys.argv[1] == "sleep":
        # a thread still waiting on a verifier when the process is killed
        threading.Thread(target=compute_score, args=("m", "\\\\boxed{(x+y+z+w)^{90}}", "1"),
                         kwargs=dict(timeout=30, processes=2), daemon=True).start()
        import time; time.sleep(3600)
    # plain exit: no shutdown() call, a daemon thread could still be starting a replacement
    """
)


def run_script(mode):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-c", EXIT_SCRIPT, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )


def pids_from(lines, tag):
    for line in lines:
        if line.startswith(tag):
            return [int(p) for p in line.split()[1:]]
    raise AssertionError(f"no {tag} line in {lines}")


def test_interpreter_exit_and_fork_leave_nothing_behind():
    proc = run_script("fork")
    try:
        out, err = proc.communicate(timeout=120)  # loose: start-up of verifier processes on a busy machine
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the process did not exit: something hangs at interpreter exit")
    assert proc.returncode == 0, err[-3000:]
    lines = out.splitlines()
    parent_pids, child_pids = pids_from(lines, "PIDS"), pids_from(lines, "CHILD")
    assert parent_pids and child_pids and not set(parent_pids) & set(child_pids)
    assert wait_gone(parent_pids + child_pids) == []


def test_verifiers_exit_when_their_parent_is_killed():
    proc = run_script("sleep")
    pids = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("PIDS"):
            pids = [int(p) for p in line.split()[1:]]
            break
        if not line and proc.poll() is not None:
            break
    assert pids, proc.stderr.read()[-3000:]
    time.sleep(0.5)  # let the daemon thread hand its job to a verifier
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    # An idle verifier sees EOF on its pipe; a busy one notices its parent is gone (it checks twice a second)
    assert wait_gone(pids, within=15) == []


def test_the_verifier_is_the_callers_own_copy(tmp_path):
    """A verifier started from a directory that holds another `verl_ebpo` (a child `python -c` has the
    working directory first on its path) still runs the caller's worker, not that one."""
    other = tmp_path / "elsewhere"
    (other / "verl_ebpo" / "rewards").mkdir(parents=True)
    (other / "verl_ebpo" / "__init__.py").write_text("")
    (other / "verl_ebpo" / "rewards" / "__init__.py").write_text("")
    (other / "verl_ebpo" / "rewards" / "_worker.py").write_text("import sys\nsys.exit(3)\n")
    script = tmp_path / "score_one.py"
    script.write_text(
        "from verl_ebpo.rewards import compute_score, shutdown\n"
        "print(compute_score('x', r'\\boxed{\\frac{1}{2}}', '0.5')['verdict'])\n"
        "shutdown()\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, str(script)], cwd=other, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "correct"


# -- issue 19.1: any exception hands the process back; waiting has a deadline; options bounded ----------------------


def test_any_exception_during_a_job_replaces_the_process_and_later_calls_still_return(fake_pool, monkeypatch):
    """Before: only EOFError/OSError released the process, so an OverflowError (timeout=3e6) lost it and every later
    call waited forever."""
    from verl_ebpo.rewards.pool import _Worker

    pool = fake_pool(size=1)
    assert pool.run(["1"], "1", "latex", 5.0, 2.0) == "correct"
    real = _Worker.request

    def boom(self, job, wait_s):
        raise OverflowError("timeout is too large")

    monkeypatch.setattr(_Worker, "request", boom)
    with pytest.raises(OverflowError):
        pool.run(["1"], "1", "latex", 5.0, 2.0)
    monkeypatch.setattr(_Worker, "request", real)
    start = time.monotonic()
    assert pool.run(["1"], "2", "latex", 5.0, 2.0) == "wrong"  # a replacement process answers
    assert time.monotonic() - start < 60


def test_waiting_for_a_free_process_ends_in_verifier_unavailable(fake_pool):
    pool = fake_pool(size=1)
    assert pool.run(["1"], "1", "latex", 10.0, 2.0) == "correct"  # its one process is up
    pool.acquire_timeout = 1.0
    with ThreadPoolExecutor(1) as ex:
        busy = ex.submit(pool.run, ["1"], "sleep4", "latex", 10.0, 2.0)
        time.sleep(0.5)
        start = time.monotonic()
        with pytest.raises(VerifierUnavailable, match="no verifier process became free within 1 s"):
            pool.run(["1"], "1", "latex", 10.0, 2.0)
        assert time.monotonic() - start < 5
        assert busy.result() == "wrong"


@pytest.mark.parametrize("key, value", [("timeout", 3e6), ("timeout", 3601), ("kill_grace", 601),
                                        ("processes", 257), ("max_answer_chars", 10**7 + 1),
                                        ("memory_limit_mb", 2**30 + 1)])
def test_reward_options_have_upper_bounds(key, value):
    from verl_ebpo.rewards.score import RewardOptions

    with pytest.raises(ValueError, match=f"reward_kwargs.{key} must be"):
        RewardOptions(**{key: value})


# -- issue 30.6: one global bound on live processes; shutdown() lets calls in flight finish ---------------------


def test_live_processes_never_exceed_the_global_bound_whatever_the_callers_ask(fake_pool, monkeypatch):
    """Before: a pool asked for 64 processes started one per waiting caller (6 threads x processes=64 reached 24
    processes in 4 s on a 2-core machine). Now the size is capped by MAX_PROCESSES (the CPUs)."""
    from verl_ebpo.rewards import pool as pool_module

    monkeypatch.setattr(pool_module, "MAX_PROCESSES", 2, raising=False)
    pool = fake_pool(size=64)
    assert pool.size == 2
    with ThreadPoolExecutor(8) as ex:
        verdicts = list(ex.map(lambda i: pool.run([str(i)], "sleep0.2", "boxed", timeout=5, grace=5), range(16)))
    assert verdicts == ["wrong"] * 16
    assert pool.counters["started"] <= 2 and len(pool.pids()) <= 2
    pool.resize(256)
    assert pool.size == 2


def test_the_shared_pool_has_the_largest_size_any_caller_asked_for(monkeypatch):
    """Before: each call resized the shared pool to its own `processes` (callers asking 1 and 8 shrank and grew it
    under each other), and any size was taken as is."""
    from verl_ebpo.rewards import pool as pool_module

    monkeypatch.setattr(pool_module, "MAX_PROCESSES", 3, raising=False)
    pool_module.shutdown()
    try:
        assert pool_module.get_pool(1, 0).size == 1
        assert pool_module.get_pool(2, 0).size == 2
        assert pool_module.get_pool(1, 0).size == 2  # a smaller request does not shrink it
        assert pool_module.get_pool(64, 0).size == 3  # capped
    finally:
        pool_module.shutdown()


def test_close_lets_a_call_in_flight_finish_and_a_waiting_call_fails_with_one_error(fake_pool):
    """Before: close() killed the process of a call in flight; the call then failed (VerifierUnavailable after a
    retry). Now it gets its verdict; a call still waiting for a process gets VerifierUnavailable ("closed")."""
    pool = fake_pool(size=1)
    assert pool.run(["1"], "1", "boxed", timeout=5, grace=5) == "correct"
    (pid,) = pool.pids()
    with ThreadPoolExecutor(2) as ex:
        in_flight = ex.submit(pool.run, ["1"], "sleep1", "boxed", 5, 5)
        time.sleep(0.3)
        waiting = ex.submit(pool.run, ["2"], "2", "boxed", 5, 5)
        time.sleep(0.2)
        pool.close(wait_s=0.1)  # returns before the call in flight ends; it is not killed
        assert in_flight.result(timeout=30) == "wrong"  # its own verdict, not an error
        with pytest.raises(VerifierUnavailable, match="closed"):
            waiting.result(timeout=30)
    assert pool.counters["crashed"] == 0
    assert wait_gone([pid]) == []  # stopped once the call handed it back
