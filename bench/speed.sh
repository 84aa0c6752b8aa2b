#!/usr/bin/env bash
# Speed against the machine's limits, everything measured in this one run:
# the sgemm peak on all cores, autoshard's GPT-2 training step (1 device;
# model=2 with one core per device; a long sequence), PyTorch's same step on
# the same threads when python3-torch is installed, decoding with f32, bf16
# and int8 weights against the bandwidth limit (bench/decode.sh), gradients
# reduced behind the backward pass over a 1 Gbit/s link (bench/overlap.sh,
# as root), and the collectives against OpenMPI. Prints each step as a fraction of the peak (model FLOPs:
# 6 x parameters x tokens) and as a ratio to PyTorch.
# Usage: bench/speed.sh [BUILD_DIR] [STEPS]     (AUTOSHARD_SPEED_QUICK=1: skip gpt2-medium, T=1024 and decoding)
set -euo pipefail
build=${1:-build}; steps=${2:-5}
here=$(dirname "$0")
threads=$(nproc)
have_torch=0
/usr/bin/python3 -c "import torch" 2>/dev/null && have_torch=1
torch_core=$("$here/torch_blas_core.sh" "$build")  # PyTorch given the same kernels

peak=$("$build/bench/bench_sgemm" 2>/dev/null | head -1)  # the best kernels for the CPU (ir/blas_core.h)
shipped=$(AUTOSHARD_KEEP_BLAS_CORE=1 "$build/bench/bench_sgemm" 2>/dev/null | head -1)  # OpenBLAS's own choice
rows=()
declare -A torch_runs  # one PyTorch run per (model, batch, seq)
ours() {  # model batch seq [mesh]: one bench_gpt2_step run's JSON
  "$build/bench/bench_gpt2_step" --model "$1" --batch "$2" --seq "$3" --steps "$steps" \
    ${4:+--mesh "$4"} 2>/dev/null | tail -1
}
row() {  # name model batch seq OURS_JSON: adds the row, with PyTorch's same step
  local name=$1 model=$2 batch=$3 seq=$4 ours=$5
  local key="$model $batch $seq"
  if [ "$have_torch" = 1 ] && [ -z "${torch_runs[$key]:-}" ]; then
    torch_runs[$key]=$(env ${torch_core:+OPENBLAS_CORETYPE=$torch_core} /usr/bin/python3 "$here/pytorch_gpt2_step.py" \
                       --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" \
                       --threads "$threads" | tail -1)
  fi
  rows+=("{\"name\":\"$name\",\"ours\":$ours,\"torch\":${torch_runs[$key]:-"{}"}}")
}
merged() {  # JSON runs of one configuration -> one, the median over all their steps
  /usr/bin/python3 -c '
import json, statistics, sys
runs = [json.loads(a) for a in sys.argv[1:]]
out = dict(runs[0], step_s=sorted(t for r in runs for t in r["step_s"]), runs=len(runs))
out.update(steps=len(out["step_s"]), median_step_s=statistics.median(out["step_s"]),
           min_step_s=out["step_s"][0])
out["tokens_per_second"] = out["batch"] * out["seq"] / out["median_step_s"]
print(json.dumps(out))' "$@"
}
# One device against model=2: the two take turns for 3 rounds and each row is
# the median of all its steps, so that a slow minute of the VM (its speed
# drifts 10% and more) does not decide which of the two comes out ahead.
pair() {  # name model batch seq
  local one=() two=()
  for round in 1 2 3; do
    one+=("$(ours "$2" "$3" "$4")")
    two+=("$(ours "$2" "$3" "$4" model=2)")
  done
  row "$1, 1 device" "$2" "$3" "$4" "$(merged "${one[@]}")"
  row "$1, model=2" "$2" "$3" "$4" "$(merged "${two[@]}")"
}

pair "gpt2 B=4 T=64" gpt2 4 64
if [ "${AUTOSHARD_SPEED_QUICK:-0}" != 1 ]; then
  row "gpt2 B=1 T=1024, 1 device" gpt2 1 1024 "$(ours gpt2 1 1024)"
  pair "gpt2-medium B=4 T=64" gpt2-medium 4 64
fi

printf '%s\n' "${rows[@]}" | /usr/bin/python3 "$here/speed_report.py" "$peak" "$shipped"

# Decoding: f32, bf16 and int8 weights against the bandwidth limit of the
# bytes each reads, and PyTorch's f32 loop (bench/decode.sh's own table).
if [ "${AUTOSHARD_SPEED_QUICK:-0}" != 1 ]; then
  echo >&2
  "$here/decode.sh" "$build" 32
fi

# Communication behind computation: two MPI ranks over a veth pair shaped to
# 1 Gbit/s (needs root for the network namespaces; skipped otherwise).
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v tc >/dev/null; then
  echo >&2
  # (Not `tee /dev/stderr`: when stderr is a file, that reopens and truncates it.)
  overlap=$("$here/overlap.sh" "$build" gpt2 4 1gbit)
  printf '%s\n' "$overlap" >&2
  printf '%s\n' "$overlap" | tail -1
else
  echo "overlap rows skipped: bench/overlap.sh needs root (ip netns, tc)" >&2
fi

echo >&2
"$here/collectives_vs_mpi.sh" "$build" 2 | sed -n '/^op /,$p' >&2
