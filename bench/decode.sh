#!/usr/bin/env bash
# Decode tokens per second of Llama-shaped models: autoshard (1 device and
# model=2; weights held in f32, bf16 and int8) against the copy-bandwidth
# limit of the bytes each format reads, and PyTorch's own loop with a
# key-value cache on the same threads (f32).
# Usage: bench/decode.sh [BUILD_DIR] [TOKENS]
set -euo pipefail
build=${1:-build}; tokens=${2:-32}
here=$(dirname "$0")
threads=$(nproc)
torch_core=$("$here/torch_blas_core.sh" "$build")  # PyTorch given the same kernels
runs=$(mktemp); log=$(mktemp)  # one bench_decode's JSON lines and its messages
trap 'rm -f "$runs" "$log"' EXIT
# The three formats on 1 device take turns within one process (bench_decode
# with a list), so "x f32" compares decodes seconds apart: this VM's copy
# bandwidth moves by a fifth between minutes. The model=2 rows run alone.
echo "| config | mesh | weights | autoshard tokens/s | limit tokens/s | of the limit | x f32 | PyTorch f32 tokens/s | speed-up |" >&2
echo "|---|---|---|---|---|---|---|---|---|" >&2
for cfg in "$here/configs/llama-124m.json" "$here/configs/llama-1b.json"; do
  for run in "|f32,bf16,int8" "model=2|f32" "model=2|int8"; do
    mesh=${run%%|*}; dtypes=${run#*|}
    if ! "$build/bench/bench_decode" "$cfg" --tokens "$tokens" --weights-dtype "$dtypes" \
         ${mesh:+--mesh "$mesh"} >"$runs" 2>"$log"; then
      cat "$log" >&2
      exit 1
    fi
    while read -r ours; do
      echo "$ours"
      theirs='{}'
      if [ -z "$mesh" ] && [[ "$ours" == *'"weights_dtype":"f32"'* ]] &&
         /usr/bin/python3 -c "import torch" 2>/dev/null </dev/null; then
        theirs=$(env ${torch_core:+OPENBLAS_CORETYPE=$torch_core} /usr/bin/python3 "$here/pytorch_decode.py" "$cfg" \
                 --tokens "$tokens" --threads "$threads" </dev/null)
        echo "$theirs"
      fi
      /usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
a, b = (json.loads(arg) for arg in sys.argv[1:3])
tps = a["decode_tokens_per_s"]
one_device_f32 = a["weights_dtype"] == "f32" and a["mesh"] == "1 device"  # what x f32 divides by
ratio = f"{a.get('x_f32', 1.0):.2f}x" if "x_f32" in a or one_device_f32 else ""
line = (f"| {a['config'].split('/')[-1]} | {a['mesh']} | {a['weights_dtype']} | {tps:.2f} | "
        f"{a['limit_tokens_per_s']:.2f} | {100 * a['of_limit']:.0f}% | {ratio} |")
if b:
    line += f" {b['decode_tokens_per_s']:.2f} | {tps / b['decode_tokens_per_s']:.2f}x |"
else:
    line += " | |"
print(line, file=sys.stderr)
PY
    done <"$runs"
  done
done
