"""`hf_seeded`: verl's single-turn agent loop with a per-request sampling seed (the CPU backend's default agent loop).

verl 0.9.1's V1 trainer gives every request a random id (`uuid4`) and no seed, so a rollout server that samples
the requests of a step from one random stream gives each request draws that depend on which requests shared its
batch and in what order they arrived: two runs of one seed differ from the first step. This loop adds vLLM's
per-request `seed` to the sampling parameters, computed from what identifies the answer in the run: the trainer
step (`global_steps`), the row (`extra_info.index`, verl's `index`), the prompt's text, the answer's number in
its group (`session_id`) and how many requests with all of these this worker has seen before (rows whose index
repeats, e.g. a dataset without `extra_info.index`). The `hf` rollout server samples each seeded request from its
own stream (`verl_ebpo.tools.cpu.sampling.row_uniforms`), mixed with `rollout.seed`. Selected by
`actor_rollout_ref.rollout.agent.default_agent_loop=hf_seeded` with `agent_loop_config_path` = `AGENT_LOOPS`
(`CPURun` sets both, `verl_ebpo.tools.cpu.overrides`); a row that names its own `agent_name` keeps it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from verl_ebpo.tools.cpu.sampling import mix_seed

NAME = "hf_seeded"


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def prompt_digest(raw_prompt: Any) -> int:
    """A stable 64-bit digest of a prompt (its messages as JSON, keys sorted)."""
    text = json.dumps(list(raw_prompt) if raw_prompt is not None else None, sort_keys=True, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class RequestSeeds:
    """Per-request seeds: `seed(kwargs)` from the request's identity, plus a counter for repeated identities
    (reset when the trainer step changes, so it holds at most one step's requests)."""

    def __init__(self):
        self.step = None
        self.seen: dict[tuple, int] = {}

    def seed(self, kwargs: dict) -> int:
        step = _int(kwargs.get("global_steps"), -1)
        if step != self.step:
            self.step, self.seen = step, {}
        key = (step, _int(kwargs.get("index")), _int(kwargs.get("session_id")), prompt_digest(kwargs.get("raw_prompt")))
        repeat = self.seen.get(key, 0)
        self.seen[key] = repeat + 1
        return mix_seed(*key, repeat)


_SEEDS = RequestSeeds()  # one per agent-loop worker process (the loop itself is built anew for every answer)


class SeededSingleTurnAgentLoop(SingleTurnAgentLoop):
    """verl's `SingleTurnAgentLoop` whose requests carry a `seed` (see the module's docstring)."""

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs) -> Any:
        if sampling_params.get("seed") is None:
            sampling_params = {**sampling_params, "seed": _SEEDS.seed(kwargs)}
        return await super().run(sampling_params, priority=priority, **kwargs)

