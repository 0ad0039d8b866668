"""verl's synchronous replay buffer, polling more often, with DAPO's group filtering intact (small CPU runs).

verl 0.9.1's `ReplayBuffer` checks for finished rollouts every 2 s (a constructor default no config key
reaches), so every step of a small CPU job would wait at least 2 s for generation that takes 0.1 s.
`CPUReplayBuffer` is that class with `poll_interval` from `trainer.v1.sampler.sampler_kwargs.poll_interval_s`
(default 0.2 s), plugged in through verl's documented hook `trainer.v1.sampler.custom_sampler.{path,name}`.

DAPO: verl hands a custom buffer only the base constructor arguments; the filtering arguments it gives its
own buffer (`filter_groups_metric`, `train_batch_size`, `gen_batch_size`, `max_inflight_gen_batches`,
`sync_refill_failed_groups`) are derived from `algorithm.filter_groups`, `data.*` and
`trainer.v1.sampler.sync_refill_failed_groups`. `CPURun` passes those config nodes to the buffer as Hydra
interpolations under `sampler_kwargs.verl` (`VERL_CONFIG_LINKS`), and `filter_arguments` derives the same
arguments by verl's rules (`PPOTrainer._build_replay_buffer`); a test builds both buffers from one composed
config and compares them, so a verl upgrade that changes the rules fails there. Without that block the
buffer refuses to start (it could not tell whether DAPO was asked for).

Answers generated but not trained on: verl's DAPO evicts groups whose answers all scored the same and, once
enough groups are ready, discards the surplus; both leave through `ReplayBuffer._clear_groups` (the one
private method overridden here). The buffer adds, per step, `cpu_replay/discarded_answers` and
`cpu_replay/discarded_reward_sum` to the step's metrics, so the reward of every answer generated (not only
of those trained on) can be computed from verl's metrics file.
"""

from __future__ import annotations

from typing import Mapping, Optional

import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from verl_ebpo.spec import config_get as _get
from verl_ebpo.tools.cpu.overrides import VERL_CONFIG_LINKS
from verl_ebpo.tools.verl_logs import DISCARDED_ANSWERS, DISCARDED_REWARD_SUM

DEFAULT_POLL_INTERVAL_S = 0.2


def filter_arguments(linked: Optional[Mapping]) -> dict:
    """The filtering arguments verl 0.9.1's `PPOTrainer._build_replay_buffer` gives its own sync buffer,
    from the linked config values (`sampler_kwargs.verl`, see `VERL_CONFIG_LINKS`)."""
    if linked is None:
        raise ValueError(
            "CPUReplayBuffer needs trainer.v1.sampler.sampler_kwargs.verl (links to algorithm.filter_groups, "
            "data.train_batch_size, ...) to apply DAPO's group filtering as verl would: build the run with "
            "verl_ebpo.tools.cpu.launch.CPURun, or add the overrides of CPURun.overrides()"
        )
    missing = sorted(set(VERL_CONFIG_LINKS) - set(linked.keys()))
    if missing:
        raise ValueError(f"trainer.v1.sampler.sampler_kwargs.verl lacks {missing} (see VERL_CONFIG_LINKS)")
    filter_groups = linked["filter_groups"]
    metric = None
    if bool(_get(filter_groups, "enable", False)):
        metric = _get(filter_groups, "metric", None)
        if not metric:
            raise ValueError("algorithm.filter_groups.metric must be set when group filtering is enabled")
        if bool(linked["reward_model_enable"]) and not bool(linked["reward_model_enable_resource_pool"]):
            raise ValueError(
                "algorithm.filter_groups requires the reward metric at sampling time: use rule-based reward or "
                "reward.reward_model.enable_resource_pool=True"
            )
        metric = str(metric)
    refill = bool(linked["sync_refill_failed_groups"])
    train_batch_size = int(linked["train_batch_size"])
    return {
        "filter_groups_metric": metric,
        "sync_refill_failed_groups": refill,
        "train_batch_size": train_batch_size,
        "gen_batch_size": 1 if metric is not None or refill else int(linked["gen_batch_size"] or train_batch_size),
        "max_inflight_gen_batches": int(_get(filter_groups, "max_inflight_gen_batches", 1)) if metric else 1,
    }


class CPUReplayBuffer(ReplayBuffer):
    def __init__(self, *args, sampler_kwargs=None, poll_interval=None, **kwargs):
        interval = DEFAULT_POLL_INTERVAL_S
        if _get(sampler_kwargs, "poll_interval_s") is not None:
            interval = float(_get(sampler_kwargs, "poll_interval_s"))
        if poll_interval is not None:
            interval = float(poll_interval)
        if interval <= 0:
            raise ValueError(f"poll_interval_s must be > 0, got {interval}")
        trainer_mode = kwargs.get("trainer_mode", args[0] if args else "sync")
        if trainer_mode != "sync":
            raise ValueError(
                f"CPUReplayBuffer is verl's synchronous buffer; trainer.v1.trainer_mode={trainer_mode!r} needs "
                "verl's own (drop the custom_sampler overrides)"
            )
        # What verl passes explicitly wins (a later verl may pass the filtering arguments to custom buffers).
        kwargs = {**filter_arguments(_get(sampler_kwargs, "verl")), **kwargs}
        super().__init__(*args, sampler_kwargs=sampler_kwargs, poll_interval=interval, **kwargs)
        self._discarded = {DISCARDED_ANSWERS: 0.0, DISCARDED_REWARD_SUM: 0.0}

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        """verl's eviction and surplus disposal both end here: tally the answers (and their rewards) that
        were generated for training but leave without being trained on, then let verl clear them."""
        if partition_id != "val" and uids:
            keys = [key for key in self.partitions[partition_id] if key.split("_")[0] in uids]
            if keys:
                data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["rm_scores"])
                scores = [float(v.sum().item()) for v in data["rm_scores"]]
                self._discarded[DISCARDED_ANSWERS] += len(scores)
                self._discarded[DISCARDED_REWARD_SUM] += sum(scores)
        super()._clear_groups(partition_id, uids)

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        self._discarded = {DISCARDED_ANSWERS: 0.0, DISCARDED_REWARD_SUM: 0.0}
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id != "val":
            metrics = {**metrics, **self._discarded}
        return batch, metrics
