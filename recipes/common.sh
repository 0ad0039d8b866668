# shellcheck shell=bash
# recipes/common.sh: the settings every run shares. Sourced by recipes/<model>/run_<algo>.sh, never run.
#
# A run script (recipes/<model>/run_<algo>.sh) sets ALGO, sources this file and calls recipe_run "$@".
# This file reads recipes/algos/$ALGO.sh (the algorithm's schedule and data order; its verl keys come from
# `python -m verl_ebpo.tools.algorithms`, the one definition the CPU smoke and `verl-ebpo demo` use too) and
# the caller's recipes/<model>/model.env. The command line is, in this order (Hydra: the last value wins):
#
#   python3 -m verl.trainer.main_ppo  <shared keys>  <backend keys>  <order keys>  <ALGO_ARGS>  "$@"
#
# so the runs of a model differ only in ALGO_ARGS, the order keys and the schedule, by construction.
# Every value a user changes is an environment variable (recipes/README.md has the table); keys derived from
# another (DAPO's max_resp_len and overlong buffer, Dr.GRPO's loss_scale_factor, token budgets, the run name)
# follow it whether it is set by variable or by a trailing override (data.max_response_length=2048,
# data.max_prompt_length=, data.seed=, actor_rollout_ref.model.path=, actor_rollout_ref.rollout.n=).
#
# Main variables [defaults; PROTOCOL=paper value first, authors after a slash]:
#   PRESET            1gpu: Qwen3-0.6B(-Base) on 1 GPU | 1node: Qwen3-1.7B(-Base) on 8 GPUs | unset: the paper
#   SEED [42 / 1]  MODEL_PATH [model.env]  TRAIN_BATCH_SIZE [512]  PPO_MINI_BATCH_SIZE [128]  LR [1e-6]
#   MAX_PROMPT_LENGTH [4096]  MAX_RESPONSE_LENGTH [8192]  GROUP_SIZE [4]
#   NNODES, N_GPUS_PER_NODE [detected (nvidia-smi here; the Ray cluster at RAY_ADDRESS when set); else 1, 8]
#   ROLLOUT vllm|sglang [vllm]  BACKEND fsdp|megatron [fsdp]  PROTOCOL paper|authors [paper]
#   LAUNCH ray-job|local [ray-job; local under SMOKE=cpu]  SMOKE cpu: the CPU smoke (verl_ebpo.tools.cpu.smoke)
#   RECIPE_DRY_RUN=1  print the command, one argument a line, and exit (nothing launched); =preflight: the
#                     preflight's command instead; 0 or unset: launch (any other value is refused)
#   SHARED_DIR        the folder every node mounts (several nodes: required; DATA_DIR and CKPTS_ROOT default under it)
#   GPU_MEMORY_GB [detected; else 80]  one GPU's memory: below 120 the 80 GB preset (token budgets halved, vLLM's
#                     share GPU_MEM_UTIL_80GB of model.env)
#   SKIP_PREFLIGHT=1  launch without `verl-ebpo preflight` (run before every launch; FREE_DISK_GB: the volume's free space)
# and the rest in recipes/README.md ("Variables").
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

# ---- the choices: checked before anything else (also under RECIPE_DRY_RUN=1) ------------------------
PROTOCOL="${PROTOCOL:-paper}"
ROLLOUT="${ROLLOUT:-vllm}"
BACKEND="${BACKEND:-fsdp}"
SMOKE="${SMOKE:-}"
PRESET="${PRESET:-}"
case "$PROTOCOL" in paper | authors) ;; *) _recipe_die "PROTOCOL must be paper or authors, got '$PROTOCOL'" ;; esac
case "$ROLLOUT" in vllm | sglang) ;; *) _recipe_die "ROLLOUT must be vllm or sglang, got '$ROLLOUT'" ;; esac
case "$BACKEND" in fsdp | megatron) ;; *) _recipe_die "BACKEND must be fsdp or megatron, got '$BACKEND'" ;; esac
case "$SMOKE" in "" | cpu) ;; *) _recipe_die "SMOKE must be cpu (or unset), got '$SMOKE'" ;; esac
case "$PRESET" in "" | 1gpu | 1node) ;; *) _recipe_die "PRESET must be 1gpu or 1node (or unset), got '$PRESET'" ;; esac
RECIPE_DRY_RUN="${RECIPE_DRY_RUN:-0}"
case "$RECIPE_DRY_RUN" in 0 | 1 | preflight) ;; *) _recipe_die "RECIPE_DRY_RUN must be 1 (print the command), preflight (print the preflight's command) or 0 (launch), got '$RECIPE_DRY_RUN'" ;; esac
SKIP_PREFLIGHT="${SKIP_PREFLIGHT:-0}"
case "$SKIP_PREFLIGHT" in 0 | 1) ;; *) _recipe_die "SKIP_PREFLIGHT must be 1 (skip the preflight) or 0, got '$SKIP_PREFLIGHT'" ;; esac

# _recipe_int NAME VALUE MIN MAX: a decimal integer in [MIN, MAX] (digits only: no sign, no leading zero, so bash
# never reads it as octal; at most 10 digits, so its arithmetic never overflows)
_recipe_int() {
    [[ "$2" =~ ^(0|[1-9][0-9]{0,9})$ ]] && (($2 >= $3 && $2 <= $4)) \
        || _recipe_die "$1 must be a decimal integer in [$3, $4] (digits only, no leading zero), got '$2'"
}
# _recipe_real NAME VALUE LOW HIGH [open]: a finite decimal number in [LOW, HIGH] ((LOW, HIGH] with `open`)
_recipe_real() {
    local ok=0
    if [[ "$2" =~ ^([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})([eE][-+]?[0-9]{1,2})?$ ]]; then
        awk -v x="$2" -v lo="$3" -v hi="$4" -v open="${5:-}" \
            'BEGIN { x += 0; exit !((open == "open" ? x > lo : x >= lo) && x <= hi) }' && ok=1
    fi
    local bracket="["
    [[ "${5:-}" == open ]] && bracket="("
    ((ok)) || _recipe_die "$1 must be a decimal number in $bracket$3, $4], got '$2'"
}
if [[ "$PROTOCOL" == paper ]]; then SEED="${SEED:-42}"; else SEED="${SEED:-1}"; fi
[[ "$SEED" =~ ^[0-9]+$ ]] || _recipe_die "SEED must be a non-negative integer, got '$SEED'"
_recipe_int SEED "$SEED" 0 2147483647
if [[ -n "$SMOKE" ]]; then LAUNCH="${LAUNCH:-local}"; else LAUNCH="${LAUNCH:-ray-job}"; fi
case "$LAUNCH" in ray-job | local) ;; *) _recipe_die "LAUNCH must be ray-job or local, got '$LAUNCH'" ;; esac

# _recipe_check_model PATH: an HF id (org/name) or a folder with a config.json
_recipe_check_model() {
    local path="$1"
    if [[ -d "$path" ]]; then
        [[ -f "$path/config.json" ]] || _recipe_die "MODEL_PATH '$path' is a folder without config.json"
    elif ! [[ "$path" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
        _recipe_die "MODEL_PATH must be an HF id (org/name) or a folder with config.json, got '$path'"
    fi
}

# The algorithm's defaults (SCHEDULE, ORDER, CURRICULUM) come first, then the model's settings.
SCHEDULE=main
CURRICULUM=0
DEFAULT_ORDER=random
# shellcheck source=/dev/null
source "$RECIPES_DIR/algos/$ALGO.sh"
[[ -n "${ALGO_KEYS:-}" ]] || _recipe_die "recipes/algos/$ALGO.sh sets no ALGO_KEYS"

# ---- presets: the first thing to run, small and fast (every value can still be set) -----------------
case "$PRESET" in
    1gpu)  # one GPU, Qwen3-0.6B: GRPO, DAPO, EBPO over 3 seeds in hours (recipes/README.md)
        if [[ "$CURRICULUM" == 1 ]]; then : "${MODEL_PATH:=Qwen/Qwen3-0.6B-Base}"; else : "${MODEL_PATH:=Qwen/Qwen3-0.6B}"; fi
        : "${NNODES:=1}" "${N_GPUS_PER_NODE:=1}" "${TRAIN_BATCH_SIZE:=64}" "${PPO_MINI_BATCH_SIZE:=32}"
        : "${MAX_PROMPT_LENGTH:=1024}" "${MAX_RESPONSE_LENGTH:=2048}" "${SAVE_FREQ:=50}"
        : "${TEST_FREQ:=25}" "${VAL_N:=4}" "${GPU_MEM_UTIL:=0.5}" "${LR:=1e-6}" "${ROLLOUT_TP:=1}" "${SP_SIZE:=1}"
        : "${MEGATRON_TP:=1}" "${MEGATRON_PP:=1}"
        [[ "$CURRICULUM" == 1 ]] || : "${TOTAL_STEPS:=150}"
        ;;
    1node)  # one node of 8 GPUs, Qwen3-1.7B
        if [[ "$CURRICULUM" == 1 ]]; then : "${MODEL_PATH:=Qwen/Qwen3-1.7B-Base}"; else : "${MODEL_PATH:=Qwen/Qwen3-1.7B}"; fi
        : "${NNODES:=1}" "${N_GPUS_PER_NODE:=8}" "${TRAIN_BATCH_SIZE:=128}" "${PPO_MINI_BATCH_SIZE:=32}"
        : "${MAX_PROMPT_LENGTH:=2048}" "${MAX_RESPONSE_LENGTH:=4096}" "${SAVE_FREQ:=50}"
        : "${TEST_FREQ:=50}" "${VAL_N:=8}" "${ROLLOUT_TP:=1}" "${SP_SIZE:=1}" "${MEGATRON_TP:=1}" "${MEGATRON_PP:=1}"
        [[ "$CURRICULUM" == 1 ]] || : "${TOTAL_STEPS:=300}"
        ;;
esac
# shellcheck source=/dev/null
source "$MODEL_DIR/model.env"

# ---- where things are -------------------------------------------------------------------------
if [[ "$CURRICULUM" == 1 ]]; then
    MODEL_PATH="${MODEL_PATH:-$BASE_MODEL_PATH}"
else
    MODEL_PATH="${MODEL_PATH:-$POSTTRAINED_MODEL_PATH}"
fi
[[ -n "$MODEL_PATH" ]] || _recipe_die "MODEL_PATH is empty"
_recipe_check_model "$MODEL_PATH"
# SHARED_DIR: the folder every node mounts at the same path; the data and checkpoints default under it
SHARED_DIR="${SHARED_DIR:-}"
_data_base="${SHARED_DIR:-$HOME}"
if [[ "$PROTOCOL" == paper ]]; then
    DATA_DIR="${DATA_DIR:-$_data_base/data/verl_ebpo}"
    VAL_FILES="${VAL_FILES:-[$DATA_DIR/dapo_math_holdout.parquet]}"
else
    DATA_DIR="${DATA_DIR:-$_data_base/data/verl_ebpo_authors}"
    VAL_FILES="${VAL_FILES:-[$DATA_DIR/aime24.parquet]}"
fi
TRAIN_FILE="${TRAIN_FILE:-$DATA_DIR/dapo_math_17k.parquet}"
CKPTS_ROOT="${CKPTS_ROOT:-$_data_base/ckpts}"
PYTHON="${PYTHON:-python3}"                # the trainer's (on the cluster under LAUNCH=ray-job)
RECIPE_PYTHON="${RECIPE_PYTHON:-python3}"  # this machine's, for the algorithm keys and SMOKE=cpu

# ---- cluster and launch -----------------------------------------------------------------------
# NNODES, N_GPUS_PER_NODE and GPU_MEMORY_GB not set: what `verl-ebpo preflight` detects (this machine's GPUs with
# nvidia-smi; every alive node of the Ray cluster at RAY_ADDRESS when it is set), else one node of 8 GPUs of
# unknown memory (the preflight then assumes 80 GB and says so). Never under SMOKE=cpu (its own hardware keys).
_ray_address_set="${RAY_ADDRESS:-}"
DETECTED="- - - not_run"
if [[ -z "$SMOKE" && (-z "${NNODES:-}" || -z "${N_GPUS_PER_NODE:-}" || -z "${GPU_MEMORY_GB:-}") ]]; then
    DETECTED="$(PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$RECIPE_PYTHON" -m verl_ebpo.tools.preflight.cluster \
        ${_ray_address_set:+--ray-address "$_ray_address_set"} 2>/dev/null | tail -n 1)" || DETECTED="- - - failed"
fi
read -r _det_nodes _det_gpus _det_gb _ <<<"$DETECTED"
[[ "$_det_nodes" =~ ^[1-9][0-9]*$ ]] || _det_nodes=1
[[ "$_det_gpus" =~ ^[1-9][0-9]*$ ]] || _det_gpus=8
[[ "$_det_gb" =~ ^[1-9][0-9]*$ ]] || _det_gb=""
NNODES="${NNODES:-$_det_nodes}"
N_GPUS_PER_NODE="${N_GPUS_PER_NODE:-$_det_gpus}"
_gpu_memory_declared="${GPU_MEMORY_GB:-}"  # passed to the preflight only when set by the user (it detects its own)
GPU_MEMORY_GB="${GPU_MEMORY_GB:-$_det_gb}"
RAY_ADDRESS="${RAY_ADDRESS:-http://127.0.0.1:8265}"
WORKING_DIR="${WORKING_DIR:-$REPO_ROOT}"
RUNTIME_ENV="${RUNTIME_ENV:-$RECIPES_DIR/runtime_env.yaml}"
RAY_JOB_ARGS="${RAY_JOB_ARGS:-}"

# ---- the paper's training settings (both protocols) -------------------------------------------
GROUP_SIZE="${GROUP_SIZE:-4}"
TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-512}"
PPO_MINI_BATCH_SIZE="${PPO_MINI_BATCH_SIZE:-128}"
LR="${LR:-1e-6}"
WEIGHT_DECAY="${WEIGHT_DECAY:-0.01}"
KL_LOSS_COEF="${KL_LOSS_COEF:-0.001}"
MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-4096}"
MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-8192}"
CLIP_RATIO="${CLIP_RATIO:-0.2}"
ORDER="${ORDER:-$DEFAULT_ORDER}"
DIFFICULTY_FIELD="${DIFFICULTY_FIELD:-extra_info.difficulty_${MODEL_TAG}}"

# ---- schedule: (protocol, the algorithm's SCHEDULE) --------------------------------------------
# authors: recipe/ebpo/*.sh of Tonyzhou98/verl @75b0147 (recipes/README.md, "The two protocols").
case "$PROTOCOL:$SCHEDULE" in
    paper:curriculum) _epochs=1 _steps=null _save=100 ;;  # one pass, easy -> hard; final checkpoint
    paper:*) _epochs=100 _steps=1000 _save=100 ;;          # the paper: up to 1000 steps
    authors:baseline) _epochs=6 _steps=null _save=50 ;;   # random-order GRPO / Dr.GRPO / DAPO (~200 steps)
    authors:ebpo) _epochs=20 _steps=null _save=10 ;;      # EBPO-naive / -topic: steps 300, 260, 200 evaluated (weights kept)
    authors:curriculum) _epochs=1 _steps=null _save=10 ;; # every -diff run: one epoch, final step evaluated
    *) _recipe_die "recipes/algos/$ALGO.sh: unknown SCHEDULE '$SCHEDULE' (main | baseline | ebpo | curriculum)" ;;
esac
TOTAL_EPOCHS="${TOTAL_EPOCHS:-$_epochs}"
TOTAL_STEPS="${TOTAL_STEPS:-$_steps}"
SAVE_FREQ="${SAVE_FREQ:-$_save}"

# ---- logging / checkpoints / validation -------------------------------------------------------
PROJECT_NAME="${PROJECT_NAME:-verl_ebpo}"
# checkpoints kept: the last 2 (verl's rotation; a full 8B checkpoint is ~98 GB), except the authors' EBPO runs,
# whose evaluated step is picked afterwards from every 10th step's weights (null: all)
if [[ "$PROTOCOL:$SCHEDULE" == authors:ebpo ]]; then KEEP_CKPTS="${KEEP_CKPTS:-null}"; fi
KEEP_CKPTS="${KEEP_CKPTS:-2}"
# what a checkpoint holds: the authors' EBPO runs (a save every 10 steps for 20 epochs, the evaluated step picked
# afterwards) keep every step's weights without its optimizer state (4 instead of 12 bytes a parameter); a resume
# of such a run restarts AdamW's moments. Every other run saves everything (exact resume).
if [[ "$PROTOCOL:$SCHEDULE" == authors:ebpo ]]; then CKPT_CONTENTS="${CKPT_CONTENTS:-[model,extra]}"; fi
CKPT_CONTENTS="${CKPT_CONTENTS:-[model,optimizer,extra]}"
VAL_BEFORE_TRAIN="${VAL_BEFORE_TRAIN:-True}"
LOGGER="${LOGGER:-[console,wandb,file]}"
if [[ "$PROTOCOL" == paper ]]; then
    # Maj@16 on the held-out split picks the best checkpoint (recipes/tools/best_checkpoint.py)
    TEST_FREQ="${TEST_FREQ:-50}"
    VAL_N="${VAL_N:-16}"
    _val_temperature=1.0 _val_do_sample=True
else
    # their scripts: aime-2024 every 5 steps, val_kwargs.n=8, that verl's greedy validation defaults
    TEST_FREQ="${TEST_FREQ:-5}"
    VAL_N="${VAL_N:-8}"
    _val_temperature=0 _val_do_sample=False
fi

# ---- performance (do not change the algorithm) ------------------------------------------------
# one GPU's memory in GB [detected; unknown: 80, as the preflight assumes]; below 120 the 80 GB preset: the token
# budgets halve and vLLM's share is the model's GPU_MEM_UTIL_80GB (model.env), so the learner's resident state fits
# beside it when vLLM starts (the preflight's "memory: rollout")
_gpu_gb_for_presets="${GPU_MEMORY_GB:-80}"
if [[ "$_gpu_gb_for_presets" =~ ^[0-9]+$ ]] && ((_gpu_gb_for_presets < 120)); then
    GPU_MEM_UTIL="${GPU_MEM_UTIL:-${GPU_MEM_UTIL_80GB:-0.7}}"
else
    GPU_MEM_UTIL="${GPU_MEM_UTIL:-0.7}"
fi
FREE_DISK_GB="${FREE_DISK_GB:-}"       # the checkpoint volume's free space for the preflight [measured]
OFFLOAD="${OFFLOAD:-False}"
ROLLOUT_TP="${ROLLOUT_TP:-1}"
SP_SIZE="${SP_SIZE:-1}"
MEGATRON_TP="${MEGATRON_TP:-1}"
MEGATRON_PP="${MEGATRON_PP:-1}"
MEGATRON_CP="${MEGATRON_CP:-1}"

# ---- algorithm knobs ----------------------------------------------------------------------------
if [[ "$PROTOCOL" == paper ]]; then
    EBPO_PRIOR_SCOPE="${EBPO_PRIOR_SCOPE:-running}"
else
    EBPO_PRIOR_SCOPE="${EBPO_PRIOR_SCOPE:-batch}"
fi
OVERLONG_PENALTY="${OVERLONG_PENALTY:-1.0}"  # OVERLONG_BUFFER_LEN [half of MAX_RESPONSE_LENGTH], set in recipe_run

# ---- checks -----------------------------------------------------------------------------------
_recipe_int GROUP_SIZE "$GROUP_SIZE" 2 1024
_recipe_int NNODES "$NNODES" 1 1024
_recipe_int N_GPUS_PER_NODE "$N_GPUS_PER_NODE" 1 64
_recipe_int TRAIN_BATCH_SIZE "$TRAIN_BATCH_SIZE" 1 1000000
_recipe_int PPO_MINI_BATCH_SIZE "$PPO_MINI_BATCH_SIZE" 1 1000000
_recipe_int MAX_PROMPT_LENGTH "$MAX_PROMPT_LENGTH" 1 1048576
_recipe_int MAX_RESPONSE_LENGTH "$MAX_RESPONSE_LENGTH" 2 1048576
for _v in ROLLOUT_TP SP_SIZE MEGATRON_TP MEGATRON_PP MEGATRON_CP; do _recipe_int "$_v" "${!_v}" 1 64; done
[[ -z "$GPU_MEMORY_GB" ]] || _recipe_int GPU_MEMORY_GB "$GPU_MEMORY_GB" 1 4096
for _v in ACTOR_MAX_TOKENS_PER_GPU INFER_MAX_TOKENS_PER_GPU; do
    [[ -z "${!_v:-}" ]] || _recipe_int "$_v" "${!_v}" 1 100000000
done
[[ -z "$FREE_DISK_GB" ]] || _recipe_real FREE_DISK_GB "$FREE_DISK_GB" 0 1000000000
_recipe_real LR "$LR" 0 1 open
_recipe_real WEIGHT_DECAY "$WEIGHT_DECAY" 0 1
_recipe_real KL_LOSS_COEF "$KL_LOSS_COEF" 0 100
_recipe_real CLIP_RATIO "$CLIP_RATIO" 0 1 open
_recipe_real GPU_MEM_UTIL "$GPU_MEM_UTIL" 0 1 open
_recipe_real OVERLONG_PENALTY "$OVERLONG_PENALTY" 0 100
case "$ORDER" in random | topic | diff | file) ;; *) _recipe_die "ORDER must be random, topic, diff or file, got '$ORDER'" ;; esac
case "$EBPO_PRIOR_SCOPE" in running | batch) ;; *) _recipe_die "EBPO_PRIOR_SCOPE must be running or batch, got '$EBPO_PRIOR_SCOPE'" ;; esac

# job_path FILE: how the trainer reaches FILE, a file of this repository: relative to WORKING_DIR when the
# job is submitted with `ray job submit` (its processes start in their node's copy of WORKING_DIR),
# absolute otherwise.
job_path() {
    local file="$1"
    if [[ "$LAUNCH" == ray-job && -z "$SMOKE" && "$file" == "$WORKING_DIR"/* ]]; then
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

# _recipe_sanitize TEXT: a folder-safe, lower-case name (the basename of a model path or id)
_recipe_sanitize() {
    local name="${1%/}"
    name="${name##*/}"
    name="$(printf '%s' "$name" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9._-' '_')"
    printf '%s\n' "${name:-model}"
}

# _recipe_prescan OVERRIDES...: the trailing overrides that other keys derive from update their variable
# (Hydra keeps the last value, so the derived keys must follow that one).
_recipe_prescan() {
    local arg value
    for arg in "$@"; do
        value="${arg#*=}"
        case "${arg%%=*}" in
            data.max_response_length | +data.max_response_length | ++data.max_response_length) MAX_RESPONSE_LENGTH="$value" ;;
            data.max_prompt_length | +data.max_prompt_length | ++data.max_prompt_length) MAX_PROMPT_LENGTH="$value" ;;
            data.seed | ++data.seed) SEED="$value" ;;
            actor_rollout_ref.model.path) MODEL_PATH="$value" ;;
            actor_rollout_ref.rollout.n) GROUP_SIZE="$value" ;;
            trainer.total_epochs) TOTAL_EPOCHS="$value" ;;
        esac
    done
    _recipe_int "data.max_response_length (MAX_RESPONSE_LENGTH)" "$MAX_RESPONSE_LENGTH" 2 1048576
    _recipe_int "data.max_prompt_length (MAX_PROMPT_LENGTH)" "$MAX_PROMPT_LENGTH" 1 1048576
    [[ "$SEED" =~ ^[0-9]+$ ]] || _recipe_die "SEED (data.seed) must be a non-negative integer, got '$SEED'"
    _recipe_int "SEED (data.seed)" "$SEED" 0 2147483647
    _recipe_int "actor_rollout_ref.rollout.n (GROUP_SIZE)" "$GROUP_SIZE" 2 1024
    _recipe_check_model "$MODEL_PATH"
}

# shellcheck source=recipes/order.sh
source "$RECIPES_DIR/order.sh"

# _recipe_build: every derived value and the argument arrays (after _recipe_prescan).
_recipe_build() {
    _seq_len=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))
    # token budgets per GPU: (prompt + response) x 2 for the update, x 4 for the log-prob passes (x 1 and x 2 below
    # 120 GB a GPU), divided by the sequence split (FSDP: Ulysses SP_SIZE; Megatron: context parallelism MEGATRON_CP)
    local split=$SP_SIZE mult=2
    [[ "$BACKEND" == megatron ]] && split=$MEGATRON_CP
    ((${GPU_MEMORY_GB:-80} >= 120)) || mult=1
    ACTOR_MAX_TOKENS_PER_GPU="${ACTOR_MAX_TOKENS_PER_GPU:-$((_seq_len * mult / split))}"
    INFER_MAX_TOKENS_PER_GPU="${INFER_MAX_TOKENS_PER_GPU:-$((_seq_len * mult * 2 / split))}"
    OVERLONG_BUFFER_LEN="${OVERLONG_BUFFER_LEN:-$((MAX_RESPONSE_LENGTH / 2))}"
    # the run's name and folder: the model actually used, the algorithm, G and the seed
    if [[ -n "$SMOKE" ]]; then _model_name="smoke_cpu-${MODEL_TAG}"; else _model_name="$(_recipe_sanitize "$MODEL_PATH")"; fi
    _default_exp="${_model_name}-${ALGO}-g${GROUP_SIZE}-s${SEED}"
    [[ "$ORDER" == "$DEFAULT_ORDER" ]] || _default_exp="${_default_exp}-${ORDER}"
    [[ "$PROTOCOL" == paper ]] || _default_exp="${_default_exp}-${PROTOCOL}"
    EXPERIMENT_NAME="${EXPERIMENT_NAME:-$_default_exp}"
    CKPT_DIR="$CKPTS_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME"
    # verl's FileLogger opens its file with "wb": one file per attempt, so a resume keeps the earlier metrics
    METRICS_FILE="${METRICS_FILE:-$CKPT_DIR/metrics/attempt-$(date -u +%Y%m%dT%H%M%SZ)-$$.jsonl}"

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
        data.seed="$SEED"
        # model
        actor_rollout_ref.model.path="$MODEL_PATH"
        actor_rollout_ref.model.use_remove_padding=True
        actor_rollout_ref.model.enable_gradient_checkpointing=True
        # policy loss and optimiser: identical for every algorithm unless its keys override one
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
        # the old-log-prob pass computes the entropy: in chunks of 2048 tokens, not over all logits at once
        actor_rollout_ref.actor.entropy_from_logits_with_chunking=True
        actor_rollout_ref.actor.checkpoint.save_contents="$CKPT_CONTENTS"
        actor_rollout_ref.ref.log_prob_max_token_len_per_gpu="$INFER_MAX_TOKENS_PER_GPU"
        algorithm.use_kl_in_reward=False
        # rollout: vLLM or SGLang, G samples per prompt at temperature 1
        actor_rollout_ref.rollout.name="$ROLLOUT"
        actor_rollout_ref.rollout.mode=async
        actor_rollout_ref.rollout.n="$GROUP_SIZE"
        actor_rollout_ref.rollout.seed="$SEED"
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
        trainer.total_epochs="$TOTAL_EPOCHS"
        trainer.total_training_steps="$TOTAL_STEPS"
        trainer.save_freq="$SAVE_FREQ"
        trainer.test_freq="$TEST_FREQ"
        trainer.max_actor_ckpt_to_keep="$KEEP_CKPTS"
        trainer.val_before_train="$VAL_BEFORE_TRAIN"
        trainer.log_val_generations=10
        trainer.resume_mode=auto
        trainer.default_local_dir="$CKPT_DIR"
        # verl's file logger (in the TaskRunner, wherever Ray places it): this attempt's own metrics file
        +ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH="$METRICS_FILE"
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
            actor_rollout_ref.actor.megatron.context_parallel_size="$MEGATRON_CP"
            actor_rollout_ref.ref.megatron.context_parallel_size="$MEGATRON_CP"
            actor_rollout_ref.actor.megatron.param_offload="$OFFLOAD"
            actor_rollout_ref.actor.megatron.optimizer_offload="$OFFLOAD"
            actor_rollout_ref.ref.megatron.param_offload=True
        )
    fi

    # ---- training-data order (verl_ebpo.samplers) ---------------------------------------------
    ORDER_ARGS=()
    if [[ "$ORDER" == file ]]; then
        # the training file's own row order, no shuffle (a SequentialSampler): the authors' EBPO-naive runs
        ORDER_ARGS=(data.shuffle=False)
    else
        recipe_order_args "$ORDER"
    fi

    # ---- the algorithm's own keys: verl_ebpo.tools.algorithms, the one definition -------------
    # a curriculum run of one epoch stays inside one pass over its data, whatever the algorithm draws per step
    # (DAPO's dynamic sampling draws more than TRAIN_BATCH_SIZE prompts a step): the plugin's replay buffer
    local keys one_pass=()
    [[ "$SCHEDULE" == curriculum && "$TOTAL_EPOCHS" == 1 ]] && one_pass=(--one-pass)
    keys="$(PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$RECIPE_PYTHON" -m verl_ebpo.tools.algorithms "$ALGO_KEYS" \
        --protocol "$PROTOCOL" --max-response-length "$MAX_RESPONSE_LENGTH" --overlong-buffer-len "$OVERLONG_BUFFER_LEN" \
        --overlong-penalty "$OVERLONG_PENALTY" --prior-scope "$EBPO_PRIOR_SCOPE" --log-discarded "${one_pass[@]}" 2>&1)" \
        || _recipe_die "the algorithm's keys: ${keys##*$'\n'}"
    mapfile -t ALGO_ARGS <<<"$keys"
}

# _recipe_ray_auth: current Ray (2.5x+) clusters started with RAY_AUTH_MODE=token answer `ray job submit`
# "AuthenticationError: Authentication required" unless the client sends the token; send it when there is one.
_recipe_ray_auth() {
    if [[ -z "${RAY_AUTH_MODE:-}" ]] && [[ -n "${RAY_AUTH_TOKEN:-}" || -s "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]]; then
        export RAY_AUTH_MODE=token
    fi
}

# _recipe_ray_answers ADDRESS: something listens at the dashboard address `ray job submit` uses ([http(s)://]host[:port]);
# other forms (auto, ray://, IPv6) are left to Ray
_recipe_ray_answers() {
    [[ "$1" =~ ^(https?://)?([A-Za-z0-9._-]+)(:([0-9]+))?/?$ ]] || return 0
    local host="${BASH_REMATCH[2]}" port="${BASH_REMATCH[4]}"
    [[ -n "$port" ]] || { [[ "$1" == https://* ]] && port=443 || port=80; }
    timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null
}

# recipe_run "$@": run verl's trainer with the shared, backend, order and algorithm keys, then the
# caller's extra overrides (which win: Hydra keeps the last value of a key). Hydra's own flags among the
# caller's arguments (--cfg job, --resolve, --info, ...) go last, where Hydra's argument parser wants them.
# LAUNCH=ray-job submits it with `ray job submit` (which shell-quotes each argument, shlex.join, and runs the
# line through a shell); a command with Hydra flags (--cfg job, ...) only prints, so it always runs here.
# SMOKE=cpu hands the same command to verl_ebpo.tools.cpu.smoke, which swaps the hardware keys only.
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
    _recipe_prescan "${overrides[@]}"
    _recipe_build
    local trainer=("$PYTHON" -m verl.trainer.main_ppo
        "${COMMON_ARGS[@]}" "${BACKEND_ARGS[@]}" "${ORDER_ARGS[@]}" "${ALGO_ARGS[@]}" "${overrides[@]}" "${flags[@]}")
    if [[ -n "$SMOKE" ]]; then
        local smoke=("$RECIPE_PYTHON" -m verl_ebpo.tools.cpu.smoke --launch "$LAUNCH" --ray-address "$RAY_ADDRESS"
            --working-dir "$WORKING_DIR" --ckpt-dir "$CKPT_DIR" --metrics-file "$METRICS_FILE"
            --name "$(basename "$MODEL_DIR")/run_${ALGO}.sh")
        [[ "$RECIPE_DRY_RUN" != 0 ]] && smoke+=(--dry-run)
        ((${#flags[@]})) && smoke+=(--print-only)
        [[ "$LAUNCH" == ray-job ]] && _recipe_ray_auth
        PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "${smoke[@]}" -- "${trainer[@]:3}"
    fi
    local submit=()
    if [[ "$LAUNCH" == ray-job && ${#flags[@]} -eq 0 ]]; then
        # `ray job submit` shell-quotes each argument (shlex.join) and runs the line through a shell on the head
        # node: the arguments go as they are. The metrics folder is made there first (checkpoints need a shared
        # filesystem anyway): bash -c 'mkdir -p "$(dirname "$0")" && exec "$@"' <metrics file> <trainer...>
        # shellcheck disable=SC2206  # RAY_JOB_ARGS: extra flags, split on spaces on purpose
        submit=(ray job submit --address "$RAY_ADDRESS" --runtime-env "$RUNTIME_ENV" --working-dir "$WORKING_DIR"
            ${RAY_JOB_ARGS} -- bash -c 'mkdir -p "$(dirname "$0")" && exec "$@"' "$METRICS_FILE")
    fi
    # the preflight (verl-ebpo preflight) on the same overrides, in WORKING_DIR (where the job reads relative paths)
    local preflight=("$RECIPE_PYTHON" -m verl_ebpo.tools.preflight --working-dir "$WORKING_DIR")
    [[ -z "$_gpu_memory_declared" ]] || preflight+=(--gpu-memory-gb "$_gpu_memory_declared")
    [[ "$LAUNCH" != ray-job ]] || preflight+=(--ray-address "$RAY_ADDRESS")
    [[ -z "$FREE_DISK_GB" ]] || preflight+=(--free-disk-gb "$FREE_DISK_GB")
    [[ -z "$SHARED_DIR" ]] || preflight+=(--shared-dir "$SHARED_DIR")
    preflight+=(--creates "$(dirname "$METRICS_FILE")")
    preflight+=("${trainer[@]:3}")
    if [[ "$RECIPE_DRY_RUN" == 1 ]]; then
        printf '%s\n' "${submit[@]}" "${trainer[@]}"
        return 0
    elif [[ "$RECIPE_DRY_RUN" == preflight ]]; then
        printf '%s\n' "${preflight[@]}"
        return 0
    fi
    if ((${#submit[@]})) && ! _recipe_ray_answers "$RAY_ADDRESS"; then
        _recipe_die "no Ray cluster answers at $RAY_ADDRESS to submit the job to: run on this node with LAUNCH=local, or start a cluster with \`ray start --head\` (or set RAY_ADDRESS to its dashboard)"
    fi
    if ((${#flags[@]} == 0)); then
        # several nodes: the data, checkpoints and metrics must be on a folder every node mounts
        if ((NNODES > 1)) && [[ -z "$SHARED_DIR" ]]; then
            _recipe_die "NNODES=$NNODES: set SHARED_DIR to the folder every node mounts (DATA_DIR and CKPTS_ROOT default under it; the preflight checks every path is), or NNODES=1 to run on this one node"
        fi
        mkdir -p "$(dirname "$METRICS_FILE")"
        if [[ "$SKIP_PREFLIGHT" != 1 ]]; then
            (cd "$WORKING_DIR" && PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "${preflight[@]}") || exit 2
        fi
    fi
    echo "[recipes] $(basename "$MODEL_DIR")/run_${ALGO}.sh: protocol=$PROTOCOL model=$MODEL_PATH seed=$SEED G=$GROUP_SIZE" \
        "backend=$BACKEND rollout=$ROLLOUT order=$ORDER nodes=${NNODES}x${N_GPUS_PER_NODE} exp=$EXPERIMENT_NAME" \
        "metrics=$METRICS_FILE launch=${submit[0]:+ray job submit to $RAY_ADDRESS}${submit[0]:-here}" >&2
    if ((${#submit[@]})); then
        _recipe_ray_auth
        exec "${submit[@]}" "${trainer[@]}"
    fi
    ((${#flags[@]})) || mkdir -p "$(dirname "$METRICS_FILE")"
    exec "${trainer[@]}"
}
