"""The plugin's replay buffer (verl_ebpo.samplers.replay): built by verl's own builder, DAPO's arguments as verl
derives them, discarded answers counted, and the one-pass rules (pure, then on verl's real data loader).
The trainer-level behaviour (a DAPO curriculum that ends at the end of its data) is tested end to end in
tests/test_recipes_smoke.py."""

import inspect

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from replay_standins import StandInTrainer, verl_config
from replay_standins import buffer as _buffer
from verl_ebpo.advantage.options import from_mapping
from verl_ebpo.samplers import replay as rules
from verl_ebpo.tools.algorithms import buffer_overrides
from verl_ebpo.tools.cpu.launch import CPURun



def test_replay_buffer_options_and_refusals():
    assert _buffer().poll_interval == 2.0  # verl's own default
    fast = _buffer(sampler_kwargs={"poll_interval_s": 0.05})
    assert fast.poll_interval == 0.05 and fast.filter_groups_metric is None and fast.gen_batch_size == 4
    assert not fast.one_pass
    with pytest.raises(ValueError, match=r"poll_interval_s must be a number in \(0, 60\]"):
        _buffer(sampler_kwargs={"poll_interval_s": 0})
    with pytest.raises(ValueError, match="unknown .* option.*one_passs"):  # a typo is not silently ignored
        _buffer(sampler_kwargs={"one_passs": True})
    with pytest.raises(ValueError, match="synchronous"):
        _buffer(trainer_mode="colocate_async")
    with pytest.raises(ValueError, match="metric must be set"):  # verl's own check, on the trainer's config
        _buffer(StandInTrainer("algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=null"))


def test_buffer_overrides_are_the_class_and_its_options():
    keys = buffer_overrides(one_pass=True)
    assert keys == ["trainer.v1.sampler.custom_sampler.path=pkg://verl_ebpo.samplers.replay",
                    "trainer.v1.sampler.custom_sampler.name=TrackedReplayBuffer",
                    "+trainer.v1.sampler.sampler_kwargs.one_pass=true"]
    cfg = verl_config(*keys)
    assert cfg.trainer.v1.sampler.sampler_kwargs == {"one_pass": True}
    assert buffer_overrides(poll_interval_s=0.05)[2:] == ["+trainer.v1.sampler.sampler_kwargs.poll_interval_s=0.05"]


def _build_both_buffers(extra):
    """verl's own buffer and ours, each built by verl's real `PPOTrainer._build_replay_buffer` from the same
    composed, resolved config (CPURun's overrides + `extra`)."""
    from omegaconf import open_dict
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    run = CPURun(model_path="/m", train_files="t.parquet", val_files="v.parquet", out_dir="/tmp/unused",
                 train_batch_size=8, extra=list(extra))
    cfg = verl_config(*run.overrides())
    buffers = []
    for custom in (False, True):
        c = cfg.copy()
        if not custom:
            with open_dict(c):
                c.trainer.v1.sampler.custom_sampler.path = None
                c.trainer.v1.sampler.custom_sampler.name = None
        buffers.append(PPOTrainer._build_replay_buffer(StandInTrainer(config=c)))
    return buffers


@pytest.mark.parametrize("extra", [
    [],
    ["algorithm.filter_groups.enable=True"],
    ["algorithm.filter_groups.enable=True", "algorithm.filter_groups.max_inflight_gen_batches=2"],
    ["trainer.v1.sampler.sync_refill_failed_groups=true"],
    ["data.gen_batch_size=4"],
])
def test_replay_buffer_gets_the_dapo_arguments_verl_gives_its_own(extra):
    """Canary: verl 0.9.1 hands a custom buffer only the base arguments; ours computes the filtering ones from
    the trainer's config exactly as `PPOTrainer._build_replay_buffer` does for verl's own buffer."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from verl_ebpo.samplers.replay import TrackedReplayBuffer

    own, ours = _build_both_buffers(extra)
    assert type(own) is ReplayBuffer and type(ours) is TrackedReplayBuffer
    for attr in ("filter_groups_metric", "train_batch_size", "gen_batch_size", "max_inflight_gen_batches",
                 "sync_refill_failed_groups", "max_off_policy_threshold", "trainer_mode"):
        assert getattr(ours, attr) == getattr(own, attr), attr
    assert ours.refill_fn is not None and ours.poll_interval < own.poll_interval == 2.0


def test_verl_replay_buffer_internals_we_use_still_exist():
    """Canary for the private parts of verl 0.9.1's `ReplayBuffer` we override or call: `_clear_groups` is where
    DAPO-evicted and surplus groups leave (trajectory keys `<uid>_<sample>_<output>`); the one-pass step's end
    reads the metadata snapshot and verl's eviction reasons and materialises a batch as `sample` does; refills
    go through `self.refill_fn`."""
    from verl.trainer.ppo.v1 import replay_buffer as rb

    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(rb.ReplayBuffer._clear_groups) == ["self", "partition_id", "uids"]
    assert "self._clear_groups(partition_id, evicted_uids)" in inspect.getsource(rb.ReplayBuffer._evict_terminal_groups)
    sample = inspect.getsource(rb.ReplayBuffer.sample)
    assert "self._clear_groups(partition_id, surplus_uids)" in sample
    assert sample.count("self.refill_fn(") == 2  # DAPO's refills and the failed-group refills
    assert "key.split(\"_\")[0] in uids" in inspect.getsource(rb.ReplayBuffer._clear_groups)
    assert "{uid}_{session_id}_{index}" in rb.ReplayBuffer.__doc__
    assert params(rb.ReplayBuffer._terminal_eviction_reasons) == ["self", "global_steps", "partition_id"]
    assert params(rb.ReplayBuffer._materialize_batch) == ["self", "partition_id", "selected_prompt_uids",
                                                          "partition_snapshot"]
    assert params(rb.ReplayBuffer._wait_for_next_poll) == ["self", "partition_id", "last_debug_time"]
    assert params(rb.ReplayBuffer._sync_metadata_from_transfer_queue) == ["self"]
    buffer = _buffer()
    for attr in ("pending_keys", "running_keys", "finished_keys", "failure_keys", "prompt_global_steps", "partitions"):
        assert isinstance(getattr(buffer, attr), dict), attr


def test_replay_buffer_tallies_the_answers_it_clears(monkeypatch):
    """Dropped groups' answers and rewards are counted before verl clears them; validation is not counted."""
    from verl_ebpo.samplers import replay

    scores = {"a_0_0": [0.0, 1.0], "a_1_0": [0.0, 0.0], "b_0_0": [1.0], "b_1_0": [0.0], "c_0_0": [1.0]}
    cleared = []
    monkeypatch.setattr(replay.tq, "kv_batch_get", lambda keys, partition_id, select_fields: {
        "rm_scores": [torch.tensor(scores[k]) for k in keys]})
    monkeypatch.setattr(replay.tq, "kv_clear", lambda partition_id, keys: cleared.append((partition_id, sorted(keys))))
    buffer = _buffer()
    buffer.partitions["train"] = {k: {} for k in scores}
    buffer._clear_groups("train", {"a", "b"})
    assert buffer._discarded == {rules.DISCARDED_ANSWERS: 4.0, rules.DISCARDED_REWARD_SUM: 2.0}
    assert cleared == [("train", ["a", "a_0_0", "a_1_0", "b", "b_0_0", "b_1_0"])]  # verl's own clearing ran
    assert list(buffer.partitions["train"]) == ["c_0_0"]
    buffer.partitions["val"] = {"c_0_0": {}}
    buffer._clear_groups("val", {"c"})
    assert buffer._discarded[rules.DISCARDED_ANSWERS] == 4.0


# ---- the one-pass rules -----------------------------------------------------------------------------------

def test_one_pass_rules_by_hand():
    # B = 4: a non-last step keeps 4 in reserve; the last may take all
    assert rules.refill_allowance(left=10, batch=4, is_last=False) == 6
    assert rules.refill_allowance(left=3, batch=4, is_last=False) == 0
    assert rules.refill_allowance(left=3, batch=4, is_last=True) == 3
    assert rules.refill_allowance(left=7, batch=4, is_last=True, chunk=2) == 6
    # before step 5 with L left: L >= 8 keeps the plan, 4 <= L < 8 makes step 5 the last, L < 4 ends after 4
    assert rules.last_step(5, left=8, batch=4, planned=9) == 9
    assert rules.last_step(5, left=7, batch=4, planned=9) == 5
    assert rules.last_step(5, left=4, batch=4, planned=9) == 5
    assert rules.last_step(5, left=3, batch=4, planned=9) == 4
    assert rules.last_step(5, left=7, batch=4, planned=3) == 3  # verl's own earlier end is kept


def _simulate(n: int, batch: int, accept: list[bool], planned: int):
    """verl's sync loop with DAPO (prepare draws B prompts, refills replace rejected groups) under the rules.
    Returns (prompts drawn per step, groups trained per step)."""
    drawn, steps, trained, k = 0, [], [], 0
    last = rules.last_step(1, n - drawn, batch, planned)
    step = 1
    while step <= last:
        assert n - drawn >= batch, "a step began without B prompts left: verl would restart the data"
        took, ok = batch, 0
        for _ in range(batch):
            ok += accept[k % len(accept)]
            k += 1
        while ok < batch:  # refill one prompt per rejected group, within the allowance
            if rules.refill_allowance(n - drawn - took, batch, step >= last) == 0:
                break
            took += 1
            ok += accept[k % len(accept)]
            k += 1
        drawn += took
        steps.append(took)
        trained.append(min(ok, batch))
        last = rules.last_step(step + 1, n - drawn, batch, last)
        step += 1
    return steps, trained, drawn


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.integers(0, 200), st.lists(st.booleans(), min_size=1, max_size=50))
def test_one_pass_never_draws_past_the_data_and_leaves_less_than_a_batch(batch, extra, accept):
    n = batch + extra
    planned = n // batch  # verl's steps for one epoch
    steps, trained, drawn = _simulate(n, batch, accept, planned)
    assert drawn <= n and len(steps) <= planned
    assert n - drawn < batch  # the run ends at the end of the data, not before
    assert len(steps) >= 1 and all(t <= batch for t in trained)
    if all(accept):  # no group is filtered: exactly verl's one epoch
        assert steps == [batch] * planned


# ---- the one-pass buffer on verl's real data loader -------------------------------------------------------

def _trainer(n, batch, epochs=1, **kwargs):
    """A DAPO run's trainer (`algorithm.filter_groups.enable=True`) over `n` prompts, `batch` a step."""
    return StandInTrainer("algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc",
                          f"trainer.total_epochs={epochs}", n=n, batch=batch, **kwargs)


def _one_pass_buffer(trainer):
    return _buffer(trainer, sampler_kwargs={"one_pass": True})


def test_one_pass_refuses_what_it_cannot_keep_to_one_pass():
    with pytest.raises(ValueError, match="total_epochs=1"):
        _one_pass_buffer(_trainer(12, 4, epochs=2))
    with pytest.raises(ValueError, match="parameter_sync_step=1"):
        _one_pass_buffer(_trainer(12, 4, sync_steps=2))


@pytest.mark.parametrize("workers", [0, 2])
def test_one_pass_plans_from_the_loaders_position_also_after_a_resume(workers):
    from verl_ebpo.samplers.replay import DataPassEnds

    trainer = _trainer(n=12, batch=4, workers=workers)  # verl plans 12 // 4 = 3 steps
    buffer = _one_pass_buffer(trainer)
    trainer.on_train_begin()  # fresh: 12 left >= 2B, the plan stands
    assert trainer.begun == 1 and trainer.total_training_steps == 3 and buffer._position() == (0, 12)
    trainer.draw(4)  # step 1: prepare_step draws B
    buffer._is_last = False
    buffer._refill(3)  # 8 left, B in reserve: 4 allowed
    with pytest.raises(DataPassEnds):
        buffer._refill(2)  # 1 allowed: drawn, then the step ends with what it has
    assert trainer.refilled == [3, 1] and buffer._position() == (8, 12)
    buffer._plan(2)  # 4 left: step 2 is the last (verl planned 3)
    assert trainer.total_training_steps == 2
    state = trainer.train_dataloader.state_dict()  # the checkpoint after step 1 (verl's data.pt)

    resumed = _trainer(n=12, batch=4, workers=workers)  # verl plans 3 steps again on resume
    resumed.train_dataloader.load_state_dict(state)
    resumed.global_steps = 2
    again = _one_pass_buffer(resumed)
    resumed.on_train_begin()  # the restored position decides before fit's first step
    assert again._position() == (8, 12) and resumed.total_training_steps == 2
    resumed.draw(4)
    again._is_last = True  # the last step may take everything left: nothing is
    with pytest.raises(DataPassEnds):
        again._refill(1)
    assert resumed.refilled == [] and again._position() == (12, 12)
    again._plan(3)
    assert resumed.total_training_steps == 2


def test_one_pass_ends_a_resumed_run_that_has_no_batch_left():
    trainer = _trainer(n=9, batch=4)
    _one_pass_buffer(trainer)
    trainer.train_dataloader_it = iter(trainer.train_dataloader)
    trainer.draw(6)
    state = trainer.train_dataloader.state_dict()
    resumed = _trainer(n=9, batch=4)
    resumed.train_dataloader.load_state_dict(state)
    resumed.global_steps = 3
    _one_pass_buffer(resumed)
    resumed.on_train_begin()
    assert resumed.total_training_steps == 2  # fit's loop (global_steps <= total) does not start


def test_one_pass_stops_when_the_data_restarts_behind_its_back():
    trainer = _trainer(n=8, batch=4)
    buffer = _one_pass_buffer(trainer)
    trainer.on_train_begin()
    trainer.train_dataloader_it = iter(trainer.train_dataloader)  # what verl's fetch does at StopIteration
    with pytest.raises(RuntimeError, match="second pass"):
        buffer._position()


def test_verl_trainer_internals_one_pass_reads_still_exist():
    """Canary: in verl 0.9.1 the buffer's `refill_fn` is the trainer's bound `_add_prompts_to_generate`; the
    trainer fetches from `train_dataloader_it` (re-created from `train_dataloader` when exhausted), a
    StatefulDataLoader with drop_last whose iterator counts `_num_yielded` (restored by `load_state_dict`);
    `fit` calls `on_train_begin` after the resume and before its loop, whose bound and last step are
    `total_training_steps`."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert "refill_fn=self._add_prompts_to_generate" in inspect.getsource(PPOTrainer._build_replay_buffer)
    fetch = inspect.getsource(PPOTrainer._fetch_one_gen_batch)
    assert "self.train_dataloader_it = iter(self.train_dataloader)" in fetch
    assert "next(self.train_dataloader_it)" in fetch
    loader = inspect.getsource(PPOTrainer._init_dataloader)
    assert "self.train_dataloader = StatefulDataLoader(" in loader and "drop_last=True" in loader
    assert "self.total_training_steps = total_training_steps" in loader
    fit = inspect.getsource(PPOTrainer.fit)
    begin = fit.index("self.on_train_begin()")
    loop = fit.index("while current_epoch < self.config.trainer.total_epochs and self.global_steps <= self.total_training_steps")
    assert fit.index("self.global_steps += 1") < begin < loop
    assert "is_last_step = self.global_steps >= self.total_training_steps" in fit
    assert "self.step(metrics, self.timing_raw)" in fit
    init = inspect.getsource(PPOTrainer.__init__)
    assert init.index("self.parameter_sync_step =") < init.index("self.replay_buffer = self._build_replay_buffer()")
    from torchdata.stateful_dataloader import StatefulDataLoader

    it = iter(StatefulDataLoader(list(range(5)), batch_size=1))
    next(it), next(it)
    assert it._num_yielded == 2


def test_docs_name_every_replay_option_and_bad_values_are_refused():
    import dataclasses
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "ordering.md").read_text()
    assert all(f"| `{f.name}` |" in doc for f in dataclasses.fields(rules.ReplayOptions))
    for bad in ({"poll_interval_s": 0}, {"poll_interval_s": 61}, {"poll_interval_s": "2"}, {"one_pass": "yes"}):
        with pytest.raises(ValueError, match=rf"^trainer\.v1\.sampler\.sampler_kwargs\.{next(iter(bad))} must be"):
            from_mapping(rules.ReplayOptions, bad, rules.PREFIX)
    with pytest.raises(ValueError, match=r"unknown trainer\.v1\.sampler\.sampler_kwargs option\(s\) \['deterministic'\]"):
        from_mapping(rules.ReplayOptions, {"deterministic": True}, rules.PREFIX)


# -- sampler_kwargs (what a user writes) is checked before use, naming the key ---


@pytest.mark.parametrize("sampler_kwargs, message", [
    ("one_pass", r"^trainer\.v1\.sampler\.sampler_kwargs must be a mapping of options, got str"),
    (["one_pass"], r"^trainer\.v1\.sampler\.sampler_kwargs must be a mapping of options, got list"),
    (3, r"^trainer\.v1\.sampler\.sampler_kwargs must be a mapping of options, got int"),
])
def test_sampler_kwargs_that_is_not_a_mapping_is_a_one_line_error_naming_the_key(sampler_kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        _buffer(sampler_kwargs=sampler_kwargs)
    assert "\n" not in str(info.value)


def test_sampler_kwargs_from_hydra_as_a_string_is_refused_naming_the_key():
    """`trainer.v1.sampler.sampler_kwargs=one_pass` as Hydra composes it: a DictConfig holding the string."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"sampler_kwargs": {"one_pass": False}})
    cfg.sampler_kwargs = "one_pass"
    with pytest.raises(ValueError, match="sampler_kwargs must be a mapping of options"):
        _buffer(sampler_kwargs=cfg.sampler_kwargs)
    ok = OmegaConf.create({"poll_interval_s": 0.5, "one_pass": False})  # a DictConfig is read as before
    assert _buffer(sampler_kwargs=ok).poll_interval == 0.5
