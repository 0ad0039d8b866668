"""`verl-ebpo demo`: EBPO against verl's GRPO / DAPO (/ Dr.GRPO) on CPU, several seeds, verl's real trainer.

For each seed it builds offline a random tiny Llama, a character tokenizer and the successor task
(`verl_ebpo.tools.tiny.task`), then trains it with `python -m verl.trainer.main_ppo` once per algorithm on the
CPU backend (`verl_ebpo.tools.cpu.backend`), all runs joining one Ray cluster. It reads verl's metrics files back and
writes to the output folder (default `runs/demo/`): `summary.json`, `reward_curves.png`, `steps.csv`, `verl-ebpo
compare`'s files over the same runs (`report.md`, `comparison.json`, `validation_accuracy.png`), and per run verl's
own logs under `runs/<algo>/seed<k>/`. See docs/demo.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from verl_ebpo.tools.demo.options import DemoOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per `DemoOptions` field (`--batch-size` for `batch_size`), documented by the field."""
    for f in dataclasses.fields(DemoOptions):
        flag = "--" + f.name.replace("_", "-")
        default = f.metadata.get("default_doc") or f"{f.default}"
        if isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", default=None, help=f.metadata["help"])
        else:
            parser.add_argument(flag, default=None, metavar=f.name.upper(),
                                help=f"{f.metadata['help']} (default {default.strip('`')})")


def options_from_args(args: argparse.Namespace) -> DemoOptions:
    names = {f.name for f in dataclasses.fields(DemoOptions)}
    return DemoOptions.from_mapping({k: v for k, v in vars(args).items() if k in names and v is not None})


def run(args: argparse.Namespace) -> int:
    from verl_ebpo.tools.cpu.launch import TrainerFailed
    from verl_ebpo.tools.demo.runner import run_demo
    from verl_ebpo.tools.files import OutputPathError

    try:
        options = options_from_args(args)
        estimate, ok = options.cost_line()
        if not ok and not options.force:  # refused before anything is written
            raise ValueError(f"{estimate}: too large; use fewer seeds, steps, a smaller batch or group, or --force")
        if not options.quiet:
            print(f"verl-ebpo demo: {estimate}", flush=True)
        run_demo(options)
    except (TrainerFailed, ValueError, OutputPathError) as exc:  # a run of verl failed, a bad option or --out
        print(f"verl-ebpo demo: error: {(str(exc).strip() or type(exc).__name__).splitlines()[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("verl-ebpo demo: stopped; the running trainer and the Ray cluster were shut down", file=sys.stderr)
        return 130
    return 0

