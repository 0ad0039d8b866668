#!/usr/bin/env python3
"""Time and memory of the update phase's core on one GPU: a random-weight model with the published
Qwen3-8B / Qwen3-14B shape, bf16, gradient checkpointing, sdpa attention; forward, a plain fp32
log-softmax over the vocabulary (verl's fused/chunked log-prob kernels need less), backward; on the
per-GPU token budget of the recipes (`ACTOR_MAX_TOKENS_PER_GPU`: 24576 for 8B, 12288 for 14B with
sequence parallelism 2). No download: only the shapes are used.

    python recipes/tools/measure_update.py --model qwen3_8b --out update_phase.json

Prints and writes: parameters, weights/grads/peak GB, activations+logits GB (peak - weights - grads),
median seconds per forward+backward, tokens/s. `--model tiny --device cpu` is a seconds-long smoke run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

SHAPES = {
    # name: (config kwargs, (batch, sequence length))
    "qwen3_8b": (dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, vocab_size=151936), (3, 8192)),
    "qwen3_14b": (dict(hidden_size=5120, intermediate_size=17408, num_hidden_layers=40, num_attention_heads=40,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936), (3, 4096)),
    "tiny": (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=1000), (2, 32)),
}


def measure(name: str, device: str, iters: int = 4, shape: tuple[int, int] | None = None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    kw, default_shape = SHAPES[name]
    b, s = shape or default_shape
    cfg = Qwen3Config(max_position_embeddings=40960, tie_word_embeddings=False, rms_norm_eps=1e-6, **kw)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    model.train()
    params = sum(p.numel() for p in model.parameters())
    weights = torch.cuda.memory_allocated() if cuda else params * 2
    ids = torch.randint(0, kw["vocab_size"], (b, s), device=device)
    times, grads = [], 0
    for it in range(iters):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(input_ids=ids).logits
        logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        (-logp.mean()).backward()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del logits, logp
        if it == 0:
            grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
        model.zero_grad(set_to_none=False)
    steady = sorted(times[1:] or times)
    median = steady[len(steady) // 2]
    out = {"model": name, "device": torch.cuda.get_device_name(0) if cuda else device, "torch": torch.__version__,
           "params_B": round(params / 1e9, 3), "batch": b, "seq_len": s, "tokens": b * s,
           "fwd_bwd_s_median": round(median, 4), "tokens_per_s": round(b * s / median),
           "weights_GB": round(weights / 1e9, 2), "grads_GB": round(grads / 1e9, 2)}
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        out.update(peak_GB=round(peak / 1e9, 2), activations_logits_GB=round((peak - weights - grads) / 1e9, 2))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(SHAPES), required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    result = measure(args.model, args.device, args.iters)
    print(json.dumps(result))
    if args.out:
        from verl_ebpo.tools.files import atomic_write_text

        atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
