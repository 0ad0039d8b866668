"""`TrackedReplayBuffer`: verl's synchronous replay buffer, reporting what the data and the rollouts spend, and
optionally keeping a run inside one pass over its data (a curriculum with DAPO's dynamic sampling).

Plugged in through verl's hook `trainer.v1.sampler.custom_sampler.{path,name}` (`verl_ebpo.tools.algorithms.buffer_overrides()`
writes the keys; the recipes' `-diff` runs add `one_pass`). Every training step gains the `replay/*` metrics below.

One pass (`one_pass=true`): verl 0.9.1 sets a run's steps to `len(data) // train_batch_size` and starts its data
iterator again when the data runs out, while DAPO's dynamic sampling draws more than `train_batch_size` prompts a
step; a curriculum with DAPO would reach its end early and restart from the easiest problems. Three rules
(B = `train_batch_size`) keep the run inside one pass:

1. `refill_allowance`: a step that is not the run's last keeps B prompts in reserve for the next step (verl draws
   B prompts at the start of every step, before any refill); the last step may draw every prompt left.
2. `last_step`: before a step starts, with L prompts left: L < B -> the previous step was the last; B <= L < 2B ->
   the coming step is the last. A run's last step only ever moves earlier (verl's own total is kept when earlier).
3. Once no prompt is left to replace a group DAPO filters, the group is kept (`replay/kept_filtered_groups`) and the
   step trains on what it has, the groups DAPO accepts first, at most B (verl pads a short batch).

verl hands a custom buffer only its base constructor arguments; the DAPO ones are computed from the trainer's config
as verl computes them for its own buffer (`filter_arguments`, tested equal). The trainer is `refill_fn`'s owner (a
bound method of verl's `PPOTrainer`): its config, the data loader's position (its iterator's `_num_yielded`),
`total_training_steps` (which ends verl's loop) and the `on_train_begin` hook (run after a resume restored the
loader, before the first step) -- each a touch with a canary in tests/test_samplers_replay.py.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from verl_ebpo.advantage.options import from_mapping

logger = logging.getLogger(__name__)

# metrics added to every training step's
PROMPTS_CONSUMED = "replay/prompts_consumed"  # prompts drawn from the data loader's current pass
PROMPTS_LEFT = "replay/prompts_left"  # prompts left in that pass
DATA_PASS = "replay/data_pass"  # passes over the data begun in this attempt (1: the first)
LAST_STEP = "replay/last_step"  # one_pass: the run's last step as planned after this step's sampling
KEPT_GROUPS = "replay/kept_filtered_groups"  # one_pass: groups DAPO would drop, trained on at the data's end
DISCARDED_ANSWERS = "replay/discarded_answers"  # answers generated for training but not trained on (DAPO)
DISCARDED_REWARD_SUM = "replay/discarded_reward_sum"  # the sum of those answers' rewards
PREFIX = "trainer.v1.sampler.sampler_kwargs"


@dataclass(frozen=True)
class ReplayOptions:
    """`+trainer.v1.sampler.sampler_kwargs.KEY=VALUE` of `TrackedReplayBuffer`."""

    one_pass: bool = False  # end the run when the data's first pass ends (needs trainer.total_epochs=1)
    poll_interval_s: float = 2.0  # seconds between checks for finished rollouts, in (0, 60] (verl's own: 2)

    def __post_init__(self) -> None:
        if not isinstance(self.one_pass, bool):
            raise ValueError(f"{PREFIX}.one_pass must be true or false, got {self.one_pass!r}")
        if type(self.poll_interval_s) not in (int, float) or not 0 < self.poll_interval_s <= 60:
            raise ValueError(f"{PREFIX}.poll_interval_s must be a number in (0, 60], got {self.poll_interval_s!r}")


def filter_arguments(trainer) -> dict:
    """The filtering arguments verl 0.9.1's `PPOTrainer._build_replay_buffer` gives its own sync buffer (a custom
    one gets none), from the trainer's config; the metric and its checks are verl's `_resolve_filter_groups_metric`."""
    config, metric = trainer.config, trainer._resolve_filter_groups_metric()
    refill, batch = bool(config.trainer.v1.sampler.get("sync_refill_failed_groups", False)), config.data.train_batch_size
    return {"filter_groups_metric": metric, "sync_refill_failed_groups": refill, "train_batch_size": batch,
            "gen_batch_size": 1 if metric is not None or refill else (config.data.get("gen_batch_size") or batch),
            "max_inflight_gen_batches": config.algorithm.filter_groups.get("max_inflight_gen_batches", 1) if metric else 1}


def refill_allowance(left: int, batch: int, is_last: bool, chunk: int = 1) -> int:
    """Rule 1: the prompts this step's refills may still draw, of the `left` in the pass (whole `chunk`s)."""
    allowed = max(0, left - (0 if is_last else batch))
    return allowed - allowed % max(1, chunk)


def last_step(next_step: int, left: int, batch: int, planned: int) -> int:
    """Rule 2: the run's last step, decided before `next_step` starts with `left` prompts left in the pass."""
    return min(planned, next_step - 1) if left < batch else min(planned, next_step) if left < 2 * batch else planned


class DataPassEnds(Exception):
    """Raised by a refill that reached `refill_allowance`: breaks out of verl's sampling loop."""


class TrackedReplayBuffer(ReplayBuffer):
    def __init__(self, *args, sampler_kwargs=None, refill_fn=None, **kwargs):
        opts = from_mapping(ReplayOptions, sampler_kwargs, PREFIX)
        if kwargs.get("trainer_mode") != "sync":  # verl passes its arguments by keyword
            raise ValueError(f"TrackedReplayBuffer is verl's synchronous buffer; trainer.v1.trainer_mode="
                             f"{kwargs.get('trainer_mode')!r} needs verl's own (drop the custom_sampler overrides)")
        trainer = self._trainer = refill_fn.__self__  # verl's PPOTrainer (refill_fn: its `_add_prompts_to_generate`)
        super().__init__(*args, **kwargs, **filter_arguments(trainer), sampler_kwargs=sampler_kwargs,
                         refill_fn=self._refill, poll_interval=opts.poll_interval_s)
        self.one_pass, self._trainer_refill = opts.one_pass, refill_fn
        self._discarded = {DISCARDED_ANSWERS: 0.0, DISCARDED_REWARD_SUM: 0.0}
        self._is_last, self._kept = True, set()  # the step's last-step flag; groups kept by rule 3
        self._iterator, self._passes = None, 0
        self._settling = None  # the partition whose snapshots wait for every rollout (rule 3's end; deterministic)
        if self.one_pass:
            if trainer.config.trainer.total_epochs != 1:
                raise ValueError(f"{PREFIX}.one_pass ends the run at the end of the data's first pass: set "
                                 f"trainer.total_epochs=1 (got {trainer.config.trainer.total_epochs})")
            if trainer.parameter_sync_step != 1:
                raise ValueError(f"{PREFIX}.one_pass needs parameter_sync_step=1 (one sample per step)")
            begin = trainer.on_train_begin

            def on_train_begin():  # after _load_checkpoint restored the loader, before fit's first step
                begin()
                self._plan(trainer.global_steps)

            trainer.on_train_begin = on_train_begin

    def _position(self) -> tuple[int, int]:
        """(prompts drawn from the loader's current pass, prompts in a pass)."""
        trainer = self._trainer
        if trainer.train_dataloader_it is None:  # verl's first fetch does the same; restores a resumed position
            trainer.train_dataloader_it = iter(trainer.train_dataloader)
        it = trainer.train_dataloader_it
        if it is not self._iterator:
            self._iterator, self._passes = it, self._passes + 1
            if self.one_pass and self._passes > 1:
                raise RuntimeError("one_pass: verl started a second pass over the data (a fetch outside the "
                                   "replay buffer's allowance); stopping instead of training on it")
        per = trainer.train_dataloader.batch_size
        return it._num_yielded * per, len(trainer.train_dataloader) * per

    def _plan(self, next_step: int) -> None:
        drawn, size = self._position()
        planned = self._trainer.total_training_steps
        last = last_step(next_step, size - drawn, self.train_batch_size, planned)
        if last != planned:
            logger.warning("one_pass: %d of %d prompts drawn; the run ends after step %d (verl planned %d)",
                           drawn, size, last, planned)
            self._trainer.total_training_steps = last

    def _allowance(self) -> int:
        drawn, size = self._position()
        return refill_allowance(size - drawn, self.train_batch_size, self._is_last, self.gen_batch_size)

    def _refill(self, n: int) -> None:
        take = min(n, self._allowance()) if self.one_pass else n
        if take > 0:
            self._trainer_refill(take)
        if take < n:
            raise DataPassEnds

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        """verl's eviction and surplus disposal both end here: tally the answers (and their rewards) that were
        generated for training but leave without being trained on, then let verl clear them."""
        keys = [k for k in self.partitions[partition_id] if k.split("_")[0] in uids] if partition_id != "val" else []
        if keys:
            scores = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["rm_scores"])["rm_scores"]
            self._discarded[DISCARDED_ANSWERS] += len(scores)
            self._discarded[DISCARDED_REWARD_SUM] += sum(float(v.sum()) for v in scores)
        super()._clear_groups(partition_id, uids)

    def _terminal_eviction_reasons(self, global_steps: int, partition_id: str):
        """Rule 3: once the data cannot replace a group DAPO filters, the group is kept (and counted) instead."""
        stale, filtered, failed, counts = super()._terminal_eviction_reasons(global_steps, partition_id)
        if self.one_pass and partition_id != "val" and filtered and self._allowance() == 0:
            self._kept |= filtered
            filtered, counts = set(), type(counts)()
        return stale, filtered, failed, counts

    def _select_prompt_uids(self, partition_id: str, sampleable_keys: set[str], batch_size: int):
        """verl's choice (oldest first), with the groups kept by rule 3 after every group DAPO accepts."""
        selected, snapshot, steps = super()._select_prompt_uids(partition_id, sampleable_keys, len(sampleable_keys))
        selected = sorted(selected, key=lambda uid: uid in self._kept)  # stable: the order above otherwise
        return selected[:batch_size], snapshot, steps

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        if partition_id == "val":
            return super().sample(global_steps, partition_id, batch_size)
        self._discarded, self._kept = {DISCARDED_ANSWERS: 0.0, DISCARDED_REWARD_SUM: 0.0}, set()
        self._is_last = global_steps >= self._trainer.total_training_steps
        try:
            batch, metrics = super().sample(global_steps, partition_id, batch_size)
        except DataPassEnds:  # verl's per-step eviction counts before this point are not in `metrics`
            batch, metrics = self._take_what_is_left(global_steps, partition_id, batch_size)
        finally:
            self._settling = None
        drawn, size = self._position()
        metrics = {**metrics, **self._discarded, PROMPTS_CONSUMED: drawn, PROMPTS_LEFT: size - drawn,
                   DATA_PASS: self._passes}
        if self.one_pass:
            self._plan(global_steps + 1)
            metrics.update({LAST_STEP: self._trainer.total_training_steps,
                            KEPT_GROUPS: len(self._kept & self._trained(batch))})
        return batch, metrics

    def _sync_metadata_from_transfer_queue(self) -> None:
        """While `_settling` names a partition (rule 3's end; `deterministic`'s whole step), each of verl's snapshots
        is taken only once no group of it is pending or running: verl's own loop decides on settled snapshots."""
        super()._sync_metadata_from_transfer_queue()
        p, last_debug = self._settling, time.time()
        while p is not None and (self.pending_keys[p] or self.running_keys[p]):
            last_debug = self._wait_for_next_poll(p, last_debug)
            super()._sync_metadata_from_transfer_queue()

    @staticmethod
    def _trained(batch) -> set[str]:
        return {key.split("_")[0] for key in batch.keys}

    def _take_what_is_left(self, global_steps: int, partition_id: str, batch_size: int):
        """Rule 3, at the end of the data: a refill found no prompt left. Wait for the answers in flight, then
        train on what there is (verl's choice, the groups DAPO accepts first, at most `batch_size`); the rest is
        discarded. verl pads a short batch (`PPOTrainer._balance_batch`)."""
        self._settling = partition_id
        self._sync_metadata_from_transfer_queue()  # settled: wait for the answers in flight
        _stale, _filtered, failed, _counts = self._terminal_eviction_reasons(global_steps, partition_id)
        pool = (self.finished_keys[partition_id] | self.failure_keys[partition_id]) - failed
        selected, snapshot, _steps = self._select_prompt_uids(partition_id, pool, batch_size)
        rest = pool - set(selected)
        self._clear_groups(partition_id, rest | failed)
        return self._materialize_batch(partition_id, selected, snapshot), {f"{self._metrics_prefix(partition_id)}/filter_groups/discarded_surplus_samples": len(rest)}
