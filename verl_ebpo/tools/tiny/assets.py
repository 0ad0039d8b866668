"""Tiny, offline assets for CPU runs of verl: a random Llama, a character-level tokenizer, RL parquet.

- `build_tokenizer`: a `tokenizers` WordLevel model that splits text into single characters, with
  special tokens for padding, end of turn (eos) and chat roles and a chat template, wrapped as a
  `PreTrainedTokenizerFast` padding on the left (as verl's rollout expects).
- `build_model`: a randomly initialised `LlamaForCausalLM` (hidden 64, 2 layers, 4 heads / 2 KV heads,
  about 84K parameters) saved with its tokenizer and generation config, ready for
  `actor_rollout_ref.model.path`. (verl's Qwen2 chat handling wants "\\n" as one token of a BPE
  vocabulary, so the tiny model is a Llama.)
- `write_rl_parquet`: rows in verl's RL data format (`prompt` chat messages, `data_source`,
  `reward_model.ground_truth`, `extra_info`).
Everything is deterministic given the seed and takes well under a second.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from verl_ebpo.tools.files import atomic_output

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, EOS, UNK, *ROLE_TOKENS)
CHARACTERS = "0123456789abcdefghijklmnopqrstuvwxyz +-*/=()<>?!.,:;'\"\\{}[]^_|#\n"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<eos>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 128
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False


def vocabulary() -> dict[str, int]:
    """Token -> id: the special tokens first, then one token per character of `CHARACTERS`."""
    tokens = list(SPECIAL_TOKENS) + list(dict.fromkeys(CHARACTERS))
    return {tok: i for i, tok in enumerate(tokens)}


def build_tokenizer():
    """The character-level tokenizer (a `transformers.PreTrainedTokenizerFast`)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = vocabulary()
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        additional_special_tokens=list(ROLE_TOKENS),
        padding_side="left",
        truncation_side="left",
        model_max_length=TinyModelSpec.max_position_embeddings,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(path: str | os.PathLike, seed: int = 0, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write a random tiny Llama with the character tokenizer to `path` (a folder); returns it."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    vocab_size = len(tokenizer)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        initializer_range=spec.initializer_range,
        tie_word_embeddings=spec.tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        dtype="float32",
    )
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def warm_start(
    path: str | os.PathLike,
    pairs: Sequence[tuple[str, str]],
    steps: int = 150,
    lr: float = 3e-3,
    batch_size: int = 64,
    seed: int = 0,
) -> float:
    """Supervised warm start of the model saved at `path` (in place): teach it to answer each question of
    `pairs` (question, answer) with the answer and eos, loss on the answer tokens only. Returns the last
    batch's loss. Used to give a tiny model a non-trivial success rate (e.g. an answer format a verifier
    can parse) before RL; a few seconds on a CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not pairs:
        raise ValueError("warm_start needs at least one (question, answer) pair")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    sequences = []
    for question, answer in pairs:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        sequences.append((prompt_ids, answer_ids))
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        picks = torch.randint(len(sequences), (min(batch_size, len(sequences)),), generator=generator).tolist()
        width = max(len(p) + len(a) for p, a in (sequences[i] for i in picks))
        ids = torch.full((len(picks), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((len(picks), width), -100, dtype=torch.long)
        mask = torch.zeros((len(picks), width), dtype=torch.long)
        for row, i in enumerate(picks):
            prompt_ids, answer_ids = sequences[i]
            seq = prompt_ids + answer_ids
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
            labels[row, len(prompt_ids) : len(seq)] = torch.tensor(answer_ids)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(path)
    return float(loss.detach())


def count_parameters(path: str | os.PathLike) -> int:
    """Number of parameters of a model written by `build_model`."""
    from safetensors import safe_open

    with safe_open(str(Path(path) / "model.safetensors"), framework="pt") as f:
        return sum(f.get_tensor(key).numel() for key in f.keys())


def rl_row(
    index: int,
    question: str,
    ground_truth: str,
    data_source: str,
    split: str = "train",
    extra_info: Optional[Mapping] = None,
) -> dict:
    """One row of verl's RL data format (a single user turn)."""
    info = {"index": index, "split": split, "question": question}
    if extra_info:
        info.update(extra_info)
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": question}],
        "ability": "toy",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": info,
    }


def write_rl_parquet(rows: Iterable[dict], path: str | os.PathLike, chunk: int = 20_000) -> Path:
    """Write RL rows (see `rl_row`; any iterable, consumed in chunks of `chunk` rows, never all in memory) to a
    parquet file; returns its path."""
    import itertools

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    it = iter(rows)
    first = list(itertools.islice(it, chunk))
    if not first:
        raise ValueError(f"no rows to write to {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp:
        table = pa.Table.from_pandas(pd.DataFrame(first), preserve_index=False)
        with pq.ParquetWriter(tmp, table.schema) as writer:
            writer.write_table(table)
            while block := list(itertools.islice(it, chunk)):
                writer.write_table(pa.Table.from_pandas(pd.DataFrame(block), schema=table.schema, preserve_index=False))
    return path
