#!/usr/bin/env bash
# The quality cost of holding weights in bf16 or int8 (generate/eval
# --weights-dtype): trains a byte-level GPT-2 (MODEL, default "mini") on
# this repository's README, then measures the loss of a text it was not
# trained on (docs/architecture.md, read as bytes) with its weights in f32, rounded to bf16, and quantized to int8
# with per-channel scales. Prints a table and one JSON line.
#
#   bench/quantized_quality.sh [BUILD_DIR] [STEPS] [MODEL]
set -euo pipefail
build=${1:-build}; steps=${2:-600}; model=${3:-mini}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOSHARD_HOME="$work/home"
"$build/autoshard" train --model "$model" --data "$root/README.md" --steps "$steps" --batch 8 \
  --seq 64 --sample 0 --checkpoint-dir "$work/ckpt" >/dev/null 2>&1
ckpt=$(ls -d "$work"/ckpt/step-* | tail -1)
rows=()
for dtype in f32 bf16 int8; do
  rows+=("$("$build/autoshard" eval --model "$model" --weights "$ckpt" --data "$root/docs/architecture.md" \
            --batch 8 --seq 64 --batches 40 --weights-dtype "$dtype" --json)")
done
python3 - "$steps" "$model" "${rows[@]}" <<'PY'
import json, sys
steps, model, rows = sys.argv[1], sys.argv[2], [json.loads(r) for r in sys.argv[3:]]
base = rows[0]["loss"]
print(f"GPT-2 {model} trained {steps} steps on README.md; loss of docs/architecture.md "
      f"({rows[0]['tokens']} bytes)")
print(f"{'weights':<10}{'loss':>12}{'vs f32':>10}")
for r in rows:
    print(f"{r['weights_dtype']:<10}{r['loss']:>12.6f}{100 * (r['loss'] / base - 1):>+9.3f}%")
print(json.dumps({"bench": "quantized_quality", "model": model, "steps": int(steps),
                  "loss": {r["weights_dtype"]: r["loss"] for r in rows}}))
PY
