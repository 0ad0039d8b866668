#!/usr/bin/env bash
# Run recipes/eval/generate.py as GPUS/TP processes, each on its own TP GPUs and its own shard of the
# problems, and concatenate their outputs into one JSONL file.
#
#   bash recipes/eval/sharded_generate.sh OUT.jsonl [generate.py arguments, without --out/--shard/--tp]
#
# Environment: GPUS [8], TP [1], PYTHON [python3]. Logs: OUT.shard<i>.log.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${GPUS:=8}"
: "${TP:=1}"
: "${PYTHON:=python3}"
if [[ $# -lt 1 ]]; then
    sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
out="$1"
shift
[[ "$GPUS" =~ ^[1-9][0-9]*$ && "$TP" =~ ^[1-9][0-9]*$ && $((GPUS % TP)) -eq 0 ]] \
    || { echo "sharded_generate.sh: GPUS ($GPUS) must be a positive multiple of TP ($TP)" >&2; exit 2; }
mkdir -p "$(dirname "$out")"
shards=$((GPUS / TP))
pids=()
for ((i = 0; i < shards; i++)); do
    devices=$(seq -s, $((i * TP)) $((i * TP + TP - 1)))
    CUDA_VISIBLE_DEVICES="$devices" "$PYTHON" "$HERE/generate.py" "$@" --tp "$TP" --shard "$i/$shards" \
        --out "$out.shard$i" >"$out.shard$i.log" 2>&1 &
    pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        echo "sharded_generate.sh: shard $i of $shards failed; the end of $out.shard$i.log:" >&2
        tail -n 20 "$out.shard$i.log" >&2
        failed=1
    fi
done
[[ $failed -eq 0 ]] || exit 1
tmp="$out.tmp"
for ((i = 0; i < shards; i++)); do cat "$out.shard$i"; done >"$tmp"
mv "$tmp" "$out"
for ((i = 0; i < shards; i++)); do rm -f "$out.shard$i"; done
echo "[sharded_generate] $shards shard(s) -> $out ($(wc -l <"$out") samples)" >&2
