"""The preflight's checks that call verl: composition, verl's own config check, the data as verl's dataset reads it,
the prompt lengths, the reward; then the verl-free ones of `resources` (docs/preflight.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import warnings
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from verl_ebpo.samplers.fields import read_field
from verl_ebpo.tools.preflight import resources
from verl_ebpo.tools.preflight.context import GT, Context, Report, check_numbers, files, local, num, remote, sel
from verl_ebpo.tools.preflight.estimates import GB

ORDERED = {"TopicOrderedDataset": "topic", "DifficultyOrderedDataset": "difficulty"}


def compose(overrides: list) -> Any:
    """verl's config for `overrides`, as `python -m verl.trainer.main_ppo OVERRIDES` composes it (its Hydra
    config `ppo_trainer` in verl/trainer/config)."""
    import verl.trainer
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None, job_name="preflight"):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def detect_cluster(ray_address=None):
    """The cluster preflight plans for (cluster.detect; tests replace this)."""
    from verl_ebpo.tools.preflight.cluster import detect

    return detect(ray_address)


def run_checks(overrides: list, *, gpu_memory_gb=None, free_disk_gb=None, shared_dir=None, working_dir=None,
               ray_address=None, host_memory_gb=None, creates=()) -> Report:
    """The checks of `overrides` (no printing): a Report, its FAILs with their fixes in `Report.blocking`."""
    cfg = compose(overrides)
    check_numbers(cfg)  # a key of the wrong type or range: one line naming it (InputError), before verl reads it
    report = Report()
    cluster = detect_cluster(ray_address)
    if host_memory_gb is not None:
        cluster = dataclasses.replace(cluster, host_bytes=host_memory_gb * GB)
    ctx = Context(cfg, os.path.abspath(working_dir or os.getcwd()), free_disk_gb, shared_dir, cluster, tuple(creates),
                  num(cfg, "trainer.nnodes", int, 1), num(cfg, "trainer.n_gpus_per_node", int, 1))
    check_verl(ctx, report)
    resources.check_cluster(ctx, report, gpu_memory_gb)
    check_ebpo(ctx, report)
    check_data(ctx, report)
    resources.check_model(ctx, report)
    steps = resources.check_checkpoints(ctx, report)
    resources.check_memory(ctx, report)
    resources.check_host(ctx, report)
    resources.check_nodes(ctx, report)
    check_reward(ctx, report)
    rollout = sel(cfg, "actor_rollout_ref.rollout.name")
    if rollout in (None, "sglang"):  # verl's validate_config passes both; the workers fail on None minutes in
        report.add("backend", "warn" if rollout else "FAIL", "SGLang: the rollout is not seeded" if rollout else
                   "no rollout engine", "verl 0.9.1 passes SGLang neither rollout.seed nor max_num_batched_tokens"
                   if rollout else "", "" if rollout else "set actor_rollout_ref.rollout.name=vllm (or sglang)")
    resources.check_time(ctx, report, steps)
    return report


def check_verl(ctx: Context, report: Report) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # verl's refusal: the one line
        warnings.simplefilter("ignore")
        ref, critic = need_reference_policy(ctx.cfg), need_critic(ctx.cfg)
        validate_config(ctx.cfg, use_reference_policy=ref, use_critic=critic)
    ctx.uses_ref = bool(ref)
    report.add("verl config", "ok", f"validate_config passed (reference policy: {ref}, critic: {critic})")


def check_ebpo(ctx: Context, report: Report) -> None:
    """adv_estimator=ebpo: its options read by the plugin's own spec, and the callback that saves the prior."""
    if sel(ctx.cfg, "algorithm.adv_estimator") != "ebpo":
        return
    from verl_ebpo.advantage.options import EBPOOptions

    try:
        opts = EBPOOptions.from_algorithm_config(sel(ctx.cfg, "algorithm"))
    except ValueError as exc:
        report.add("ebpo options", "FAIL", str(exc))
        return
    report.add("ebpo options", "ok", f"prior_scope={opts.prior_scope}, prior_decay={opts.prior_decay:g}, "
               f"normalize={opts.normalize}")
    if opts.prior_scope == "running" and not sel(ctx.cfg, "trainer.checkpoint_callback_class"):
        report.add("ebpo checkpoint", "warn", "the running prior is not saved with the checkpoints",
                   "no trainer.checkpoint_callback_class: a resume starts the prior afresh",
                   "set trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback")


def _prompt_type_problem(values, prompt_key: str) -> Optional[str]:
    """verl's RLHFDataset reads `prompt_key` as chat messages ([{role, content}, ...]); what is wrong, or None."""
    for i, v in enumerate(values):
        listed = isinstance(v, (list, tuple))
        if v is not None and not (listed and all(isinstance(m, dict) and "role" in m and "content" in m for m in v)):
            shown = f"a list of {type(v[0]).__name__ if v else 'nothing'}" if listed else type(v).__name__
            return f"column {prompt_key!r} holds {shown} (row {i}: {str(v)[:40]!r}), not chat messages"
    return None


def label_fix(field: str) -> str:
    """How to write the ordering field `field` on every row."""
    topic = "topic" in field
    return (f"label it: verl-ebpo label-{'topics' if topic else 'difficulty'}, or recipes/data/label_data.sh "
            f"{'topics' if topic else 'difficulty MODEL'}")


def _read_file(report, which, raw, working_dir, wanted) -> Optional[Any]:
    """The columns `wanted` of one data file as a pyarrow Table, or None (a row added saying why)."""
    check = f"data: {which}"
    if remote(raw):
        return report.add(check, "n/a", f"{raw}: remote, not checked")  # None: not read
    path = local(raw, working_dir)
    from verl_ebpo.tools.files import unreadable_reason

    why = unreadable_reason(path)
    if why or not path.endswith(".parquet"):
        report.add(check, "FAIL" if why else "n/a", f"data.{which}_files {os.path.basename(path)}: "
                   f"{why or 'not parquet, not checked'}",
                   f"data.{which}_files: {path}")
        return None
    import pyarrow.parquet as pq

    try:
        names = set(pq.ParquetFile(path).schema_arrow.names)
    except Exception as exc:  # noqa: BLE001 - not a parquet file
        report.add(check, "FAIL", f"{os.path.basename(path)}: not readable as parquet", f"{path}: {exc}")
        return None
    tops = sorted({w.split(".")[0] for w in wanted})
    missing = [t for t in tops if t not in names]
    table = None if missing else pq.read_table(path, columns=tops)
    problem = (f"no column {missing[0]!r}" if missing else "0 rows" if table.num_rows == 0 else
               next((f"{n} missing on {e:,} of {table.num_rows:,} rows" for n in wanted[:3]
                     if (e := sum(v is None for v in read_field(table, n)))), None)
               or _prompt_type_problem(read_field(table, wanted[0]), wanted[0]))
    if problem:
        fix = label_fix(wanted[3]) if len(wanted) > 3 and wanted[3].split(".")[0] in missing else ""
        report.add(check, "FAIL", f"data.{which}_files {os.path.basename(path)}: {problem}",
                   f"data.{which}_files: {path}: the run reads {', '.join(wanted)}", fix)
        return None
    return table


def check_data(ctx: Context, report: Report) -> None:
    cfg, opts = ctx.cfg, None
    prompt_key, order = sel(cfg, "data.prompt_key", "prompt"), ORDERED.get(sel(cfg, "data.custom_cls.name"))
    if order:
        from verl_ebpo.samplers.dataset import options_from_data_config

        opts = options_from_data_config(sel(cfg, "data"), order)  # refused: the one line

    for which in ("train", "val"):
        wanted = [prompt_key, GT, "data_source", *((opts.field,) if opts is not None and which == "train" else ())]
        raws = files(sel(cfg, f"data.{which}_files"))
        tables = [_read_file(report, which, str(raw), ctx.working_dir, wanted) for raw in raws]
        if not raws:
            report.add(f"data: {which}", "FAIL", f"data.{which}_files is empty")
        if not raws or any(t is None for t in tables):
            continue
        table = pa.concat_tables(tables, promote_options="default")
        rows, limit = table.num_rows, num(cfg, f"data.{which}_max_samples", int, none_ok=True)
        if limit is not None and 0 < limit < rows:  # rl_dataset.py: seeded choice when shuffled, else the first N
            seed = () if sel(cfg, "data.seed") is None else (sel(cfg, "data.seed"),)
            keep = np.random.default_rng(*seed).choice(rows, limit, replace=False) if sel(cfg, "data.shuffle") \
                else np.arange(limit)
            table = table.take(pa.array(keep))
        kept = f"{table.num_rows:,} of {rows:,} rows (data.{which}_max_samples)" if table.num_rows < rows else \
            f"{rows:,} rows"
        if which == "val":
            ctx.val_rows = table.num_rows
            report.add("data: val", "ok", kept, f"{', '.join(map(str, raws))}: columns {', '.join(wanted)}")
            continue
        ctx.first_row = {"ground_truth": read_field(table, GT)[0], "data_source": read_field(table, "data_source")[0]}
        served = table.num_rows
        if opts is not None:
            from verl_ebpo.samplers.dataset import build_plan, loader_batch

            try:
                served = len(build_plan(table, opts, loader_batch=loader_batch(sel(cfg, "data"))))
            except ValueError as exc:
                report.add("data: train", "FAIL", str(exc), "", label_fix(opts.field))
                continue
            kept += f", {served:,} served in {order} order"
        ctx.train_len = served
        batch = num(cfg, "data.train_batch_size", int, 1)
        spe = served // batch
        report.add("data: train", "ok" if spe >= 1 else "FAIL", f"{kept}: {spe} steps an epoch of {batch}",
                   f"{', '.join(map(str, raws))}: columns {', '.join(wanted)}; len(train_dataset) {served:,} // "
                   f"data.train_batch_size {batch} (verl drops the incomplete batch)",
                   "" if spe >= 1 else "more rows or a smaller data.train_batch_size")


def check_reward(ctx: Context, report: Report) -> None:
    from omegaconf import OmegaConf

    path = sel(ctx.cfg, "reward.custom_reward_function.path")
    name = sel(ctx.cfg, "reward.custom_reward_function.name")
    try:
        if path:
            from verl.trainer.ppo.reward import get_custom_reward_fn

            given = dict(sel(ctx.cfg, "reward.custom_reward_function"))
            if not str(path).startswith("pkg://"):
                given["path"] = local(str(path), ctx.working_dir)
            fn, label = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": given}})), \
                f"{path}:{name}"
        else:
            from verl.utils.reward_score import default_compute_score as fn

            label = "verl's default_compute_score"
    except Exception as exc:  # noqa: BLE001 - verl would fail the same way in the reward workers
        report.add("reward", "FAIL", f"{path}:{name} does not load: {_root_cause(exc, str(path))}",
                   f"reward.custom_reward_function: {exc}")
        return
    if ctx.first_row is None:
        report.add("reward", "n/a", f"{label} loads; not scored (no local training row)")
        return
    gt, source = ctx.first_row["ground_truth"], ctx.first_row["data_source"]
    detail = f"{label} on 'Answer: {gt}' against ground truth {gt!r} (data_source {source!r})"
    try:
        out = fn(data_source=source, solution_str=f"Answer: {gt}", ground_truth=gt, extra_info={})
        score = float(out["score"] if isinstance(out, dict) else out)
    except Exception as exc:  # noqa: BLE001
        fix = "" if path and not isinstance(exc, NotImplementedError) else (
            f"verl's default_compute_score has no scorer for data_source {source!r}: set reward.custom_reward_function"
            ".path=pkg://verl_ebpo.rewards reward.custom_reward_function.name=compute_score")
        report.add("reward", "FAIL", f"raised on the first row: {type(exc).__name__}: {exc}", detail, fix)
        return
    if score != 1.0:
        report.add("reward", "FAIL", f"scores the first row's ground truth as {score:g}, not 1", detail)
        return
    report.add("reward", "ok", f"{label}: a right answer scores 1", detail)


def _root_cause(exc: BaseException, path: str) -> str:
    """'TYPE: message (FILE line N)' of the innermost exception under verl's loader: a SyntaxError's own line, else
    the last frame in the reward file, else the last frame."""
    import traceback

    root = exc
    for _ in range(100):  # a chain, never a cycle followed for good
        root = root.__cause__ or root.__context__ or root
    if isinstance(root, SyntaxError) and root.lineno:
        return f"SyntaxError: {root.msg} ({root.filename} line {root.lineno})"
    frames = traceback.extract_tb(root.__traceback__) or traceback.extract_tb(exc.__traceback__)
    frame = next((f for f in reversed(frames) if os.path.basename(f.filename) == os.path.basename(path)), frames[-1])
    return f"{type(root).__name__}: {root} ({frame.filename} line {frame.lineno})"
