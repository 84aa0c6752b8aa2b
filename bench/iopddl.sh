#!/usr/bin/env bash
# `autoshard solve` on the four public IOPDDL problems (../shared/iopddl):
# the cost reached at the time limit, next to the best known results.
#
#   bench/iopddl.sh [PATH/TO/autoshard] [SECONDS] [THREADS] [PROBLEM_DIR]
set -euo pipefail
cli=${1:-build/autoshard}
seconds=${2:-60}
threads=${3:-2}
dir=${4:-$(dirname "$0")/../../shared/iopddl}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
declare -A best=([A]=6548641531 [G]=217039 [M]=49928460991 [S]=1534613444)
printf "%-8s %18s %18s %8s %10s\n" problem cost best_known ratio seconds >&2
echo "["
first=1
for p in A G M S; do
  file=$(ls "$dir"/$p.json* "$dir"/*-$p.json* 2>/dev/null | head -n 1 || true)
  [ -n "$file" ] || { echo "no problem $p in $dir" >&2; continue; }
  start=$(date +%s.%N)
  "$cli" solve "$file" --time-limit "$seconds" --threads "$threads" >/dev/null 2>"$log" || true
  summary=$(grep '^best:' "$log" | tail -n 1 || true)
  took=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
  cost=$(echo "$summary" | sed -n 's/^best: cost \([0-9]*\).*/\1/p')
  [ -n "$cost" ] || cost=0
  ratio=$(python3 -c "print(round($cost / ${best[$p]}, 4))")
  printf "%-8s %18s %18s %8s %10.1f\n" "$p" "$cost" "${best[$p]}" "$ratio" "$took" >&2
  [ $first = 1 ] || echo ","
  first=0
  echo "{\"problem\": \"$p\", \"cost\": $cost, \"best_known\": ${best[$p]}, \"ratio\": $ratio, \"seconds\": $took, \"threads\": $threads}"
done
echo "]"
