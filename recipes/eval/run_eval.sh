#!/usr/bin/env bash
# Evaluate one checkpoint (Pass@1 over k samples) and print the table beside the paper's and the authors' numbers.
#
#   bash recipes/eval/run_eval.sh <model> <method> <checkpoint>
#
#   <model>       llama3_8b | qwen3_8b | qwen3_14b     (selects the paper's rows and the default TP)
#   <method>      grpo | drgrpo | dapo | ebpo | ebpo_topic | {grpo,drgrpo,dapo,ebpo}_diff | any label
#   <checkpoint>  a verl checkpoint step folder (.../global_step_N), its actor/ folder, or a HF model folder/id
#
# Steps: (1) a verl checkpoint is merged into a HF model (python -m verl.model_merger merge);
# (2) recipes/eval/generate.py samples the five benchmarks, GPUS/TP processes in parallel, each on its
# own GPUs and its own shard of the problems (recipes/eval/sharded_generate.sh); (3) recipes/eval/score.py
# scores them and writes the table.
# EVAL_PROTOCOL [paper]: paper = the training prompt through the chat template, scored by verl_ebpo.rewards
# (math-verify); authors = the authors' plain-text prompt (no chat template), scored by their Minerva string
# match (recipes/eval/authors_scorer.py:evaluation_score). Same k, temperature 1.0, top_p 1.0, 20480 tokens.
#
# Environment: DATA_DIR [$HOME/data/verl_ebpo], OUT_DIR [<checkpoint>/actor/eval (eval_authors for
# EVAL_PROTOCOL=authors) for a verl checkpoint, <folder>/eval for a HF model folder, ./eval/<model>-<method>
# for a HF id], GPUS [8],
# TP [ROLLOUT_TP of recipes/<model>/model.env], ENGINE [vllm], BACKEND [fsdp: how the checkpoint was
# trained], CHAT_TEMPLATE_KWARGS [{}; as data.apply_chat_template_kwargs in training],
# GEN_ARGS / SCORE_ARGS [extra arguments for generate.py / score.py], PYTHON [python3].
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RECIPES_DIR="$(dirname "$HERE")"

if [[ $# -ne 3 ]]; then
    sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
model="$1" method="$2" ckpt="$3"
[[ -f "$RECIPES_DIR/$model/model.env" ]] || { echo "run_eval.sh: unknown model '$model'" >&2; exit 2; }
# shellcheck source=/dev/null
source "$RECIPES_DIR/$model/model.env"
: "${DATA_DIR:=$HOME/data/verl_ebpo}"
: "${GPUS:=8}"
: "${TP:=$ROLLOUT_TP}"
: "${ENGINE:=vllm}"
: "${BACKEND:=fsdp}"
CHAT_TEMPLATE_KWARGS="${CHAT_TEMPLATE_KWARGS:-}"
[[ -n "$CHAT_TEMPLATE_KWARGS" ]] || CHAT_TEMPLATE_KWARGS='{}'
: "${GEN_ARGS:=}"
: "${SCORE_ARGS:=}"
: "${PYTHON:=python3}"
: "${EVAL_PROTOCOL:=paper}"
case "$EVAL_PROTOCOL" in
    paper) _eval_suffix="" _gen_style=chat ;;
    authors) _eval_suffix="_authors" _gen_style=authors ;;
    *) echo "run_eval.sh: EVAL_PROTOCOL must be paper or authors, got '$EVAL_PROTOCOL'" >&2; exit 2 ;;
esac

# (1) a HF model to sample from
hf_model="$ckpt"
if [[ -d "$ckpt/actor" ]]; then ckpt="$ckpt/actor"; fi
if [[ -d "$ckpt" && ! -f "$ckpt/config.json" ]]; then
    hf_model="$ckpt/huggingface_merged"
    if [[ ! -f "$hf_model/config.json" ]]; then
        echo "[run_eval] merging $ckpt -> $hf_model" >&2
        "$PYTHON" -m verl.model_merger merge --backend "$BACKEND" --local_dir "$ckpt" --target_dir "$hf_model"
    fi
fi
if [[ -d "$ckpt" ]]; then
    : "${OUT_DIR:=$ckpt/eval${_eval_suffix}}"
else
    : "${OUT_DIR:=eval/${model}-${method}${_eval_suffix}}"
fi
mkdir -p "$OUT_DIR"

# (2) generations, GPUS/TP processes in parallel
# shellcheck disable=SC2086
GPUS="$GPUS" TP="$TP" PYTHON="$PYTHON" bash "$HERE/sharded_generate.sh" "$OUT_DIR/generations.jsonl" \
    --engine "$ENGINE" --model "$hf_model" --data-dir "$DATA_DIR" --chat-template-kwargs "$CHAT_TEMPLATE_KWARGS" \
    --prompt-style "$_gen_style" $GEN_ARGS

# (3) scores and the table
# shellcheck disable=SC2086
"$PYTHON" "$HERE/score.py" --model "$model" --run "$method=$OUT_DIR/generations.jsonl" --data-dir "$DATA_DIR" \
    --out-md "$OUT_DIR/table.md" --out-json "$OUT_DIR/scores.json" --protocol "$EVAL_PROTOCOL" $SCORE_ARGS
echo "[run_eval] wrote $OUT_DIR/{generations.jsonl,scores.json,table.md}" >&2
