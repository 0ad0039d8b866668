"""Stand-ins for the replay buffer's tests: verl's `PPOTrainer` as the buffer sees it (the owner of `refill_fn`),
with a real composed verl config (verl's ppo_trainer, Hydra) and verl's own `_resolve_filter_groups_metric`, around
verl's real StatefulDataLoader over row numbers."""

from __future__ import annotations

import functools
import os

_BASE = dict(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=8, max_off_policy_strategy="drop")


@functools.lru_cache(maxsize=None)
def verl_config(*overrides: str):
    """verl's ppo_trainer config composed with `overrides` and resolved, as verl's TaskRunner has it."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import verl.trainer

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.trainer.__file__), "config"),
                               version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=list(overrides))
    OmegaConf.resolve(cfg)
    return cfg


class StandInTrainer:
    """`trainer_mode`, `config` (verl's, composed; or `config`), `_resolve_filter_groups_metric` (verl's), `parameter_sync_step`, the data loader
    and its iterator, `total_training_steps`, `global_steps`, `on_train_begin`, `_add_prompts_to_generate` (the
    refills, recorded) and `draw` (prepare_step's B prompts)."""

    trainer_mode = "sync"

    def __init__(self, *overrides: str, config=None, n: int = 12, batch: int = 4, sync_steps: int = 1,
                 workers: int = 0):
        from torchdata.stateful_dataloader import StatefulDataLoader
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        self._resolve_filter_groups_metric = PPOTrainer._resolve_filter_groups_metric.__get__(self)
        self.config = config or verl_config("trainer.total_epochs=1", f"data.train_batch_size={batch}", *overrides)
        self.parameter_sync_step = sync_steps
        self.train_dataloader = StatefulDataLoader(list(range(n)), batch_size=1, drop_last=True, num_workers=workers)
        self.train_dataloader_it = None
        self.total_training_steps, self.global_steps = n // batch, 1
        self.begun, self.refilled = 0, []

    def on_train_begin(self):
        self.begun += 1

    def _add_prompts_to_generate(self, n):
        for _ in range(n):
            next(self.train_dataloader_it)
        self.refilled.append(n)
        return n

    def draw(self, n):
        for _ in range(n):
            next(self.train_dataloader_it)


def buffer(trainer: StandInTrainer | None = None, cls=None, **kwargs):
    """The plugin's buffer (or `cls`) built with verl's base arguments, `refill_fn` bound to `trainer`."""
    from verl_ebpo.samplers.replay import TrackedReplayBuffer

    trainer = trainer or StandInTrainer()
    return (cls or TrackedReplayBuffer)(**{**_BASE, "refill_fn": trainer._add_prompts_to_generate, **kwargs})
