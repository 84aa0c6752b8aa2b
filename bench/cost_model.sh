#!/usr/bin/env bash
# The cost model against this machine: for two GPT-2 sizes and several plans
# on in-process meshes of 2 to 4 devices, the predicted step time and process
# memory next to the measured ones (median step after a warm-up; peak RSS),
# their ratios, and the Spearman rank correlation of the plans by predicted
# and by measured time. Calibrates first (autoshard calibrate).
#
# The machine's speed drifts by 10-20% from minute to minute (a shared VM),
# while plans differ by less: every plan is measured in each of
# AUTOSHARD_COST_PASSES passes (default 2) over all plans, and its time is
# the fastest pass's median, so one slow minute does not reorder the plans.
#
# With AUTOSHARD_COST_TRACES=DIR, the last pass also writes each pair it
# compares as two timelines for Perfetto (docs/observability.md):
# DIR/MODEL-PLAN.predicted.json (plan --predict --trace) beside
# DIR/MODEL-PLAN.measured.json (train --trace of the second step), and the
# table names them.
#
#   bench/cost_model.sh [PATH/TO/autoshard] [--no-calibrate]
set -euo pipefail
cli=${1:-build/autoshard}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOSHARD_HOME="$work/home"
mkdir -p "$AUTOSHARD_HOME"
[ "${2:-}" = --no-calibrate ] || "$cli" calibrate --out "$AUTOSHARD_HOME/cpu.json" >&2

plans=(
  "data|--mesh data=2 --plan data"
  "megatron|--mesh model=2 --plan megatron"
  "mixed|--mesh data=2,model=2 --plan megatron"
  "zero1|--mesh data=2 --plan data --zero1"
  "uneven|--mesh model=3 --plan megatron"
  "recompute|--mesh model=2 --plan megatron --recompute"
  "auto-4|--mesh data=2,model=2 --plan auto"
)
models=("mini|16|128|8" "gpt2|4|64|5")
passes=${AUTOSHARD_COST_PASSES:-2}
echo "[" > "$work/rows.json"
first=1
for pass in $(seq 1 "$passes"); do
  for m in "${models[@]}"; do
    IFS='|' read -r model batch seq steps <<<"$m"
    for p in "${plans[@]}"; do
      IFS='|' read -r name args <<<"$p"
      traces=(); plan_trace=()
      if [ -n "${AUTOSHARD_COST_TRACES:-}" ] && [ "$pass" = "$passes" ]; then
        mkdir -p "$AUTOSHARD_COST_TRACES"
        pair="$AUTOSHARD_COST_TRACES/$model-$name"
        plan_trace=(--trace "$pair.predicted.json" --overwrite)
        traces=(--trace "$pair.measured.json" --trace-steps 2:2)
        echo "timelines of $model $name: $pair.predicted.json $pair.measured.json" >&2
      fi
      $cli plan --model "$model" --batch "$batch" --seq "$seq" $args --predict --json \
        "${plan_trace[@]}" > "$work/plan.json"
      $cli train --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" --sample 0 \
        --lr-schedule constant $args --overwrite --log "$work/log.jsonl" "${traces[@]}" > /dev/null 2>&1
      row=$(python3 - "$work/plan.json" "$work/log.jsonl" "$model" "$name" <<'PY'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))["predicted"]
log = [json.loads(l) for l in open(sys.argv[2])]
measured = statistics.median(r["step_ms"] for r in log[1:]) / 1e3
rss = max(r["peak_rss_bytes"] for r in log)
print(json.dumps({"model": sys.argv[3], "plan": sys.argv[4], "predicted_step_s": plan["step_s"],
                  "measured_step_s": measured, "predicted_process_bytes": plan["process_bytes"],
                  "measured_peak_rss_bytes": rss}))
PY
)
      [ $first = 1 ] || echo "," >> "$work/rows.json"
      first=0
      echo "$row" >> "$work/rows.json"
    done
  done
done
echo "]" >> "$work/rows.json"
python3 - "$work/rows.json" <<'PY'
import json, sys
passes = json.load(open(sys.argv[1]))
# One row per (model, plan): the fastest pass's median step, the largest peak RSS.
rows = {}
for r in passes:
    key = (r["model"], r["plan"])
    if key not in rows:
        rows[key] = dict(r, measured_passes_s=[])
    best = rows[key]
    best["measured_passes_s"].append(r["measured_step_s"])
    best["measured_step_s"] = min(best["measured_step_s"], r["measured_step_s"])
    best["measured_peak_rss_bytes"] = max(best["measured_peak_rss_bytes"], r["measured_peak_rss_bytes"])
rows = list(rows.values())
def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0] * len(v)
    for k, i in enumerate(order): r[i] = k
    return r
def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))
summary = {}
print(f"{'model':6} {'plan':10} {'pred s':>8} {'meas s':>8} {'ratio':>6} {'pred MiB':>9} {'RSS MiB':>9} {'ratio':>6}")
for r in rows:
    r["time_ratio"] = r["predicted_step_s"] / r["measured_step_s"]
    r["memory_ratio"] = r["predicted_process_bytes"] / r["measured_peak_rss_bytes"]
    print(f"{r['model']:6} {r['plan']:10} {r['predicted_step_s']:8.3f} {r['measured_step_s']:8.3f} "
          f"{r['time_ratio']:6.2f} {r['predicted_process_bytes']/2**20:9.1f} "
          f"{r['measured_peak_rss_bytes']/2**20:9.1f} {r['memory_ratio']:6.2f}")
for model in sorted(set(r["model"] for r in rows)):
    mine = [r for r in rows if r["model"] == model]
    summary[model] = {"spearman": spearman([r["predicted_step_s"] for r in mine],
                                           [r["measured_step_s"] for r in mine]),
                      "worst_time_error": max(abs(r["time_ratio"] - 1) for r in mine),
                      "worst_memory_error": max(abs(r["memory_ratio"] - 1) for r in mine)}
    s = summary[model]
    print(f"{model}: Spearman {s['spearman']:.2f}, worst time error {100*s['worst_time_error']:.0f}%, "
          f"worst memory error {100*s['worst_memory_error']:.0f}%")
print(json.dumps({"rows": rows, "summary": summary}))
PY
