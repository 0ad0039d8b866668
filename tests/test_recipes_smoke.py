"""`SMOKE=cpu bash recipes/<model>/run_<algo>.sh`: verl's real trainer runs each recipe's own keys on the CPU
backend (tiny model and data made offline, hardware keys swapped), writes checkpoints under CKPTS_ROOT and one
metrics file per attempt, and a second invocation resumes.

`-m slow` (CI, after the README's command): DAPO-diff on 24 prompts, which must end with its curriculum (one pass,
dynamic sampling, the recipe's reward manager and KL loss, one metrics file per attempt).
On demand (`pytest -m recipe_smoke tests/test_recipes_smoke.py`): EBPO (2 steps, its prior file) and resumed by a
second invocation, DAPO-diff resumed after its last step, DAPO, one run per algorithm family under both protocols,
and `LAUNCH=ray-job` through a local Ray head with its dashboard and token authentication.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"


def smoke(model: str, algo: str, ckpts: Path, steps: int = 1, timeout: float = 900, args: tuple = (),
          **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", "SMOKE": "cpu",
            "CKPTS_ROOT": str(ckpts), "SMOKE_STEPS": str(steps), **env}
    for key in ("MODEL_PATH", "DATA_DIR", "EXPERIMENT_NAME", "LAUNCH", "RECIPE_DRY_RUN", "METRICS_FILE"):
        if key not in env:
            full.pop(key, None)
    out = subprocess.run(["bash", str(RECIPES / model / f"run_{algo}.sh"), *args], env=full, capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    if out.returncode != 0:
        (ckpts / "smoke_failure.log").write_text(out.stdout + "\n--- stderr\n" + out.stderr)
    assert out.returncode == 0, f"see {ckpts / 'smoke_failure.log'}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def run_folder(ckpts: Path) -> Path:
    (folder,) = list((ckpts / "verl_ebpo").iterdir())
    return folder


def metrics(folder: Path) -> list[dict[int, dict]]:
    """One {step: metrics} per attempt, oldest first."""
    files = sorted((folder / "metrics").glob("attempt-*.jsonl"), key=lambda p: p.stat().st_mtime)
    return [{(r := json.loads(line))["step"]: r["data"] for line in f.read_text().splitlines() if line.strip()}
            for f in files]


def _smoke_ebpo_first(tmp_path):
    started = time.time()
    out = smoke("qwen3_8b", "ebpo", tmp_path, steps=2)
    seconds = time.time() - started
    assert "swapped (hardware)" in out.stderr and "actor_rollout_ref.rollout.name: vllm -> hf" in out.stderr
    folder = run_folder(tmp_path)
    assert folder.name == "smoke_cpu-qwen3_8b-ebpo-g4-s42"
    prior = json.loads((folder / "global_step_2" / "ebpo_prior.json").read_text())
    assert prior["global_step"] == 2 and prior["updates"] == 2
    (attempt,) = metrics(folder)
    assert sorted(s for s in attempt if s >= 1) == [1, 2]
    assert attempt[2]["ebpo/prior_weight"] == 2 * attempt[1]["ebpo/prior_weight"]  # the running prior grows
    assert "actor/kl_loss" in attempt[1]  # the recipe's KL loss to the reference policy runs on CPU too
    print(f"\nSMOKE=cpu run_ebpo.sh: 2 steps {seconds:.0f} s", file=sys.stderr)
    return folder, attempt


@pytest.mark.e2e
@pytest.mark.recipe_smoke  # in the default suite EBPO trains with its callback in tests/test_e2e_cpu.py (runs A, B)
def test_smoke_ebpo_writes_its_prior_and_metrics(tmp_path):
    _smoke_ebpo_first(tmp_path)


@pytest.mark.e2e
@pytest.mark.recipe_smoke  # a second trainer launch (run B of tests/test_e2e_cpu.py resumes in the default suite)
def test_smoke_ebpo_second_invocation_resumes(tmp_path):
    folder, attempt = _smoke_ebpo_first(tmp_path)
    started = time.time()
    out = smoke("qwen3_8b", "ebpo", tmp_path, steps=3)
    second = time.time() - started
    assert "Resuming from" in out.stdout + out.stderr
    earlier, latest = metrics(folder)
    assert earlier == attempt  # the resume did not erase the first attempt's metrics
    assert sorted(s for s in latest if s >= 1) == [3]
    prior = json.loads((folder / "global_step_3" / "ebpo_prior.json").read_text())
    assert prior["updates"] == 3  # restored from step 2, then one more update
    print(f"\nSMOKE=cpu run_ebpo.sh: resumed to step 3 {second:.0f} s", file=sys.stderr)


@pytest.mark.e2e
@pytest.mark.recipe_smoke  # the demo's e2e run trains DAPO from the same definition (verl_ebpo.tools.algorithms)
def test_smoke_dapo_runs_its_dynamic_sampling_and_overlong_shaping(tmp_path):
    out = smoke("qwen3_8b", "dapo", tmp_path, steps=1)
    assert "reward.reward_kwargs.max_resp_len" not in out.stderr.split("swapped (hardware)")[1].split("[recipes] checkpoints")[0]
    folder = run_folder(tmp_path)
    assert folder.name == "smoke_cpu-qwen3_8b-dapo-g4-s42"
    assert (folder / "global_step_1" / "actor").is_dir()
    (attempt,) = metrics(folder)
    assert 1 in attempt and "critic/score/mean" in attempt[1]
    # the answers DAPO's dynamic sampling dropped are logged (the replay buffer, every epoch)
    assert "replay/discarded_answers" in attempt[1] and "replay/discarded_reward_sum" in attempt[1]


def _smoke_dapo_diff_first(tmp_path):
    """DAPO-diff on 24 prompts (B = 8): verl plans min(SMOKE_STEPS, 24 // 8) = 3 steps, DAPO draws more than 8
    prompts a step, and the run must end when the curriculum does, each prompt drawn at most once."""
    started = time.time()
    out = smoke("qwen3_8b", "dapo_diff", tmp_path, steps=10, args=("data.train_max_samples=24",))
    seconds = time.time() - started
    folder = run_folder(tmp_path)
    (attempt,) = metrics(folder)
    steps = sorted(s for s in attempt if s >= 1)
    consumed = [attempt[s]["replay/prompts_consumed"] for s in steps]
    assert all(attempt[s]["replay/data_pass"] == 1 for s in steps)  # never a second pass
    assert consumed == sorted(consumed) and consumed[-1] <= 24 and 24 - consumed[-1] < 8
    assert all(attempt[s]["replay/prompts_consumed"] + attempt[s]["replay/prompts_left"] == 24 for s in steps)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) <= 3
    assert attempt[steps[-1]]["replay/last_step"] == steps[-1]  # the planned end is where it ended
    assert (folder / f"global_step_{steps[-1]}" / "actor").is_dir()  # the last step saved, as verl's last step does
    for s, drawn in zip(steps, [consumed[0]] + [b - a for a, b in zip(consumed, consumed[1:])]):
        dropped = attempt[s]["replay/discarded_answers"]  # G = 4 answers per dropped group, at most 8 groups trained
        assert dropped % 4 == 0 and 4 * (drawn - 8) <= dropped <= 4 * drawn, (s, drawn, dropped)
    print(f"\nSMOKE=cpu run_dapo_diff.sh: {len(steps)} steps, {consumed[-1]:.0f} of 24 prompts, {seconds:.0f} s",
          file=sys.stderr)
    return out, folder, attempt, steps


@pytest.mark.e2e
@pytest.mark.slow  # CI runs it after the README's command (a launch of ~1-4 min)
def test_smoke_dapo_diff_makes_exactly_one_pass_over_its_curriculum(tmp_path):
    out, _folder, _attempt, _steps = _smoke_dapo_diff_first(tmp_path)
    swaps = out.stderr.split("swapped (hardware)")[1].split("[recipes] checkpoints")[0]
    assert "sampler_kwargs.poll_interval_s: (unset) -> 0.05" in swaps and "custom_sampler" not in swaps  # the recipe's


@pytest.mark.e2e
@pytest.mark.recipe_smoke
def test_smoke_dapo_diff_second_invocation_resumes_and_stops(tmp_path):
    _out, folder, first, steps = _smoke_dapo_diff_first(tmp_path)
    out = smoke("qwen3_8b", "dapo_diff", tmp_path, steps=10, args=("data.train_max_samples=24",))
    assert "Resuming from" in out.stdout + out.stderr and "the run ends after step" in out.stdout + out.stderr
    earlier, latest = metrics(folder)
    assert earlier == first and not [s for s in latest if s >= 1]  # nothing left to train: no step, no restart


FAMILIES = [("grpo", "paper"), ("drgrpo", "authors"), ("drgrpo", "paper"), ("dapo", "authors"),
            ("ebpo", "authors"), ("ebpo_topic", "paper"), ("ebpo_topic", "authors"), ("dapo_diff", "paper"),
            ("ebpo_diff", "authors"), ("grpo_diff", "paper")]


@pytest.mark.e2e
@pytest.mark.recipe_smoke
@pytest.mark.parametrize("algo, protocol", FAMILIES)
def test_smoke_every_family_under_both_protocols(tmp_path, algo, protocol):
    model = "qwen3_14b" if algo.endswith("_diff") else "llama3_8b"
    smoke(model, algo, tmp_path, steps=1, PROTOCOL=protocol)
    folder = run_folder(tmp_path)
    assert (folder / "global_step_1" / "actor").is_dir()
    assert (folder / "global_step_1" / "ebpo_prior.json").is_file() == algo.startswith("ebpo")
    (attempt,) = metrics(folder)
    assert 1 in attempt


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.e2e
@pytest.mark.recipe_smoke
def test_smoke_through_ray_job_submit_on_a_token_authenticated_cluster(tmp_path):
    from verl_ebpo.tools.cpu.launch import _kill_group, cpu_env

    ray = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    token = secrets.token_hex(32)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    port, dashboard = _free_port(), _free_port()
    temp_dir = Path("/tmp") / f"verl_ebpo_rayjob_{secrets.token_hex(4)}"
    head = [ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
            "--num-cpus=16", "--num-gpus=1", "--include-dashboard=true", f"--dashboard-port={dashboard}",
            "--dashboard-host=127.0.0.1", "--disable-usage-stats", f"--ray-client-server-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}", "--block"]
    env = {**cpu_env(), **auth, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(head, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        address = f"http://127.0.0.1:{dashboard}"
        for _ in range(120):  # the dashboard's job API comes up after the head
            probe = subprocess.run([ray, "job", "list", "--address", address], env={**os.environ, **auth},
                                   capture_output=True, text=True, timeout=600)
            if probe.returncode == 0:
                break
            time.sleep(2)
        # the recipe sends the token (RAY_AUTH_TOKEN given, RAY_AUTH_MODE left to the recipe)
        out = smoke("qwen3_8b", "grpo", tmp_path, steps=1, timeout=1200, LAUNCH="ray-job", RAY_ADDRESS=address,
                    RAY_AUTH_TOKEN=token, WORKING_DIR=str(ROOT))
        assert "succeeded" in (out.stdout + out.stderr).lower()
        folder = run_folder(tmp_path)
        assert (folder / "global_step_1" / "actor").is_dir()
        (attempt,) = metrics(folder)
        assert 1 in attempt
    finally:
        _kill_group(proc)  # `ray start --block` stops its cluster when signalled
        shutil.rmtree(temp_dir, ignore_errors=True)


# ---- without the trainer ----------------------------------------------------------------------------------------

_POLICY = """
import verl_ebpo.tools.cpu.backend
import verl.workers.engine.fsdp.transformer_impl as impl
from torch.distributed.fsdp import CPUOffloadPolicy
policy = impl.CPUOffloadPolicy(pin_memory=True)
print(policy.pin_memory, isinstance(policy, CPUOffloadPolicy))
"""


@pytest.mark.parametrize("platform, pinned", [("cpu", "False"), ("", "True")])
def test_reference_policy_offload_is_unpinned_on_the_cpu_platform_only(platform, pinned):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VERL_PLATFORM": platform}
    out = subprocess.run([sys.executable, "-c", _POLICY], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == [pinned, "True"]  # still verl's CPUOffloadPolicy for its isinstance checks


def test_tiny_rows_carry_the_labels_the_orders_read():
    from verl_ebpo.samplers.fields import read_field
    from verl_ebpo.tools.cpu.smoke import labelled_rows

    import pyarrow as pa

    rows = labelled_rows(64, seed=3, difficulty_field="extra_info.difficulty_qwen3_8b")
    table = pa.Table.from_pylist(rows)
    operands = [r["extra_info"]["operand"] for r in rows]
    assert list(read_field(table, "extra_info.topic")) == ["low" if n < 5 else "high" for n in operands]
    assert list(read_field(table, "extra_info.difficulty_qwen3_8b")) == [round(1 - n / 10, 3) for n in operands]
    assert all("difficulty" not in k for k in labelled_rows(4, 3, None)[0]["extra_info"])
