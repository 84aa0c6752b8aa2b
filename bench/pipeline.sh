#!/usr/bin/env bash
# Pipeline parallelism measured here against the meshes it sits beside: a
# GPT-2 training step (default gpt2, 124M; B=8, T=64) on one device,
# data=2, model=2, pipe=2 (1F1B, 4 micro-batches) and data=2,pipe=2 (4
# in-process devices on this machine's cores), each the median step after
# a warm-up, as a ratio to the one-device step measured in the same run;
# beside each, the cost model's prediction on this machine's calibration
# (plan --predict; a pipe mesh through the pipeline model with --recompute,
# docs/pipeline.md) as a ratio to the measurement. Then the overheads of
# micro-batching alone: pipe=1 with 1 and 4 micro-batches.
#
#   bench/pipeline.sh [BUILD_DIR] [MODEL] [STEPS]
set -euo pipefail
build=$(readlink -f "${1:-build}"); model=${2:-gpt2}; steps=${3:-5}
cli="$build/autoshard"
batch=8 seq=64
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOSHARD_HOME="$work/home"
mkdir -p "$AUTOSHARD_HOME"
"$cli" calibrate --quick --no-mpi >/dev/null 2>&1

common=(--model "$model" --batch "$batch" --seq "$seq")
run() {  # NAME [ARGS...]: a measured run and the prediction of the same mesh
  local name=$1; shift
  "$cli" train "${common[@]}" --steps "$steps" --sample 0 --lr-schedule constant \
    --log "$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
  local mesh=() pipe=()
  for a in "$@"; do mesh+=("$a"); done
  # plan takes the same mesh; the pipe flags are named --microbatches and --schedule there,
  # and a pipelined step recomputes each stage's forward pass in its backward one.
  local args=("${mesh[@]/--pipe-schedule/--schedule}")
  if [ "$name" = one ]; then args=(); fi
  case "$name" in *pipe*) args+=(--recompute) ;; esac
  "$cli" plan "${common[@]}" "${args[@]}" --predict --json >"$work/$name.plan.json" 2>"$work/$name.plan.err" ||
    echo '{}' >"$work/$name.plan.json"
}
run one
run data2 --mesh data=2 --plan data
run model2 --mesh model=2 --plan megatron
run pipe2 --mesh pipe=2 --microbatches 4 --pipe-schedule 1f1b
run data2pipe2 --mesh data=2,pipe=2 --microbatches 4 --pipe-schedule 1f1b --plan data
run pipe1m1 --mesh pipe=1 --microbatches 1
run pipe1m4 --mesh pipe=1 --microbatches 4

python3 - "$work" "$model" "$batch" "$seq" <<'PY'
import json, statistics, sys
work, model, batch, seq = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def median_s(name):
    ms = [json.loads(l)["step_ms"] for l in open(f"{work}/{name}.jsonl")][1:]
    return statistics.median(ms) / 1e3
def predicted_s(name):
    p = json.load(open(f"{work}/{name}.plan.json")).get("predicted", {})
    return p.get("step_s")
rows = [("1 device", "one"), ("data=2", "data2"), ("model=2", "model2"),
        ("pipe=2 (1f1b, M=4)", "pipe2"), ("data=2,pipe=2 (1f1b, M=4)", "data2pipe2"),
        ("pipe=1 (M=1: recompute)", "pipe1m1"), ("pipe=1 (M=4)", "pipe1m4")]
base = median_s("one")
print(f"{model} training step, B={batch} T={seq}, in-process devices on this machine")
print(f"{'mesh':<28}{'step s':>9}{'vs 1 device':>13}{'predicted s':>13}{'pred/meas':>11}")
out = []
for label, name in rows:
    s, p = median_s(name), predicted_s(name)
    ratio = f"{p / s:.2f}" if p else "-"
    print(f"{label:<28}{s:>9.3f}{s / base:>13.2f}{(p or float('nan')):>13.3f}{ratio:>11}")
    out.append({"mesh": label, "step_s": s, "vs_one_device": s / base, "predicted_s": p})
print(json.dumps({"bench": "pipeline", "model": model, "batch": batch, "seq": seq, "rows": out}))
PY
