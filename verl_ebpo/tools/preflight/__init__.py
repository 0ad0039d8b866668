"""`verl-ebpo preflight [options] OVERRIDES...`: plan a verl run before it starts (docs/preflight.md).

It composes the config exactly as `python -m verl.trainer.main_ppo OVERRIDES...` does (Hydra's compose API on
verl's `ppo_trainer` config, the same overrides), runs verl's `validate_config`, then checks what the run will need
before Ray starts: the cluster, data files and columns, the checkpoint plan against the free disk, GPU memory per
pass (an estimate), paths on several nodes, the reward function, and estimates the time a step and the run's
GPU-hours. It prints one line a check (`--verbose`: how each figure is made and each FAIL's fix), then one closing
line. Exit 0: no FAIL (warnings are named); 2: a FAIL or a refused config, one line on stderr with each FAIL's fix.
"""

from __future__ import annotations

import argparse
import math
import os
import sys


def _number(name: str, low: float, high: float, low_open: bool = True):
    """A parser of a finite number in (low, high] (`low_open`) or [low, high]; the message names the range."""
    shown = f"{'(' if low_open else '['}{low:g}, {high:g}]".replace("e+0", "e").replace("e+", "e")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not (math.isfinite(value) and (low < value if low_open else low <= value) and value <= high):
            raise argparse.ArgumentTypeError(f"{name} must be in {shown}, got {text!r}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    number, env = _number, os.environ.get
    parser.add_argument("--gpu-memory-gb", type=number("--gpu-memory-gb", 0, 4096), help="one GPU's memory in GB "
                        "(1e9 bytes), in (0, 4096], checked against the detected GPUs [detected; else 80]")
    parser.add_argument("--ray-address", default=env("RAY_ADDRESS") or None, help="the Ray cluster the run goes to "
                        "(dashboard http://HOST:8265): its nodes and GPUs are counted [$RAY_ADDRESS]")
    parser.add_argument("--host-memory-gb", type=number("--host-memory-gb", 0, 1e6), help="one node's host memory in "
                        "GB, in (0, 1e6] (when this machine is not a node) [this machine's]")
    parser.add_argument("--free-disk-gb", type=number("--free-disk-gb", 0, 1e9, low_open=False), help="free space of "
                        "the checkpoint volume in GB, in [0, 1e9] [the real free space at trainer.default_local_dir]")
    parser.add_argument("--shared-dir", default=env("SHARED_DIR") or None, help="the folder every node mounts at the "
                        "same path (several nodes: checkpoints, data and metrics must be under it) [$SHARED_DIR]")
    parser.add_argument("--working-dir", help="the folder relative paths are read from [the current folder]")
    parser.add_argument("--creates", action="append", default=[], metavar="DIR", help="a folder the launcher makes "
                        "before the run (recipes: the metrics folder): missing, not a FAIL; repeatable")
    parser.add_argument("--verbose", "-v", action="store_true", help="each figure's details and each FAIL's fix")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="verl's Hydra overrides, as given to python -m verl.trainer.main_ppo (after the options)")


def run(args: argparse.Namespace) -> int:
    from verl_ebpo.tools.cli import one_line
    from verl_ebpo.tools.preflight.checks import run_checks

    try:
        report = run_checks(args.overrides, gpu_memory_gb=args.gpu_memory_gb, free_disk_gb=args.free_disk_gb,
                            shared_dir=args.shared_dir, working_dir=args.working_dir, ray_address=args.ray_address,
                            host_memory_gb=args.host_memory_gb, creates=args.creates)
    except Exception as exc:  # noqa: BLE001 - a config Hydra or verl refuses: one line, exit 2
        print(f"verl-ebpo preflight: {one_line(exc)}", file=sys.stderr)
        return 2
    print(report.table(args.verbose))
    if report.blocking:
        print(f"verl-ebpo preflight: {one_line(report.blocking)}", file=sys.stderr)
        return 2
    print(f"verl-ebpo preflight: {report.closing()}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="verl-ebpo preflight", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
