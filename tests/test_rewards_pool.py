"""The verifier pool: a stuck verifier killed within its bound and replaced, one global bound on live processes,
a bounded wait for a free process, clean exit. These run the real verifier processes (math-verify); a verifier
that ignores its timeout is simulated with SIGSTOP (a stopped process answers nothing, like a C-level loop)."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from verl_ebpo.rewards import pool as pool_module
from verl_ebpo.rewards.pool import VerifierPool, VerifierUnavailable

SLOW = "\\boxed{(x+y+z+w)^{90}}"  # math-verify works on it for many seconds: the soft timer stops it


@pytest.fixture
def make_pool():
    pools = []

    def make(size=1, **kw):
        pools.append(VerifierPool(size=size, **kw))
        return pools[-1]

    yield make
    for pool in pools:
        pool.close()


def grade(pool, output, gold="4", timeout=2.0, grace=1.0):
    return pool.score_output([f"${gold}$"], output, timeout, grace)[0]


def pids():
    """This process's live verifier processes: its children (of any thread) that run the pool's `serve`."""
    out = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                kids = [int(p) for p in f.read().split()]
            for pid in kids:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"rewards.pool import serve" in f.read():
                        out.append(pid)
        except OSError:  # a thread or process gone meanwhile
            pass
    return sorted(p for p in out if alive(p))


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


def test_a_stuck_verifier_is_killed_within_the_bound_and_replaced(make_pool):
    pool = make_pool(size=1)
    assert grade(pool, "\\boxed{4}") == "correct"
    (pid,) = pids()
    os.kill(pid, signal.SIGSTOP)  # ignores its timer from now on
    assert grade(pool, "\\boxed{4}", timeout=0.5, grace=0.5) == "timeout"
    assert wait_gone([pid]) == []
    assert grade(pool, "\\boxed{4}") == "correct"  # a fresh process took over
    assert len(pids()) == 1 and pids() != [pid]


def test_a_slow_answer_is_stopped_by_its_timer_and_the_process_lives_on(make_pool):
    pool = make_pool(size=1)
    assert grade(pool, "\\boxed{4}") == "correct"
    (pid,) = pids()
    assert grade(pool, "First we think. So " + SLOW, timeout=0.5, grace=30) == "timeout"
    assert grade(pool, "Other words, other reasoning. " + SLOW, timeout=0.5, grace=30) == "timeout"  # again
    assert pids() == [pid] and grade(pool, "\\boxed{4}") == "correct"


def test_a_verifier_that_dies_is_an_error_and_the_next_call_gets_a_fresh_one(make_pool):
    pool = make_pool(size=1)
    assert grade(pool, "\\boxed{4}") == "correct"
    (pid,) = pids()
    with ThreadPoolExecutor(1) as ex:
        job = ex.submit(grade, pool, SLOW, "4", 30.0, 5.0)
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)  # mid-job
        assert job.result(timeout=30) == "error"
    assert grade(pool, "\\boxed{5}") == "wrong"
    (pid,) = pids()
    os.kill(pid, signal.SIGKILL)  # while idle: the next call does not pay for it
    assert wait_gone([pid]) == []
    time.sleep(0.5)  # its other threads end a little after its main thread shows as a zombie
    assert grade(pool, "\\boxed{4}") == "correct" and len(pids()) == 1 and pids() != [pid]


def test_any_exception_during_a_job_replaces_the_process_and_later_calls_still_return(make_pool):
    """A timeout too large for the system's wait raises OverflowError: the process is replaced, never lost."""
    pool = make_pool(size=1)
    assert grade(pool, "\\boxed{4}") == "correct"
    with pytest.raises(OverflowError):
        grade(pool, "\\boxed{4}", timeout=1e300)
    assert pids() == []
    assert grade(pool, "\\boxed{4}") == "correct"


def test_live_processes_never_exceed_the_global_bound_whatever_the_callers_ask(make_pool, monkeypatch):
    monkeypatch.setattr(pool_module, "MAX_PROCESSES", 2)
    pool = make_pool(size=64)
    assert pool.size == 2
    seen = set()

    def one(i):
        seen.update(pids())
        return grade(pool, f"\\boxed{{{i}}}")

    with ThreadPoolExecutor(8) as ex:
        verdicts = list(ex.map(one, range(24)))
    assert verdicts == ["correct" if i == 4 else "wrong" for i in range(24)]
    assert len(seen | set(pids())) == 2 and len(pids()) == 2


def test_the_shared_pool_has_the_largest_size_any_caller_asked_for(monkeypatch):
    monkeypatch.setattr(pool_module, "MAX_PROCESSES", 3)
    pool_module.shutdown()
    try:
        assert pool_module.get_pool(1).size == 1
        assert pool_module.get_pool(2).size == 2
        assert pool_module.get_pool(1).size == 2  # a smaller request does not shrink it
        assert pool_module.get_pool(64).size == 3  # capped
    finally:
        pool_module.shutdown()


def test_waiting_for_a_free_process_ends_in_verifier_unavailable(make_pool):
    pool = make_pool(size=1)
    assert grade(pool, "\\boxed{4}") == "correct"  # its one process is up (start-up counts against the wait)
    pool.acquire_timeout = 1.0
    (pid,) = pids()
    os.kill(pid, signal.SIGSTOP)
    with ThreadPoolExecutor(1) as ex:
        busy = ex.submit(grade, pool, "\\boxed{4}", "4", 3.0, 1.0)
        time.sleep(0.3)
        with pytest.raises(VerifierUnavailable, match="no verifier process became free within 1 s"):
            grade(pool, "\\boxed{4}")
        assert busy.result() == "timeout"


def test_a_verifier_that_cannot_start_is_a_clear_error(make_pool, tmp_path, monkeypatch):
    (tmp_path / "math_verify.py").write_text("raise ImportError('math-verify is broken here')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = make_pool(size=1)
    with pytest.raises(VerifierUnavailable, match="no verifier process could be started .*exited during start-up"):
        grade(pool, "\\boxed{4}")
    assert pids() == []


def test_close_lets_a_call_in_flight_finish_and_a_waiting_call_fails(make_pool):
    pool = make_pool(size=1)
    assert grade(pool, "\\boxed{4}") == "correct"
    (pid,) = pids()
    with ThreadPoolExecutor(2) as ex:
        in_flight = ex.submit(grade, pool, SLOW, "4", 1.0, 5.0)
        time.sleep(0.3)
        waiting = ex.submit(grade, pool, "\\boxed{4}")
        time.sleep(0.2)
        pool.close()
        assert in_flight.result(timeout=30) == "timeout"  # its own verdict, not an error
        with pytest.raises(VerifierUnavailable, match="closed"):
            waiting.result(timeout=30)
    assert wait_gone([pid]) == []  # stopped once the call handed it back


EXIT_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from concurrent.futures import ThreadPoolExecutor
    from verl_ebpo.rewards import compute_score

    def pids():  # this process's children: its verifiers
        tasks = os.listdir("/proc/self/task")
        return sorted(int(p) for t in tasks for p in open(f"/proc/self/task/{t}/children").read().split())

    kw = dict(timeout=1.0, kill_grace=1.0, processes=2)
    sols = ["\\\\boxed{0.5}", "\\\\boxed{9^{9^{9^{9}}}}", "Answer: 1/2", "none"] * 4
    with ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(lambda s: compute_score("m", s, "\\\\frac12", **kw), sols))
    assert [o["acc"] for o in outs] == [True, False, True, False] * 4, outs
    print("PIDS", *pids(), flush=True)
    if sys.argv[1] == "fork":
        pid = os.fork()
        if pid == 0:  # the child forgets the parent's processes and starts its own
            ok = compute_score("m", "\\\\boxed{2.0}", "2", **kw)["acc"]
            print("CHILD", *pids(), flush=True)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        assert compute_score("m", "\\\\boxed{3.0}", "3", **kw)["acc"]  # the parent's pool still works
    if sys.argv[1] == "sleep":
        # a thread waiting on a verifier that grinds one long C-level sympy call when the process is killed
        threading.Thread(target=compute_score, args=("m", "\\\\boxed{10^{10^{9}}}", "1"),
                         kwargs=dict(timeout=60, processes=2), daemon=True).start()
        import time; time.sleep(2); print("BUSY", flush=True); time.sleep(3600)
    # plain exit: no shutdown() call
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
    assert proc.stdout.readline().startswith("BUSY")
    busy = [p for p in pids if _cpu_ticks(p) != _cpu_ticks(p, after=0.5)]
    assert busy, "no verifier was computing"  # the test would not test the mid-job case
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    # The kernel kills a verifier whose parent died (PR_SET_PDEATHSIG), even mid-job with the GIL held
    assert wait_gone(pids, within=5) == []


def _cpu_ticks(pid, after=0.0):
    time.sleep(after)
    with open(f"/proc/{pid}/stat") as f:
        return sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])


def test_a_verifier_outlives_the_thread_that_started_it(make_pool):
    """The kernel's parent-death signal follows the starting *thread*: verl's reward threads come and go, the
    verifiers must not go with them."""
    pool = make_pool(size=1)
    t = threading.Thread(target=lambda: grade(pool, "\\boxed{4}"))
    t.start(), t.join()
    (pid,) = pids()
    time.sleep(0.5)
    assert grade(pool, "\\boxed{4}") == "correct"
    assert pids() == [pid]


def test_bytes_printed_at_verifier_start_up_do_not_touch_the_protocol(make_pool, tmp_path, monkeypatch):
    """A `sitecustomize` that prints (to stdout, unbuffered, and straight to fd 1 and 2) when any interpreter
    starts, and again during each job: the verifiers talk over their own socket, so grading is unaffected."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os, sys\nprint('hello from sitecustomize ' * 50)\nos.write(1, b'\\x00\\xff' * 4096)\n"
        "os.write(2, b'noise on stderr\\n')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    pool = make_pool(size=1, acquire_timeout=120)
    assert grade(pool, "print('x')\n\\boxed{4}") == "correct"
    (pid,) = pids()
    assert grade(pool, "\\boxed{5}") == "wrong" and pids() == [pid]


def test_a_non_string_sys_path_entry_is_ignored(make_pool, tmp_path, monkeypatch):
    """Python ignores `sys.path` entries that are not strings; so does the start of a verifier."""
    monkeypatch.setattr(sys, "path", [pathlib.Path(tmp_path), b"/nonexistent", 42, *sys.path])
    pool = make_pool(size=1)
    assert grade(pool, "\\boxed{4}") == "correct"


def test_the_verifier_is_the_callers_own_copy(tmp_path):
    """A verifier started from a directory that holds another `verl_ebpo` (a child `python -c` has the
    working directory first on its path) still runs the caller's worker, not that one."""
    other = tmp_path / "elsewhere"
    (other / "verl_ebpo" / "rewards").mkdir(parents=True)
    (other / "verl_ebpo" / "__init__.py").write_text("")
    (other / "verl_ebpo" / "rewards" / "__init__.py").write_text("")
    (other / "verl_ebpo" / "rewards" / "pool.py").write_text("import sys\nsys.exit(3)\n")
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


@pytest.mark.parametrize("key, value", [("timeout", 3e6), ("timeout", 3601), ("kill_grace", 601),
                                        ("processes", 257)])
def test_reward_options_have_upper_bounds(key, value):
    from verl_ebpo.rewards.score import RewardOptions

    with pytest.raises(ValueError, match=f"reward_kwargs.{key} must be"):
        RewardOptions(**{key: value})
