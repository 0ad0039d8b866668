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
from verl_ebpo.tools.preflight.context import GT, ORDERED, Context, Report, _files, _gb, _local, _remote, _sel
from verl_ebpo.tools.preflight.plan import _backend, check_backend, check_checkpoints, check_model, check_nodes


def compose(overrides: list) -> Any:
    """verl's config for `overrides`, as `python -m verl.trainer.main_ppo OVERRIDES` composes it (its Hydra
    config `ppo_trainer` in verl/trainer/config)."""
    import verl.trainer
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None, job_name="preflight"):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def run_checks(overrides: list, *, gpu_memory_gb: float = 80.0, free_disk_gb=None, shared_dir=None,
               working_dir=None) -> Report:
    cfg = compose(overrides)
    report = Report()
    ctx = Context(cfg, os.path.abspath(working_dir or os.getcwd()), gpu_memory_gb * est.GB, free_disk_gb, shared_dir)
    check_verl(ctx, report)
    check_data(ctx, report)
    check_model(ctx, report)
    check_checkpoints(ctx, report)
    check_memory(ctx, report)
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
    report.add("verl config", "ok", f"validate_config passed (reference policy: {ref}, critic: {critic})")


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
    batch = int(_sel(cfg, "data.train_batch_size"))
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
                              opts if opts is not None and (which == "train" or opts.apply_to != "train") else None)
            if row is None:
                rows_total = None
            elif rows_total is not None:
                rows_total += row
        if which == "train" and rows_total is not None:
            ctx.train_rows = rows_total
            spe = rows_total // batch
            status = "ok" if spe >= 1 else "FAIL"
            report.add("data: steps per epoch", status,
                       f"{rows_total:,} rows // data.train_batch_size {batch} = {spe} steps per epoch"
                       + ("" if spe >= 1 else " (verl drops the incomplete batch: no step would run)"))
    _check_prompt_lengths(ctx, report, prompt_key)


def _check_file(ctx, report, which, raw, prompt_key, opts) -> Optional[int]:
    check = f"data: {which}"
    if _remote(raw):
        report.add(check, "n/a", f"{raw}: remote, not checked")
        return None
    path = _local(raw, ctx.working_dir)
    from verl_ebpo.files import unreadable_reason

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
    wanted = [prompt_key, GT, "data_source", *(opts.value_fields() if opts is not None else ())]
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
    note = ""
    if opts is not None:
        from verl_ebpo.samplers.dataset import build_plan, loader_batch

        try:
            plan = build_plan(table, opts, loader_batch=loader_batch(_sel(ctx.cfg, "data")) if which == "train" else None)
        except ValueError as exc:
            report.add(check, "FAIL", f"{path}: {exc}")
            return None
        note = f"; {', '.join(opts.value_fields())} on every row ({len(plan):,} rows served)"
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
    limit = int(_sel(ctx.cfg, "data.max_prompt_length"))
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


def _tokens(cfg, prefix: str, dyn_key: str, max_key: str, mbs_key: str, seq: int) -> tuple[Optional[int], str]:
    """Tokens of one micro-batch on one GPU, and the key that sets it."""
    if _sel(cfg, f"{prefix}.{dyn_key}"):
        return int(_sel(cfg, f"{prefix}.{max_key}")), f"{prefix}.{max_key}"
    mbs = _sel(cfg, f"{prefix}.{mbs_key}")
    return (int(mbs) * seq if mbs else None), f"{prefix}.{mbs_key}"


def check_memory(ctx: Context, report: Report) -> None:
    cfg = ctx.cfg
    if ctx.params is None:
        report.add("memory", "n/a", "not estimated (no model config.json)")
        return
    backend = _backend(cfg)
    world = int(_sel(cfg, "trainer.nnodes")) * int(_sel(cfg, "trainer.n_gpus_per_node"))
    a = "actor_rollout_ref.actor"
    if backend == "fsdp":
        tp = pp = cp = 1
        offload = (bool(_sel(cfg, f"{a}.fsdp_config.param_offload")), bool(_sel(cfg, f"{a}.fsdp_config.optimizer_offload")))
        ref_offload = bool(_sel(cfg, "actor_rollout_ref.ref.fsdp_config.param_offload"))
    else:
        tp, pp, cp = (int(_sel(cfg, f"{a}.megatron.{k}_parallel_size") or 1)
                      for k in ("tensor_model", "pipeline_model", "context"))
        offload = (bool(_sel(cfg, f"{a}.megatron.param_offload")), bool(_sel(cfg, f"{a}.megatron.optimizer_offload")))
        ref_offload = bool(_sel(cfg, "actor_rollout_ref.ref.megatron.param_offload"))
    model_bytes = est.dtype_bytes(_sel(cfg, f"{a}.fsdp_config.model_dtype"), 4)
    shards = est.learner_shards(ctx.params, backend, world, tp=tp, pp=pp, cp=cp, model_bytes=model_bytes,
                                param_offload=offload[0], optimizer_offload=offload[1])
    ref_shard = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.trainer.ppo.utils import need_reference_policy

        uses_ref = need_reference_policy(cfg)
    if uses_ref and not ref_offload:
        ref_shard = est.learner_shards(ctx.params, backend, world, tp=tp, pp=pp, cp=cp, model_bytes=model_bytes).params
    resident = shards.params + shards.optimizer + ref_shard
    vocab = int(ctx.model_cfg["vocab_size"])
    seq = int(_sel(cfg, "data.max_prompt_length")) + int(_sel(cfg, "data.max_response_length"))
    r = "actor_rollout_ref.rollout"
    util = float(_sel(cfg, f"{r}.gpu_memory_utilization"))
    rollout_total = util * ctx.gpu_bytes + resident
    gpu = f"{ctx.gpu_bytes / est.GB:g} GB (--gpu-memory-gb)"
    status = {"ok": "ok", "tight": "warn", "fail": "FAIL"}
    v = est.verdict(rollout_total, ctx.gpu_bytes)
    report.add("memory: rollout", status[v], f"gpu_memory_utilization {util:g} x {gpu} + resident learner states "
               f"{_gb(resident)} = {_gb(rollout_total)}")
    chunk = int(_sel(cfg, f"{a}.entropy_from_logits_chunk_size") or 2048)
    passes = []
    t, key = _tokens(cfg, r, "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu",
                     "log_prob_micro_batch_size_per_gpu", seq)
    chunked = bool(_sel(cfg, f"{a}.entropy_from_logits_with_chunking"))
    if t:
        passes.append(("old log-prob", t, True, chunked, 1, resident, key))
    if uses_ref:
        t, key = _tokens(cfg, "actor_rollout_ref.ref", "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu",
                         "log_prob_micro_batch_size_per_gpu", seq)
        if t:
            passes.append(("ref log-prob", t, False, False, 1, resident, key))
    t, key = _tokens(cfg, a, "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "ppo_micro_batch_size_per_gpu", seq)
    if t:
        ent = bool(_sel(cfg, f"{a}.calculate_entropy")) or float(_sel(cfg, f"{a}.entropy_coeff") or 0) != 0
        passes.append(("update", t, ent, chunked, 2, resident + shards.grads, key))
    for name, tokens, entropy, chunk_on, copies, states, key in passes:
        logits = copies * est.logits_bytes(tokens, vocab, tp)
        extra = est.entropy_bytes(tokens, vocab, tp, chunk_on, chunk) if entropy else 0
        total = logits + extra + states
        v = est.verdict(total, ctx.gpu_bytes)
        ent = ("" if not entropy else
               f" + entropy ({'chunked' if chunk_on else 'not chunked'}) {_gb(extra)}")
        figure = (f"{tokens:,} tokens/GPU x {vocab:,} vocabulary{f' / TP {tp}' if tp > 1 else ''}: logits"
                  f"{' + gradient' if copies == 2 else ''} {_gb(logits)}{ent} + states {_gb(states)} = {_gb(total)} "
                  f"of {gpu}, activations not counted")
        if v == "fail":
            figure += (f": lower {key}" + ("" if not entropy or chunk_on else
                                          " or set actor_rollout_ref.actor.entropy_from_logits_with_chunking=True"))
        report.add(f"memory: {name}", status[v], figure)


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
    except Exception as exc:  # noqa: BLE001 - verl would fail the same way in the TaskRunner
        report.add("reward", "FAIL", f"reward.custom_reward_function {path}:{name} does not load: {exc}")
        return
    if ctx.first_row is None:
        report.add("reward", "n/a", f"{label} loads; not scored (no local training row)")
        return
    gt, source = ctx.first_row["ground_truth"], ctx.first_row["data_source"]
    try:
        out = fn(data_source=source, solution_str=f"Answer: {gt}", ground_truth=gt, extra_info={})
        score = float(out["score"] if isinstance(out, dict) else out)
    except Exception as exc:  # noqa: BLE001
        report.add("reward", "FAIL", f"{label} raised on the first training row's ground truth {gt!r}: {exc}")
        return
    if score != 1.0:
        report.add("reward", "FAIL", f"{label} scores the first training row's ground truth {gt!r} against itself "
                   f"(data_source {source}) as {score:g}, not 1")
        return
    report.add("reward", "ok", f"{label}: 'Answer: {gt}' against ground truth {gt!r} scores 1")
