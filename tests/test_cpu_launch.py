"""verl_ebpo.tools.cpu.launch (overrides, environment, subprocess handling) and verl_ebpo.tools.tiny.assets."""

import os
import sys
import time

import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from verl_ebpo.tools.tiny import assets
from verl_ebpo.tools.cpu import launch, supervise
from verl_ebpo.tools.cpu.launch import CPURun, TrainerFailed, cpu_env, merge_overrides, run_main_ppo
from verl_ebpo.tools.cpu.overrides import FAST_POLL_S


def _run(tmp_path, **kw):
    return CPURun(model_path=str(tmp_path / "m"), train_files="t.parquet", val_files="v.parquet",
                  out_dir=str(tmp_path / "out"), **kw)


def test_merge_overrides_replaces_by_key_with_or_without_plus():
    base = ["a.b=1", "+c.d=2", "e=3"]
    assert merge_overrides(base, ["a.b=9", "c.d=7", "+f=1"]) == ["e=3", "a.b=9", "c.d=7", "+f=1"]
    assert merge_overrides(base, []) == base
    with pytest.raises(ValueError, match="not a Hydra override"):
        merge_overrides(base, ["oops"])


def test_cpu_env_adds_the_backend_once_and_keeps_other_modules():
    env = cpu_env({"VERL_USE_EXTERNAL_MODULES": "my.plugin", "PATH": "/bin"}, metrics_file="/x/m.jsonl")
    assert env["VERL_USE_EXTERNAL_MODULES"] == "my.plugin,verl_ebpo.tools.cpu.backend"
    assert env["VERL_PLATFORM"] == "cpu" and env["VERL_ENGINE_DEVICE"] == "cuda"
    assert env["VERL_FILE_LOGGER_PATH"] == "/x/m.jsonl" and env["PATH"] == "/bin"
    assert cpu_env(env)["VERL_USE_EXTERNAL_MODULES"] == "my.plugin,verl_ebpo.tools.cpu.backend"
    assert env["RAY_enable_worker_prestart"] == "0"  # no idle Ray workers prestarted on 2 cores


def test_overrides_compose_into_verls_real_config(tmp_path):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import verl.trainer
    from verl.utils.config import omega_conf_to_dataclass

    run = _run(tmp_path, adv_estimator="ebpo", steps=5, train_batch_size=4, n=3, lr=0.01,
               extra=["trainer.save_freq=2", "+algorithm.ebpo.prior_decay=0.9"])
    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=run.overrides())
    assert cfg.algorithm.adv_estimator == "ebpo" and cfg.algorithm.ebpo.prior_decay == 0.9
    assert cfg.actor_rollout_ref.rollout.name == "hf" and cfg.actor_rollout_ref.rollout.n == 3
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 12
    assert cfg.trainer.total_training_steps == 5 and cfg.trainer.save_freq == 2
    assert cfg.trainer.default_local_dir == str(tmp_path / "out" / "checkpoints")
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.ray_kwargs.ray_init.num_gpus == 1 and cfg.ray_kwargs.ray_init.num_cpus == 16
    assert cfg.trainer.v1.sampler.custom_sampler.name == "TrackedReplayBuffer"
    assert cfg.trainer.v1.sampler.sampler_kwargs.poll_interval_s == FAST_POLL_S == 0.05
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "hf_seeded"  # per-request seeds
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)  # verl's own validation
    assert rollout.tensor_model_parallel_size == 1
    assert OmegaConf.select(cfg, "actor_rollout_ref.model.override_config.attn_implementation") == "sdpa"
    assert "verl_ebpo.samplers.replay" not in " ".join(_run(tmp_path, fast_poll=False).overrides())


def test_run_main_ppo_reports_a_failed_trainer_with_its_output(tmp_path, monkeypatch):
    run = _run(tmp_path)
    monkeypatch.setattr(CPURun, "command", lambda self: [sys.executable, "-c", "print('hello from verl'); raise SystemExit(3)"])
    with pytest.raises(TrainerFailed, match="exited with 3") as info:
        run_main_ppo(run, timeout_s=60)
    assert info.value.returncode == 3
    assert "hello from verl" in str(info.value)
    assert "hello from verl" in run.log_file.read_text()


def test_run_main_ppo_kills_a_silent_hang(tmp_path, monkeypatch):
    run = _run(tmp_path)
    monkeypatch.setattr(CPURun, "command", lambda self: [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    lines = []
    started = time.time()
    with pytest.raises(TrainerFailed, match="timed out"):
        run_main_ppo(run, timeout_s=3, on_line=lines.append)
    assert time.time() - started < 55  # the hang (60 s) was ended, not waited out
    assert lines == ["up"]


def test_ray_worker_errors_quotes_recent_tracebacks(tmp_path, monkeypatch):
    (tmp_path / "worker-1.err").write_text("noise\nTraceback (most recent call last):\n  boom\nValueError: bad reward\n")
    (tmp_path / "worker-2.err").write_text("all fine\n")
    monkeypatch.setattr(supervise, "RAY_LOG_GLOBS", (str(tmp_path / "worker-*.err"),))
    text = launch.ray_worker_errors(since=0)
    assert "ValueError: bad reward" in text and "worker-1.err" in text and "worker-2.err" not in text
    assert launch.ray_worker_errors(since=time.time() + 100) == ""


# -- assets ---------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=assets.CHARACTERS, max_size=40))
def test_character_tokenizer_round_trips(text):
    # a special token's spelling (e.g. "<|assistant|>") is one token by design: see the test below
    assume(not any(special in text for special in assets.SPECIAL_TOKENS))
    tokenizer = _tokenizer()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text


def test_special_token_spellings_are_single_tokens():
    tokenizer = _tokenizer()
    for special in assets.SPECIAL_TOKENS:
        ids = tokenizer(special, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tokenizer.decode(ids) == special


_TOK = []


def _tokenizer():
    if not _TOK:
        _TOK.append(assets.build_tokenizer())
    return _TOK[0]


def test_chat_template_and_padding():
    tok = _tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "3+1="}], tokenize=False, add_generation_prompt=True)
    assert text == "<|user|>3+1=<eos><|assistant|>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<|user|>", "3", "+", "1", "=", "<eos>", "<|assistant|>"]
    assert tok.padding_side == "left" and tok.pad_token_id == 0 and tok.eos_token_id == 1
    assert tok.decode(ids, skip_special_tokens=True) == "3+1="


def test_tiny_model_and_parquet_load_in_verls_dataset(tmp_path):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from verl.utils.dataset.rl_dataset import RLHFDataset

    model = assets.build_model(tmp_path / "model", seed=5)
    assert 80_000 < assets.count_parameters(model) < 90_000
    rows = [assets.rl_row(i, f"{i}+1=", str(i + 1), "toy") for i in range(5)]
    path = assets.write_rl_parquet(rows, tmp_path / "train.parquet")
    assert list(pd.read_parquet(path)["data_source"]) == ["toy"] * 5
    tok = AutoTokenizer.from_pretrained(model)
    data = RLHFDataset([str(path)], tok, OmegaConf.create({"max_prompt_length": 16, "return_raw_chat": True}))
    item = data[3]
    assert item["raw_prompt"] == [{"role": "user", "content": "3+1="}]
    assert item["reward_model"]["ground_truth"] == "4"
    with pytest.raises(ValueError, match="no rows"):
        assets.write_rl_parquet([], tmp_path / "empty.parquet")


def test_build_model_is_deterministic_and_warm_start_learns(tmp_path):
    from safetensors.torch import load_file

    a = load_file(str(assets.build_model(tmp_path / "a", seed=2) / "model.safetensors"))
    b = load_file(str(assets.build_model(tmp_path / "b", seed=2) / "model.safetensors"))
    c = load_file(str(assets.build_model(tmp_path / "c", seed=3) / "model.safetensors"))
    assert all((a[k] == b[k]).all() for k in a)
    assert any((a[k] != c[k]).any() for k in a)
    pairs = [(f"{i}+1=", str(i + 1)) for i in range(9)]
    first = assets.warm_start(tmp_path / "a", pairs, steps=1, lr=1e-3)
    last = assets.warm_start(tmp_path / "a", pairs, steps=30, lr=3e-3)
    assert last < first / 2


def _composed(run):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import verl.trainer

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=run.overrides())
    OmegaConf.resolve(cfg)
    return cfg


def test_dapo_filtering_reaches_the_fast_poll_buffer_through_the_trainers_config(tmp_path):
    from replay_standins import StandInTrainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    cfg = _composed(_run(tmp_path, train_batch_size=6, extra=["algorithm.filter_groups.enable=True"]))
    buffer = PPOTrainer._build_replay_buffer(StandInTrainer(config=cfg))  # as verl builds it
    assert type(buffer).__name__ == "TrackedReplayBuffer" and buffer.poll_interval == 0.05
    assert (buffer.filter_groups_metric, buffer.train_batch_size, buffer.gen_batch_size) == ("reward", 6, 1)
    slow = _run(tmp_path, extra=["algorithm.filter_groups.enable=True"], fast_poll=False).overrides()
    assert not any("custom_sampler" in o or "sampler_kwargs" in o for o in slow)


def test_a_run_joining_a_shared_cluster_carries_its_environment(tmp_path):
    run = _run(tmp_path, ray_address="127.0.0.1:6543")
    cfg = _composed(run)
    init = cfg.ray_kwargs.ray_init
    assert init.address == "127.0.0.1:6543" and init.num_cpus is None and "num_gpus" not in init
    env = init.runtime_env.env_vars
    assert env.VERL_FILE_LOGGER_PATH == str(run.metrics_file)
    assert env.VERL_USE_EXTERNAL_MODULES == "verl_ebpo.tools.cpu.backend" and env.VERL_PLATFORM == "cpu"
    assert _composed(_run(tmp_path)).ray_kwargs.ray_init.num_cpus == 16  # a run of its own starts its cluster


def test_cpu_platform_touches_no_environment_unless_selected(monkeypatch):
    from verl_ebpo.tools.cpu.platform import PlatformCPU

    monkeypatch.delenv("VERL_ENGINE_DEVICE", raising=False)
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    PlatformCPU()  # verl probes every registered platform this way
    assert "VERL_ENGINE_DEVICE" not in os.environ
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    PlatformCPU()
    assert os.environ["VERL_ENGINE_DEVICE"] == "cuda"
