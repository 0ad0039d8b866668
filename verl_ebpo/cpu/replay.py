"""A replay buffer that polls TransferQueue more often than verl's default (for small CPU runs).

verl 0.9.1's synchronous `ReplayBuffer` checks for finished rollouts every 2 s (a constructor default
no config key reaches), so every step of a small CPU job would wait at least 2 s for generation that
takes 0.1 s. `CPUReplayBuffer` is the same class with `poll_interval` read from
`trainer.v1.sampler.sampler_kwargs.poll_interval_s` (default 0.2 s); it is plugged in through verl's
documented hook `trainer.v1.sampler.custom_sampler.{path,name}`.

verl passes a custom sampler only the base constructor arguments, so DAPO's group filtering
(`algorithm.filter_groups`) and `sync_refill_failed_groups` are not available with it: `CPURun`
leaves verl's own buffer in place when asked to (`fast_poll=False`).
"""

from __future__ import annotations

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

DEFAULT_POLL_INTERVAL_S = 0.2


class CPUReplayBuffer(ReplayBuffer):
    def __init__(self, *args, sampler_kwargs=None, poll_interval=None, **kwargs):
        interval = DEFAULT_POLL_INTERVAL_S
        if sampler_kwargs is not None and sampler_kwargs.get("poll_interval_s") is not None:
            interval = float(sampler_kwargs.get("poll_interval_s"))
        if poll_interval is not None:
            interval = float(poll_interval)
        if interval <= 0:
            raise ValueError(f"poll_interval_s must be > 0, got {interval}")
        super().__init__(*args, sampler_kwargs=sampler_kwargs, poll_interval=interval, **kwargs)
