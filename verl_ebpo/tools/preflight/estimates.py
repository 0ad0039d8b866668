"""The preflight's figures as pure functions (no verl, no torch): parameters from a model's config.json,
checkpoint bytes and plan, GPU memory per pass. Every formula here is an estimate; docs/preflight.md states them.

Units: bytes (ints), GB = 1e9 bytes.
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Mapping

GB = 1e9
DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4, "float": 4}
TIGHT = 0.9  # a pass above this share of the GPU's memory is a warning
# CUDA contexts, NCCL buffers and vLLM's CUDA-graph pool: held on every GPU all run, not freed by vLLM's sleep mode
# (2-4 GB measured by verl users; the upper figure is counted in every pass and is the rollout check's margin)
RUNTIME_OVERHEAD = 4 * GB


class EstimateError(ValueError):
    """An estimate that cannot be made (a config.json key missing or not a positive integer)."""


def _pos_int(cfg: Mapping, key: str, default=None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EstimateError(f"config.json: {key} must be a positive integer, got {value!r}")
    return value


def dtype_bytes(name, default: int = 2) -> int:
    """Bytes of one element of dtype `name` ("bfloat16", "fp32", ...); `default` when `name` is None."""
    if name is None:
        return default
    key = str(name).removeprefix("torch.").lower()
    if key not in DTYPE_BYTES:
        raise EstimateError(f"unknown dtype {name!r} (one of {', '.join(sorted(DTYPE_BYTES))})")
    return DTYPE_BYTES[key]


def param_count(cfg: Mapping) -> int:
    """Parameters of a dense decoder (Llama / Qwen2 / Qwen3 layout) from its HF config.json.

    Per layer: q and o projections H x (heads x head_dim) each, k and v H x (kv_heads x head_dim) each (+ their
    biases when `attention_bias`), the gated MLP 3 x H x I, two RMSNorms 2H (+ Qwen3's q/k norms 2 x head_dim);
    plus the embedding V x H, the output head V x H unless `tie_word_embeddings`, the final norm H.
    Qwen3-8B (36, 4096, 12288, 151936, 32/8 heads, head_dim 128, untied): 8,190,735,360."""
    h, layers, inter, vocab, heads = (_pos_int(cfg, k) for k in ("hidden_size", "num_hidden_layers",
                                                                "intermediate_size", "vocab_size", "num_attention_heads"))
    kv, head_dim = _pos_int(cfg, "num_key_value_heads", heads), _pos_int(cfg, "head_dim", cfg.get("head_dim") or h // heads)
    if cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts"):
        raise EstimateError("config.json: a mixture-of-experts model (this estimate covers dense models)")
    attn = 2 * h * heads * head_dim + 2 * h * kv * head_dim
    if cfg.get("attention_bias"):
        attn += heads * head_dim + 2 * kv * head_dim
    norms = 2 * h + (2 * head_dim if str(cfg.get("model_type", "")).startswith("qwen3") else 0)
    per_layer = attn + 3 * h * inter + norms
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return layers * per_layer + embed + h


# ---- checkpoints ---------------------------------------------------------------------------------------------


def checkpoint_bytes(params: int, backend: str, save_contents, model_bytes: int = 4, hf_bytes: int = 2) -> dict:
    """Bytes of one saved checkpoint by content (`checkpoint.save_contents`), for the whole model (all ranks).

    fsdp: `model` = the sharded parameters in the actor's `fsdp_config.model_dtype` (fp32 by default: 4 B a
    parameter), `optimizer` = AdamW's two fp32 moments (8 B). megatron: `model` = bf16 weights (2 B), `optimizer` =
    fp32 master weights and two moments (12 B). `hf_model` = a HuggingFace copy in the model's dtype (`hf_bytes`).
    `extra` (RNG, scheduler, data loader) is counted as 0. An 8B model saved by FSDP with model+optimizer: ~98 GB."""
    per = {"model": model_bytes if backend == "fsdp" else 2, "optimizer": 8 if backend == "fsdp" else 12,
           "hf_model": hf_bytes, "extra": 0}
    unknown = [item for item in save_contents if item not in per]
    if unknown:
        raise EstimateError(f"checkpoint.save_contents: unknown item {unknown[0]!r} (model, optimizer, extra, hf_model)")
    return {item: params * per[item] for item in save_contents}


CheckpointPlan = namedtuple("CheckpointPlan", "steps_per_epoch total_steps saves kept peak")


def checkpoint_plan(rows: int, train_batch_size: int, total_epochs: int, total_training_steps,
                    save_freq: int, keep) -> CheckpointPlan:
    """verl 0.9.1's schedule: steps per epoch = rows // train_batch_size (the V1 trainer); total = that x epochs
    unless `total_training_steps` is set (it then replaces it); a save every `save_freq` steps and at the last
    step (none when save_freq <= 0); `max_actor_ckpt_to_keep` (None or <= 0: all) bounds how many stay.
    Example: 17,398 rows, batch 512, 20 epochs, save every 10, keep all -> 33 steps/epoch, 660 steps, 66 kept."""
    spe = rows // train_batch_size
    total = spe * total_epochs if total_training_steps is None else int(total_training_steps)
    saves = -(-total // save_freq) if save_freq and save_freq > 0 and total > 0 else 0
    kept = saves if keep is None or keep <= 0 else min(saves, keep)
    # checkpoint_manager.py ensure_checkpoint_capacity: keep >= 2 removes down to keep - 1 before a save; keep = 1
    # removes nothing before, so the old and the new checkpoint both exist until register_checkpoint
    peak = min(saves, keep + 1) if keep == 1 else kept
    return CheckpointPlan(spe, total, saves, kept, peak)


# ---- GPU memory ------------------------------------------------------------------------------------------------


def logits_bytes(tokens: int, vocab: int, tp: int = 1, nbytes: int = 2) -> int:
    """The logits of one micro-batch on one GPU: tokens x vocabulary (divided over tensor parallelism) x bytes.
    49,152 tokens x 151,936 x 2 B (bf16) = 14.9 GB."""
    return tokens * math.ceil(vocab / tp) * nbytes


def entropy_bytes(tokens: int, vocab: int, tp: int = 1, chunked: bool = False, chunk: int = 2048,
                  nbytes: int = 2) -> int:
    """Extra memory of verl's entropy over the logits. Not chunked (`entropy_from_logits`): the softmax and its
    product with the logits, two more buffers the size of the logits. Chunked (`entropy_from_logits_with_chunking`):
    three fp32 buffers of `chunk` rows (the float copy, softmax, product)."""
    return 3 * min(chunk, tokens) * math.ceil(vocab / tp) * 4 if chunked else 2 * logits_bytes(tokens, vocab, tp, nbytes)


Shards = namedtuple("Shards", "params grads optimizer")  # resident bytes per GPU of the learner's state


def learner_shards(params: int, backend: str, world: int, *, tp: int = 1, pp: int = 1, cp: int = 1,
                   model_bytes: int = 4, param_offload: bool = False, optimizer_offload: bool = False) -> Shards:
    """fsdp: parameters (model_bytes each), fp32 gradients and AdamW's two fp32 moments, all sharded over every GPU
    of the run (16 B a parameter / world with fp32 parameters). megatron: bf16 parameters and fp32 gradients split
    over tp x pp; fp32 master weights + two moments (12 B) also over the data-parallel ranks (distributed optimizer,
    dp = world / (tp x pp x cp)). Offloaded parts count 0."""
    mp, dp = (world, 1) if backend == "fsdp" else (tp * pp, max(1, world // (tp * pp * cp)))
    p, g, o = params * (model_bytes if backend == "fsdp" else 2) // mp, params * 4 // mp, \
        params * (8 if backend == "fsdp" else 12) // (mp * dp)
    return Shards(0 if param_offload else p, g, 0 if optimizer_offload else o)


def checkpointed_inputs_bytes(tokens: int, hidden: int, layers: int, nbytes: int = 2) -> int:
    """Gradient checkpointing keeps each decoder layer's input (tokens x hidden, bf16) until the backward pass:
    T x H x L x 2 B. Qwen3-8B at 24,576 tokens: 36 x 24,576 x 4,096 x 2 B = 7.2 GB."""
    return tokens * hidden * layers * nbytes


def layer_working_bytes(tokens: int, cfg: Mapping, backward: bool = True, nbytes: int = 2) -> int:
    """One decoder layer's activations while it runs (the layer recomputed in the backward pass, and their
    gradients when `backward`): per token 2 x (H + heads x hd + 2 x kv x hd) (norm outputs, q/k/v, attention
    output) + 3 x I (gate, up, their product), bf16. Qwen3-8B at 24,576 tokens with gradients: 5.6 GB."""
    h, heads = _pos_int(cfg, "hidden_size"), _pos_int(cfg, "num_attention_heads")
    kv, hd = _pos_int(cfg, "num_key_value_heads", heads), cfg.get("head_dim") or h // heads
    per_token = 2 * (h + heads * hd + 2 * kv * hd) + 3 * _pos_int(cfg, "intermediate_size")
    return tokens * per_token * nbytes * (2 if backward else 1)


def unsharded_head_bytes(vocab: int, hidden: int, backward: bool = True) -> int:
    """FSDP all-gathers a module's parameters while it runs: the lm_head (V x H) in bf16 (2 B), and in the update
    its fp32 gradient (4 B) before the reduce-scatter: V x H x 6 B (forward only: V x H x 2 B).
    Qwen3-8B: 151,936 x 4,096 x 6 B = 3.7 GB."""
    return vocab * hidden * (6 if backward else 2)


def rollout_headroom(util: float, gpu_bytes: float, resident: int, overhead: float = RUNTIME_OVERHEAD) -> float:
    """vLLM refuses to start when the free memory is below gpu_memory_utilization x total: with the learner's
    resident state on the GPU (the hybrid engine keeps it while vLLM wakes), the memory left above vLLM's share is
    (1 - util) x GPU - resident; the run starts when that is at least `overhead` (CUDA contexts, NCCL, graph pool).
    Returns that left-over headroom minus the overhead (< 0: vLLM would refuse)."""
    return (1 - util) * gpu_bytes - resident - overhead


def host_reference_bytes(params: int, world: int, gpus_per_node: int, model_bytes: int = 4) -> int:
    """The reference model's pinned CPU copy on one node: FSDP2 gives a forward-only model CPUOffloadPolicy
    (workers/engine/fsdp/transformer_impl.py:462), each rank pins its shard P x model_dtype / W, a node holds its
    GPUs' shards. Qwen3-8B, fp32, one node of 8: 32.8 GB; Qwen3-14B: 59.1 GB."""
    return params * model_bytes * gpus_per_node // world



# ---- time (an estimate: docs/preflight.md#time) -------------------------------------------------------------------

DECODE_TOKENS_PER_S = 3000.0  # vLLM's generated tokens/s a GPU for long answers (issue 37's estimate)
LEARNER_FLOPS = 4.5e14  # FLOP/s a GPU of the update: 8 x 8.19e9 FLOPs x 6,950 tokens/s measured for Qwen3-8B
# (forward, backward, recomputation) on one H200 (recipes/README.md section 9)


def step_seconds(params: int, prompts: int, n: int, prompt_len: int, response_len: int, gpus: int,
                 ref: bool = True) -> tuple[float, float]:
    """(rollout, learner) seconds of one step, prompts and answers at half their limits: the rollout generates
    prompts x n x response_len / 2 tokens at DECODE_TOKENS_PER_S a GPU; the learner runs 12 P FLOPs a token (update
    8 P with recomputation, old log-prob 2 P, reference 2 P; 10 P without a reference) at LEARNER_FLOPS a GPU.
    Qwen3-8B, 512 x 4 answers, 4,096 + 8,192 tokens, 8 GPUs: 350 s + 343 s."""
    answers = prompts * n
    rollout = answers * response_len / 2 / (DECODE_TOKENS_PER_S * gpus)
    learner = answers * (prompt_len + response_len) / 2 * (12 if ref else 10) * params / (LEARNER_FLOPS * gpus)
    return rollout, learner
