#!/usr/bin/env bash
# GPT-2 training step, autoshard next to PyTorch on the same threads.
# Usage: bench/gpt2_vs_pytorch.sh [BUILD_DIR] [MODEL] [BATCH] [SEQ] [STEPS]
set -euo pipefail
build=${1:-build}; model=${2:-gpt2}; batch=${3:-4}; seq=${4:-64}; steps=${5:-5}
threads=$(nproc)
ours=$("$build/bench/bench_gpt2_step" --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" 2>/dev/null)
echo "$ours"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  theirs=$(/usr/bin/python3 "$(dirname "$0")/pytorch_gpt2_step.py" --model "$model" --batch "$batch" \
           --seq "$seq" --steps "$steps" --threads "$threads")
  echo "$theirs"
  /usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"\n{'engine':<22}{'step (s)':>10}{'tok/s':>10}")
for r in (a, b):
    print(f"{r['engine']:<22}{r['median_step_s']:>10.3f}{r['tokens_per_second']:>10.1f}")
print(f"\nspeed-up of autoshard over PyTorch: {b['median_step_s'] / a['median_step_s']:.2f}x")
PY
else
  echo "python3-torch not installed: run AUTOSHARD_WITH_TORCH=1 scripts/setup.sh for the side-by-side run"
fi
