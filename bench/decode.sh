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
# "x f32 at equal bandwidth": each row's tokens/s over the copy bandwidth
# measured beside it, against the f32 row's; this VM's bandwidth moves by a
# fifth between rows, which the plain ratio takes for a speed difference.
echo "| config | mesh | weights | autoshard tokens/s | limit tokens/s | of the limit | x f32 | x f32 at equal bandwidth | PyTorch f32 tokens/s | speed-up |" >&2
echo "|---|---|---|---|---|---|---|---|---|---|" >&2
for cfg in "$here/configs/llama-124m.json" "$here/configs/llama-1b.json"; do
  f32_run='{}'
  for run in "|f32" "|bf16" "|int8" "model=2|f32" "model=2|int8"; do
    mesh=${run%%|*}; dtype=${run#*|}
    ours=$("$build/bench/bench_decode" "$cfg" --tokens "$tokens" --weights-dtype "$dtype" \
           ${mesh:+--mesh "$mesh"} 2>/dev/null)
    echo "$ours"
    theirs='{}'
    if [ -z "$mesh" ] && [ "$dtype" = f32 ] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
      theirs=$(env ${torch_core:+OPENBLAS_CORETYPE=$torch_core} /usr/bin/python3 "$here/pytorch_decode.py" "$cfg" \
               --tokens "$tokens" --threads "$threads")
      echo "$theirs"
    fi
    [ -z "$mesh" ] && [ "$dtype" = f32 ] && f32_run=$ours
    /usr/bin/python3 - "$ours" "$theirs" "$f32_run" <<'PY'
import json, sys
a, b, f32 = (json.loads(arg) for arg in sys.argv[1:4])
tps = a["decode_tokens_per_s"]
ratio = fair = ""
if f32:
    ratio = f"{tps / f32['decode_tokens_per_s']:.2f}x"
    per_byte = lambda r: r["decode_tokens_per_s"] / r["copy_bytes_per_s"]
    fair = f"{per_byte(a) / per_byte(f32):.2f}x"
line = (f"| {a['config'].split('/')[-1]} | {a['mesh']} | {a['weights_dtype']} | {tps:.2f} | "
        f"{a['limit_tokens_per_s']:.2f} | {100 * a['of_limit']:.0f}% | {ratio} | {fair} |")
if b:
    line += f" {b['decode_tokens_per_s']:.2f} | {tps / b['decode_tokens_per_s']:.2f}x |"
else:
    line += " | |"
print(line, file=sys.stderr)
PY
  done
done
