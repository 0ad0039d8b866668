"""The verl keys that make each algorithm, written once: read by the recipes (recipes/common.sh runs
`python -m verl_ebpo.tools.algorithms ALGO --protocol P ...`), their CPU smoke (`SMOKE=cpu`) and `verl-ebpo demo`,
so what the demo compares on CPU is what the recipes run on GPUs.

    python -m verl_ebpo.tools.algorithms dapo --protocol paper --max-response-length 8192
        -> one Hydra override a line (on top of the recipes' shared keys; Hydra keeps the last value of a key)

Keys that derive from another key are Hydra interpolations (`${data.max_response_length}`), so a trailing
`data.max_response_length=2048` moves them too. DAPO's overlong buffer needs arithmetic, which Hydra cannot do:
its default is half the response budget (the paper: 4096 of 8192), computed from `max_response_length`.

protocol `paper`: what the paper describes, with fair baselines; `authors`: key for key what the authors'
public scripts (Tonyzhou98/verl @75b0147) ran — see recipes/README.md, "The two protocols".
"""

from __future__ import annotations

import argparse
import sys

ALGORITHMS = ("grpo", "drgrpo", "dapo", "ebpo")
PROTOCOLS = ("paper", "authors")
PRIOR_SCOPES = ("running", "batch")
RESPONSE_BUDGET = "${data.max_response_length}"  # interpolation: follows data.max_response_length wherever set

DESCRIPTIONS = {
    "grpo": "GRPO: group-mean baseline, advantage divided by the group's std (verl's `grpo`)",
    "drgrpo": "Dr.GRPO: GRPO without the std division, sequence-sum loss divided by the response budget "
              "(paper protocol; the authors' scripts kept token-mean)",
    "dapo": "DAPO: GRPO plus clip-higher (0.28), dynamic sampling (groups whose answers all score the same are "
            "dropped and refilled) and overlong reward shaping (paper protocol; the authors' verl ran clip-higher "
            "without std normalisation only)",
    "ebpo": "EBPO: baseline shrunk toward a prior mean (`algorithm.adv_estimator=ebpo`), the prior saved with "
            "each checkpoint (paper: a running prior; the authors' code: the batch's)",
}


def overrides(algo: str, protocol: str = "paper", *, max_response_length: int = 8192,
              overlong_buffer_len: int | None = None, overlong_penalty: float = 1.0,
              prior_scope: str | None = None, one_pass: bool = False, log_discarded: bool = False) -> list[str]:
    """The Hydra overrides that make `algo` under `protocol` (ranges: max_response_length >= 2,
    1 <= overlong_buffer_len < max_response_length, overlong_penalty >= 0). ValueError on bad input.

    one_pass: the run stays inside one pass over its data (the curriculum runs; needs trainer.total_epochs=1):
    the plugin's replay buffer (`buffer_overrides`), for every algorithm alike,
    so the -diff runs differ only in their algorithm's keys.

    log_discarded: a run that drops groups (paper DAPO's dynamic sampling) gets the same replay buffer without
    one_pass, which logs the answers it discards (`replay/discarded_*`, docs/ordering.md#one-pass), so the reward
    of every generated answer can be compared with the other methods' (the recipes; nothing else changes).
    """
    keys = _algorithm_keys(algo, protocol, max_response_length, overlong_buffer_len, overlong_penalty, prior_scope)
    drops_groups = "algorithm.filter_groups.enable=True" in keys
    if not one_pass and not (log_discarded and drops_groups):
        return keys
    return keys + buffer_overrides(one_pass=one_pass)


def buffer_overrides(*, one_pass: bool = False, poll_interval_s: float | None = None) -> list[str]:
    """The overrides that plug the plugin's `TrackedReplayBuffer` into verl's V1 trainer (docs/ordering.md#one-pass);
    it computes DAPO's arguments from the trainer's config as verl does for its own buffer."""
    kwargs = "+trainer.v1.sampler.sampler_kwargs"
    return ["trainer.v1.sampler.custom_sampler.path=pkg://verl_ebpo.samplers.replay",
            "trainer.v1.sampler.custom_sampler.name=TrackedReplayBuffer", *([f"{kwargs}.one_pass=true"] * one_pass),
            *([] if poll_interval_s is None else [f"{kwargs}.poll_interval_s={float(poll_interval_s):g}"])]


def _algorithm_keys(algo, protocol, max_response_length, overlong_buffer_len, overlong_penalty, prior_scope):
    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algo!r} (one of {', '.join(ALGORITHMS)})")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r} (paper or authors)")
    if int(max_response_length) < 2:
        raise ValueError(f"max_response_length must be >= 2, got {max_response_length}")
    # DAPO's default overlong buffer: half the response budget (4096 of 8192)
    buffer = int(max_response_length) // 2 if overlong_buffer_len is None else int(overlong_buffer_len)
    if not 1 <= buffer < int(max_response_length):
        raise ValueError(f"overlong buffer must be in [1, max_response_length={max_response_length}), got {buffer}")
    if not float(overlong_penalty) >= 0:
        raise ValueError(f"overlong penalty must be >= 0, got {overlong_penalty}")
    paper = protocol == "paper"
    scope = prior_scope or ("running" if paper else "batch")  # main's --prior-scope has the choices
    if algo == "grpo":
        return ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=True"]
    if algo == "drgrpo":
        keys = ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=False"]
        if not paper:  # drgrpo_fsdp_math_17k_*.sh: loss_agg_mode="token-mean"
            return keys + ["actor_rollout_ref.actor.loss_agg_mode=token-mean"]
        return keys + ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
                       f"actor_rollout_ref.actor.loss_scale_factor={RESPONSE_BUDGET}"]
    if algo == "dapo":
        if not paper:  # their +algorithm.filter_groups.* / +reward_model.overlong_buffer.* were not read by their verl
            return ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=False",
                    "actor_rollout_ref.actor.clip_ratio_high=0.28"]
        return [
            "algorithm.adv_estimator=grpo",
            "algorithm.norm_adv_by_std_in_grpo=True",
            "actor_rollout_ref.actor.clip_ratio_low=0.2",
            "actor_rollout_ref.actor.clip_ratio_high=0.28",
            "algorithm.filter_groups.enable=True",
            "algorithm.filter_groups.metric=acc",
            "reward.reward_manager.name=dapo",
            f"+reward.reward_kwargs.max_resp_len={RESPONSE_BUDGET}",
            "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
            f"+reward.reward_kwargs.overlong_buffer_cfg.len={buffer}",
            f"+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor={float(overlong_penalty):g}",
            "+reward.reward_kwargs.overlong_buffer_cfg.log=False",
        ]
    return [
        "algorithm.adv_estimator=ebpo",
        "algorithm.norm_adv_by_std_in_grpo=True",
        f"+algorithm.ebpo.prior_scope={scope}",
        "trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback",
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ebpo.tools.algorithms", description=__doc__.splitlines()[0])
    parser.add_argument("algo", choices=ALGORITHMS)
    parser.add_argument("--protocol", choices=PROTOCOLS, default="paper")
    parser.add_argument("--max-response-length", type=int, default=8192)
    parser.add_argument("--overlong-buffer-len", type=int, default=None,
                        help="DAPO's overlong buffer (default: half of --max-response-length)")
    parser.add_argument("--overlong-penalty", type=float, default=1.0)
    parser.add_argument("--prior-scope", choices=PRIOR_SCOPES, default=None,
                        help="EBPO's prior (default: running under paper, batch under authors)")
    parser.add_argument("--one-pass", action="store_true",
                        help="keep the run inside one pass over its data (the curriculum runs; total_epochs=1)")
    parser.add_argument("--log-discarded", action="store_true",
                        help="a run that drops groups (paper DAPO) logs the answers it discards (the replay buffer)")
    args = parser.parse_args(argv)
    try:
        keys = overrides(**vars(args))  # the flags are overrides' arguments
    except ValueError as exc:
        print(f"verl_ebpo.tools.algorithms: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
