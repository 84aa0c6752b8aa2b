#!/usr/bin/env bash
# Predicted against measured memory: for a GPT-2 training step and a Keras
# CNN's, on one device, model=2, data=2,model=2 and (GPT-2) pipe=2, each
# with and without --recompute, the memory `plan --predict` predicts for
# this process (its in-process devices together: "process_bytes"; for a
# pipeline the stages' peaks added, as its devices share the process)
# beside the peak RSS `train --log` measures over a few steps, and their
# ratio. A table on stdout, then the rows as one JSON line. Peak RSS also
# holds what no step plans (the program and its libraries, the BLAS's
# buffers, the allocator's slack): the "baseline", a one-step run of the
# CNN on one example, says how much.
#
#   bench/memory.sh [PATH/TO/autoshard] [MODEL] [STEPS]
set -euo pipefail
cli=$(readlink -f "${1:-build/autoshard}"); model=${2:-gpt2}; steps=${3:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOSHARD_HOME="$work/home"
mkdir -p "$AUTOSHARD_HOME"
here=$(cd "$(dirname "$0")/.." && pwd)
cnn="$here/tests/data/keras_files/resnet_cnn.keras"  # 11x11x3 images, 4 outputs, MSE
python3 - "$work" <<'PY'
# Random inputs and targets as .npy files (version 1.0, little-endian f32),
# written without NumPy.
import array, random, sys
def save(path, shape):
    random.seed(len(shape))
    data = array.array("f", (random.gauss(0, 1) for _ in range(eval("*".join(map(str, shape))))))
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
        f.write(data.tobytes())
save(f"{sys.argv[1]}/x.npy", (256, 11, 11, 3))
save(f"{sys.argv[1]}/y.npy", (256, 4))
PY

meshes=("one|" "model=2|--mesh model=2 --plan megatron" "data=2,model=2|--mesh data=2,model=2 --plan megatron"
        "pipe=2|--mesh pipe=2 --microbatches 2")
rows="$work/rows.jsonl"
: > "$rows"
measure() {  # KIND NAME RECOMPUTE PLAN_ARGS... -- TRAIN_ARGS...
  local kind=$1 name=$2 recompute=$3; shift 3
  local plan_args=() train_args=()
  while [ "$1" != -- ]; do plan_args+=("$1"); shift; done; shift
  train_args=("$@")
  "$cli" plan "${plan_args[@]}" --predict --json > "$work/plan.json" 2> "$work/plan.err" || {
    echo "{\"kind\": \"$kind\", \"mesh\": \"$name\", \"recompute\": $recompute, \"error\": $(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read().strip()))' "$work/plan.err")}" >> "$rows"
    return; }
  "$cli" train "${train_args[@]}" --overwrite --log "$work/log.jsonl" > /dev/null 2>&1
  python3 - "$work/plan.json" "$work/log.jsonl" "$kind" "$name" "$recompute" >> "$rows" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["predicted"]
if "per_stage" in plan:  # a pipeline: its stages' devices share this process
    predicted = sum(s["peak_bytes"] for s in plan["per_stage"])
else:
    predicted = plan["process_bytes"]
rss = max(json.loads(l)["peak_rss_bytes"] for l in open(sys.argv[2]))
print(json.dumps({"kind": sys.argv[3], "mesh": sys.argv[4], "recompute": sys.argv[5] == "true",
                  "predicted_bytes": predicted, "measured_peak_rss_bytes": rss,
                  "ratio": predicted / rss}))
PY
}
# What a run holds beside its step: the CNN (a few thousand weights), one
# example, one step.
"$cli" train --model "$cnn" --x "$work/x.npy" --y "$work/y.npy" --batch 1 --steps 1 \
  --log "$work/base.jsonl" > /dev/null 2>&1
baseline=$(python3 -c 'import json,sys; print(max(json.loads(l)["peak_rss_bytes"] for l in open(sys.argv[1])))' "$work/base.jsonl")
lm=(--model "$model" --batch 4 --seq 64)
for m in "${meshes[@]}"; do
  IFS='|' read -r name args <<<"$m"
  for recompute in false true; do
    flag=(); [ $recompute = true ] && flag=(--recompute)
    # plan prices a pipeline as its stages run: recomputing their forward pass.
    plan_flag=("${flag[@]}"); case "$name" in pipe=*) plan_flag=(--recompute) ;; esac
    measure "$model" "$name" $recompute "${lm[@]}" $args "${plan_flag[@]}" -- \
      "${lm[@]}" $args "${flag[@]}" --steps "$steps" --sample 0
  done
done
for m in "${meshes[@]:0:3}"; do
  IFS='|' read -r name args <<<"$m"
  args=${args/--plan megatron/--plan auto}
  for recompute in false; do  # --recompute is for transformer blocks
    measure keras-cnn "$name" $recompute --model "$cnn" --batch 32 $args -- \
      --model "$cnn" --x "$work/x.npy" --y "$work/y.npy" --batch 32 $args --steps "$steps"
  done
done
python3 - "$rows" "$baseline" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
baseline = int(sys.argv[2])
print(f"{'model':10} {'mesh':16} {'recompute':9} {'predicted MiB':>13} {'peak RSS MiB':>12} {'ratio':>6} {'RSS - base':>10} {'ratio':>6}")
for r in rows:
    if "error" in r:
        print(f"{r['kind']:10} {r['mesh']:16} {str(r['recompute']):9} {r['error'][:60]}")
        continue
    above = max(1, r["measured_peak_rss_bytes"] - baseline)
    r["ratio_above_baseline"] = r["predicted_bytes"] / above
    print(f"{r['kind']:10} {r['mesh']:16} {str(r['recompute']):9} {r['predicted_bytes']/2**20:13.1f} "
          f"{r['measured_peak_rss_bytes']/2**20:12.1f} {r['ratio']:6.2f} {above/2**20:10.1f} "
          f"{r['ratio_above_baseline']:6.2f}")
print(f"baseline (the CNN, one example, one step): {baseline/2**20:.1f} MiB peak RSS")
print(json.dumps({"baseline_peak_rss_bytes": baseline, "rows": rows}))
PY
