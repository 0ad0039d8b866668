"""The rules of `verl_ebpo.samplers.replay.TrackedReplayBuffer`, verl-free: its options, its metrics, the config
links it is built from, and the one-pass stopping rule (pure functions, tested without a trainer).

One pass (`one_pass=true`): verl 0.9.1 sets a run's steps to `len(data) // train_batch_size` and starts its data
iterator again when the data runs out, while DAPO's dynamic sampling draws more than `train_batch_size` prompts a
step; a curriculum run with DAPO would reach the end of the curriculum early and restart from the easiest problems.
With `one_pass` the buffer keeps the run inside one pass over the data, by three rules (B = `train_batch_size`):

1. `refill_allowance`: a step that is not the run's last keeps B prompts in reserve for the next step (verl draws
   B prompts at the start of every step, before any refill); the last step may draw every prompt left.
2. `last_step`: before a step starts (at the start of training and after each step's sampling), with L prompts
   left: L < B -> no step can start, the previous step was the last; B <= L < 2B -> the coming step is the last.
   A run's last step only ever moves earlier (verl's own total, e.g. `trainer.total_training_steps`, is kept when
   it comes first).
3. Once no prompt is left to replace a group DAPO filters (identical rewards: a group-normalised advantage of 0),
   the group is kept (`replay/kept_filtered_groups` counts those trained on) and the step trains on what it has,
   the groups DAPO accepts first, at most B (verl pads a short batch): a step never waits for prompts that do not
   exist.

So every prompt is drawn at most once, in order, and the run ends at the end of the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from verl_ebpo.spec import Spec, config_get, option

# metrics added to every training step's (verl's metrics file, wandb, ...)
PROMPTS_CONSUMED = "replay/prompts_consumed"  # prompts drawn from the data loader's current pass
PROMPTS_LEFT = "replay/prompts_left"  # prompts left in that pass
DATA_PASS = "replay/data_pass"  # passes over the data begun in this attempt (1: the first)
LAST_STEP = "replay/last_step"  # one_pass: the run's last step as planned after this step's sampling
KEPT_GROUPS = "replay/kept_filtered_groups"  # one_pass: groups DAPO would drop, trained on at the data's end
DISCARDED_ANSWERS = "replay/discarded_answers"  # answers generated for training but not trained on (DAPO)
DISCARDED_REWARD_SUM = "replay/discarded_reward_sum"  # the sum of those answers' rewards

BUFFER_MODULE = "pkg://verl_ebpo.samplers.replay"
BUFFER_CLASS = "TrackedReplayBuffer"

# sampler_kwargs.verl.<name> -> the verl config node it links to (a Hydra interpolation, resolved by verl's
# TaskRunner before the trainer builds its replay buffer); read by `filter_arguments`.
VERL_CONFIG_LINKS = {
    "filter_groups": "algorithm.filter_groups",
    "train_batch_size": "data.train_batch_size",
    "gen_batch_size": "data.gen_batch_size",
    "sync_refill_failed_groups": "trainer.v1.sampler.sync_refill_failed_groups",
    "reward_model_enable": "reward.reward_model.enable",
    "reward_model_enable_resource_pool": "reward.reward_model.enable_resource_pool",
}


@dataclass(frozen=True)
class ReplayOptions(Spec):
    """`+trainer.v1.sampler.sampler_kwargs.KEY=VALUE` of `TrackedReplayBuffer` (besides the `verl` links)."""

    PREFIX = "trainer.v1.sampler.sampler_kwargs"
    one_pass: bool = option(False, doc="end the run when the data's first pass ends, drawing every prompt at most "
                            "once (a curriculum with DAPO's dynamic sampling); needs `trainer.total_epochs=1`")
    poll_interval_s: float = option(2.0, number=(0.0, 60.0), lo_open=True,
                                    doc="seconds between checks for finished rollouts (verl's own buffer: 2)")
    verl: Any = option(None, default_doc="(required)", doc="`verl.KEY=${NODE}` links to the config nodes from which "
                       "the buffer derives DAPO's arguments as verl does for its own (`buffer_overrides()` writes them)")


def link_overrides() -> list[str]:
    """Hydra overrides that hand the buffer the config nodes verl derives its own buffer's DAPO arguments from."""
    return [f"+trainer.v1.sampler.sampler_kwargs.verl.{name}=${{{node}}}" for name, node in VERL_CONFIG_LINKS.items()]


def buffer_overrides(*, one_pass: bool = False, poll_interval_s: Optional[float] = None) -> list[str]:
    """The Hydra overrides that plug `TrackedReplayBuffer` into verl's V1 trainer (options validated here)."""
    opts = ReplayOptions.from_mapping({"one_pass": one_pass, "poll_interval_s": poll_interval_s})
    out = [f"trainer.v1.sampler.custom_sampler.path={BUFFER_MODULE}",
           f"trainer.v1.sampler.custom_sampler.name={BUFFER_CLASS}", *link_overrides()]
    if opts.one_pass:
        out.append("+trainer.v1.sampler.sampler_kwargs.one_pass=true")
    if poll_interval_s is not None:
        out.append(f"+trainer.v1.sampler.sampler_kwargs.poll_interval_s={opts.poll_interval_s:g}")
    return out


def filter_arguments(linked: Optional[Mapping]) -> dict:
    """The filtering arguments verl 0.9.1's `PPOTrainer._build_replay_buffer` (and `_resolve_filter_groups_metric`)
    gives its own sync buffer, computed the same way from the linked config values (`sampler_kwargs.verl`, see
    `VERL_CONFIG_LINKS`: verl's own config, typed and checked by verl, so read as verl reads it)."""
    if linked is None:
        raise ValueError(f"{BUFFER_CLASS} needs trainer.v1.sampler.sampler_kwargs.verl (links to "
                         "algorithm.filter_groups, data.train_batch_size, ...) to apply DAPO's group filtering as verl "
                         "would: add the overrides of verl_ebpo.samplers.replay_rules.buffer_overrides()")
    missing = sorted(set(VERL_CONFIG_LINKS) - set(linked))
    if missing:
        raise ValueError(f"trainer.v1.sampler.sampler_kwargs.verl lacks {missing} (see VERL_CONFIG_LINKS)")
    filter_groups = linked["filter_groups"]
    metric = None
    if filter_groups is not None and config_get(filter_groups, "enable", False):
        metric = config_get(filter_groups, "metric", None)
        if not metric:
            raise ValueError("algorithm.filter_groups.metric must be set when group filtering is enabled")
        if linked["reward_model_enable"] and not linked["reward_model_enable_resource_pool"]:
            raise ValueError("algorithm.filter_groups requires the reward metric at sampling time: use rule-based "
                             "reward or reward.reward_model.enable_resource_pool=True")
    refill = bool(linked["sync_refill_failed_groups"])
    train_batch_size = linked["train_batch_size"]
    return {
        "filter_groups_metric": metric,
        "sync_refill_failed_groups": refill,
        "train_batch_size": train_batch_size,
        "gen_batch_size": 1 if metric is not None or refill else (linked["gen_batch_size"] or train_batch_size),
        "max_inflight_gen_batches": config_get(filter_groups, "max_inflight_gen_batches", 1) if metric else 1,
    }


def refill_allowance(left: int, batch: int, is_last: bool, chunk: int = 1) -> int:
    """Rule 1: the prompts this step's refills may still draw, of the `left` in the pass (whole `chunk`s)."""
    allowed = max(0, left - (0 if is_last else batch))
    return allowed - allowed % max(1, chunk)


def last_step(next_step: int, left: int, batch: int, planned: int) -> int:
    """Rule 2: the run's last step, decided before `next_step` starts with `left` prompts left in the pass."""
    if left < batch:
        return min(planned, next_step - 1)
    if left < 2 * batch:
        return min(planned, next_step)
    return planned

