#!/usr/bin/env bash
# Evaluate one checkpoint (Pass@1 over k samples) and print the table beside the paper's and the authors' numbers.
#
#   bash recipes/eval/run_eval.sh <model> <method> <checkpoint>
#
#   <model>       any recipes/<model>/ folder with a model.env (llama3_8b, qwen3_8b, qwen3_14b, or yours): the
#                 default TP (its ROLLOUT_TP, else 1); the paper's rows only for the three models of Table 1
#   <method>      grpo | drgrpo | dapo | ebpo | ebpo_topic | {grpo,drgrpo,dapo,ebpo}_diff | any label (letters,
#                 digits, _ . -)
#   <checkpoint>  a verl checkpoint step folder (.../global_step_N, its actor/ with the weights), its actor/
#                 folder, or a HF model folder (config.json) or id (org/name)
#
# Everything is checked before anything is merged or generated: the arguments and numbers, the checkpoint's
# weights, every benchmark file, the output paths, the scorer (generate.py and score.py --check-only).
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
    sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
model="$1" method="$2" ckpt="$3"
die() { echo "run_eval.sh: $*" >&2; exit 2; }
[[ "$model" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ && -f "$RECIPES_DIR/$model/model.env" ]] \
    || die "unknown model '$model': no recipes/$model/model.env"
[[ "$method" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "method must be a label of letters, digits, _ . -, got '$method'"
# shellcheck source=/dev/null
source "$RECIPES_DIR/$model/model.env"
: "${DATA_DIR:=$HOME/data/verl_ebpo}"
: "${GPUS:=8}"
: "${TP:=${ROLLOUT_TP:-1}}"
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
    *) die "EVAL_PROTOCOL must be paper or authors, got '$EVAL_PROTOCOL'" ;;
esac
case "$ENGINE" in vllm | hf) ;; *) die "ENGINE must be vllm or hf, got '$ENGINE'" ;; esac
case "$BACKEND" in fsdp | megatron) ;; *) die "BACKEND must be fsdp or megatron, got '$BACKEND'" ;; esac
[[ "$GPUS" =~ ^[1-9][0-9]*$ && "$TP" =~ ^[1-9][0-9]*$ && $((GPUS % TP)) -eq 0 ]] \
    || die "GPUS ($GPUS) must be a positive multiple of TP ($TP)"
[[ -d "$DATA_DIR" ]] || die "DATA_DIR $DATA_DIR is not a folder (recipes/data/prepare_data.py writes the benchmarks)"

# (1) a HF model to sample from: the checkpoint's weights must be there before anything starts
hf_model="$ckpt"
if [[ -d "$ckpt/actor" ]]; then
    ckpt="$ckpt/actor"
elif [[ -d "$ckpt" && "$(basename "$ckpt")" == global_step_* ]]; then
    die "checkpoint $ckpt has no actor/ folder: its weights were removed (verl's rotation, KEEP_CKPTS) or never saved"
fi
if [[ -d "$ckpt" && ! -f "$ckpt/config.json" ]]; then
    [[ -n "$(find "$ckpt" -type f -print -quit)" ]] \
        || die "checkpoint $ckpt holds no weights (an empty actor/; verl's rotation, KEEP_CKPTS, deletes them)"
    hf_model="$ckpt/huggingface_merged"
elif [[ ! -e "$ckpt" ]]; then
    case "$ckpt" in
        */global_step_*) die "checkpoint $ckpt: no such folder, or its actor/ (the weights) was removed by rotation" ;;
        /* | ./* | ../* | ~*) die "checkpoint $ckpt: no such folder" ;;
    esac
    [[ "$ckpt" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] \
        || die "checkpoint '$ckpt' is neither a folder nor a HF model id (org/name)"
elif [[ ! -d "$ckpt" ]]; then
    die "checkpoint $ckpt is not a folder"
fi
if [[ -d "$ckpt" ]]; then
    : "${OUT_DIR:=$ckpt/eval${_eval_suffix}}"
else
    : "${OUT_DIR:=eval/${model}-${method}${_eval_suffix}}"
fi
mkdir -p "$OUT_DIR"

# (1b) every check of generate.py and score.py that does not need the generations, before any GPU work
# shellcheck disable=SC2086
"$PYTHON" "$HERE/generate.py" --check-only --engine "$ENGINE" --model "$hf_model" --data-dir "$DATA_DIR" \
    --chat-template-kwargs "$CHAT_TEMPLATE_KWARGS" --prompt-style "$_gen_style" --out "$OUT_DIR/generations.jsonl" \
    $GEN_ARGS || exit 2
# shellcheck disable=SC2086
"$PYTHON" "$HERE/score.py" --check-only --model "$model" --run "$method=$OUT_DIR/generations.jsonl" \
    --data-dir "$DATA_DIR" --out-md "$OUT_DIR/table.md" --out-json "$OUT_DIR/scores.json" \
    --protocol "$EVAL_PROTOCOL" $SCORE_ARGS || exit 2
if [[ "$hf_model" == "$ckpt/huggingface_merged" && ! -f "$hf_model/config.json" ]]; then
    echo "[run_eval] merging $ckpt -> $hf_model" >&2
    "$PYTHON" -m verl.model_merger merge --backend "$BACKEND" --local_dir "$ckpt" --target_dir "$hf_model"
fi

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
