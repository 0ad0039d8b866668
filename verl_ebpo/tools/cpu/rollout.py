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
updates are refused with an error. Environment: `VERL_EBPO_HF_BATCH_WINDOW_S` (default 0.02 s) is how
long the server gathers requests before sampling a batch; `VERL_EBPO_HF_DEBUG=1` prints each batch's
size and timing to the server's Ray log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Generator, Optional

import ray
import torch

from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from verl_ebpo.tools.cpu.sampling import SamplingParams, generate_batch, mix_seed

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

ROLLOUT_NAME = "hf"
# How long the server waits for more requests before sampling a batch (requests of one step arrive
# within a few milliseconds of each other).
BATCH_WINDOW_S = float(os.getenv("VERL_EBPO_HF_BATCH_WINDOW_S", "0.02"))
_DEBUG = os.getenv("VERL_EBPO_HF_DEBUG", "0") == "1"


def server_actor_name(
    replica_rank: int, is_reward_model: bool = False, is_teacher_model: bool = False, name_suffix: str = ""
) -> str:
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
    submitted: float = field(default_factory=time.monotonic)


class HFRolloutServer:
    """A replica's CPU inference server (a Ray actor; see `HFReplica.launch_servers`)."""

    def __init__(self, config, model_config, replica_rank: int = 0, max_batch_size: Optional[int] = None):
        from transformers import AutoModelForCausalLM, GenerationConfig

        self.config: RolloutConfig = omega_conf_to_dataclass(config)
        self.model_config: HFModelConfig = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        path = self.model_config.local_path
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
        self.model.eval()
        hf_config = self.model.config

        stop_ids: set[int] = set()
        try:
            generation_config = GenerationConfig.from_pretrained(path)
            eos = generation_config.eos_token_id
        except OSError:
            eos = None
        for source in (eos, hf_config.eos_token_id, getattr(self.model_config.tokenizer, "eos_token_id", None)):
            if source is None:
                continue
            stop_ids.update([source] if isinstance(source, int) else list(source))
        if not stop_ids:
            raise ValueError(f"model at {path} declares no eos_token_id: the rollout could never stop early")
        self.stop_token_ids = sorted(stop_ids)
        pad = hf_config.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.stop_token_ids[0])

        max_positions = int(getattr(hf_config, "max_position_embeddings", 0) or 0)
        max_model_len = self.config.max_model_len or (self.config.prompt_length + self.config.response_length)
        self.max_model_len = min(max_model_len, max_positions) if max_positions else max_model_len
        self.max_batch_size = int(max_batch_size or self.config.max_num_seqs)

        self.generator = torch.Generator().manual_seed(int(self.config.seed) + int(replica_rank))
        self.global_steps = None
        self._queue: list[_Request] = []
        self._event: Optional[asyncio.Event] = None
        self._loop_task: Optional[asyncio.Task] = None
        self._model_lock: Optional[asyncio.Lock] = None
        self.stats = {"requests": 0, "batches": 0, "weight_updates": 0, "seeded_requests": 0}

    # -- life cycle ----------------------------------------------------------------------------
    async def ping(self) -> dict:
        return {"replica_rank": self.replica_rank, "stop_token_ids": self.stop_token_ids}

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._event = asyncio.Event()
            self._model_lock = asyncio.Lock()
            self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())

    async def _batch_loop(self) -> None:
        while True:
            await self._event.wait()
            self._event.clear()
            await asyncio.sleep(BATCH_WINDOW_S)
            while self._queue:
                batch = self._queue[: self.max_batch_size]
                del self._queue[: self.max_batch_size]
                try:
                    async with self._model_lock:
                        results = await asyncio.to_thread(self._sample, batch)
                except Exception as exc:  # a failed batch fails its requests, not the server
                    logger.exception("hf rollout: batch of %d failed", len(batch))
                    for request in batch:
                        if not request.future.done():
                            request.future.set_exception(exc)
                    continue
                for request, result in zip(batch, results, strict=True):
                    if not request.future.done():
                        request.future.set_result(result)

    def _sample(self, batch: list[_Request]) -> list[TokenOutput]:
        t0 = time.monotonic()
        outputs = generate_batch(
            self.model,
            [r.prompt_ids for r in batch],
            [r.params for r in batch],
            stop_token_ids=self.stop_token_ids,
            pad_token_id=self.pad_token_id,
            generator=self.generator,
        )
        self.stats["batches"] += 1
        self.stats["requests"] += len(batch)
        self.stats["seeded_requests"] += sum(r.params.seed is not None for r in batch)
        if _DEBUG:
            print(f"[hf rollout] batch={len(batch)} wait={t0 - min(r.submitted for r in batch):.3f}s "
                  f"sample={time.monotonic() - t0:.3f}s", flush=True)
        return [
            TokenOutput(
                token_ids=out.token_ids,
                log_probs=out.log_probs if r.want_log_probs else None,
                stop_reason="completed",
                num_preempted=0,
                extra_fields={"global_steps": self.global_steps},
            )
            for r, out in zip(batch, outputs, strict=True)
        ]

    # -- verl's token-in/token-out protocol ---------------------------------------------------------
    def sampling_params_for(self, prompt_len: int, sampling_params: dict[str, Any]) -> SamplingParams:
        """vLLM server's rules for max_tokens, applied to this server's context length."""
        sampling_params = dict(sampling_params)
        max_possible = self.max_model_len - prompt_len
        if max_possible < 1:
            raise ValueError(
                f"Prompt length ({prompt_len}) leaves no room to generate within max_model_len "
                f"({self.max_model_len})"
            )
        if "max_tokens" in sampling_params:
            max_tokens = sampling_params.pop("max_tokens")
        elif "max_new_tokens" in sampling_params:
            max_tokens = sampling_params.pop("max_new_tokens")
        else:
            max_tokens = min(
                self.config.response_length, self.config.prompt_length + self.config.response_length - prompt_len
            )
        max_tokens = max(1, min(int(max_tokens), max_possible))
        top_k = sampling_params.get("top_k", -1)
        seed = sampling_params.get("seed")  # vLLM's per-request seed (the `hf_seeded` agent loop sets it)
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_k=int(-1 if top_k is None else top_k),
            top_p=float(sampling_params.get("top_p", 1.0)),
            seed=None if seed is None else mix_seed(int(self.config.seed), int(seed)),
        )

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str = "",
        image_data: Optional[list[Any]] = None,
        video_data: Optional[list[Any]] = None,
        audio_data: Optional[list[Any]] = None,
        mm_processor_kwargs: Optional[dict[str, Any]] = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> TokenOutput:
        if image_data or video_data or audio_data:
            raise NotImplementedError("the CPU hf rollout serves text-only models")
        repetition_penalty = float(sampling_params.get("repetition_penalty", 1.0) or 1.0)
        if repetition_penalty != 1.0:
            raise NotImplementedError(f"repetition_penalty={repetition_penalty} is not supported by the hf rollout")
        prompt_ids = [int(t) for t in prompt_ids]
        params = self.sampling_params_for(len(prompt_ids), sampling_params)
        self._ensure_loop()
        future = asyncio.get_running_loop().create_future()
        self._queue.append(
            _Request(prompt_ids, params, bool(sampling_params.get("logprobs", False)), future, request_id)
        )
        self._event.set()
        return await future

    # -- weights ------------------------------------------------------------------------------
    async def update_weights(self, named_tensors: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> int:
        """Load the trainer's full tensors (HF names) into the model; returns how many were loaded."""
        self._ensure_loop()
        async with self._model_lock:
            loaded = await asyncio.to_thread(self._load, named_tensors)
        if global_steps is not None:
            self.global_steps = global_steps
        self.stats["weight_updates"] += 1
        return loaded

    def _load(self, named_tensors: dict[str, torch.Tensor]) -> int:
        own = self.model.state_dict(keep_vars=True)
        unexpected = sorted(set(named_tensors) - set(own))
        if unexpected:
            raise ValueError(f"hf rollout: weights not in the rollout model: {unexpected[:8]}")
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        missing = sorted(set(own) - set(named_tensors) - tied)
        if missing:
            raise ValueError(f"hf rollout: weight update lacks {missing[:8]}")
        with torch.no_grad():
            for name, tensor in named_tensors.items():
                target = own[name]
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(
                        f"hf rollout: {name} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}"
                    )
                target.data.copy_(tensor.to(dtype=target.dtype))
        return len(named_tensors)

    async def get_weights(self) -> dict[str, torch.Tensor]:
        """The server's current weights (for tests and debugging)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    async def set_global_steps(self, global_steps: int):
        self.global_steps = global_steps

    async def get_stats(self) -> dict:
        return dict(self.stats)

    # -- memory management and request control: nothing to do on a CPU ----------------------------
    async def wake_up(self, tags: Optional[list[str]] = None):
        return None

    async def sleep(self):
        return None

    async def clear_kv_cache(self):
        return None  # the KV cache lives only for the duration of one batch

    async def release_kv_cache(self):
        return None

    async def resume_kv_cache(self):
        return None

    async def wait_for_requests_to_drain(self):
        while self._queue:
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Answer every queued (not yet started) request as aborted; a running batch completes."""
        aborted = list(self._queue)
        self._queue.clear()
        for request in aborted:
            if not request.future.done():
                request.future.set_result(
                    TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted", extra_fields={})
                )
        return {"aborted_count": len(aborted), "request_ids": [r.request_id for r in aborted]}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        for request in list(self._queue):
            if request.request_id == request_id:
                self._queue.remove(request)
                request.future.set_result(TokenOutput(token_ids=[], stop_reason="aborted", extra_fields={}))
                return {"aborted": True, "request_id": request_id}
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self):
        return None

    async def start_profile(self, **kwargs):
        return None

    async def stop_profile(self):
        return None


class HFReplica(RolloutReplica):
    """One `HFRolloutServer` per replica, placed on the node of the replica's first worker."""

    async def launch_servers(self):
        name = server_actor_name(self.replica_rank, self.is_reward_model, self.is_teacher_model, self.name_suffix)
        options: dict[str, Any] = {"name": name, "max_concurrency": self.max_concurrency, "num_cpus": 0}
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
            options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False
            )
        server = (
            ray.remote(HFRolloutServer)
            .options(**options)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
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
        rank = int(os.environ.get("RANK", "0"))
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self._has_server = rank % world == 0
        self.server_handle = None

    def _server(self):
        if self.server_handle is None:
            self.server_handle = ray.get_actor(server_actor_name(self.replica_rank))
        return self.server_handle

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        global_steps: Optional[int] = None,
        wire_format: str = "named_tensors",
        peft_config: Optional[dict] = None,
        **kwargs,
    ):
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf rollout takes full tensors only, not wire_format={wire_format!r}")
        if peft_config is not None:
            raise NotImplementedError("the hf rollout does not load LoRA adapters; set model.lora.merge=True")
        # Every rank iterates: producing a full tensor from FSDP shards is collective.
        named = {name: tensor.detach().to("cpu").clone() for name, tensor in weights}
        if self._has_server:
            await self._server().update_weights.remote(named, global_steps)

    def generate_sequences(self, prompts):
        raise NotImplementedError("the hf rollout is served through HFReplica (server mode) only")
