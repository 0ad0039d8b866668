#!/usr/bin/env bash
# Add the ordering labels to the training file, in place (rows and their order are unchanged, so every
# run of a model keeps reading the same file; random-order runs ignore the labels).
#
#   bash recipes/data/label_data.sh topics
#       extra_info.topic: k-means (k = TOPIC_K [9], the paper's number of domains; the authors' later
#       BERTopic scripts use 10) over all-MiniLM-L6-v2 embeddings of the problems (extra_info.problem, not the
#       instruction template; verl-ebpo label-topics). CPU; it prints its estimate first (basis: 17k prompts took
#       24 min on 2 loaded cores, ~6 a second a core; more cores, shorter problem texts: less).
#       Cluster sizes and top words go to $DATA_DIR/topics.json.
#   bash recipes/data/label_data.sh difficulty <model>      (model: llama3_8b | qwen3_8b | qwen3_14b)
#       extra_info.difficulty_<model>: the pass rate of the model's DIFFICULTY_MODEL (recipes/<model>/model.env;
#       Qwen3-*-Base for Qwen3) over DIFFICULTY_SAMPLES samples per problem at temperature 1.0
#       (recipes/eval/generate.py on GPU with vLLM, GPUS/TP processes in parallel, then verl-ebpo
#       label-difficulty; roughly an hour on one 8 x H200 node for an 8B model, an estimate, not measured).
#
# Environment: DATA_DIR [${SHARED_DIR:-$HOME}/data/verl_ebpo], TRAIN_FILE [$DATA_DIR/dapo_math_17k.parquet],
#   TOPIC_K [9], DIFFICULTY_SAMPLES [16], DIFFICULTY_MAX_TOKENS [8192, the training response budget], GPUS [8],
#   TP [ROLLOUT_TP of model.env], ENGINE [vllm], PYTHON [python3].
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RECIPES_DIR="$(dirname "$HERE")"
: "${DATA_DIR:=${SHARED_DIR:-$HOME}/data/verl_ebpo}"
: "${TRAIN_FILE:=$DATA_DIR/dapo_math_17k.parquet}"
: "${PYTHON:=python3}"
: "${ENGINE:=vllm}"

usage() {
    sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[[ $# -ge 1 ]] || usage
[[ -f "$TRAIN_FILE" ]] || { echo "label_data.sh: $TRAIN_FILE not found (run recipes/data/prepare_data.py first)" >&2; exit 2; }

case "$1" in
    topics)
        [[ $# -eq 1 ]] || usage
        : "${TOPIC_K:=9}"
        "$PYTHON" -m verl_ebpo.tools.cli label-topics "$TRAIN_FILE" "$TRAIN_FILE" --in-place --k "$TOPIC_K" --seed 0 --overwrite \
            --summary-json "$DATA_DIR/topics.json"
        ;;
    difficulty)
        [[ $# -eq 2 ]] || usage
        model="$2"
        [[ -f "$RECIPES_DIR/$model/model.env" ]] || { echo "label_data.sh: unknown model '$model'" >&2; exit 2; }
        # shellcheck source=/dev/null
        source "$RECIPES_DIR/$model/model.env"
        : "${DIFFICULTY_SAMPLES:=16}"
        : "${DIFFICULTY_MAX_TOKENS:=8192}"
        : "${GPUS:=8}"
        : "${TP:=$ROLLOUT_TP}"
        rollouts="$DATA_DIR/difficulty_rollouts_${MODEL_TAG}.jsonl"
        GPUS="$GPUS" TP="$TP" PYTHON="$PYTHON" bash "$RECIPES_DIR/eval/sharded_generate.sh" "$rollouts" \
            --engine "$ENGINE" --model "$DIFFICULTY_MODEL" --input "$TRAIN_FILE" --n "$DIFFICULTY_SAMPLES" \
            --max-tokens "$DIFFICULTY_MAX_TOKENS" --temperature 1.0 --top-p 1.0
        "$PYTHON" -m verl_ebpo.tools.cli label-difficulty "$TRAIN_FILE" "$rollouts" "$TRAIN_FILE" \
            --field "extra_info.difficulty_${MODEL_TAG}" --overwrite --in-place --workers 8
        ;;
    *)
        usage
        ;;
esac
