#!/usr/bin/env bash
# The solver on problems it was not tuned on: a set of sharding problems
# exported from the training steps of this project's model families
# (GPT-2 sizes, Llama, Keras CNN, LSTM and GRU files, GPT-3 175B) on even and uneven
# meshes, batch sizes, f32 and bf16, and tight memory budgets (`autoshard
# plan --export-problem`), plus the four public IOPDDL problems. Each is
# solved at every time limit given (default 10 s and 60 s, 2 threads); the
# table gives each answer's cost against the best answer any limit found for
# that problem (and, for the public ones, the best known), and its wall time
# against the limit.
#
#   bench/problem_set.sh [PATH/TO/autoshard] [LIMITS (default "10 60")] [THREADS]
set -euo pipefail
cli=$(readlink -f "${1:-build/autoshard}")
limits=${2:-10 60}
threads=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
shared=$here/../../shared
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOSHARD_HOME="$work/home"  # the built-in CPU defaults, not a calibration
mkdir -p "$AUTOSHARD_HOME" "$work/set"

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
  # A short deterministic plan: the export is the problem, not its answer.
  if ! "$cli" plan $args --plan-time 0.5 --deterministic \
       --export-problem "$work/set/$name.json" >/dev/null 2>"$work/err"; then
    echo "skipped $name: $(tail -n 1 "$work/err")" >&2
  fi
done
for p in A G M S; do
  file=$(ls "$shared"/iopddl/*-$p.json.gz 2>/dev/null | head -n 1 || true)
  [ -n "$file" ] && cp "$file" "$work/set/iopddl-$p.json.gz"
done

for file in "$work"/set/*; do
  name=$(basename "$file"); name=${name%.gz}; name=${name%.json}
  for limit in $limits; do
    start=$(date +%s.%N)
    "$cli" solve "$file" --time-limit "$limit" --threads "$threads" >/dev/null 2>"$work/log" || true
    took=$(python3 -c "print($(date +%s.%N) - $start)")
    cost=$(sed -n 's/^best: cost \([0-9]*\).*/\1/p' "$work/log" | tail -n 1)
    proven=$(grep -c "proven optimal" "$work/log" || true)
    nodes=$(python3 - "$file" <<'PY'
import gzip, json, sys
f = sys.argv[1]
p = json.load(gzip.open(f) if f.endswith(".gz") else open(f))
print(len(p.get("problem", p)["nodes"]["intervals"]))
PY
)
    echo "{\"problem\": \"$name\", \"nodes\": $nodes, \"limit_s\": $limit, \"cost\": ${cost:-null}, \"seconds\": $took, \"proven_optimal\": $((proven > 0 ? 1 : 0))}"
  done
done >"$work/rows.jsonl"

python3 - "$work/rows.jsonl" <<'PY'
import json, math, sys
known = {"iopddl-A": 6548641531, "iopddl-G": 217039, "iopddl-M": 49928460991, "iopddl-S": 1534613444}
rows = [json.loads(l) for l in open(sys.argv[1])]
best = {}
for r in rows:
    if r["cost"] is not None:
        best[r["problem"]] = min(best.get(r["problem"], r["cost"]), r["cost"], known.get(r["problem"], r["cost"]))
limits = sorted({r["limit_s"] for r in rows})
print(f"{'problem':24} {'nodes':>6} " + " ".join(f"{'cost/best @' + str(l) + 's':>16} {'wall s':>7}" for l in limits), file=sys.stderr)
by = {}
for r in rows:
    r["vs_best"] = r["cost"] / best[r["problem"]] if r["cost"] is not None and best.get(r["problem"]) else None
    by.setdefault(r["problem"], {})[r["limit_s"]] = r
for name, rs in by.items():
    cells = []
    for l in limits:
        r = rs.get(l)
        ratio = "none" if not r or r["vs_best"] is None else f"{r['vs_best']:.4f}" + (" (opt)" if r["proven_optimal"] else "")
        cells.append(f"{ratio:>16} {r['seconds'] if r else float('nan'):7.1f}")
    print(f"{name:24} {next(iter(rs.values()))['nodes']:6} " + " ".join(cells), file=sys.stderr)
for l in limits:
    ok = [r["vs_best"] for r in rows if r["limit_s"] == l and r["vs_best"]]
    over = max((r["seconds"] / l for r in rows if r["limit_s"] == l), default=0)
    print(f"at {l} s: geometric mean {math.exp(sum(map(math.log, ok)) / len(ok)):.4f} of the best over {len(ok)} problems, "
          f"worst {max(ok):.4f}; slowest answer {over:.2f}x the limit", file=sys.stderr)
print(json.dumps(rows))
PY
