"""The preflight's GPU-memory checks: the rollout's start and each learner pass, per GPU, from `estimates` (the
formulas and the verl source lines they follow: docs/preflight.md)."""

from __future__ import annotations

import math

from verl_ebpo.tools.preflight import estimates as est
from verl_ebpo.tools.preflight.context import A, F, R, Context, Report, _gb, _sel, num

STATUS = {"ok": "ok", "tight": "warn", "fail": "FAIL"}


def _tokens(cfg, prefix: str, dyn_key: str, max_key: str, mbs_key: str, seq: int):
    """Tokens of one micro-batch on one GPU, and the key that sets it."""
    if _sel(cfg, f"{prefix}.{dyn_key}"):
        return num(cfg, f"{prefix}.{max_key}", int, 1), f"{prefix}.{max_key}"
    mbs = num(cfg, f"{prefix}.{mbs_key}", int, 1, none_ok=True)
    return (mbs * seq if mbs else None), f"{prefix}.{mbs_key}"


def _parallel(cfg, backend: str) -> tuple[int, int, int]:
    if backend == "fsdp":
        return 1, 1, 1
    return tuple(num(cfg, f"{A}.megatron.{k}_parallel_size", int, 1, none_ok=True) or 1
                 for k in ("tensor_model", "pipeline_model", "context"))


def _util_that_fits(gpu: float, resident: int) -> float:
    """The largest gpu_memory_utilization (a multiple of 0.05) that leaves the margin: (1 - u) x GPU - resident >= it."""
    return math.floor((1 - (resident + est.RUNTIME_OVERHEAD) / gpu) * 20) / 20


def check_memory(ctx: Context, report: Report) -> None:
    from verl_ebpo.tools.preflight.plan import _backend

    cfg = ctx.cfg
    if ctx.params is None:
        report.add("memory", "warn", "GPU memory not estimated (no model config.json): the rollout and the learner "
                   "passes are not checked")
        return
    backend = _backend(cfg)
    world = num(cfg, "trainer.nnodes", int, 1) * num(cfg, "trainer.n_gpus_per_node", int, 1)
    tp, pp, cp = _parallel(cfg, backend)
    engine = "fsdp_config" if backend == "fsdp" else "megatron"
    offload = (bool(_sel(cfg, f"{A}.{engine}.param_offload")), bool(_sel(cfg, f"{A}.{engine}.optimizer_offload")))
    model_bytes = est.dtype_bytes(_sel(cfg, f"{A}.fsdp_config.model_dtype"), 4)
    shards = est.learner_shards(ctx.params, backend, world, tp=tp, pp=pp, cp=cp, model_bytes=model_bytes,
                                param_offload=offload[0], optimizer_offload=offload[1])
    # FSDP2 gives a forward-only model CPUOffloadPolicy whatever ref.fsdp_config.param_offload says
    # (workers/engine/fsdp/transformer_impl.py:462): the reference holds no GPU memory between passes
    ref_shard = 0
    if ctx.uses_ref and backend != "fsdp" and not _sel(cfg, f"{F}.megatron.param_offload"):
        ref_shard = est.learner_shards(ctx.params, backend, world, tp=tp, pp=pp, cp=cp).params
    resident = shards.params + shards.optimizer + ref_shard
    gpu, label = ctx.gpu_bytes, ctx.gpu_source
    util = num(cfg, f"{R}.gpu_memory_utilization", float, 0, 1)
    left = est.rollout_headroom(util, gpu, resident)
    figure = (f"vLLM starts when gpu_memory_utilization {util:g} x {label} is free: (1 - {util:g}) x GPU - resident "
              f"learner state {_gb(resident)} = {_gb(left + est.RUNTIME_OVERHEAD)} left for CUDA contexts, NCCL and "
              f"graphs (margin {_gb(est.RUNTIME_OVERHEAD)})")
    if left < 0:
        fits = _util_that_fits(gpu, resident)
        fix = (f"set actor_rollout_ref.rollout.gpu_memory_utilization={fits:g} (recipes: GPU_MEM_UTIL={fits:g})"
               if fits >= 0.3 else "set OFFLOAD=True (actor param/optimizer offload) or use more GPUs")
        report.add("memory: rollout", "FAIL", f"{figure}: vLLM would refuse to start; {fix}")
    else:
        report.add("memory: rollout", "ok", figure)

    cm = ctx.model_cfg
    vocab, hidden, layers = int(cm["vocab_size"]), int(cm["hidden_size"]), int(cm["num_hidden_layers"])
    seq = num(cfg, "data.max_prompt_length", int, 1) + num(cfg, "data.max_response_length", int, 1)
    chunk = num(cfg, f"{A}.entropy_from_logits_chunk_size", int, 1, none_ok=True) or 2048
    chunked = bool(_sel(cfg, f"{A}.entropy_from_logits_with_chunking"))
    ckpt = _sel(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing") is not False
    passes = []
    t, key = _tokens(cfg, R, "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu",
                     "log_prob_micro_batch_size_per_gpu", seq)
    if t:
        passes.append(("old log-prob", t, True, False, resident, key))
    if ctx.uses_ref:
        t, key = _tokens(cfg, F, "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu",
                         "log_prob_micro_batch_size_per_gpu", seq)
        if t:
            passes.append(("ref log-prob", t, False, False, resident, key))
    t, key = _tokens(cfg, A, "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "ppo_micro_batch_size_per_gpu", seq)
    if t:
        ent = bool(_sel(cfg, f"{A}.calculate_entropy")) or (num(cfg, f"{A}.entropy_coeff", float, none_ok=True) or 0) != 0
        passes.append(("update", t, ent, True, resident + shards.grads, key))
    for name, tokens, entropy, backward, states, key in passes:
        # in-place logits gradient (flash-attn's cross entropy, inplace_backward=True) unless entropy is computed
        # (workers/engine/fsdp/transformer_impl.py:1425-1427)
        copies = 2 if backward and entropy else 1
        logits = copies * est.logits_bytes(tokens, vocab, tp)
        extra = est.entropy_bytes(tokens, vocab, tp, chunked, chunk) if entropy else 0
        if backward and ckpt:
            acts = est.checkpointed_inputs_bytes(tokens, hidden, layers // pp) // tp
        elif backward:
            acts = layers // pp * est.layer_working_bytes(tokens, cm, backward=False) // tp
        else:
            acts = 0
        layer = est.layer_working_bytes(tokens, cm, backward=backward) // tp
        head = est.unsharded_head_bytes(vocab, hidden, backward) // tp
        total = logits + extra + acts + layer + head + states + est.RUNTIME_OVERHEAD
        v = est.verdict(total, gpu)
        parts = [f"logits{' + gradient' if copies == 2 else ' (gradient in place)' if backward else ''} {_gb(logits)}"]
        if entropy:
            parts.append(f"entropy ({'chunked' if chunked else 'not chunked'}) {_gb(extra)}")
        if backward:
            parts.append(f"{'checkpointed layer inputs' if ckpt else 'all layers'} {_gb(acts)}")
        parts += [f"one layer {_gb(layer)}", f"unsharded lm_head {_gb(head)}", f"states {_gb(states)}",
                  f"runtime {_gb(est.RUNTIME_OVERHEAD)}"]
        figure = (f"{tokens:,} tokens/GPU x {vocab:,} vocabulary{f' / TP {tp}' if tp > 1 else ''}: "
                  f"{' + '.join(parts)} = {_gb(total)} of {label}")
        if v == "fail":
            figure += f": lower {key}" + ("" if not entropy or chunked else
                                          " or set actor_rollout_ref.actor.entropy_from_logits_with_chunking=True")
        report.add(f"memory: {name}", STATUS[v], figure)

