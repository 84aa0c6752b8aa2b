#!/usr/bin/env bash
# The solver on problems it was not tuned on: a set of sharding problems
# exported from the training steps of this project's model families
# (GPT-2 sizes, Llama, Keras CNN, LSTM and GRU files, GPT-3 175B) on even and uneven
# meshes, batch sizes, f32 and bf16, and tight memory budgets (`autoshard
# plan --export-problem`), the four public IOPDDL problems, and variants of
# those (bench/iopddl_variants.py: limits tightened and loosened, costs
# perturbed, half-size connected subgraphs, two copies overlapping in time:
# a proxy for the contest's hidden problems of the same families). Each is
# solved at every time limit given (default 10 s and 60 s, 2 threads); the
# table gives each answer's cost against the best answer any run found for
# that problem (and, for the public ones, the best known), the time its
# answer was found and its wall time against the limit.
#
#   bench/problem_set.sh [PATH/TO/autoshard] [LIMITS (default "10 60")] [THREADS]
#
# Environment:
#   PROBLEM_SET_DIR  keep the generated problems there (made once, reused)
#   ONLY             a regular expression: solve only the problems it matches
#   BEST_FILE        a JSON file of the best cost found per problem, read and
#                    updated, so that separate runs (before and after a change)
#                    are measured against the same best
#   ROWS_FILE        also write every answer as a JSON line there
#   SOLVE_ARGS       more arguments to `autoshard solve` (--deterministic, say)
#   OTHER_SOLVER     another solver run the contest's way (`SOLVER PROBLEM.json
#                    SECONDS`, its answer the last line of stdout) on the same
#                    problems and limits, right after autoshard on each, with
#                    the problem uncompressed (the contest's solvers read plain
#                    JSON); its answers are checked by `autoshard solve
#                    --evaluate` (an answer that overflows or is missing counts
#                    as none), its wall time is the whole command's, and the
#                    table gets its columns and a count of the problems where
#                    autoshard is at or below it
#   OTHER_NAME       that solver's name in the table (default: its file name)
set -euo pipefail
cli=$(readlink -f "${1:-build/autoshard}")
limits=${2:-10 60}
threads=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
shared=$here/../../shared
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOSHARD_HOME="$work/home"  # the built-in CPU defaults, not a calibration
set_dir=${PROBLEM_SET_DIR:-$work/set}
mkdir -p "$AUTOSHARD_HOME" "$set_dir"

# name | plan's arguments (the problem AutoShard poses for that step)
set_rows=(
  "gpt2-2x2|--model gpt2 --batch 8 --seq 128 --mesh data=2,model=2"
  "gpt2-model3|--model gpt2 --batch 8 --seq 128 --mesh model=3"
  "gpt2-2x4-a100|--model gpt2 --batch 8 --seq 1024 --mesh data=2,model=4 --cluster a100-80g --dtype bf16"
  "gpt2-4x4-tight|--model gpt2 --batch 16 --seq 256 --mesh data=4,model=4 --memory-per-device 450MiB"
  "gpt2-medium-3x3|--model gpt2-medium --batch 9 --seq 256 --mesh data=3,model=3"
  "gpt2-medium-4x4-a100|--model gpt2-medium --batch 16 --seq 1024 --mesh data=4,model=4 --cluster a100-80g --dtype bf16"
  "gpt2-large-1x8-h100|--model gpt2-large --batch 8 --seq 1024 --mesh data=1,model=8 --cluster h100-80g --dtype bf16"
  "gpt2-3axis|--model gpt2 --batch 8 --seq 256 --mesh data=2,model=2,seq=2"
  "llama124m-2x2|--model $here/configs/llama-124m.json --batch 8 --seq 128 --mesh data=2,model=2"
  "llama124m-model6|--model $here/configs/llama-124m.json --batch 6 --seq 128 --mesh model=6"
  "llama1b-2x4-tight|--model $here/configs/llama-1b.json --batch 8 --seq 256 --mesh data=2,model=4 --memory-per-device 4GiB"
  "llama1b-8x8-a100|--model $here/configs/llama-1b.json --batch 64 --seq 2048 --mesh data=8,model=8 --cluster a100-80g --dtype bf16"
  "gpt3-128x8-a100|--model gpt3-175b --batch 1536 --seq 2048 --mesh data=128,model=8 --cluster a100-80g --dtype bf16 --recompute"
  "cnn-2x2|--model $shared/keras-files/fashion_cnn.keras --batch 64 --mesh data=2,model=2"
  "cnn-lstm-model3|--model $shared/keras-files/cnn_lstm_forecast.keras --batch 32 --mesh model=3"
  "gru-model3|--model $shared/keras-files/gru_forecast.keras --batch 32 --mesh model=3"
)
for row in "${set_rows[@]}"; do
  IFS='|' read -r name args <<<"$row"
  [ -e "$set_dir/$name.json" ] && continue
  # A short deterministic plan: the export is the problem, not its answer.
  if ! "$cli" plan $args --plan-time 0.5 --deterministic \
       --export-problem "$set_dir/$name.json" >/dev/null 2>"$work/err"; then
    echo "skipped $name: $(tail -n 1 "$work/err")" >&2
  fi
done
for p in A G M S; do
  file=$(ls "$shared"/iopddl/*-$p.json.gz 2>/dev/null | head -n 1 || true)
  [ -n "$file" ] && [ ! -e "$set_dir/iopddl-$p.json.gz" ] && cp "$file" "$set_dir/iopddl-$p.json.gz"
done
ls "$set_dir"/iopddl-*-twice.json >/dev/null 2>&1 ||
  python3 "$here/iopddl_variants.py" "$shared/iopddl" "$set_dir"

# The other solver on one problem at one limit: a row like autoshard's,
# with "solver" naming it. Its time limit is whole seconds (the contest's).
run_other() {
  local file=$1 name=$2 nodes=$3 limit=$4 plain=$work/plain.json
  if [ "$(cat "$work/plain.name" 2>/dev/null)" != "$name" ]; then
    case $file in *.gz) gzip -dc "$file" >"$plain" ;; *) cp "$file" "$plain" ;; esac
    echo "$name" >"$work/plain.name"
  fi
  local start took cost=null verdict
  start=$(date +%s.%N)
  timeout $((limit * 3 + 60)) "$OTHER_SOLVER" "$plain" "$limit" >"$work/other.out" 2>/dev/null || true
  took=$(python3 -c "print($(date +%s.%N) - $start)")
  verdict=$("$cli" solve "$file" --evaluate "$work/other.out" 2>/dev/null || true)
  if [ -n "$verdict" ]; then
    cost=$(python3 -c 'import json,sys; v=json.loads(sys.argv[1]); print(v["cost"] if v["feasible"] else "null")' "$verdict")
  fi
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "{\"problem\": \"$name\", \"nodes\": $nodes, \"limit_s\": $limit, \"cost\": $cost, \"found_s\": null, \"seconds\": $took, \"proven_optimal\": 0, \"load\": $load, \"solver\": \"${OTHER_NAME:-$(basename "$OTHER_SOLVER")}\"}"
}
: >"$work/other.jsonl"

for file in "$set_dir"/*; do
  name=$(basename "$file"); name=${name%.gz}; name=${name%.json}
  [[ -z "${ONLY:-}" || "$name" =~ ${ONLY} ]] || continue
  nodes=$(python3 - "$file" <<'PY'
import gzip, json, sys
f = sys.argv[1]
p = json.load(gzip.open(f) if f.endswith(".gz") else open(f))
print(len(p.get("problem", p)["nodes"]["intervals"]))
PY
)
  for limit in $limits; do
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$cli" solve "$file" --time-limit "$limit" --threads "$threads" ${SOLVE_ARGS:-} \
      >/dev/null 2>"$work/log" || true
    took=$(python3 -c "print($(date +%s.%N) - $start)")
    cost=$(sed -n 's/^best: cost \([0-9]*\).*/\1/p' "$work/log" | tail -n 1)
    # When the answer was found: its progress line's time (the solver's
    # clock; reading the problem comes before it).
    found=$(awk -v c="$cost" '$3 == "cost" && $4 == c { print $1; exit }' "$work/log")
    proven=$(grep -c "proven optimal" "$work/log" || true)
    load=$(cut -d' ' -f1 /proc/loadavg)  # the machine's load as the answer came
    echo "{\"problem\": \"$name\", \"nodes\": $nodes, \"limit_s\": $limit, \"cost\": ${cost:-null}, \"found_s\": ${found:-null}, \"seconds\": $took, \"proven_optimal\": $((proven > 0 ? 1 : 0)), \"load\": $load}"
    if [ -n "${OTHER_SOLVER:-}" ]; then
      run_other "$file" "$name" "$nodes" "$limit" >>"$work/other.jsonl"
    fi
  done
done >"$work/rows.jsonl"
[ -z "${ROWS_FILE:-}" ] || cat "$work/rows.jsonl" "$work/other.jsonl" >"$ROWS_FILE" 2>/dev/null

python3 "$here/problem_set_report.py" "$work/rows.jsonl" ${OTHER_SOLVER:+"$work/other.jsonl"} \
  ${BEST_FILE:+--best "$BEST_FILE"}
