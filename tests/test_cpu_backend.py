"""The CPU backend's registrations in verl 0.9.1 and its `hf` rollout server (no Ray, no trainer)."""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import verl_ebpo.tools.cpu.backend  # noqa: F401  (registers the backend in this process)
from verl_ebpo.tools.tiny import assets
from verl_ebpo.tools.cpu.launch import CPURun, cpu_env
from verl_ebpo.tools.cpu.platform import CPU_DEVICE_MODULE, PlatformCPU

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, env: dict) -> dict:
    """Run `code` in a fresh interpreter (verl's platform is a per-process singleton); it prints JSON."""
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _plain_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_")}
    env["VERL_FORCE_DEVICE"] = "cpu"
    return env


# -- private verl internals we rely on (pinned verl 0.9.1) ------------------------------------------


def test_verl_private_rollout_registry_still_exists_and_holds_hf():
    from verl.workers.rollout import base

    # registration.py writes into this private dict: if verl renames it, this fails first.
    assert isinstance(base._ROLLOUT_REGISTRY, dict)
    assert base._ROLLOUT_REGISTRY[("vllm", "async")] == "verl.workers.rollout.vllm_rollout.ServerAdapter"
    from verl_ebpo.tools.cpu.rollout import HFServerAdapter

    assert base.get_rollout_class("hf", "async") is HFServerAdapter


def test_hf_replica_is_registered_next_to_verls_own():
    from verl.workers.rollout.replica import RolloutReplicaRegistry, get_rollout_replica_class

    from verl_ebpo.tools.cpu.rollout import HFReplica

    assert get_rollout_replica_class("hf") is HFReplica
    assert {"vllm", "sglang", "trtllm", "hf"} <= set(RolloutReplicaRegistry._registry)


def test_registration_is_idempotent_and_never_replaces():
    from verl.plugin.platform import PlatformRegistry
    from verl.workers.rollout import base

    before = dict(base._ROLLOUT_REGISTRY)
    verl_ebpo.tools.cpu.backend.register()
    verl_ebpo.tools.cpu.backend.register()
    assert base._ROLLOUT_REGISTRY == before
    assert PlatformRegistry.get("cpu") is PlatformCPU
    assert PlatformRegistry.get("nvidia").__name__ == "PlatformCUDA"


def test_process_group_init_is_wrapped_where_verl_calls_it():
    import verl.utils.distributed as dist_utils
    import verl.workers.engine_workers as engine_workers

    assert getattr(dist_utils.initialize_global_process_group_ray, "_verl_ebpo_cpu", False)
    assert engine_workers.initialize_global_process_group_ray is dist_utils.initialize_global_process_group_ray


# -- the platform, selected and not ---------------------------------------------------------------


def test_cpu_platform_selected_by_env_runs_verls_device_helpers_and_gloo():
    env = cpu_env(_plain_env())
    env.pop("VERL_ENGINE_DEVICE")  # the platform sets it itself when selected
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    out = _python(
        """
import json, os, torch
import verl.workers.engine_workers as ew
from verl.utils import device
from verl.workers.engine import EngineRegistry
ew.initialize_global_process_group_ray()  # what verl's TrainingWorker calls
print(json.dumps({
    "device": device.get_device_name(), "backend": device.get_nccl_backend(),
    "pg_backend": str(torch.distributed.get_backend()), "device_id": str(device.get_device_id()),
    "resource": device.get_resource_name(), "engine": EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__,
    "engine_env": os.environ.get("VERL_ENGINE_DEVICE"), "ipc": device.is_support_ipc(),
}))
""",
        env,
    )
    assert out == {
        "device": "cpu",
        "backend": "gloo",
        "pg_backend": "gloo",
        "device_id": "cpu",
        "resource": "GPU",
        "engine": "FSDPEngineWithLMHead",
        "engine_env": "cuda",
        "ipc": False,
    }


def test_cpu_platform_is_never_auto_detected_and_the_entry_point_does_not_load_it():
    code = """
import json, sys
import verl
from verl.plugin.platform import PlatformRegistry, get_platform
from verl.workers.rollout import base
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
print(json.dumps({"cpu_registered": PlatformRegistry.get("cpu") is not None,
                  "cpu_module": "verl_ebpo.tools.cpu.backend" in sys.modules,
                  "hf": ("hf", "async") in base._ROLLOUT_REGISTRY,
                  "ebpo": "ebpo" in ADV_ESTIMATOR_REGISTRY,
                  "platform": get_platform().device_name}))
"""
    plain = _python(code, _plain_env())
    assert plain == {"cpu_registered": False, "cpu_module": False, "hf": False, "ebpo": True, "platform": "cuda"}
    loaded = _python(code, {**_plain_env(), "VERL_USE_EXTERNAL_MODULES": "verl_ebpo.tools.cpu.backend"})
    # registered but not selected: auto-detection still falls back to verl's default
    assert loaded == {"cpu_registered": True, "cpu_module": True, "hf": True, "ebpo": True, "platform": "cuda"}


def test_device_module_answers_verls_calls(monkeypatch):
    monkeypatch.delenv("VERL_ENGINE_DEVICE", raising=False)  # PlatformCPU() sets it when selected; restored after
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    avail, total = CPU_DEVICE_MODULE.mem_get_info()
    assert 0 < avail <= total
    assert CPU_DEVICE_MODULE.memory_allocated() > 0
    assert CPU_DEVICE_MODULE.max_memory_allocated() >= CPU_DEVICE_MODULE.memory_allocated() // 2
    assert CPU_DEVICE_MODULE.current_device() == torch.device("cpu")
    assert CPU_DEVICE_MODULE.is_available() and CPU_DEVICE_MODULE.device_count() == 1
    state = CPU_DEVICE_MODULE.get_rng_state()
    a = torch.rand(3)
    CPU_DEVICE_MODULE.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    assert CPU_DEVICE_MODULE.Stream is torch.cpu.Stream  # everything else comes from torch.cpu
    CPU_DEVICE_MODULE.empty_cache()
    CPU_DEVICE_MODULE.synchronize()
    platform = PlatformCPU()
    assert os.environ["VERL_ENGINE_DEVICE"] == "cuda"
    assert not platform.is_platform_available(use_smi_check=True)
    assert platform.ray_resource_options(1) == {"num_gpus": 1}  # verl's own, from the resource name "GPU"
    assert platform.get_device_capability() == (None, None)


# -- the hf rollout server, driven directly -----------------------------------------------------------


@pytest.fixture(scope="module")
def verl_config(tmp_path_factory):
    """verl's real Hydra config with CPURun's overrides (what main_ppo would see)."""
    from hydra import compose, initialize_config_dir

    import verl.trainer

    root = tmp_path_factory.mktemp("cpu_cfg")
    model = assets.build_model(root / "model", seed=1)
    run = CPURun(model_path=str(model), train_files="unused.parquet", val_files="unused.parquet", out_dir=str(root),
                 max_prompt_length=16, max_response_length=6)
    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=run.overrides())


@pytest.fixture
def server(verl_config):
    from verl_ebpo.tools.cpu.rollout import HFRolloutServer

    return HFRolloutServer(verl_config.actor_rollout_ref.rollout, verl_config.actor_rollout_ref.model, replica_rank=0)


def test_server_batches_concurrent_requests_and_returns_log_probs(server, monkeypatch):
    from verl.workers.rollout.replica import TokenOutput

    batches = []
    sample = server._sample
    monkeypatch.setattr(server, "_sample", lambda batch: (batches.append(len(batch)), sample(batch))[1])

    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    async def go():
        reqs = [server.generate(prompt_ids=[4, 9 + i % 5, 43, 1, 5], sampling_params=dict(params), request_id=str(i))
                for i in range(24)]
        reqs.append(server.generate(prompt_ids=[4, 9, 1, 5], sampling_params={**params, "logprobs": False}))
        reqs.append(server.generate(prompt_ids=[4, 9, 1, 5], sampling_params={**params, "max_tokens": 2}))
        return await asyncio.gather(*reqs)

    outs = asyncio.run(go())
    assert all(isinstance(o, TokenOutput) for o in outs)
    assert all(1 <= len(o.token_ids) <= 6 for o in outs)  # response_length
    assert all(len(o.log_probs) == len(o.token_ids) and max(o.log_probs) <= 0 for o in outs[:24])
    assert outs[24].log_probs is None
    assert len(outs[25].token_ids) <= 2
    assert all(o.stop_reason == "completed" for o in outs)
    assert sum(batches) == 26 and len(batches) < 26  # sampled together, not one by one


def test_server_max_tokens_follows_verls_vllm_rules(server):
    # prompt_length 16 + response_length 6 = 22 positions
    assert server.sampling_params_for(5, {}).max_tokens == 6
    assert server.sampling_params_for(20, {}).max_tokens == 2
    assert server.sampling_params_for(5, {"max_new_tokens": 3}).max_tokens == 3
    assert server.sampling_params_for(5, {"max_tokens": 100}).max_tokens == 17
    with pytest.raises(ValueError, match="no room"):
        server.sampling_params_for(22, {})
    with pytest.raises(NotImplementedError, match="repetition_penalty"):
        asyncio.run(server.generate(prompt_ids=[4, 5], sampling_params={"repetition_penalty": 1.2}))


def test_server_loads_full_weights_from_the_trainer_and_refuses_names_it_lacks(server):
    own = {k: v.detach().clone() for k, v in server.model.state_dict().items()}
    new = {k: v + 0.5 for k, v in own.items()}
    assert asyncio.run(server.update_weights(new, global_steps=3)) == len(own)
    got = server.model.state_dict()
    assert all(torch.equal(got[k], new[k]) for k in own)
    out = asyncio.run(server.generate(prompt_ids=[4, 9, 1, 5], sampling_params={"temperature": 0}))
    assert out.extra_fields["global_steps"] == 3
    with pytest.raises(ValueError, match="not in the rollout model"):
        asyncio.run(server.update_weights({**new, "model.bogus.weight": torch.zeros(1)}))


def test_server_abort_answers_queued_requests(server):
    async def go():
        server._ensure_loop()
        task = asyncio.ensure_future(server.generate(prompt_ids=[4, 5], sampling_params={}, request_id="r1"))
        await asyncio.sleep(0)  # queued, the batch window has not passed
        result = await server.abort_all_requests()
        return result, await task

    result, out = asyncio.run(go())
    assert result == {"aborted_count": 1, "request_ids": ["r1"]}
    assert out.stop_reason == "aborted" and out.token_ids == []


def test_adapter_refuses_what_the_hf_rollout_cannot_do(verl_config, monkeypatch):
    from verl_ebpo.tools.cpu.rollout import HFServerAdapter

    monkeypatch.setenv("RANK", "0")
    adapter = HFServerAdapter(verl_config.actor_rollout_ref.rollout, verl_config.actor_rollout_ref.model, None)
    assert adapter.replica_rank == 0 and adapter._has_server
    with pytest.raises(NotImplementedError, match="full tensors"):
        asyncio.run(adapter.update_weights(iter([]), wire_format="delta_flush"))
    with pytest.raises(NotImplementedError, match="LoRA"):
        asyncio.run(adapter.update_weights(iter([]), peft_config={"r": 8}))


def test_verl_replica_server_handle_is_where_verl_reads_it():
    """Canary: `HFReplica.launch_servers` sets the private `_server_handle`/`_server_address`, which verl 0.9.1's
    `RolloutReplica.server_handle`/`server_address` properties return."""
    import inspect

    from verl.workers.rollout.replica import RolloutReplica

    assert "return self._server_handle" in inspect.getsource(RolloutReplica.server_handle.fget)
    assert "return self._server_address" in inspect.getsource(RolloutReplica.server_address.fget)
    assert "self._server_handle: ActorHandle = None" in inspect.getsource(RolloutReplica.__init__)


def test_seeded_agent_loop_is_verls_default_for_cpu_runs_and_seeds_by_identity(verl_config):
    """Reproducible runs: CPURun selects the `hf_seeded` agent loop (verl's SingleTurnAgentLoop + a per-request
    seed from step, row, answer number and prompt); a repeated identity gets a new seed, a new step starts over."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    from verl_ebpo.tools.cpu.agent_loop import NAME, RequestSeeds

    agent = verl_config.actor_rollout_ref.rollout.agent
    assert agent.default_agent_loop == NAME
    (entry,) = [e for e in OmegaConf.load(agent.agent_loop_config_path) if e.name == NAME]
    assert issubclass(get_class(entry._target_), SingleTurnAgentLoop)

    prompt = [{"role": "user", "content": "3+1="}]
    row = dict(global_steps=4, index=7, session_id=2, raw_prompt=prompt, uid="random-uuid")
    first, second = RequestSeeds(), RequestSeeds()
    s = first.seed(dict(row))
    assert s == second.seed({**row, "uid": "another-uuid"})  # the random uid plays no part
    others = {second.seed({**row, **change}) for change in (
        {"session_id": 3}, {"index": 8}, {"raw_prompt": [{"role": "user", "content": "4+1="}]})}
    assert len(others) == 3 and s not in others
    assert first.seed(dict(row)) != s  # the same identity again (a repeated row): its own seed
    assert first.seed({**row, "global_steps": 5}) != s and first.seed(dict(row)) == s  # a new step resets


def test_server_samples_a_seeded_request_the_same_whatever_its_batch(server):
    from verl_ebpo.tools.cpu.sampling import mix_seed

    assert server.sampling_params_for(5, {"seed": 3}).seed == mix_seed(int(server.config.seed), 3)
    assert server.sampling_params_for(5, {}).seed is None
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}

    async def go(order):
        reqs = [server.generate(prompt_ids=[4, 9 + i % 3, 43, 1, 5], sampling_params={**params, "seed": i})
                for i in order]
        return dict(zip(order, [o.token_ids for o in await asyncio.gather(*reqs)]))

    a = asyncio.run(go(list(range(12))))
    b = asyncio.run(go(list(range(11, -1, -1))))
    c = asyncio.run(go([5, 2]))
    assert a == b and c == {5: a[5], 2: a[2]}

