"""The preflight's checks on a composed verl config: composition, verl's own check, data, memory, reward (thin glue over
`estimates`; the verl-free ones in `plan`; docs/preflight.md)."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from typing import Any, Optional

from verl_ebpo.tools.preflight import estimates as est
from verl_ebpo.tools.preflight.context import (GT, ORDERED, Context, Report, _files, _local, _remote, _sel,
                                               check_numbers, num)
from verl_ebpo.tools.preflight.host import check_cluster, check_host, gpu_memory
from verl_ebpo.tools.preflight.memory import check_memory
from verl_ebpo.tools.preflight.plan import check_backend, check_checkpoints, check_model, check_nodes


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
    """The cluster preflight plans for (verl_ebpo.tools.preflight.cluster.detect; tests replace this)."""
    from verl_ebpo.tools.preflight.cluster import detect

    return detect(ray_address)


def run_checks(overrides: list, *, gpu_memory_gb=None, free_disk_gb=None, shared_dir=None, working_dir=None,
               ray_address=None, host_memory_gb=None) -> Report:
    import dataclasses

    cfg = compose(overrides)
    check_numbers(cfg)  # a key of the wrong type or range: one line naming it (InputError), before verl reads it
    report = Report()
    cluster = detect_cluster(ray_address)
    if host_memory_gb is not None:
        cluster = dataclasses.replace(cluster, host_bytes=host_memory_gb * est.GB)
    gpu_bytes, gpu_label, memory_row = gpu_memory(gpu_memory_gb, cluster)
    ctx = Context(cfg, os.path.abspath(working_dir or os.getcwd()), gpu_bytes, free_disk_gb, shared_dir,
                  gpu_source=gpu_label, cluster=cluster)
    check_verl(ctx, report)
    check_cluster(ctx, report, memory_row)
    check_ebpo(ctx, report)
    check_data(ctx, report)
    check_model(ctx, report)
    check_checkpoints(ctx, report)
    check_memory(ctx, report)
    check_host(ctx, report)
    check_nodes(ctx, report)
    check_reward(ctx, report)
    check_backend(ctx, report)
    return report


# ---- verl's own checks -------------------------------------------------------------------------------------------


def check_verl(ctx: Context, report: Report) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref, critic = need_reference_policy(ctx.cfg), need_critic(ctx.cfg)
            validate_config(ctx.cfg, use_reference_policy=ref, use_critic=critic)
    except Exception as exc:  # noqa: BLE001 - verl's refusal, reported as the blocking line
        report.add("verl config", "FAIL", f"verl's validate_config: {exc}")
        return
    ctx.uses_ref = bool(ref)
    report.add("verl config", "ok", f"validate_config passed (reference policy: {ref}, critic: {critic})")


CALLBACK = "verl_ebpo.EBPOCheckpointCallback"


def check_ebpo(ctx: Context, report: Report) -> None:
    """adv_estimator=ebpo: its options read by the plugin's own spec (EBPOOptions.from_algorithm_config), and the
    checkpoint callback that saves the running prior."""
    if _sel(ctx.cfg, "algorithm.adv_estimator") != "ebpo":
        return
    from verl_ebpo.advantage.options import EBPOOptions

    try:
        opts = EBPOOptions.from_algorithm_config(_sel(ctx.cfg, "algorithm"))
    except ValueError as exc:
        report.add("ebpo options", "FAIL", str(exc))
        return
    report.add("ebpo options", "ok", f"prior_scope={opts.prior_scope}, prior_decay={opts.prior_decay:g}, "
               f"normalize={opts.normalize}")
    callback = _sel(ctx.cfg, "trainer.checkpoint_callback_class")
    if opts.prior_scope == "running" and not callback:
        report.add("ebpo checkpoint", "warn", "no trainer.checkpoint_callback_class: the running prior is not saved "
                   f"with the checkpoints, so a resume starts it afresh; set trainer.checkpoint_callback_class={CALLBACK}")


# ---- data --------------------------------------------------------------------------------------------------------


def _ordering(cfg):
    """The ordering options of a TopicOrderedDataset / DifficultyOrderedDataset run, else None."""
    name = _sel(cfg, "data.custom_cls.name")
    if name not in ORDERED:
        return None
    from verl_ebpo.samplers.dataset import options_from_data_config

    return options_from_data_config(_sel(cfg, "data"), ORDERED[name])


def check_data(ctx: Context, report: Report) -> None:
    cfg = ctx.cfg
    prompt_key = _sel(cfg, "data.prompt_key", "prompt")
    batch = num(cfg, "data.train_batch_size", int, 1)
    try:
        opts = _ordering(cfg)
    except ValueError as exc:
        report.add("data: ordering", "FAIL", str(exc))
        opts = None
    for which in ("train", "val"):
        files = _files(_sel(cfg, f"data.{which}_files"))
        if not files:
            report.add(f"data: {which}", "FAIL", f"data.{which}_files is empty")
            continue
        rows_total = 0
        for raw in files:
            row = _check_file(ctx, report, which, str(raw), prompt_key,
                              opts if which == "train" else None)
            if row is None:
                rows_total = None
            elif rows_total is not None:
                rows_total += row
        if which == "train" and rows_total is not None:
            length, how = _dataset_len(ctx, rows_total, opts)
            ctx.train_len = length
            spe = est.steps_per_epoch(length, batch)
            status = "ok" if spe >= 1 else "FAIL"
            report.add("data: steps per epoch", status,
                       f"len(train_dataset) {length:,} ({how}) // data.train_batch_size {batch} = {spe} steps per epoch"
                       + ("" if spe >= 1 else " (verl drops the incomplete batch: no step would run)"))
    _check_prompt_lengths(ctx, report, prompt_key)


def _dataset_len(ctx: Context, rows: int, opts) -> tuple[int, str]:
    """len(train_dataset) as verl's V1 trainer counts it: rows after `data.train_max_samples`; the ordered datasets'
    padded plan (their `build_plan` over every train file, as the dataset orders them)."""
    limit = num(ctx.cfg, "data.train_max_samples", int, none_ok=True)
    if limit is not None and 0 < limit < rows:
        rows, how = limit, f"data.train_max_samples of {rows:,} rows"
    else:
        how = "rows"
    if opts is None or ctx.train_plan_len is None:
        return rows, how
    return ctx.train_plan_len, f"the ordered dataset's plan over {rows:,} rows, padded to whole batches"


def _prompt_type_problem(values, prompt_key: str) -> Optional[str]:
    """verl's RLHFDataset reads `prompt_key` as chat messages ([{role, content}, ...]); what is wrong, or None."""
    for i, v in enumerate(values):
        if v is None:
            continue
        if not isinstance(v, (list, tuple)) or not all(isinstance(m, dict) and "role" in m and "content" in m
                                                          for m in v):
            shown = type(v).__name__ if not isinstance(v, (list, tuple)) else f"a list of {type(v[0]).__name__ if v else 'nothing'}"
            return (f"column {prompt_key!r} holds {shown} (row {i}: {str(v)[:40]!r}), not chat messages "
                    "(a list of {'role': ..., 'content': ...}, what recipes/data/prepare_data.py writes)")
    return None


def _check_file(ctx, report, which, raw, prompt_key, opts) -> Optional[int]:
    check = f"data: {which}"
    if _remote(raw):
        report.add(check, "n/a", f"{raw}: remote, not checked")
        return None
    path = _local(raw, ctx.working_dir)
    from verl_ebpo.tools.files import unreadable_reason

    why = unreadable_reason(path)
    if why:
        report.add(check, "FAIL", f"data.{which}_files: {path}: {why}")
        return None
    if not path.endswith(".parquet"):
        report.add(check, "n/a", f"{path}: not parquet, columns not checked")
        return None
    import pyarrow.parquet as pq

    from verl_ebpo.samplers.fields import read_field

    try:
        names = set(pq.ParquetFile(path).schema_arrow.names)
    except Exception as exc:  # noqa: BLE001 - not a parquet file
        report.add(check, "FAIL", f"data.{which}_files: {path}: not readable as parquet ({exc})")
        return None
    wanted = [prompt_key, GT, "data_source", *((opts.field,) if opts is not None else ())]
    tops = sorted({w.split(".")[0] for w in wanted})
    missing = [t for t in tops if t not in names]
    if missing:
        report.add(check, "FAIL", f"{path}: no column {missing[0]!r} (the run reads {', '.join(wanted)})")
        return None
    table = pq.read_table(path, columns=tops)
    if table.num_rows == 0:
        report.add(check, "FAIL", f"{path}: 0 rows")
        return None
    for name in (prompt_key, GT, "data_source"):
        values = read_field(table, name)
        empty = sum(v is None for v in values)
        if empty:
            report.add(check, "FAIL", f"{path}: {empty:,} of {table.num_rows:,} rows have no {name}")
            return None
    problem = _prompt_type_problem(read_field(table, prompt_key), prompt_key)
    if problem:
        report.add(check, "FAIL", f"data.{which}_files: {path}: {problem}")
        return None
    note = ""
    if opts is not None:
        from verl_ebpo.samplers.dataset import build_plan, loader_batch

        try:
            plan = build_plan(table, opts, loader_batch=loader_batch(_sel(ctx.cfg, "data")) if which == "train" else None)
        except ValueError as exc:
            report.add(check, "FAIL", f"{path}: {exc}")
            return None
        note = f"; {opts.field} on every row ({len(plan):,} rows served)"
        if which == "train":
            ctx.train_plan_len = (ctx.train_plan_len or 0) + len(plan)
    if which == "train" and ctx.first_row is None:
        ctx.first_row = {"ground_truth": read_field(table, GT)[0], "data_source": read_field(table, "data_source")[0]}
    report.add(check, "ok", f"{path}: {table.num_rows:,} rows, columns {prompt_key}, {GT}, data_source{note}")
    return table.num_rows


def _local_tokenizer(ctx: Context) -> Optional[str]:
    path = _sel(ctx.cfg, "actor_rollout_ref.model.tokenizer_path") or _sel(ctx.cfg, "actor_rollout_ref.model.path")
    path = _local(str(path), ctx.working_dir) if path else None
    if path and any(os.path.isfile(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer.model")):
        return path
    return None


def _check_prompt_lengths(ctx: Context, report: Report, prompt_key: str) -> None:
    tok_dir = _local_tokenizer(ctx)
    limit = num(ctx.cfg, "data.max_prompt_length", int, 1)
    if any(c.startswith("data: train") and s == "FAIL" for c, s, _ in report.rows):
        return  # the train files are refused already
    if tok_dir is None:
        report.add("data: prompt lengths", "n/a", f"not measured: the model's tokenizer is not a local folder "
                   f"(limit data.max_prompt_length={limit})")
        return
    import pyarrow.parquet as pq
    from tqdm import tqdm
    from transformers import AutoTokenizer

    from verl.utils.tokenizer import normalize_token_ids  # how verl's length filter counts (rl_dataset.py)

    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    kwargs = {k: v for k, v in (_sel(ctx.cfg, "data.apply_chat_template_kwargs") or {}).items()
              if k not in ("tokenize", "return_dict", "return_tensors")}
    over = total = 0
    for raw in _files(_sel(ctx.cfg, "data.train_files")):
        path = _local(str(raw), ctx.working_dir)
        if _remote(str(raw)) or not os.path.isfile(path) or not path.endswith(".parquet"):
            continue
        prompts = pq.read_table(path, columns=[prompt_key]).column(prompt_key).to_pylist()
        for messages in tqdm(prompts, desc="preflight: prompt lengths", unit="prompt", file=sys.stderr,
                             disable=len(prompts) < 2000):
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
            total += 1
            over += len(normalize_token_ids(ids)) > limit
    if over == 0:
        report.add("data: prompt lengths", "ok", f"0 of {total:,} train prompts over data.max_prompt_length={limit}")
    elif _sel(ctx.cfg, "data.filter_overlong_prompts"):
        report.add("data: prompt lengths", "warn", f"{over:,} of {total:,} train prompts over "
                   f"data.max_prompt_length={limit}: verl filters them out (filter_overlong_prompts)")
    elif _sel(ctx.cfg, "data.truncation") == "error":
        report.add("data: prompt lengths", "FAIL", f"{over:,} of {total:,} train prompts over data.max_prompt_length="
                   f"{limit} with data.truncation=error: verl stops on the first one")
    else:
        report.add("data: prompt lengths", "warn", f"{over:,} of {total:,} train prompts over data.max_prompt_length="
                   f"{limit}: truncated ({_sel(ctx.cfg, 'data.truncation')})")


# ---- reward, backend ---------------------------------------------------------------------------------------------


def check_reward(ctx: Context, report: Report) -> None:
    cfg = ctx.cfg
    from omegaconf import OmegaConf, open_dict

    path = _sel(cfg, "reward.custom_reward_function.path")
    name = _sel(cfg, "reward.custom_reward_function.name")
    try:
        if path:
            from verl.trainer.ppo.reward import get_custom_reward_fn

            local = OmegaConf.create({"reward": {"custom_reward_function": _sel(cfg, "reward.custom_reward_function")}})
            if not str(path).startswith("pkg://") and not os.path.isabs(str(path)):
                with open_dict(local):
                    local.reward.custom_reward_function.path = _local(str(path), ctx.working_dir)
            fn = get_custom_reward_fn(local)
            label = f"{path}:{name}"
        else:
            from verl.utils.reward_score import default_compute_score as fn

            label = "verl's default_compute_score"
    except Exception as exc:  # noqa: BLE001 - verl would fail the same way in the reward workers
        report.add("reward", "FAIL", f"reward.custom_reward_function {path}:{name} does not load: {exc}"
                   f"{_root_cause(exc, str(path))}")
        return
    if ctx.first_row is None:
        report.add("reward", "n/a", f"{label} loads; not scored (no local training row)")
        return
    gt, source = ctx.first_row["ground_truth"], ctx.first_row["data_source"]
    try:
        out = fn(data_source=source, solution_str=f"Answer: {gt}", ground_truth=gt, extra_info={})
        score = float(out["score"] if isinstance(out, dict) else out)
    except Exception as exc:  # noqa: BLE001
        fix = ""
        if not path or isinstance(exc, NotImplementedError):
            fix = (f"; verl's default_compute_score has no scorer for data_source {source!r}: set "
                   "reward.custom_reward_function.path=pkg://verl_ebpo.rewards "
                   "reward.custom_reward_function.name=compute_score")
        report.add("reward", "FAIL", f"{label} raised on the first training row's ground truth {gt!r} (data_source "
                   f"{source!r}): {type(exc).__name__}: {exc}{fix}")
        return
    if score != 1.0:
        report.add("reward", "FAIL", f"{label} scores the first training row's ground truth {gt!r} against itself "
                   f"(data_source {source}) as {score:g}, not 1")
        return
    report.add("reward", "ok", f"{label}: 'Answer: {gt}' against ground truth {gt!r} scores 1")


def _root_cause(exc: BaseException, path: str) -> str:
    """' (cause: TYPE: message, FILE line N)': the innermost exception under verl's loader and where it was raised
    (a SyntaxError's own file and line; else the last frame in the reward file, else the last frame)."""
    import traceback

    root, seen = exc, set()
    while (root.__cause__ or root.__context__) is not None and id(root) not in seen:
        seen.add(id(root))
        root = root.__cause__ or root.__context__
    if root is exc and not isinstance(exc, SyntaxError):
        frames = traceback.extract_tb(exc.__traceback__)
    else:
        frames = traceback.extract_tb(root.__traceback__)
    where = ""
    if isinstance(root, SyntaxError) and root.lineno:
        where = f", {root.filename} line {root.lineno}"
    elif frames:
        base = os.path.basename(path.removeprefix("pkg://").replace(".", "/")) if path else ""
        mine = [f for f in frames if base and os.path.basename(f.filename).startswith(base)] or frames
        where = f", {mine[-1].filename} line {mine[-1].lineno}"
    message = root.msg if isinstance(root, SyntaxError) else str(root)
    return f" (cause: {type(root).__name__}: {message}{where})"
