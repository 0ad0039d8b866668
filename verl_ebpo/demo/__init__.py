"""`verl-ebpo demo`: train a tiny model on CPU with verl's real trainer, GRPO vs EBPO.

Builds offline a random tiny Llama with a character tokenizer and the successor task
(`verl_ebpo.demo.task`), runs `python -m verl.trainer.main_ppo` twice on the CPU backend
(`verl_ebpo.cpu`) from the same seed and sample budget, once with `algorithm.adv_estimator=grpo` and
once with `ebpo`, and writes to the output folder (default `runs/demo/`): `steps.csv` (per-step
metrics of both runs), `reward_curves.png`, `report.md`, `summary.json` and each run's verl logs.
"""

from __future__ import annotations

import argparse

DEFAULTS = {
    "out": "runs/demo",
    "steps": 60,
    "batch_size": 32,
    "group_size": 4,
    "lr": 5e-3,
    "seed": 0,
    "max_response_length": 4,
    "temperature": 1.0,
    "train_rows": 4096,
    "timeout": 900,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    parser.add_argument("--out", default=d["out"], help=f"output folder (default {d['out']})")
    parser.add_argument(
        "--steps", type=int, default=d["steps"], help=f"training steps per run (default {d['steps']})"
    )
    parser.add_argument(
        "--batch-size", type=int, default=d["batch_size"], help=f"prompts per step (default {d['batch_size']})"
    )
    parser.add_argument(
        "--group-size", type=int, default=d["group_size"], help=f"answers per prompt, G (default {d['group_size']})"
    )
    parser.add_argument("--lr", type=float, default=d["lr"], help=f"actor learning rate (default {d['lr']})")
    parser.add_argument("--seed", type=int, default=d["seed"], help=f"seed of model, data and sampling (default {d['seed']})")
    parser.add_argument(
        "--algorithms", default="grpo,ebpo", help="comma-separated advantage estimators to run (default grpo,ebpo)"
    )
    parser.add_argument(
        "--timeout", type=float, default=d["timeout"], help=f"seconds allowed per training run (default {d['timeout']})"
    )
    parser.add_argument("--quiet", action="store_true", help="print only the summary")


def run(args: argparse.Namespace) -> int:
    from verl_ebpo.demo.runner import DemoConfig, run_demo

    algorithms = tuple(a.strip() for a in args.algorithms.split(",") if a.strip())
    config = DemoConfig(
        out=args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        group_size=args.group_size,
        lr=args.lr,
        seed=args.seed,
        algorithms=algorithms,
        timeout_s=args.timeout,
        verbose=not args.quiet,
    )
    run_demo(config)
    return 0


__all__ = ["DEFAULTS", "add_arguments", "run"]
