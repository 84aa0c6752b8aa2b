#!/usr/bin/env bash
# The cost of tracing (train --trace) against the same run without it, in
# one run of this script: GPT-2 "tiny" on data=2 (in-process devices), the
# median step time of each, alternated so that the machine's drift falls on
# both. Prints a readable table and one JSON line.
#
#   bench/trace_overhead.sh [BUILD_DIR] [STEPS] [ROUNDS]
set -euo pipefail
build=${1:-build}; steps=${2:-40}; rounds=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOSHARD_HOME="$work/home"

median_step_ms() {  # LOG: the median step_ms after the first 5 steps (warm-up)
  python3 - "$1" <<'PY'
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1])][5:]
print(statistics.median(ms))
PY
}

args=(train --model tiny --mesh data=2 --batch 8 --seq 64 --steps "$steps" --sample 0)
off=(); on=()
for r in $(seq "$rounds"); do
  "$build/autoshard" "${args[@]}" --log "$work/off$r.jsonl" >/dev/null 2>&1
  off+=("$(median_step_ms "$work/off$r.jsonl")")
  "$build/autoshard" "${args[@]}" --log "$work/on$r.jsonl" --trace "$work/on$r.json" >/dev/null 2>&1
  on+=("$(median_step_ms "$work/on$r.jsonl")")
done
python3 - "${off[*]}" "${on[*]}" "$(stat -c %s "$work/on1.json")" "$steps" <<'PY'
import json, statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
a, b = statistics.median(off), statistics.median(on)
print(f"{'run':<28}{'median step (ms)':>18}")
print(f"{'no trace':<28}{a:>18.3f}")
print(f"{'--trace (every step)':<28}{b:>18.3f}")
print(f"overhead: {100 * (b / a - 1):+.2f}% of the step; trace file {int(sys.argv[3]) / 2**20:.1f} MiB "
      f"for {sys.argv[4]} steps")
print(json.dumps({"bench": "trace_overhead", "step_ms_off": a, "step_ms_on": b,
                  "overhead": b / a - 1, "rounds_off": off, "rounds_on": on}))
PY
