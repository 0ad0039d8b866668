"""`actor_rollout_ref.rollout.name=hf`: a CPU rollout server for verl 0.9.1's server-mode rollout.

verl 0.9.1 generates only through server replicas (vLLM / SGLang / TensorRT-LLM). This module adds a
fourth kind, registered in verl's two rollout registries (see `verl_ebpo.tools.cpu.register`):

- `HFRolloutServer`, a Ray actor holding a transformers causal LM on the CPU. Its `generate` speaks
  verl's token-in/token-out protocol (`prompt_ids`, `sampling_params` -> `TokenOutput` with token ids
  and log-probs); requests that arrive together are sampled as one KV-cached batch
  (`verl_ebpo.tools.cpu.sampling.generate_batch`); a request with a `seed` (vLLM's per-request seed, set by
  the `hf_seeded` agent loop) is sampled from its own stream, mixed with `rollout.seed`, whatever its batch.
  Sleep / wake-up / cache calls are no-ops (nothing to page out on a CPU).
- `HFReplica`, the `RolloutReplica` that launches one such server per replica.
- `HFServerAdapter`, the `BaseRollout` living in the trainer worker: `update_weights` sends the full
  tensors of the trainer's model to the server after every step (verl's "naive" checkpoint engine).

Only the hybrid (colocated, synchronous) layout is exercised. LoRA adapters and delta weight
updates are refused with an error. `VERL_EBPO_HF_BATCH_WINDOW_S` (`verl_ebpo.tools.env`, default 0.02 s) is how
long the server gathers requests before sampling a batch (requests of one step arrive within milliseconds).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any, Generator, Optional

import ray
import torch

from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from verl_ebpo.tools import env
from verl_ebpo.tools.cpu.sampling import SamplingParams, generate_batch, mix_seed

logger = logging.getLogger(__name__)
ROLLOUT_NAME = "hf"


def server_actor_name(replica_rank: int, is_reward_model: bool = False, is_teacher_model: bool = False,
                      name_suffix: str = "") -> str:
    """Ray actor name of a replica's server (the adapter in the trainer worker finds it by name)."""
    kind = "reward_" if is_reward_model else "teacher_" if is_teacher_model else ""
    return f"{ROLLOUT_NAME}_server_{kind}{replica_rank}_0{name_suffix}"


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    want_log_probs: bool
    future: asyncio.Future
    request_id: str = ""


class HFRolloutServer:
    """A replica's CPU inference server (a Ray actor; see `HFReplica.launch_servers`)."""

    def __init__(self, config, model_config, replica_rank: int = 0):
        from transformers import AutoModelForCausalLM, GenerationConfig

        self.config: RolloutConfig = omega_conf_to_dataclass(config)
        self.model_config: HFModelConfig = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.batch_window_s = env.read("VERL_EBPO_HF_BATCH_WINDOW_S")
        path = self.model_config.local_path
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
        hf_config = self.model.config
        try:
            eos = GenerationConfig.from_pretrained(path).eos_token_id
        except OSError:  # no generation_config.json
            eos = None
        stop_ids: set[int] = set()
        for source in (eos, hf_config.eos_token_id, getattr(self.model_config.tokenizer, "eos_token_id", None)):
            stop_ids.update([] if source is None else [source] if isinstance(source, int) else source)
        if not stop_ids:
            raise ValueError(f"model at {path} declares no eos_token_id: the rollout could never stop early")
        self.stop_token_ids = sorted(stop_ids)
        self.pad_token_id = int(hf_config.pad_token_id if hf_config.pad_token_id is not None else self.stop_token_ids[0])
        max_model_len = self.config.max_model_len or (self.config.prompt_length + self.config.response_length)
        self.max_model_len = min(max_model_len, getattr(hf_config, "max_position_embeddings", None) or max_model_len)
        self.max_batch_size = int(self.config.max_num_seqs)
        self.generator = torch.Generator().manual_seed(int(self.config.seed) + int(replica_rank))
        self.global_steps = None
        self._queue: list[_Request] = []
        self._event: Optional[asyncio.Event] = None
        self._loop_task: Optional[asyncio.Task] = None
        self._model_lock: Optional[asyncio.Lock] = None

    async def ping(self) -> None:
        return None

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._event = asyncio.Event()
            self._model_lock = asyncio.Lock()
            self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())

    async def _batch_loop(self) -> None:
        while True:
            await self._event.wait()
            self._event.clear()
            await asyncio.sleep(self.batch_window_s)
            while self._queue:
                batch = self._queue[: self.max_batch_size]
                del self._queue[: self.max_batch_size]
                try:
                    async with self._model_lock:
                        results = await asyncio.to_thread(self._sample, batch)
                except Exception as exc:  # a failed batch fails its requests, not the server
                    logger.exception("hf rollout: batch of %d failed", len(batch))
                    results = [exc] * len(batch)
                for request, result in zip(batch, results, strict=True):
                    if not request.future.done():
                        (request.future.set_exception if isinstance(result, Exception) else request.future.set_result)(
                            result)

    def _sample(self, batch: list[_Request]) -> list[TokenOutput]:
        outputs = generate_batch(self.model, [r.prompt_ids for r in batch], [r.params for r in batch],
                                 stop_token_ids=self.stop_token_ids, pad_token_id=self.pad_token_id,
                                 generator=self.generator)
        return [TokenOutput(token_ids=out.token_ids, log_probs=out.log_probs if r.want_log_probs else None,
                            stop_reason="completed", num_preempted=0, extra_fields={"global_steps": self.global_steps})
                for r, out in zip(batch, outputs, strict=True)]

    # -- verl's token-in/token-out protocol ---------------------------------------------------------
    def sampling_params_for(self, prompt_len: int, sampling_params: dict[str, Any]) -> SamplingParams:
        """vLLM server's rules for max_tokens, applied to this server's context length."""
        max_possible = self.max_model_len - prompt_len
        if max_possible < 1:
            raise ValueError(f"Prompt length ({prompt_len}) leaves no room to generate within max_model_len "
                             f"({self.max_model_len})")
        max_tokens = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
        if max_tokens is None:
            max_tokens = min(self.config.response_length,
                             self.config.prompt_length + self.config.response_length - prompt_len)
        top_k = sampling_params.get("top_k", -1)
        seed = sampling_params.get("seed")  # vLLM's per-request seed (the `hf_seeded` agent loop sets it)
        return SamplingParams(
            max_tokens=max(1, min(int(max_tokens), max_possible)),
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_k=int(-1 if top_k is None else top_k),
            top_p=float(sampling_params.get("top_p", 1.0)),
            seed=None if seed is None else mix_seed(int(self.config.seed), int(seed)),
        )

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str = "",
                       image_data: Optional[list[Any]] = None, video_data: Optional[list[Any]] = None,
                       audio_data: Optional[list[Any]] = None, **kwargs: Any) -> TokenOutput:
        if image_data or video_data or audio_data:
            raise NotImplementedError("the CPU hf rollout serves text-only models")
        repetition_penalty = float(sampling_params.get("repetition_penalty", 1.0) or 1.0)
        if repetition_penalty != 1.0:
            raise NotImplementedError(f"repetition_penalty={repetition_penalty} is not supported by the hf rollout")
        params = self.sampling_params_for(len(prompt_ids), sampling_params)
        self._ensure_loop()
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Request(list(prompt_ids), params, bool(sampling_params.get("logprobs", False)), future,
                                    request_id))
        self._event.set()
        return await future

    async def update_weights(self, named_tensors: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> int:
        """Load the trainer's full tensors (HF names) into the model; returns how many were loaded."""
        self._ensure_loop()
        async with self._model_lock:
            result = await asyncio.to_thread(self.model.load_state_dict, named_tensors, strict=False)
        if result.unexpected_keys:  # names that would never reach the sampled model
            raise ValueError(f"hf rollout: weights not in the rollout model: {result.unexpected_keys[:8]}")
        if global_steps is not None:
            self.global_steps = global_steps
        return len(named_tensors)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Answer every queued (not yet started) request as aborted; a running batch completes."""
        aborted, self._queue = self._queue, []
        for request in aborted:
            if not request.future.done():
                request.future.set_result(TokenOutput(token_ids=[], stop_reason="aborted", extra_fields={}))
        return {"aborted_count": len(aborted), "request_ids": [r.request_id for r in aborted]}


async def _nothing(self, *args, **kwargs) -> None:
    return None


# what verl's RolloutReplica asks every server: nothing to page out, cache or profile on a CPU (the KV cache lives
# for one batch)
for _name in ("wake_up", "sleep", "clear_kv_cache", "release_kv_cache", "resume_kv_cache", "resume_generation",
              "start_profile", "stop_profile"):
    setattr(HFRolloutServer, _name, _nothing)


class HFReplica(RolloutReplica):
    """One `HFRolloutServer` per replica, placed on the node of the replica's first worker."""

    async def launch_servers(self):
        name = server_actor_name(self.replica_rank, self.is_reward_model, self.is_teacher_model, self.name_suffix)
        options: dict[str, Any] = {"name": name, "max_concurrency": self.max_concurrency, "num_cpus": 0}
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
            options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False)
        server = ray.remote(HFRolloutServer).options(**options).remote(
            config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        await server.ping.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{ROLLOUT_NAME}://{name}"  # no HTTP endpoint: token-in/token-out only

    def rollout_worker_use_gpu(self) -> bool:
        return False


class HFServerAdapter(BaseRollout):
    """The trainer worker's handle on its replica's `HFRolloutServer` (verl's `BaseRollout`)."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))  # torch.distributed's, set by verl's worker
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self._has_server = rank % world == 0

    resume = release = _nothing

    @torch.no_grad()
    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None],
                             global_steps: Optional[int] = None, wire_format: str = "named_tensors",
                             peft_config: Optional[dict] = None, **kwargs):
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf rollout takes full tensors only, not wire_format={wire_format!r}")
        if peft_config is not None:
            raise NotImplementedError("the hf rollout does not load LoRA adapters; set model.lora.merge=True")
        # Every rank iterates: producing a full tensor from FSDP shards is collective.
        named = {name: tensor.detach().to("cpu").clone() for name, tensor in weights}
        if self._has_server:
            server = ray.get_actor(server_actor_name(self.replica_rank))
            await server.update_weights.remote(named, global_steps)
