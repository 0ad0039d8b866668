# shellcheck shell=bash
# recipes/common.sh: the settings every run shares. Sourced by recipes/<model>/run_<algo>.sh, never run.
#
# A run script (recipes/<model>/run_<algo>.sh) sets ALGO, sources this file and calls recipe_run "$@".
# This file reads recipes/algos/$ALGO.sh (the algorithm's own keys, `algo_args`, and its schedule and
# data order) and the caller's recipes/<model>/model.env.
# The command line is, in this order (Hydra: the last value of a key wins):
#
#   python3 -m verl.trainer.main_ppo  <shared keys>  <backend keys>  <order keys>  <ALGO_ARGS>  "$@"
#
# so the runs of a model differ only in ALGO_ARGS, the order keys and the schedule, by construction.
# It is launched like verl's own recipes, with `ray job submit` (LAUNCH=ray-job, the default) against
# RAY_ADDRESS, uploading WORKING_DIR with recipes/runtime_env.yaml; LAUNCH=local runs it in this shell.
#
# Environment (defaults in brackets; PROTOCOL=paper values first, PROTOCOL=authors after a slash):
#   PROTOCOL          paper: what the paper describes, with fair baselines | authors: key for key what the
#                     authors' public scripts ran (recipes/README.md lists every difference)   [paper]
#   MODEL_PATH        HF id or local folder   [model.env: POSTTRAINED_MODEL_PATH; BASE_MODEL_PATH for -diff]
#   DATA_DIR          folder written by recipes/data/prepare_data.py
#                     [$HOME/data/verl_ebpo (prepared with --holdout 500) / $HOME/data/verl_ebpo_authors]
#   TRAIN_FILE        [$DATA_DIR/dapo_math_17k.parquet]
#   VAL_FILES         Hydra list of parquet files validated during training
#                     [$DATA_DIR/dapo_math_holdout.parquet / $DATA_DIR/aime24.parquet]
#   NNODES            [4]        N_GPUS_PER_NODE   [8]          (the paper: 4 nodes x 8 H200)
#   GROUP_SIZE        G, responses per prompt (actor_rollout_ref.rollout.n)  [4]
#   PROJECT_NAME      [verl_ebpo]
#   EXPERIMENT_NAME   [<model>-<algo>-g<G>, plus -<order> when ORDER is not the script's own, plus -authors]
#   BACKEND           learner: fsdp (FSDP2) | megatron   [fsdp]
#   ORDER             training-data order: random | topic | diff | file (the file's own order, no shuffle)
#                     [random; authors' EBPO-naive: file; the _topic/_diff scripts fix it]
#   DIFFICULTY_FIELD  the pass-rate label ORDER=diff sorts by   [extra_info.difficulty_<model>]
#   CKPTS_ROOT        checkpoints go to $CKPTS_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME   [$HOME/ckpts]
#   TOTAL_STEPS, TOTAL_EPOCHS, SAVE_FREQ   [1000, 100, 100; -diff: null, 1, 100 /
#                     baselines null, 6, 50; EBPO null, 20, 10; -diff null, 1, 10]
#   TEST_FREQ [50 / 5]   VAL_N [16 / 8]   KEEP_CKPTS [null = keep all]   VAL_BEFORE_TRAIN [True]
#   LOGGER            [[console,wandb,file]]: `file` is verl's file logger, read by `verl-ebpo compare`; each
#                     attempt of a run writes under $CKPTS_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME/metrics/attempt-<UTC time>/
#   ROLLOUT_TP, SP_SIZE, MEGATRON_TP, MEGATRON_PP   parallelism   [recipes/<model>/model.env]
#   GPU_MEM_UTIL      vLLM's share of GPU memory   [0.7]
#   OFFLOAD           FSDP/Megatron parameter+optimizer offload of the actor   [False]
#   EBPO_PRIOR_SCOPE  running (the paper) | batch (the authors' code)   [running / batch]
#   OVERLONG_BUFFER_LEN [4096]  OVERLONG_PENALTY [1.0]   DAPO's overlong reward shaping (paper protocol)
#   LAUNCH            ray-job: `ray job submit` | local: run main_ppo here   [ray-job]
#   RAY_ADDRESS       the cluster's dashboard address for `ray job submit`   [http://127.0.0.1:8265]
#   WORKING_DIR       uploaded as the job's working directory   [this repository's root]
#   RUNTIME_ENV       [recipes/runtime_env.yaml]     RAY_JOB_ARGS   extra `ray job submit` flags (e.g. --no-wait)
#   PYTHON            [python3]
#   RECIPE_DRY_RUN    1: print the command, one argument a line, and exit (no Python, no verl, no Ray)
#
# `bash recipes/<model>/run_<algo>.sh --cfg job` prints verl's composed config and exits (CPU is enough;
# Hydra's flags always run here, never through `ray job submit`).

if [[ -z "${ALGO:-}" ]]; then
    echo "recipes/common.sh: set ALGO before sourcing (it is sourced by recipes/<model>/run_<algo>.sh)" >&2
    # shellcheck disable=SC2317
    return 2 2>/dev/null || exit 2
fi

RECIPES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$RECIPES_DIR")"
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"

_recipe_die() {
    echo "recipes/$(basename "$MODEL_DIR")/run_${ALGO}.sh: $*" >&2
    exit 2
}

[[ -f "$MODEL_DIR/model.env" ]] || _recipe_die "no model.env beside $(basename "${BASH_SOURCE[1]}") in $MODEL_DIR"
[[ -f "$RECIPES_DIR/algos/$ALGO.sh" ]] || _recipe_die "unknown ALGO=$ALGO (no recipes/algos/$ALGO.sh)"

# ---- the protocol: checked first, the algorithm's defaults depend on it ---------------------------
: "${PROTOCOL:=paper}"
case "$PROTOCOL" in
    paper | authors) ;;
    *) _recipe_die "PROTOCOL must be paper or authors, got '$PROTOCOL'" ;;
esac

# The algorithm's defaults (SCHEDULE, ORDER, CURRICULUM) come first, then the model's settings.
SCHEDULE=main
CURRICULUM=0
DEFAULT_ORDER=random
# shellcheck source=/dev/null
source "$RECIPES_DIR/algos/$ALGO.sh"
# shellcheck source=/dev/null
source "$MODEL_DIR/model.env"

# ---- where things are -------------------------------------------------------------------------
if [[ "$CURRICULUM" == 1 ]]; then
    : "${MODEL_PATH:=$BASE_MODEL_PATH}"
else
    : "${MODEL_PATH:=$POSTTRAINED_MODEL_PATH}"
fi
if [[ "$PROTOCOL" == paper ]]; then
    : "${DATA_DIR:=$HOME/data/verl_ebpo}"
    : "${VAL_FILES:=[$DATA_DIR/dapo_math_holdout.parquet]}"
else
    : "${DATA_DIR:=$HOME/data/verl_ebpo_authors}"
    : "${VAL_FILES:=[$DATA_DIR/aime24.parquet]}"
fi
: "${TRAIN_FILE:=$DATA_DIR/dapo_math_17k.parquet}"
: "${CKPTS_ROOT:=$HOME/ckpts}"
: "${PYTHON:=python3}"

# ---- cluster and launch -----------------------------------------------------------------------
: "${NNODES:=4}"
: "${N_GPUS_PER_NODE:=8}"
: "${BACKEND:=fsdp}"
: "${LAUNCH:=ray-job}"
: "${RAY_ADDRESS:=http://127.0.0.1:8265}"
: "${WORKING_DIR:=$REPO_ROOT}"
: "${RUNTIME_ENV:=$RECIPES_DIR/runtime_env.yaml}"
: "${RAY_JOB_ARGS:=}"

# ---- the paper's training settings (both protocols) -------------------------------------------
: "${GROUP_SIZE:=4}"
TRAIN_BATCH_SIZE=512
PPO_MINI_BATCH_SIZE=128
LR=1e-6
WEIGHT_DECAY=0.01
KL_LOSS_COEF=0.001
MAX_PROMPT_LENGTH=4096
MAX_RESPONSE_LENGTH=8192
CLIP_RATIO=0.2
: "${ORDER:=$DEFAULT_ORDER}"
: "${DIFFICULTY_FIELD:=extra_info.difficulty_${MODEL_TAG}}"

# ---- schedule: (protocol, the algorithm's SCHEDULE) --------------------------------------------
# authors: recipe/ebpo/*.sh of Tonyzhou98/verl @75b0147 (recipes/README.md, "The two protocols").
case "$PROTOCOL:$SCHEDULE" in
    paper:curriculum) _epochs=1 _steps=null _save=100 ;;  # one pass, easy -> hard; final checkpoint
    paper:*) _epochs=100 _steps=1000 _save=100 ;;          # the paper: up to 1000 steps
    authors:baseline) _epochs=6 _steps=null _save=50 ;;   # random-order GRPO / Dr.GRPO / DAPO (~200 steps)
    authors:ebpo) _epochs=20 _steps=null _save=10 ;;      # EBPO-naive / -topic: steps 300, 260, 200 evaluated
    authors:curriculum) _epochs=1 _steps=null _save=10 ;; # every -diff run: one epoch, final step evaluated
    *) _recipe_die "recipes/algos/$ALGO.sh: unknown SCHEDULE '$SCHEDULE' (main | baseline | ebpo | curriculum)" ;;
esac
: "${TOTAL_EPOCHS:=$_epochs}"
: "${TOTAL_STEPS:=$_steps}"
: "${SAVE_FREQ:=$_save}"

# ---- logging / checkpoints / validation -------------------------------------------------------
: "${PROJECT_NAME:=verl_ebpo}"
_default_exp="${MODEL_TAG}-${ALGO}-g${GROUP_SIZE}"
[[ "$ORDER" == "$DEFAULT_ORDER" ]] || _default_exp="${_default_exp}-${ORDER}"
[[ "$PROTOCOL" == paper ]] || _default_exp="${_default_exp}-${PROTOCOL}"
: "${EXPERIMENT_NAME:=$_default_exp}"
: "${KEEP_CKPTS:=null}"
: "${VAL_BEFORE_TRAIN:=True}"
: "${LOGGER:=[console,wandb,file]}"
if [[ "$PROTOCOL" == paper ]]; then
    # Maj@16 on the held-out split picks the best checkpoint (recipes/tools/best_checkpoint.py)
    : "${TEST_FREQ:=50}"
    : "${VAL_N:=16}"
    _val_temperature=1.0 _val_do_sample=True
else
    # their scripts: aime-2024 every 5 steps, val_kwargs.n=8, that verl's greedy validation defaults
    : "${TEST_FREQ:=5}"
    : "${VAL_N:=8}"
    _val_temperature=0 _val_do_sample=False
fi

# ---- performance (do not change the algorithm) ------------------------------------------------
: "${GPU_MEM_UTIL:=0.7}"
: "${OFFLOAD:=False}"
: "${ROLLOUT_TP:=1}"
: "${SP_SIZE:=1}"
: "${MEGATRON_TP:=1}"
: "${MEGATRON_PP:=1}"
_seq_len=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))
: "${ACTOR_MAX_TOKENS_PER_GPU:=$((_seq_len * 2 / SP_SIZE))}"
: "${INFER_MAX_TOKENS_PER_GPU:=$((_seq_len * 4 / SP_SIZE))}"

# ---- algorithm knobs read by the run scripts --------------------------------------------------
if [[ "$PROTOCOL" == paper ]]; then
    : "${EBPO_PRIOR_SCOPE:=running}"
else
    : "${EBPO_PRIOR_SCOPE:=batch}"
fi
: "${OVERLONG_BUFFER_LEN:=4096}"
: "${OVERLONG_PENALTY:=1.0}"

# ---- checks -----------------------------------------------------------------------------------
[[ -n "${MODEL_PATH:-}" ]] || _recipe_die "MODEL_PATH is empty"
[[ "$GROUP_SIZE" =~ ^[0-9]+$ && "$GROUP_SIZE" -ge 2 ]] || _recipe_die "GROUP_SIZE must be an integer >= 2, got '$GROUP_SIZE'"
[[ "$NNODES" =~ ^[1-9][0-9]*$ ]] || _recipe_die "NNODES must be a positive integer, got '$NNODES'"
[[ "$N_GPUS_PER_NODE" =~ ^[1-9][0-9]*$ ]] || _recipe_die "N_GPUS_PER_NODE must be a positive integer, got '$N_GPUS_PER_NODE'"
case "$BACKEND" in fsdp | megatron) ;; *) _recipe_die "BACKEND must be fsdp or megatron, got '$BACKEND'" ;; esac
case "$ORDER" in random | topic | diff | file) ;; *) _recipe_die "ORDER must be random, topic, diff or file, got '$ORDER'" ;; esac
case "$EBPO_PRIOR_SCOPE" in running | batch) ;; *) _recipe_die "EBPO_PRIOR_SCOPE must be running or batch, got '$EBPO_PRIOR_SCOPE'" ;; esac
case "$LAUNCH" in ray-job | local) ;; *) _recipe_die "LAUNCH must be ray-job or local, got '$LAUNCH'" ;; esac

# job_path FILE: how the trainer reaches FILE, a file of this repository: relative to WORKING_DIR when the
# job is submitted with `ray job submit` (its processes start in their node's copy of WORKING_DIR),
# absolute otherwise.
job_path() {
    local file="$1"
    if [[ "$LAUNCH" == ray-job && "$file" == "$WORKING_DIR"/* ]]; then
        printf '%s\n' "${file#"$WORKING_DIR"/}"
    else
        printf '%s\n' "$file"
    fi
}

# ---- the reward: both protocols score with one function for every algorithm -------------------
if [[ "$PROTOCOL" == paper ]]; then
    # math-verify on the last \boxed{} or `Answer:` line, 1/0 (verl_ebpo.rewards)
    REWARD_PATH=pkg://verl_ebpo.rewards
    REWARD_NAME=compute_score
else
    # their verl's `math_dapo`: Minerva-normalised string match on the last `Answer:` line, +1/-1
    REWARD_PATH="$(job_path "$RECIPES_DIR/eval/authors_scorer.py")"
    REWARD_NAME=compute_score
fi
if [[ "$PROTOCOL" == paper ]]; then
    DATA_SEED=42
else
    DATA_SEED=1  # their verl's sampler seed when data.seed is unset (main_ppo.create_rl_sampler)
fi

# ---- the shared command line ------------------------------------------------------------------
COMMON_ARGS=(
    # data: DAPO-Math-17k (deduplicated), DAPO-style prompt (recipes/data/prepare_data.py)
    data.train_files="$TRAIN_FILE"
    data.val_files="$VAL_FILES"
    data.prompt_key=prompt
    data.max_prompt_length="$MAX_PROMPT_LENGTH"
    data.max_response_length="$MAX_RESPONSE_LENGTH"
    data.train_batch_size="$TRAIN_BATCH_SIZE"
    data.filter_overlong_prompts=True
    data.truncation=error
    data.seed="$DATA_SEED"
    # model
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    # policy loss and optimiser: identical for every algorithm unless its script overrides a key
    actor_rollout_ref.actor.optim.lr="$LR"
    actor_rollout_ref.actor.optim.weight_decay="$WEIGHT_DECAY"
    actor_rollout_ref.actor.ppo_mini_batch_size="$PPO_MINI_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_epochs=1
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef="$KL_LOSS_COEF"
    actor_rollout_ref.actor.kl_loss_type=low_var_kl
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.loss_agg_mode=token-mean
    actor_rollout_ref.actor.clip_ratio_low="$CLIP_RATIO"
    actor_rollout_ref.actor.clip_ratio_high="$CLIP_RATIO"
    actor_rollout_ref.actor.use_dynamic_bsz=True
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu="$ACTOR_MAX_TOKENS_PER_GPU"
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu="$INFER_MAX_TOKENS_PER_GPU"
    algorithm.use_kl_in_reward=False
    # rollout: vLLM, G samples per prompt at temperature 1
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.mode=async
    actor_rollout_ref.rollout.n="$GROUP_SIZE"
    actor_rollout_ref.rollout.temperature=1.0
    actor_rollout_ref.rollout.top_p=1.0
    actor_rollout_ref.rollout.top_k=-1
    actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"
    actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEM_UTIL"
    actor_rollout_ref.rollout.max_num_batched_tokens="$_seq_len"
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="$INFER_MAX_TOKENS_PER_GPU"
    actor_rollout_ref.rollout.val_kwargs.temperature="$_val_temperature"
    actor_rollout_ref.rollout.val_kwargs.top_p=1.0
    actor_rollout_ref.rollout.val_kwargs.do_sample="$_val_do_sample"
    actor_rollout_ref.rollout.val_kwargs.n="$VAL_N"
    # reward: the same verifier for every algorithm (paper DAPO only adds its overlong shaping on top)
    reward.reward_manager.name=naive
    reward.custom_reward_function.path="$REWARD_PATH"
    reward.custom_reward_function.name="$REWARD_NAME"
    # trainer
    trainer.nnodes="$NNODES"
    trainer.n_gpus_per_node="$N_GPUS_PER_NODE"
    trainer.project_name="$PROJECT_NAME"
    trainer.experiment_name="$EXPERIMENT_NAME"
    trainer.logger="$LOGGER"
    +ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_ROOT="$CKPTS_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME/metrics/attempt-$(date -u +%Y%m%dT%H%M%SZ)"
    trainer.total_epochs="$TOTAL_EPOCHS"
    trainer.total_training_steps="$TOTAL_STEPS"
    trainer.save_freq="$SAVE_FREQ"
    trainer.test_freq="$TEST_FREQ"
    trainer.max_actor_ckpt_to_keep="$KEEP_CKPTS"
    trainer.val_before_train="$VAL_BEFORE_TRAIN"
    trainer.log_val_generations=10
    trainer.resume_mode=auto
    trainer.default_local_dir="$CKPTS_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME"
)

if [[ "$BACKEND" == fsdp ]]; then
    BACKEND_ARGS=(
        actor_rollout_ref.actor.strategy=fsdp2
        actor_rollout_ref.actor.fsdp_config.strategy=fsdp2
        actor_rollout_ref.ref.fsdp_config.strategy=fsdp2
        actor_rollout_ref.actor.fsdp_config.param_offload="$OFFLOAD"
        actor_rollout_ref.actor.fsdp_config.optimizer_offload="$OFFLOAD"
        actor_rollout_ref.ref.fsdp_config.param_offload=True
        actor_rollout_ref.actor.ulysses_sequence_parallel_size="$SP_SIZE"
        actor_rollout_ref.ref.ulysses_sequence_parallel_size="$SP_SIZE"
    )
else
    # verl 0.9.1: `model_engine=megatron` on ppo_trainer.yaml (ppo_megatron_trainer.yaml is its deprecated alias).
    BACKEND_ARGS=(
        model_engine=megatron
        actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$MEGATRON_TP"
        actor_rollout_ref.actor.megatron.pipeline_model_parallel_size="$MEGATRON_PP"
        actor_rollout_ref.ref.megatron.tensor_model_parallel_size="$MEGATRON_TP"
        actor_rollout_ref.ref.megatron.pipeline_model_parallel_size="$MEGATRON_PP"
        actor_rollout_ref.actor.megatron.param_offload="$OFFLOAD"
        actor_rollout_ref.actor.megatron.optimizer_offload="$OFFLOAD"
        actor_rollout_ref.ref.megatron.param_offload=True
    )
fi

# ---- training-data order (verl_ebpo.samplers) -------------------------------------------------
# shellcheck source=recipes/order.sh
source "$RECIPES_DIR/order.sh"
ORDER_ARGS=()
if [[ "$ORDER" == file ]]; then
    # the training file's own row order, no shuffle (a SequentialSampler): the authors' EBPO-naive runs
    ORDER_ARGS=(data.shuffle=False)
else
    recipe_order_args "$ORDER"
fi

# ---- the algorithm's own keys (recipes/algos/$ALGO.sh) ------------------------------------------
ALGO_ARGS=()
algo_args

# recipe_run "$@": run verl's trainer with the shared, backend, order and algorithm keys, then the
# caller's extra overrides (which win: Hydra keeps the last value of a key). Hydra's own flags among the
# caller's arguments (--cfg job, --resolve, --info, ...) go last, where Hydra's argument parser wants them.
# LAUNCH=ray-job submits it with `ray job submit` (each argument shell-quoted: Ray runs the entrypoint
# through a shell); a command with Hydra flags (--cfg job, ...) only prints, so it always runs here.
recipe_run() {
    local overrides=() flags=()
    while (($#)); do
        case "$1" in
            --cfg | -c | --package | -p | --config-name | -cn | --config-path | -cp | --config-dir | -cd | --experimental-rerun)
                flags+=("$1")
                if (($# > 1)); then flags+=("$2"); shift; fi
                ;;
            --info | -i)
                flags+=("$1")
                case "${2-}" in all | config | defaults | defaults-tree | plugins | searchpath) flags+=("$2"); shift ;; esac
                ;;
            -*) flags+=("$1") ;;
            *) overrides+=("$1") ;;
        esac
        shift
    done
    local trainer=("$PYTHON" -m verl.trainer.main_ppo
        "${COMMON_ARGS[@]}" "${BACKEND_ARGS[@]}" "${ORDER_ARGS[@]}" "${ALGO_ARGS[@]}" "${overrides[@]}" "${flags[@]}")
    local submit=()
    if [[ "$LAUNCH" == ray-job && ${#flags[@]} -eq 0 ]]; then
        # shellcheck disable=SC2206  # RAY_JOB_ARGS: extra flags, split on spaces on purpose
        submit=(ray job submit --address "$RAY_ADDRESS" --runtime-env "$RUNTIME_ENV" --working-dir "$WORKING_DIR"
            ${RAY_JOB_ARGS} --)
    fi
    if [[ "${RECIPE_DRY_RUN:-0}" == 1 ]]; then
        printf '%s\n' "${submit[@]}" "${trainer[@]}"
        return 0
    fi
    echo "[recipes] $(basename "$MODEL_DIR")/run_${ALGO}.sh: protocol=$PROTOCOL model=$MODEL_PATH G=$GROUP_SIZE" \
        "backend=$BACKEND order=$ORDER nodes=${NNODES}x${N_GPUS_PER_NODE} exp=$EXPERIMENT_NAME" \
        "launch=${submit[0]:+ray job submit to $RAY_ADDRESS}${submit[0]:-here}" >&2
    if ((${#submit[@]})); then
        local quoted=() arg
        for arg in "${trainer[@]}"; do quoted+=("$(printf '%q' "$arg")"); done
        exec "${submit[@]}" "${quoted[@]}"
    fi
    exec "${trainer[@]}"
}
