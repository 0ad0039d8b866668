"""`deterministic`: the plugin's replay buffer deciding only on settled snapshots, in draw order (the CPU demo's
choice; docs/ordering.md#deterministic).

`DETERMINISTIC_OVERRIDES` name `DeterministicReplayBuffer`, a subclass of the plugin's buffer
(`verl_ebpo.samplers.replay.TrackedReplayBuffer`), as verl's `trainer.v1.sampler.custom_sampler`, in place of the
plugin's class (the rest of the plugin's buffer overrides, e.g. `CPURun`'s, unchanged). verl's sync buffer decides while rollouts are still running, so two runs
of the same code and seed differ with DAPO. Here every decision is made on a settled snapshot, in draw order
(rules 1-3 are `one_pass`'s, in `verl_ebpo.samplers.replay`):

4. the buffer evicts, refills and selects only when no group of the partition is pending or running (verl's own
   loop, its snapshots taken once the generation in flight is done: the plugin's `_sync_metadata_from_transfer_queue`
   waits while `_settling` names the partition), then adds verl's credit (2 prompts per evicted group, 1 per failed
   group with `sync_refill_failed_groups`) and draws `min(credit, max_inflight_gen_batches x B)` prompts at once, so
   the number drawn depends only on the rewards;
5. `draw_order`: groups are chosen oldest step first (verl's rule), then in the order their prompts were drawn from
   the data loader (not verl's random `uuid4` uid): the trainer's `_submit_batch_to_rollout` (every prompt verl sends
   to generation, the step's first B and every refill) is wrapped on the instance to number them;
6. `batch_layout`: the training batch lists its answers in that order (group, then answer), not the order they
   finished in.

Tests: tests/test_deterministic.py (a simulated TransferQueue whose rollouts finish at random times);
tests/test_e2e_dapo_determinism.py (two DAPO runs of verl's trainer on the CPU backend).
"""

from __future__ import annotations

import itertools
from typing import Iterable, Mapping

from verl_ebpo.samplers.replay import TrackedReplayBuffer

# after the plugin's buffer overrides (a later override of a key wins: `merge_overrides`, Hydra)
DETERMINISTIC_OVERRIDES = ("trainer.v1.sampler.custom_sampler.path=pkg://verl_ebpo.tools.cpu.deterministic",
                           "trainer.v1.sampler.custom_sampler.name=DeterministicReplayBuffer")


def _draw_rank(uid: str, ranks: Mapping[str, int]) -> tuple[int, int, str]:
    """Rule 5's key past the step: drawn prompts by draw rank; a uid never seen drawn (a rollout-skip cache hit)
    after them, by its uid."""
    rank = ranks.get(uid)
    return (0, rank, "") if rank is not None else (1, 0, uid)


def draw_order(uids: Iterable[str], steps: Mapping[str, int], ranks: Mapping[str, int]) -> list[str]:
    """Rule 5: `uids` (prompt groups, any order) oldest step first (`steps[uid]`, 0 when unknown, as verl),
    then by draw rank (`ranks[uid]`: 0, 1, ... in the order the data loader gave the prompts). Returns a list of
    len(uids)."""
    return sorted(uids, key=lambda uid: (steps.get(uid, 0), *_draw_rank(uid, ranks)))


def batch_layout(keys: Iterable[str], ranks: Mapping[str, int]) -> list[str]:
    """Rule 6: answer keys `<uid>_<session>_<output>` grouped by prompt in draw order, then by session and output
    number. Returns a list of len(keys)."""
    def key(k: str):
        uid, session, output = k.split("_")
        return (*_draw_rank(uid, ranks), int(session), int(output))

    return sorted(keys, key=key)


class DeterministicReplayBuffer(TrackedReplayBuffer):
    """`TrackedReplayBuffer` with rules 4-6 (verl builds it from `DETERMINISTIC_OVERRIDES`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ranks: dict[str, int] = {}  # prompt uid -> its draw rank (0, 1, ...)
        counter = itertools.count()
        submit = self._trainer._submit_batch_to_rollout  # the trainer is verl's V1 PPOTrainer (refill_fn's owner)

        def numbered_submit(batch):
            for uid in list(batch["uid"]):
                self._ranks[str(uid)] = next(counter)
            return submit(batch)

        self._trainer._submit_batch_to_rollout = numbered_submit

    def _select_prompt_uids(self, partition_id: str, sampleable_keys: set[str], batch_size: int):
        """Rule 5, then the groups kept by one_pass's rule 3 after every group DAPO accepts."""
        selected, snapshot, steps = super()._select_prompt_uids(partition_id, sampleable_keys, len(sampleable_keys))
        if partition_id != "val":
            selected = sorted(draw_order(selected, steps, self._ranks), key=lambda uid: uid in self._kept)
        return selected[:batch_size], snapshot, steps

    def _materialize_batch(self, partition_id: str, selected_prompt_uids: list[str], partition_snapshot: dict):
        """Rule 6: the batch's answers in draw order, not the order they finished in."""
        if partition_id != "val":
            chosen = set(selected_prompt_uids)
            keys = batch_layout([k for k in partition_snapshot if k.split("_")[0] in chosen], self._ranks)
            partition_snapshot = {k: partition_snapshot[k] for k in keys}
        return super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        """Rule 4 for the whole step; then forget the prompts that left (the next step's are numbered after this
        returns)."""
        if partition_id == "val":
            return super().sample(global_steps, partition_id, batch_size)
        self._settling = partition_id
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        present = set().union(*(keys[partition_id] for keys in (self.pending_keys, self.running_keys,
                                                                self.finished_keys, self.failure_keys)))
        self._ranks = {u: r for u, r in self._ranks.items() if u in present - self._trained(batch)}
        return batch, metrics
