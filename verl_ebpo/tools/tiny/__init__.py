"""Tiny, offline material for CPU runs of verl, verl-free: `assets` (a random tiny Llama, a character tokenizer,
RL parquet files) and `task` (the successor task "n+1=" and its reward, `pkg://verl_ebpo.tools.tiny.task`).

Used by the CPU backend's `python -m verl_ebpo.tools.cpu.run`, by `verl-ebpo demo` and by the tests; nothing here
imports verl (tests/test_verl_boundary.py checks it at import time).
"""
