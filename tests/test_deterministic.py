"""The replay buffer's `deterministic` option (verl_ebpo.tools.cpu.deterministic, rules 4-6): its pure ordering rules,
then verl's real sync sampling loop and ours on a simulated TransferQueue whose rollouts finish at random times (the
timing two runs of one seed do not share), and the verl internals it touches. Two DAPO runs of verl's trainer on
the CPU backend: tests/test_e2e_dapo_determinism.py."""

import inspect
import random
import uuid
from collections import defaultdict

import pytest
import torch

from replay_standins import StandInTrainer, verl_config
from replay_standins import buffer as standin_buffer
from verl_ebpo.advantage.options import from_mapping
from verl_ebpo.samplers import replay as rules
from verl_ebpo.tools.cpu.deterministic import batch_layout, draw_order

B, G = 4, 2  # prompts per step, answers per prompt


# ---- the pure rules ------------------------------------------------------------------------------------------

def test_draw_order_is_oldest_step_then_draw_rank_never_the_uid():
    ranks = {"f": 0, "a": 1, "e": 2, "b": 3}
    assert draw_order({"a", "b", "e", "f"}, {}, ranks) == ["f", "a", "e", "b"]
    # verl's oldest-step-first stays first; a uid never seen drawn comes after the drawn ones, by uid
    steps = {"a": 2, "b": 1, "e": 2, "f": 2, "z": 2, "y": 2}
    assert draw_order(["z", "f", "y", "a", "e", "b"], steps, ranks) == ["b", "f", "a", "e", "y", "z"]
    uids = [str(uuid.UUID(int=random.Random(s).getrandbits(128))) for s in range(40)]
    order = {u: i for i, u in enumerate(uids)}
    for seed in range(5):  # whatever order the set comes in (hash seeds, uuid4 values): the draw order
        shuffled = random.Random(seed).sample(uids, len(uids))
        assert draw_order(set(shuffled), {}, order) == uids
    assert draw_order(uids, {}, order) != sorted(uids)  # verl's uids sort in a random order


def test_batch_layout_is_draw_order_then_answer():
    ranks = {"p": 1, "q": 0}
    keys = ["p_1_0", "q_1_0", "p_0_0", "q_0_1", "q_0_0", "p_10_0", "p_2_0"]
    assert batch_layout(keys, ranks) == ["q_0_0", "q_0_1", "q_1_0", "p_0_0", "p_1_0", "p_2_0", "p_10_0"]


def test_the_plugin_refuses_the_removed_option():
    """The deterministic buffer is chosen by its own class path; the plugin's buffer has no `deterministic` option."""
    from verl_ebpo.tools.algorithms import buffer_overrides

    assert not any("deterministic" in k for k in buffer_overrides())
    with pytest.raises(ValueError, match="deterministic"):
        from_mapping(rules.ReplayOptions, {"deterministic": "true"}, rules.PREFIX)


def test_verls_builder_given_the_demos_override_builds_the_deterministic_buffer():
    """The override the demo's commands record (docs/results/demo_default/summary.json), composed by Hydra and built
    by verl's own `PPOTrainer._build_replay_buffer`: verl builds the tools'
    subclass named by the override, and that subclass numbers the prompts the trainer sends to generation."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from verl_ebpo.tools.cpu.deterministic import DETERMINISTIC_OVERRIDES, DeterministicReplayBuffer
    from verl_ebpo.tools.cpu.launch import CPURun

    run = CPURun(model_path="/m", train_files="t.parquet", val_files="v.parquet", out_dir="/tmp/unused",
                 train_batch_size=8, extra=["algorithm.filter_groups.enable=True", *DETERMINISTIC_OVERRIDES])
    trainer = StandInTrainer(config=verl_config(*run.overrides()))
    trainer.sent = []
    trainer._submit_batch_to_rollout = lambda batch: trainer.sent.append(list(batch["uid"]))
    buffer = PPOTrainer._build_replay_buffer(trainer)
    assert type(buffer) is DeterministicReplayBuffer and buffer.filter_groups_metric is not None
    trainer._submit_batch_to_rollout({"uid": ["q", "p"]})
    trainer._submit_batch_to_rollout({"uid": ["r"]})
    assert buffer._ranks == {"q": 0, "p": 1, "r": 2} and trainer.sent == [["q", "p"], ["r"]]


def test_the_demo_sets_it_for_every_algorithm():
    """DAPO for its refills; GRPO, Dr.GRPO and EBPO for the batch layout (finish order parted 60-step runs)."""
    from verl_ebpo.tools.demo.options import ALGORITHMS, DemoOptions

    from verl_ebpo.tools.cpu.deterministic import DETERMINISTIC_OVERRIDES

    options = DemoOptions()
    assert all(tuple(options.overrides(a)[-2:]) == DETERMINISTIC_OVERRIDES for a in ALGORITHMS)
    assert set(ALGORITHMS) == {"grpo", "drgrpo", "dapo", "ebpo"}


# ---- verl's sampling loop on a simulated TransferQueue ----------------------------------------------------------

class _FakeTQ:
    """The TransferQueue calls verl's sync buffer makes, in memory; every `kv_list` (one poll) lets the simulated
    rollouts advance one tick."""

    def __init__(self, sim):
        self.sim, self.tags, self.scores = sim, defaultdict(dict), {}

    def kv_list(self, partition_id=None):
        self.sim.tick()
        return {p: {k: dict(t) for k, t in items.items()} for p, items in self.tags.items()}

    def kv_clear(self, partition_id, keys):
        for key in keys:
            self.tags[partition_id].pop(key, None)
            self.scores.pop(key, None)

    def kv_batch_get(self, keys, partition_id, select_fields):
        assert select_fields == ["rm_scores"]
        return {"rm_scores": [torch.tensor([self.scores[k]]) for k in keys]}


class _SimTrainer(StandInTrainer):
    """verl's PPOTrainer as the buffer sees it (a composed DAPO config, at most `inflight` x B prompts in flight),
    around verl's real StatefulDataLoader over row numbers: `draw` is prepare_step's B prompts,
    `_add_prompts_to_generate` the refills; both submit through `_submit_batch_to_rollout` (uuid4 uids, as verl).
    Row r's answers score `rewards(r)`; a running group finishes at each poll with probability 0.3 from the `timing`
    stream."""

    def __init__(self, rewards, timing, n_rows=400, inflight=1):
        super().__init__("algorithm.filter_groups.enable=True",
                         f"algorithm.filter_groups.max_inflight_gen_batches={inflight}", n=n_rows, batch=B)
        self.train_dataloader_it = iter(self.train_dataloader)
        self.total_training_steps = 100
        self.rewards, self.rng, self.tq = rewards, random.Random(timing), _FakeTQ(self)
        self.row_of, self.running, self.drawn = {}, [], defaultdict(list)

    def _submit_batch_to_rollout(self, batch):
        for uid in batch["uid"]:
            self.tq.tags["train"][uid] = {"is_prompt": True, "status": "pending", "global_steps": self.global_steps}
            self.running.append(uid)
        return len(batch["uid"])

    def _add_prompts_to_generate(self, n):
        uids = [str(uuid.uuid4()) for _ in range(n)]
        for uid in uids:
            self.row_of[uid] = int(next(self.train_dataloader_it))
            self.drawn[self.global_steps].append(self.row_of[uid])
        return self._submit_batch_to_rollout({"uid": uids})

    draw = _add_prompts_to_generate

    def tick(self):
        for uid in list(self.running):
            tags = self.tq.tags["train"]
            if uid not in tags:  # cleared
                self.running.remove(uid)
            elif tags[uid]["status"] == "pending":
                tags[uid]["status"] = "running"
            elif self.rng.random() < 0.3:
                for session, score in enumerate(self.rewards(self.row_of[uid])):
                    key = f"{uid}_{session}_0"
                    tags[key] = {"status": "success", "global_steps": self.global_steps}
                    self.tq.scores[key] = score
                tags[uid]["status"] = "finished"
                self.running.remove(uid)


def _rewards(row):
    """Rows 1, 2, 5 and every row from 9 on that is not a multiple of 3: all answers score the same (DAPO drops)."""
    same = row in (1, 2, 5) or (row >= 9 and row % 3 != 0)
    return [float(row % 2)] * G if same else [0.0, 1.0]


def _run(monkeypatch, deterministic, timing, steps=3, inflight=1, **options):
    from verl.trainer.ppo.v1 import replay_buffer as verl_rb

    from verl_ebpo.samplers import replay
    from verl_ebpo.samplers.replay import TrackedReplayBuffer
    from verl_ebpo.tools.cpu.deterministic import DeterministicReplayBuffer

    sim = _SimTrainer(_rewards, timing, inflight=inflight)
    monkeypatch.setattr(verl_rb, "tq", sim.tq)
    monkeypatch.setattr(replay, "tq", sim.tq)
    buffer = standin_buffer(sim, DeterministicReplayBuffer if deterministic else TrackedReplayBuffer,
                            max_off_policy_threshold=None, sampler_kwargs=options)
    buffer.poll_interval = 0.0  # the simulated rollouts advance one tick a poll
    out = []
    for step in range(1, steps + 1):
        sim.global_steps = step
        sim.draw(B)  # prepare_step
        batch, metrics = buffer.sample(step, "train", B)
        layout = [(sim.row_of[k.split("_")[0]], k.split("_")[1]) for k in batch.keys]
        kept = {k: v for k, v in metrics.items() if not k.startswith("replay/prompts")}
        out.append((sim.drawn[step], layout, kept))
        if step >= sim.total_training_steps:  # verl's loop ends there (one_pass moves it earlier)
            break
    return out, buffer


def test_deterministic_sampling_does_not_depend_on_when_rollouts_finish(monkeypatch):
    runs = [_run(monkeypatch, True, timing)[0] for timing in range(6)]
    assert all(run == runs[0] for run in runs), "deterministic: the timing changed what was drawn or trained"
    # by hand, B = 4: step 1 draws rows 0-3, drops 1 and 2 (credit 4) -> draws 4-7 at once, drops 5; 0, 3, 4, 6
    # are trained on (draw order), 7 is surplus
    drawn, layout, metrics = runs[0][0]
    assert drawn == list(range(8))
    assert layout == [(r, s) for r in (0, 3, 4, 6) for s in ("0", "1")]
    assert metrics["training/filter_groups/evicted_samples"] == 3
    assert metrics["training/filter_groups/discarded_surplus_samples"] == 1
    assert metrics[rules.DISCARDED_ANSWERS] == 4 * G
    # step 2: rows 8-11 drop 10 and 11 (credit 4) -> 12-15, which drop 13 and 14: 8, 9, 12, 15 trained on
    assert runs[0][1][0] == list(range(8, 16)) and [r for r, _ in runs[0][1][1][::G]] == [8, 9, 12, 15]


def test_verls_own_sampling_does_depend_on_it(monkeypatch):
    """The simulation can tell: without the option the same rewards give other draws, selections or layouts."""
    runs = [_run(monkeypatch, False, timing)[0] for timing in range(6)]
    assert any(run != runs[0] for run in runs)
    for run in runs:  # verl's semantics either way: B groups, none of them all-equal
        for _drawn, layout, _metrics in run:
            assert len({row for row, _ in layout}) == B and all(_rewards(r)[0] != _rewards(r)[1] for r, _ in layout)


def test_deterministic_respects_the_inflight_bound_and_forgets_what_left(monkeypatch):
    runs = [_run(monkeypatch, True, timing, inflight=2) for timing in range(3)]
    assert all(out == runs[0][0] for out, _ in runs)
    assert all(not buffer._ranks for _, buffer in runs)  # every prompt trained on or cleared: no rank kept
    one, _ = _run(monkeypatch, True, 0, inflight=1)
    # step 3 (rows from 16) drops 16, 17, 19 (credit 6): at most B = 4 at once (20-23: 3 dropped, credit 8), then
    # 24-27 (24, 27 kept: 18, 21, 24, 27); with 2 x B in flight 6 at once (20-25: 4 dropped, 18, 21, 24 kept,
    # credit 8), then 26-33 (27, 30, 33 kept, surplus 2)
    assert one[2][0] == list(range(16, 28)) and runs[0][0][2][0] == list(range(16, 34))
    assert runs[0][0][2][2]["training/filter_groups/discarded_surplus_samples"] == 2


def test_deterministic_with_one_pass_trains_on_what_is_left(monkeypatch):
    """One pass over 10 rows (B = 4), deterministically: step 1 drops rows 1 and 2 (credit 4) but may draw only 2
    (4 kept in reserve): 4 and 5, and 5 drops too; the data cannot replace it, so it is kept (rule 3) after the
    groups DAPO accepts, in draw order. Step 2, the last, trains on rows 6-9."""
    monkeypatch.setattr(_SimTrainer, "__init__", _with_rows(10))
    results = [_run(monkeypatch, True, timing, steps=2, one_pass=True)[0] for timing in range(3)]
    assert all(r == results[0] for r in results)
    (drawn1, layout1, m1), (drawn2, layout2, _m2) = results[0]
    assert drawn1 == list(range(6)) and [r for r, _ in layout1[::G]] == [0, 3, 4, 5]
    assert m1[rules.KEPT_GROUPS] == 1 and m1[rules.LAST_STEP] == 2
    assert drawn2 == [6, 7, 8, 9] and [r for r, _ in layout2[::G]] == [6, 7, 8, 9]


def _with_rows(n):
    init = _SimTrainer.__init__

    def __init__(self, rewards, timing, **kwargs):
        init(self, rewards, timing, **{**kwargs, "n_rows": n})
        self.total_training_steps = n // B

    return __init__


# ---- canaries: the verl internals the option touches ------------------------------------------------------------

def test_verl_internals_deterministic_touches_still_exist():
    """verl 0.9.1: every prompt sent to generation (prepare_step's B, the refills, rollout-skip's cache misses) goes
    through `PPOTrainer._submit_batch_to_rollout(batch)`, whose `batch["uid"]` lists the prompts in data-loader order;
    verl's sync loop takes each decision's snapshot through `_sync_metadata_from_transfer_queue` (which `deterministic`
    makes wait for the rollouts in flight), with this credit rule."""
    from verl.trainer.ppo.v1 import replay_buffer as rb
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    def params(fn):
        return list(inspect.signature(fn).parameters)

    assert params(PPOTrainer._submit_batch_to_rollout) == ["self", "batch"]
    assert 'tq.kv_batch_put(keys=list(batch["uid"])' in inspect.getsource(PPOTrainer._submit_batch_to_rollout)
    assert "return self._submit_batch_to_rollout(batch)" in inspect.getsource(PPOTrainer._add_prompts_to_generate)
    assert "self._submit_batch_to_rollout(batch)" in inspect.getsource(PPOTrainer._add_batch_to_generate)
    assert 'batch_dict["uid"] = np.array([str(uuid.uuid4())' in inspect.getsource(PPOTrainer._fetch_one_gen_batch)
    sample = inspect.getsource(rb.ReplayBuffer.sample)
    for line in ("self._sync_metadata_from_transfer_queue()\n\n            eviction_reasons = self._terminal_eviction_reasons",
                 "refill_credit += 2 * dapo_count + failed_count",
                 "max_inflight_prompts = self.max_inflight_gen_batches * self.train_batch_size",
                 "dispatch_count -= dispatch_count % self.gen_batch_size",
                 "can_select = has_enough_samples and (not dapo_enabled or inflight_count == 0)",
                 "self._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot), eviction_metrics"):
        assert line in sample, line
    assert params(rb.ReplayBuffer._sync_metadata_from_transfer_queue) == ["self"]
    assert "for key, tag in partition_snapshot.items():" in inspect.getsource(rb.ReplayBuffer._materialize_batch)



# ---- the base class the recipes' -diff runs use (deterministic off), through verl's real sampling loop -------------

def _filtered(row):
    return _rewards(row)[0] == _rewards(row)[1]


def test_discarded_answers_are_counted_per_step_on_every_step(monkeypatch):
    """`replay/discarded_*` are the step's own: on every step the answers of the groups verl evicted or cut as
    surplus that step (verl's per-step counts), never a running total; the reward sum is theirs."""
    for timing in range(3):
        out, _ = _run(monkeypatch, False, timing, steps=4)
        for _drawn, _layout, m in out:
            groups = m.get("training/filter_groups/evicted_samples", 0) + m.get(
                "training/filter_groups/discarded_surplus_samples", 0)
            assert m[rules.DISCARDED_ANSWERS] == G * groups, m
            assert 0 <= m[rules.DISCARDED_REWARD_SUM] <= m[rules.DISCARDED_ANSWERS]
        assert sum(m[rules.DISCARDED_ANSWERS] > 0 for *_, m in out) >= 2


def test_one_pass_last_step_uses_every_prompt_left_and_accepted_groups_come_first(monkeypatch):
    """One pass over 14 rows (B = 4) with verl's own (timing-dependent) sampling: every row is drawn exactly once by
    the last step; a group DAPO filters is trained on only when the data cannot replace it (counted in
    replay/kept_filtered_groups), and never in place of an accepted group (the surplus cut keeps accepted groups
    first)."""
    monkeypatch.setattr(_SimTrainer, "__init__", _with_rows(14))
    for timing in range(6):
        out, _ = _run(monkeypatch, False, timing, steps=4, one_pass=True)
        drawn = [r for d, _l, _m in out for r in d]
        assert sorted(drawn) == list(range(14)), drawn
        trained = []
        for _d, layout, m in out:
            rows = [r for r, _ in layout[::G]]
            assert sum(map(_filtered, rows)) == m.get(rules.KEPT_GROUPS, 0) and len(rows) <= B
            trained += rows
        # the last step: a filtered group trained means no accepted group drawn that step was cut
        last_drawn, last_layout, _m = out[-1]
        last_rows = {r for r, _ in last_layout}
        if any(map(_filtered, last_rows)):
            assert {r for r in last_drawn if not _filtered(r)} <= last_rows, (last_drawn, last_rows)
        assert out[-1][2][rules.LAST_STEP] == len(out)
