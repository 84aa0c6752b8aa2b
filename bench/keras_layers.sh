#!/usr/bin/env bash
# Keras's vision and sequence layers against PyTorch on the same threads: a
# ResNet-18-style CNN training step (32x32x3, batch 64) and a 2-layer LSTM
# language-model step (512 units, batch 32, 64 steps, vocabulary 1000) and the
# same with GRU layers, each
# as a ratio to PyTorch 1.13 (Debian's python3-torch) and as a fraction of
# the sgemm peak measured in the same run (model FLOPs: 3 x the forward
# pass's multiply-adds x 2). Both engines run the machine's OpenBLAS (PyTorch
# through libblas.so.3; its convolutions through its own oneDNN) with the
# same kernels: bench_sgemm and bench_keras_layers restart with the best
# OPENBLAS_CORETYPE for the CPU where OpenBLAS chose slower ones
# (ir/blas_core.h), and PyTorch gets that core type in OPENBLAS_CORETYPE.
# The same models from Python, NumPy imported first (bench/keras_layers.py,
# where the extension is built), get a column of their own.
# Prints one JSON line per engine and model, then a table.
# Usage: bench/keras_layers.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}; steps=${2:-5}
here=$(dirname "$0")
threads=$(nproc)
have_torch=0
/usr/bin/python3 -c "import torch" 2>/dev/null && have_torch=1

peak=$("$build/bench/bench_sgemm" 2>/dev/null | head -1)
echo "$peak"
core=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("core", ""))' "$peak")
rows=()
for model in resnet lstm gru; do
  ours=$("$build/bench/bench_keras_layers" --model "$model" --steps "$steps" 2>/dev/null | tail -1)
  echo "$ours"
  python="{}"
  if ls "$here"/../python/autoshard/_native*.so >/dev/null 2>&1; then
    python=$(PYTHONPATH="$here/../python" /usr/bin/python3 "$here/keras_layers.py" --model "$model" --steps "$steps" | tail -1)
    echo "$python"
  fi
  theirs="{}"
  if [ "$have_torch" = 1 ]; then
    theirs=$(OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$core} /usr/bin/python3 "$here/pytorch_keras_layers.py" --model "$model" --steps "$steps" \
             --threads "$threads" | tail -1)
    echo "$theirs"
  fi
  rows+=("{\"ours\":$ours,\"torch\":$theirs,\"python\":$python}")
done
[ "$have_torch" = 1 ] || echo "python3-torch not installed: AUTOSHARD_WITH_TORCH=1 scripts/setup.sh for the PyTorch column" >&2

printf '%s\n' "${rows[@]}" | /usr/bin/python3 "$here/keras_layers_report.py" "$peak"
