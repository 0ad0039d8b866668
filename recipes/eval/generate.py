#!/usr/bin/env python3
"""Sample k answers per benchmark problem from a model (the paper's protocol) into a generations JSONL.

    python recipes/eval/generate.py --model /ckpts/.../hf --data-dir ~/data/verl_ebpo --out gens.jsonl --tp 1

- Prompts (`--prompt-style`): `chat` (EVAL_PROTOCOL=paper): the `prompt` messages of
  recipes/data/prepare_data.py's parquet files, through the model's chat template (`--chat-template-kwargs`
  as verl's `data.apply_chat_template_kwargs`), as in training. `authors` (EVAL_PROTOCOL=authors): the
  authors' evaluation prompt, the DAPO instruction + the problem (`extra_info.problem`) as plain text, no
  chat template (their recipe/ebpo/ebpo_eval.py).
- Sampling: k per problem (16; 4 for OlympiadBench), temperature 1.0, top_p 1.0, at most 20480 new tokens.
- Engines: `vllm` (GPU; the default) or `hf` (transformers' generate: slow, for small checks).
- `--shard I/N` keeps problems with index % N == I, so N processes (one per GPU group) can split a
  benchmark; concatenate their files before scoring.
- `--input FILE --n K` samples any verl RL parquet file instead of the benchmarks: this is how the
  difficulty labels are made (recipes/data/label_data.sh difficulty: the base model's pass rate over
  16 samples per training problem, scored by `verl-ebpo label-difficulty`).

Each output line: {"benchmark", "data_source", "problem_index", "index", "sample_index", "ground_truth",
"response", "finish_reason", "response_tokens"} (`index` = `problem_index` = the row number in the parquet
file, the key `verl-ebpo label-difficulty` reads); the settings go to <out>.meta.json.
Score benchmark generations with recipes/eval/score.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks import (  # noqa: E402
    AUTHORS_PROMPT_PREFIX, BENCHMARKS, MAX_TOKENS, SAMPLES, TEMPERATURE, TOP_P, parse_mapping,
)


@dataclass
class Request:
    benchmark: str
    data_source: str
    problem_index: int
    messages: list
    ground_truth: str
    problem: Optional[str] = None


@dataclass
class Sample:
    text: str
    finish_reason: Optional[str]
    tokens: int


def benchmark_files(data_dir, benchmarks: Sequence[str]) -> dict[str, Path]:
    return {name: Path(data_dir).expanduser() / f"{name}.parquet" for name in benchmarks}


def load_requests(files: dict, shard: tuple[int, int] = (0, 1), limit: Optional[int] = None):
    """The problems of each named parquet file (in file order), keeping those of this shard."""
    import pyarrow.parquet as pq

    index, count = shard
    out: dict[str, list[Request]] = {}
    for name, path in files.items():
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: run recipes/data/prepare_data.py --out-dir {path.parent}")
        table = pq.read_table(path)
        missing = {"prompt", "reward_model", "data_source"} - set(table.column_names)
        if missing:
            raise ValueError(f"{path}: not a verl RL parquet file (missing {sorted(missing)})")
        rows = table.slice(0, limit).to_pylist()
        out[name] = [Request(name, str(r["data_source"]), i, r["prompt"], r["reward_model"]["ground_truth"],
                             (r.get("extra_info") or {}).get("problem"))
                     for i, r in enumerate(rows) if i % count == index]
    return out


PROMPT_STYLES = ("chat", "authors")


def render_prompts(tokenizer, requests: Sequence[Request], chat_template_kwargs: dict,
                   style: str = "chat") -> list[str]:
    """`chat`: the row's messages through the chat template; `authors`: their plain-text prompt."""
    if style == "authors":
        missing = [f"{r.benchmark}:{r.problem_index}" for r in requests if not r.problem]
        if missing:
            raise ValueError(f"--prompt-style authors needs extra_info.problem (written by recipes/data/prepare_data.py); "
                             f"missing in {len(missing)} row(s), e.g. {missing[:3]}")
        return [AUTHORS_PROMPT_PREFIX + r.problem for r in requests]
    return [
        tokenizer.apply_chat_template(r.messages, add_generation_prompt=True, tokenize=False, **chat_template_kwargs)
        for r in requests
    ]


# ------------------------------------------------------------------------------------------------
# engines: (prompts, k) -> k Samples per prompt


def vllm_engine(args) -> tuple[object, Callable]:
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=args.model,
        tensor_parallel_size=args.tp,
        seed=args.seed,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        trust_remote_code=args.trust_remote_code,
    )

    def generate(prompts: list[str], k: int) -> list[list[Sample]]:
        params = SamplingParams(n=k, temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens,
                                seed=args.seed)
        results = llm.generate(prompts, params)
        return [[Sample(o.text, o.finish_reason, len(o.token_ids)) for o in r.outputs] for r in results]

    return llm.get_tokenizer(), generate


def hf_engine(args) -> tuple[object, Callable]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype="auto", trust_remote_code=args.trust_remote_code)
    model.to(device).eval()
    torch.manual_seed(args.seed)
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos

    def generate(prompts: list[str], k: int) -> list[list[Sample]]:
        out = []
        for prompt in prompts:
            # a chat-templated prompt carries its special tokens; a plain one gets them as vLLM adds them
            ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=args.prompt_style != "chat").input_ids
            ids = ids.to(device)
            with torch.no_grad():
                seqs = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                      temperature=args.temperature, top_p=args.top_p, top_k=0,
                                      max_new_tokens=args.max_tokens, num_return_sequences=k,
                                      pad_token_id=pad, eos_token_id=eos)
            samples = []
            for seq in seqs[:, ids.shape[1]:].tolist():
                n = len(seq)
                if eos in seq:
                    n = seq.index(eos) + 1
                    reason = "stop"
                else:
                    reason = "length"
                samples.append(Sample(tokenizer.decode(seq[:n], skip_special_tokens=True), reason, n))
            out.append(samples)
        return out

    return tokenizer, generate


ENGINES = {"vllm": vllm_engine, "hf": hf_engine}


# ------------------------------------------------------------------------------------------------


def generation_rows(requests: Sequence[Request], samples: Sequence[Sequence[Sample]], k: int):
    for req, outs in zip(requests, samples, strict=True):
        for j, s in enumerate(outs):
            yield {
                "benchmark": req.benchmark,
                "data_source": req.data_source,
                "problem_index": req.problem_index,
                "index": req.problem_index,
                "sample_index": j,
                "ground_truth": req.ground_truth,
                "response": s.text,
                "finish_reason": s.finish_reason,
                "response_tokens": s.tokens,
            }


def parse_shard(text: str) -> tuple[int, int]:
    i, sep, n = text.partition("/")
    try:
        i, n = int(i), int(n)
    except ValueError:
        raise ValueError(f"--shard takes I/N, got {text!r}") from None
    if not sep or n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard takes I/N with 0 <= I < N, got {text!r}")
    return i, n


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="HF model folder or id (a verl checkpoint: merge it first, see README)")
    p.add_argument("--data-dir", default=None, help="folder of recipes/data/prepare_data.py (the benchmarks)")
    p.add_argument("--input", default=None, help="sample this RL parquet file instead of the benchmarks")
    p.add_argument("--n", type=int, default=16, help="samples per problem with --input (default 16)")
    p.add_argument("--out", required=True, help="generations JSONL to write")
    p.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    p.add_argument("--samples", default="", help="override k, e.g. math500=4,aime24=32")
    p.add_argument("--temperature", type=float, default=TEMPERATURE)
    p.add_argument("--top-p", type=float, default=TOP_P)
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", choices=sorted(ENGINES), default="vllm")
    p.add_argument("--tp", type=int, default=1, help="vLLM tensor parallel size")
    p.add_argument("--max-model-len", type=int, default=None, help="vLLM max_model_len (default: the model's)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--device", default=None, help="hf engine: cuda / cpu (default: cuda if available)")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--chat-template-kwargs", default="{}", help='JSON, e.g. \'{"enable_thinking": false}\'')
    p.add_argument("--prompt-style", choices=PROMPT_STYLES, default="chat",
                   help="chat: the training prompt through the chat template (EVAL_PROTOCOL=paper); authors: their "
                        "plain-text evaluation prompt, no chat template (EVAL_PROTOCOL=authors)")
    p.add_argument("--shard", default="0/1", help="I/N: keep problems with index %% N == I")
    p.add_argument("--limit", type=int, default=None, help="first N problems of each benchmark (smoke tests)")
    p.add_argument("--check-only", action="store_true",
                   help="check the benchmarks, prompts and output path (everything before the engine loads), then exit")
    args = p.parse_args(argv)

    try:
        if (args.data_dir is None) == (args.input is None):
            raise ValueError("give exactly one of --data-dir (the benchmarks) and --input (one parquet file)")
        if args.input is not None:
            name = Path(args.input).stem
            files = {name: Path(args.input).expanduser()}
            samples = {name: args.n}
        else:
            benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
            unknown = sorted(set(benchmarks) - set(BENCHMARKS))
            if unknown:
                raise ValueError(f"--benchmarks: unknown {unknown}; known: {', '.join(BENCHMARKS)}")
            files = benchmark_files(args.data_dir, benchmarks)
            samples = {**SAMPLES, **parse_mapping(args.samples)}
        benchmarks = list(files)
        if any(k < 1 for k in samples.values()):
            raise ValueError(f"samples per problem must be >= 1, got {samples}")
        shard = parse_shard(args.shard)
        chat_kwargs = json.loads(args.chat_template_kwargs)
        if not isinstance(chat_kwargs, dict):
            raise ValueError("--chat-template-kwargs must be a JSON object")
        requests = load_requests(files, shard, args.limit)
        from verl_ebpo.tools.files import check_output_path

        check_output_path(args.out, inputs=list(files.values()))  # before the engine loads (an OutputPathError)
        if args.prompt_style == "authors":  # fail before the engine loads
            for reqs in requests.values():
                render_prompts(None, reqs, chat_kwargs, args.prompt_style)
    except (ValueError, FileNotFoundError) as e:
        print(f"generate: error: {e}", file=sys.stderr)
        return 2
    if args.check_only:
        print(f"generate: checked: {sum(map(len, requests.values()))} problems of {', '.join(benchmarks)}, "
              f"{args.out}", file=sys.stderr)
        return 0

    tokenizer, generate = ENGINES[args.engine](args)
    from verl_ebpo.tools.files import atomic_output, atomic_write_text

    out = Path(args.out)
    started = time.time()
    with atomic_output(out, inputs=list(files.values())) as tmp, open(tmp, "w") as f:
        for name in benchmarks:
            reqs, k = requests[name], samples[name]
            t0 = time.time()
            outs = generate(render_prompts(tokenizer, reqs, chat_kwargs, args.prompt_style), k)
            for row in generation_rows(reqs, outs, k):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            print(f"{name}: {len(reqs)} problems x {k} samples in {time.time() - t0:.0f}s", flush=True)
    meta = {
        "model": args.model, "engine": args.engine, "files": {k: str(v) for k, v in files.items()},
        "samples": {b: samples[b] for b in benchmarks}, "temperature": args.temperature, "top_p": args.top_p,
        "max_tokens": args.max_tokens, "seed": args.seed, "shard": args.shard, "limit": args.limit,
        "chat_template_kwargs": chat_kwargs, "prompt_style": args.prompt_style,
        "seconds": round(time.time() - started, 1),
    }
    atomic_write_text(str(out) + ".meta.json", json.dumps(meta, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
