"""The CPU rollout's sampler (verl_ebpo.tools.cpu.sampling): KV-cached batched generation and its log-probs."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ebpo.tools.tiny import assets
from verl_ebpo.tools.cpu.sampling import SamplingParams, filter_logits, generate_batch


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = assets.build_model(tmp_path_factory.mktemp("tiny") / "model", seed=3)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    return model, AutoTokenizer.from_pretrained(path)


def _prompt(tokenizer, text):
    out = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True)
    return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)


def _teacher_forced_log_probs(model, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    scale = temperature if temperature > 0 else 1.0
    lp = torch.log_softmax(logits / scale, dim=-1)
    return [lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens)]


def test_filter_logits_known_answer():
    # probabilities 0.5, 0.25, 0.125, 0.125 (logits = log p)
    logits = torch.log(torch.tensor([[0.125, 0.5, 0.125, 0.25]] * 4))
    top_k = torch.tensor([2, -1, -1, 0])
    top_p = torch.tensor([1.0, 0.7, 0.75, 0.5])
    out = filter_logits(logits, top_k, top_p)
    kept = torch.isfinite(out).tolist()
    assert kept[0] == [False, True, False, True]  # top-2
    assert kept[1] == [False, True, False, True]  # 0.5 < 0.7: the 0.25 token is needed
    assert kept[2] == [False, True, False, True]  # 0.5 + 0.25 reaches 0.75 exactly: stop there
    assert kept[3] == [False, True, False, False]  # 0.5 reaches 0.5
    assert torch.equal(out[0][torch.isfinite(out[0])], logits[0][torch.isfinite(out[0])])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=12),
    st.integers(-1, 14),
    st.floats(0.05, 1.0),
)
def test_filter_logits_keeps_the_smallest_nucleus(values, k, p):
    logits = torch.tensor([values], dtype=torch.float64)
    out = filter_logits(logits, torch.tensor([k]), torch.tensor([p], dtype=torch.float64))[0]
    kept = torch.isfinite(out)
    probs = torch.softmax(logits[0], -1)
    order = torch.argsort(logits[0], descending=True, stable=True)
    n_k = len(values) if k <= 0 else min(k, len(values))
    assert int(kept.sum()) >= 1
    assert int(kept.sum()) <= n_k
    assert bool(kept[logits[0] == logits[0].max()].any())  # the most likely token always stays
    # whatever is kept is at least as likely as whatever is dropped
    if (~kept).any():
        assert probs[kept].min() >= probs[~kept].max() - 1e-12
    # nucleus: mass of the kept set (renormalised over top-k) reaches p, and dropping its least likely
    # member would fall short of p (unless top-k alone limits it)
    top = probs[order[:n_k]] / probs[order[:n_k]].sum()
    n = int(kept.sum())
    if p < 1.0 and n < n_k:
        assert float(top[:n].sum()) >= p - 1e-9
        assert float(top[: n - 1].sum()) < p + 1e-9


def test_generated_log_probs_match_a_full_forward(tiny):
    model, tokenizer = tiny
    prompts = [_prompt(tokenizer, "3+1="), _prompt(tokenizer, "a much longer prompt, 12+30="), _prompt(tokenizer, "x")]
    params = [SamplingParams(8, 1.0), SamplingParams(6, 0.7, top_k=5), SamplingParams(8, 0.0)]
    outs = generate_batch(model, prompts, params, [tokenizer.eos_token_id], tokenizer.pad_token_id,
                          torch.Generator().manual_seed(0))
    assert [len(o.token_ids) for o in outs] == [len(o.log_probs) for o in outs]
    for prompt, p, out in zip(prompts, params, outs):
        expected = _teacher_forced_log_probs(model, prompt, out.token_ids, p.temperature)
        assert max(abs(a - b) for a, b in zip(expected, out.log_probs)) < 1e-4
        assert len(out.token_ids) <= p.max_tokens


def test_greedy_rows_pick_the_argmax_and_top_k_1_is_greedy(tiny):
    model, tokenizer = tiny
    prompt = _prompt(tokenizer, "7+1=")
    greedy, topk1 = generate_batch(
        model, [prompt, prompt], [SamplingParams(6, 0.0), SamplingParams(6, 1.3, top_k=1)],
        [tokenizer.eos_token_id], tokenizer.pad_token_id, torch.Generator().manual_seed(1),
    )
    assert greedy.token_ids == topk1.token_ids
    seq = list(prompt)
    for token in greedy.token_ids:
        with torch.no_grad():
            nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
        assert token == nxt
        seq.append(token)


def test_stop_tokens_end_a_row_and_are_returned(tiny):
    model, tokenizer = tiny
    prompt = _prompt(tokenizer, "5+1=")
    free = generate_batch(model, [prompt], [SamplingParams(5, 0.0)], [], 0, None)[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 5
    stop_at = free.token_ids[2]
    first = free.token_ids.index(stop_at)
    stopped = generate_batch(model, [prompt], [SamplingParams(5, 0.0)], [stop_at], 0, None)[0]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[: first + 1]


def test_same_seed_same_samples_and_rows_are_independent_of_padding(tiny):
    model, tokenizer = tiny
    short, long = _prompt(tokenizer, "1"), _prompt(tokenizer, "a longer prompt here: 4+1=")
    run = lambda: generate_batch(  # noqa: E731
        model, [short, long], [SamplingParams(6, 1.0)] * 2, [tokenizer.eos_token_id], 0, torch.Generator().manual_seed(7)
    )
    a, b = run(), run()
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    # greedy continuation of the short prompt is the same alone and left-padded next to a long one
    alone = generate_batch(model, [short], [SamplingParams(6, 0.0)], [], 0, None)[0]
    padded = generate_batch(model, [long, short], [SamplingParams(6, 0.0)] * 2, [], 0, None)[1]
    assert alone.token_ids == padded.token_ids
    assert all(math.isclose(x, y, abs_tol=1e-4) for x, y in zip(alone.log_probs, padded.log_probs))


def test_sampling_follows_the_model_distribution(tiny):
    model, tokenizer = tiny
    prompt = _prompt(tokenizer, "9")
    n = 3000
    outs = generate_batch(model, [prompt] * n, [SamplingParams(1, 1.0)] * n, [], 0, torch.Generator().manual_seed(0))
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([prompt])).logits[0, -1], -1)
    counts = torch.bincount(torch.tensor([o.token_ids[0] for o in outs]), minlength=probs.numel()).double()
    top = int(probs.argmax())
    # binomial standard error of the most likely token's frequency
    se = math.sqrt(float(probs[top]) * (1 - float(probs[top])) / n)
    assert abs(float(counts[top]) / n - float(probs[top])) < 4 * se


def test_bad_user_parameters_are_refused():
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(4, top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(4, temperature=-1)


def test_a_seeded_request_gets_the_same_answer_in_any_batch_and_order(tiny):
    """Reproducible runs: a row with its own seed (the `hf_seeded` agent loop's per-request seed) samples the same
    tokens alone, in a batch, or after other requests; the shared generator's state does not matter."""
    model, tokenizer = tiny
    prompts = [_prompt(tokenizer, q) for q in ("1+1=", "2+1=", "a longer prompt: 7+1=", "1+1=")]
    params = [SamplingParams(6, 1.0, seed=s) for s in (11, 12, 13, 14)]
    together = generate_batch(model, prompts, params, [], 0, torch.Generator().manual_seed(0))
    reversed_ = generate_batch(model, prompts[::-1], params[::-1], [], 0, torch.Generator().manual_seed(99))[::-1]
    alone = [generate_batch(model, [p], [q], [], 0, torch.Generator().manual_seed(i))[0]
             for i, (p, q) in enumerate(zip(prompts, params))]
    assert [o.token_ids for o in together] == [o.token_ids for o in reversed_] == [o.token_ids for o in alone]
    # the same prompt with two seeds: two independent draws (6 tokens over the tiny vocabulary rarely coincide)
    assert together[0].token_ids != together[3].token_ids
    # unseeded rows still follow the generator: the same generator seed, the same tokens; another, others
    unseeded = [SamplingParams(6, 1.0)] * 4
    a = generate_batch(model, prompts, unseeded, [], 0, torch.Generator().manual_seed(5))
    b = generate_batch(model, prompts, unseeded, [], 0, torch.Generator().manual_seed(5))
    c = generate_batch(model, prompts, unseeded, [], 0, torch.Generator().manual_seed(6))
    assert [o.token_ids for o in a] == [o.token_ids for o in b] != [o.token_ids for o in c]


def test_row_uniforms_are_a_pure_function_of_seed_and_position_and_uniform():
    from verl_ebpo.tools.cpu.sampling import mix_seed, row_uniforms
    import numpy as np

    seeds = np.arange(20000, dtype=np.uint64)
    u0, u1 = row_uniforms(seeds, 0), row_uniforms(seeds, 1)
    assert torch.equal(u0, row_uniforms(seeds, 0)) and torch.equal(u0[5:9], row_uniforms(seeds[5:9], 0))
    assert u0.dtype == torch.float64 and float(u0.min()) >= 0 and float(u0.max()) < 1
    # uniform: mean 1/2 and variance 1/12 within 5 standard errors; positions uncorrelated
    assert abs(float(u0.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / 20000)
    assert abs(float(u0.var()) - 1 / 12) < 0.005
    assert abs(float(torch.corrcoef(torch.stack([u0, u1]))[0, 1])) < 5 / math.sqrt(20000)
    # mix_seed: order-sensitive, deterministic, 64-bit
    assert mix_seed(1, 2) == mix_seed(1, 2) != mix_seed(2, 1) and 0 <= mix_seed(3) < 2**64
    assert len({mix_seed(0, i) for i in range(1000)}) == 1000
