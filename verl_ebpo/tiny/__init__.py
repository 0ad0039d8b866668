"""Tiny, offline material for CPU runs of verl, verl-free: `assets` (a random tiny Llama, a character tokenizer,
RL parquet files) and `task` (the successor task "n+1=" and its reward, `pkg://verl_ebpo.tiny.task`).

Used by the CPU backend's `python -m verl_ebpo.cpu.run`, by `verl-ebpo demo` and by the tests. It lives outside
`verl_ebpo.cpu` because importing anything under `verl_ebpo.cpu` runs that package's `__init__`, which imports
verl to register the backend; nothing here imports verl (tests/test_verl_boundary.py checks it at import time).
"""
