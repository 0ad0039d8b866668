"""Hardening of the prior file, `verl-ebpo inspect` and the restore path: FIFOs (no hang), deeply nested JSON,
malformed fields, symlink loops and dangling links (said for what they are), garbage trackers, and a save killed
mid-write (the previous file intact).

Every CLI refusal is checked for its exit code, exactly one line on stderr, and no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from verl_ebpo import checkpoint as ckpt
from verl_ebpo.advantage import EBPOPrior, get_prior, reset_prior
from verl_ebpo.advantage.prior import Moments
from verl_ebpo.tools.cli import main as cli_main

PRIOR = EBPOPrior(Moments(8.0, 0.5, 2.0), Moments(2.0, 0.5, 0.125), 1)


@pytest.fixture(autouse=True)
def fresh_prior():
    reset_prior()
    yield
    reset_prior()


def _state(step=3, **patch):
    return {**PRIOR.state_dict(), "global_step": step, **patch}


def _inspect(capsys, *argv):
    rc = cli_main(["inspect", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _refused(rc, out, err, *words):
    assert rc == 2, (rc, out, err)
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("verl-ebpo inspect: error: "), err
    for w in words:
        assert w in err, (w, err)


def _restore_config(folder):
    """The parts of verl's config restore_prior reads (resume_path mode needs no verl import)."""
    return {"algorithm": {"adv_estimator": "ebpo"},
            "trainer": {"resume_mode": "resume_path", "resume_from_path": str(folder)}}


def _no_hang(fn, fifo=None, timeout=30.0):
    """Run fn in a thread; fail (after releasing a reader blocked on `fifo`) if it does not return in time."""
    result = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            result["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        if fifo is not None:  # unblock the reader so the thread can finish
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        pytest.fail(f"{fn} blocked for {timeout}s")
    if "error" in result:
        raise result["error"]
    return result.get("value")


# -- FIFOs never block ------------------------------------------------------------------------------------------


def test_inspect_refuses_a_fifo_prior_without_opening_it(tmp_path, capsys):
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    fifo = folder / "ebpo_prior.json"
    os.mkfifo(fifo)
    for target in (fifo, folder):
        rc, out, err = _no_hang(lambda: _inspect(capsys, target), fifo)
        _refused(rc, out, err, str(fifo) if target == folder else str(target), "FIFO", "not a regular file")


def test_inspect_refuses_a_fifo_tracker(tmp_path, capsys):
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    os.mkfifo(tracker)
    rc, out, err = _no_hang(lambda: _inspect(capsys, tmp_path), tracker)
    _refused(rc, out, err, str(tracker), "FIFO")


def test_inspect_cli_on_a_fifo_in_a_fresh_process_exits_at_once(tmp_path):
    """The real console entry point, in its own process: exit 2, one line, no hang."""
    os.mkfifo(tmp_path / "ebpo_prior.json")
    res = subprocess.run([sys.executable, "-m", "verl_ebpo.tools.cli", "inspect", str(tmp_path)], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "FIFO" in res.stderr and "Traceback" not in res.stderr


# -- malformed contents ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        json.dumps(_state(reward={"weight": 1e400, "mean": 0, "m2": 0})),
        json.dumps(_state(updates="x")),
        json.dumps(_state(group_mean="x")),
        json.dumps(_state(step=True)),
        json.dumps([1, 2]),
        b"\xff\xfe{}",
        json.dumps(_state(reward={"weight": -1, "mean": 0.5, "m2": 2})),
        json.dumps(_state(group_mean={"weight": 2, "mean": 0.5, "m2": -0.1})),
    ],
    ids=["inf-weight", "updates-str", "group-mean-str", "step-bool", "list", "not-utf8", "negative-weight",
         "negative-m2"],
)
def test_malformed_prior_files_are_one_line_errors_naming_the_file(tmp_path, capsys, content):
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    path = folder / "ebpo_prior.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    rc, out, err = _inspect(capsys, path)
    _refused(rc, out, err, str(path), "corrupt")
    with pytest.raises(ckpt.EBPOCheckpointError) as e:
        ckpt.restore_prior(_restore_config(folder))
    assert str(path) in str(e.value) and "corrupt" in str(e.value)
    assert get_prior().updates == 0


def test_a_valid_file_still_inspects(tmp_path, capsys):
    path = ckpt.save_prior(tmp_path / "global_step_3", 3, PRIOR)
    rc, out, err = _inspect(capsys, path, "--json")
    assert rc == 0 and json.loads(out)["sigma2"] == 0.25 and err == ""


# -- links -------------------------------------------------------------------------------------------------------


def test_symlink_loops_and_dangling_links_are_named_for_what_they_are(tmp_path, capsys):
    loop_a, loop_b = tmp_path / "a", tmp_path / "b"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    rc, out, err = _inspect(capsys, loop_a)
    _refused(rc, out, err, str(loop_a), "symlink loop")
    assert "does not exist" not in err

    folder = tmp_path / "global_step_3"
    folder.mkdir()
    (folder / "ebpo_prior.json").symlink_to(loop_a)
    rc, out, err = _inspect(capsys, folder)
    _refused(rc, out, err, "ebpo_prior.json", "symlink loop")

    dangling = tmp_path / "gone"
    dangling.symlink_to(tmp_path / "nowhere")
    rc, out, err = _inspect(capsys, dangling)
    _refused(rc, out, err, str(dangling), "symlink to", "which does not exist")


def test_a_missing_path_still_says_it_does_not_exist(tmp_path, capsys):
    rc, out, err = _inspect(capsys, tmp_path / "nowhere")
    _refused(rc, out, err, "does not exist")


# -- trackers ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"abc\n", b"", b"\xff", b"3.5"])
def test_garbage_tracker_is_a_clear_error_for_inspect(tmp_path, capsys, content):
    """inspect names the tracker; a resume fails as verl itself does (verl writes the tracker: trusted)."""
    (tmp_path / "global_step_3").mkdir()
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    tracker.write_bytes(content)
    rc, out, err = _inspect(capsys, tmp_path)
    _refused(rc, out, err, str(tracker), "not a step number")
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    with pytest.raises(ValueError):
        find_latest_ckpt_path(str(tmp_path))


@pytest.mark.parametrize("tracker, folder_exists", [("3", True), ("3\n", True), (" 7 ", False), ("+3", True)])
def test_inspects_tracker_rule_is_verls(tmp_path, capsys, tracker, folder_exists):
    """inspect mirrors verl's find_latest_ckpt_path (so it never imports verl); the two agree."""
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    step = int(tracker)
    if folder_exists:
        ckpt.save_prior(tmp_path / f"global_step_{step}", step, PRIOR)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text(tracker)
    theirs = find_latest_ckpt_path(str(tmp_path))
    capsys.readouterr()  # verl prints what it found
    rc, out, err = _inspect(capsys, tmp_path, "--json")
    if theirs is None:
        _refused(rc, out, err, "does not exist")
    else:
        assert rc == 0 and json.loads(out)["path"] == os.path.join(theirs, "ebpo_prior.json")


@pytest.mark.parametrize("eps", ["0", "-1", "nan", "inf", "abc", "2"])
def test_inspect_epsilon_must_be_in_0_1(tmp_path, capsys, eps):
    path = ckpt.save_prior(tmp_path, 3, PRIOR)
    rc, out, err = _inspect(capsys, path, "--epsilon", eps)
    _refused(rc, out, err, "--epsilon must be a", "(as algorithm.ebpo.epsilon)")
    if eps != "abc":
        assert "--epsilon must be a finite number in (0, 1]" in err


@pytest.mark.parametrize("eps", ["0", "2", "nan", "abc", "1e-9", "1"])
def test_inspect_epsilon_is_checked_by_ebpo_options_own_rule(tmp_path, capsys, eps):
    """inspect's --epsilon stands for algorithm.ebpo.epsilon: accepted, refused and worded exactly as the option."""
    from verl_ebpo.advantage.options import EBPOOptions

    path = ckpt.save_prior(tmp_path, 3, PRIOR)
    rc, out, err = _inspect(capsys, path, "--json", "--epsilon", eps)
    try:
        epsilon = EBPOOptions(epsilon=eps).epsilon
    except ValueError as e:
        _refused(rc, out, err)
        assert err.strip() == f"verl-ebpo inspect: error: {str(e).replace('algorithm.ebpo.epsilon', '--epsilon')} " \
                              "(as algorithm.ebpo.epsilon)"
    else:
        assert rc == 0 and json.loads(out)["shrinkage"]["8"] == PRIOR.shrinkage_for(8, epsilon)


def test_inspect_default_epsilon_is_ebpos(tmp_path, capsys):
    from verl_ebpo.advantage.options import EBPOOptions
    from verl_ebpo.tools.inspect_prior import describe_prior

    path = ckpt.save_prior(tmp_path, 3, PRIOR)
    rc, out, _ = _inspect(capsys, path, "--json")
    eps = EBPOOptions().epsilon
    assert rc == 0 and json.loads(out)["shrinkage"] == {str(g): PRIOR.shrinkage_for(g, eps) for g in (1, 4, 8, 16, 32)}
    assert describe_prior(PRIOR, 3)["shrinkage"] == json.loads(out)["shrinkage"]


# -- writes -------------------------------------------------------------------------------------------------------


def test_save_over_a_fifo_replaces_it_and_never_blocks(tmp_path):
    """The run writes ebpo_prior.json itself (a temporary file renamed over the target): nothing opens the target,
    so a FIFO there is replaced, not written into (which would block)."""
    os.mkfifo(tmp_path / "ebpo_prior.json")
    _no_hang(lambda: ckpt.save_prior(tmp_path, 3, PRIOR), tmp_path / "ebpo_prior.json")
    assert ckpt.read_prior_file(tmp_path / "ebpo_prior.json")[1] == 3


def test_a_save_killed_mid_write_leaves_the_previous_file_intact(tmp_path):
    """A real kill: a child process starts the atomic write of ebpo_prior.json and SIGKILLs itself half-way."""
    folder = tmp_path / "global_step_3"
    ckpt.save_prior(folder, 3, PRIOR)
    before = (folder / "ebpo_prior.json").read_text()
    child = (
        "import os, signal, sys\n"
        "from verl_ebpo.advantage.prior import EBPOPrior\n"
        "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed after the write, before the rename\n"
        "EBPOPrior().save(sys.argv[1], global_step=9)\n"
    )
    res = subprocess.run([sys.executable, "-c", child, str(folder / "ebpo_prior.json")], timeout=600)
    assert res.returncode == -signal.SIGKILL
    leftovers = [n for n in os.listdir(folder) if n != "ebpo_prior.json"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".ebpo_prior.json.tmp-")  # the kill left it
    assert (folder / "ebpo_prior.json").read_text() == before  # the previous file is intact
    ckpt.read_prior_file(folder / "ebpo_prior.json")

    # the next save replaces the file; the dead writer's hidden temporary is never read (harmless, not cleaned)
    ckpt.save_prior(folder, 4, PRIOR)
    assert sorted(os.listdir(folder)) == sorted(["ebpo_prior.json", leftovers[0]])
    assert ckpt.read_prior_file(folder / "ebpo_prior.json")[1] == 4


# -- the version's type, a link loop as the tracker's folder, a prior file too large to be one --------------------


@pytest.mark.parametrize("version", [True, "1", 1.0, [1]])
def test_inspect_refuses_a_version_that_is_not_an_integer(tmp_path, capsys, version):
    """`"version": true` (== 1 in Python) is not a version."""
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    path = folder / "ebpo_prior.json"
    path.write_text(json.dumps(_state(version=version)))
    rc, out, err = _inspect(capsys, path)
    _refused(rc, out, err, str(path), "version must be an integer, got")


def test_inspect_names_a_tracked_checkpoint_folder_that_is_a_link_loop(tmp_path, capsys):
    """A tracker naming a global_step_N that is a symlink to itself is named a link loop, not "does not exist"."""
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    (tmp_path / "global_step_3").symlink_to(tmp_path / "global_step_3")
    rc, out, err = _inspect(capsys, tmp_path)
    _refused(rc, out, err, "global_step_3", "which is a symlink loop")
    assert "does not exist" not in err
    os.remove(tmp_path / "global_step_3")
    (tmp_path / "global_step_3").write_text("not a folder")
    rc, out, err = _inspect(capsys, tmp_path)
    _refused(rc, out, err, "global_step_3", "not a folder")


def test_inspect_refuses_a_prior_file_larger_than_its_bound_before_reading_it(tmp_path, capsys, monkeypatch):
    """A file past the bound is refused from its size, unread (a 512 MiB one would take 1.2 GB to read)."""
    import builtins

    from verl_ebpo.tools import inspect_prior

    path = tmp_path / "ebpo_prior.json"
    with open(path, "wb") as f:  # a sparse file: 64 MiB long, nothing written
        f.truncate(64 << 20)
    opened = []
    real_open = builtins.open

    def spy(file, *a, **k):
        opened.append(os.fspath(file) if isinstance(file, (str, os.PathLike)) else file)
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", spy)
    rc, out, err = _inspect(capsys, path)
    monkeypatch.setattr(builtins, "open", real_open)
    _refused(rc, out, err, str(path), "67,108,864 bytes", f"{inspect_prior.MAX_PRIOR_BYTES:,}", "not read")
    assert str(path) not in opened


# -- issue 48: ill-typed or out-of-range content of a prior file is one line, exit 2, never a traceback ------------


@pytest.mark.parametrize("text", [
    lambda: json.dumps(_state(updates=float("inf"))),
    lambda: json.dumps(_state()).replace('"updates": ', '"updates": 1e400, "x": '),
    lambda: "[" * 100_000 + "]" * 100_000,
    lambda: json.dumps(_state(updates=[1, 2])),
])
def test_inspect_refuses_ill_typed_prior_content_in_one_line(tmp_path, capsys, text):
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    path = folder / "ebpo_prior.json"
    path.write_text(text())
    rc, out, err = _inspect(capsys, path)
    _refused(rc, out, err, str(path))
