"""Batched, KV-cached token sampling with a transformers causal LM (the CPU `hf` rollout's engine).

Pure torch + transformers, no Ray, no verl: `generate_batch` takes token-id prompts and per-row
sampling parameters and returns, for each row, the sampled token ids, their log-probabilities and
why it stopped. A row's random draws come from its own counter-based stream (`row_uniforms`: splitmix64 of the
row's seed and the token position), so a row with a seed (`SamplingParams.seed`, vLLM's per-request seed) gets
the same tokens whatever else is in its batch and in whatever order the requests arrived; rows without one draw
their seed from the batch's `torch.Generator`. The log-probability of a token is `log_softmax(logits / temperature)` at that token
(the raw logits when greedy), i.e. what verl's actor computes for the same token, before top-k /
top-p filtering, so rollout and trainer log-probs agree when the weights agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class SamplingParams:
    """One request's sampling parameters (vLLM's conventions: temperature 0 is greedy, top_k <= 0 is
    off, top_p 1.0 is off)."""

    max_tokens: int
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    seed: Optional[int] = None  # this request's own random stream (any int; reduced mod 2**64)

    def __post_init__(self):  # what a user may set in verl's rollout config
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class SampleOutput:
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" (an end token was sampled, and is included) or "length"


def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) the tokens outside each row's top-k, then outside its top-p nucleus.

    Args:
        logits: (B, V) float logits (already divided by the temperature).
        top_k: (B,) int; <= 0 keeps all tokens.
        top_p: (B,) float in (0, 1]; the smallest set of most likely tokens whose probability mass
            (after top-k) reaches top_p is kept; the most likely token is always kept.
    Returns:
        (B, V) logits with the removed tokens at -inf.
    """
    vocab = logits.size(-1)
    sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logits.device).unsqueeze(0)
    k = torch.where(top_k <= 0, torch.full_like(top_k, vocab), top_k.clamp(max=vocab))
    remove = ranks >= k.unsqueeze(1)
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    remove = remove | ((mass_before >= top_p.unsqueeze(1)) & (top_p < 1.0).unsqueeze(1))
    remove[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, sorted_idx, sorted_logits)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic): a bijection that scrambles every bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def mix_seed(*parts: int) -> int:
    """One 64-bit seed from several integers (each reduced mod 2**64), order-sensitive: splitmix64 chained."""
    state = np.zeros(1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for part in parts:
            state = _splitmix64(state ^ np.uint64(int(part) & _MASK64)) + np.uint64(0x9E3779B97F4A7C15)
    return int(_splitmix64(state)[0])


def row_uniforms(seeds: np.ndarray, position: int) -> torch.Tensor:
    """A uniform draw in [0, 1) per row for the token at `position`, a pure function of (seed, position).

    Args:
        seeds: (B,) uint64, each row's seed.
        position: the index of the token being sampled (0 for the first answer token).
    Returns:
        (B,) float64 in [0, 1) (53 random bits each).
    """
    with np.errstate(over="ignore"):
        z = _splitmix64(seeds + np.uint64(position + 1) * np.uint64(0x9E3779B97F4A7C15))
    return torch.from_numpy((z >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def _choose(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    uniforms: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token and its log-prob for each row (greedy rows: temperature == 0); a sampled row takes the token
    where its uniform draw falls in the cumulative distribution of the filtered probabilities (inverse CDF).

    Shapes: logits (B, V); temperature, top_k, top_p, uniforms (B,)."""
    logits = logits.float()
    greedy = temperature <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature).unsqueeze(1)
    log_probs = torch.log_softmax(scaled, dim=-1)
    filtered = filter_logits(scaled, top_k, top_p)
    cdf = torch.cumsum(torch.softmax(filtered.double(), dim=-1), dim=-1)  # (B, V); masked tokens add 0
    # right=True: the first token whose cumulative mass exceeds u * total, which has a positive probability
    sampled = torch.searchsorted(cdf, (uniforms.to(cdf.dtype) * cdf[:, -1]).unsqueeze(1), right=True).squeeze(1)
    sampled = sampled.clamp(max=logits.size(-1) - 1)
    tokens = torch.where(greedy, scaled.argmax(dim=-1), sampled)
    return tokens, log_probs.gather(1, tokens.unsqueeze(1)).squeeze(1)


@torch.no_grad()
def generate_batch(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    params: Sequence[SamplingParams],
    stop_token_ids: Sequence[int],
    pad_token_id: int = 0,
    generator: Optional[torch.Generator] = None,
) -> list[SampleOutput]:
    """Sample a continuation for each prompt, all rows in one left-padded batch with a KV cache.

    Rows stop at their own `max_tokens` or when they sample a token in `stop_token_ids` (that token
    is returned, as vLLM does); the batch stops when every row has. A row with `params.seed` draws from its own
    stream (the same tokens in any batch, given the same logits); the others take a seed from `generator`.
    """
    device = next(model.parameters()).device
    rows = [torch.as_tensor(list(p), dtype=torch.long, device=device) for p in prompts]
    input_ids = pad_sequence(rows, batch_first=True, padding_value=pad_token_id, padding_side="left")
    attention_mask = pad_sequence([torch.ones_like(r) for r in rows], batch_first=True, padding_side="left")
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
    top_k = torch.tensor([p.top_k for p in params], dtype=torch.long, device=device)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
    limits = torch.tensor([p.max_tokens for p in params], device=device)
    drawn = torch.randint(0, 2**62, (len(rows),), generator=generator, dtype=torch.long).numpy().astype(np.uint64)
    seeds = np.array([drawn[i] if p.seed is None else np.uint64(int(p.seed) & _MASK64) for i, p in enumerate(params)],
                     dtype=np.uint64)
    stop = torch.tensor(sorted(set(stop_token_ids)), dtype=torch.long, device=device)

    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True)
    last_pos = position_ids[:, -1]
    lengths = torch.zeros_like(limits)  # tokens each row has kept so far
    stopped = torch.zeros_like(limits, dtype=torch.bool)
    tokens_seen, log_probs_seen = [], []
    for step in range(int(limits.max())):
        tokens, token_log_probs = _choose(out.logits[:, -1, :], temperature, top_k, top_p, row_uniforms(seeds, step))
        tokens_seen.append(tokens)
        log_probs_seen.append(token_log_probs)
        active = ~stopped & (lengths < limits)
        lengths += active
        stopped |= active & torch.isin(tokens, stop)
        if not (~stopped & (lengths < limits)).any():
            break
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=1)
        last_pos = last_pos + 1
        out = model(input_ids=tokens.unsqueeze(1), attention_mask=attention_mask, position_ids=last_pos.unsqueeze(1),
                    past_key_values=out.past_key_values, use_cache=True)
    token_ids, log_probs = torch.stack(tokens_seen, 1).tolist(), torch.stack(log_probs_seen, 1).tolist()
    return [SampleOutput(t[:n], lp[:n], "stop" if s else "length")
            for t, lp, n, s in zip(token_ids, log_probs, lengths.tolist(), stopped.tolist())]
