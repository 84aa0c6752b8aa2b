#!/usr/bin/env bash
# Decode tokens per second of Llama-shaped models: autoshard (1 device and
# model=2) against the copy-bandwidth limit and PyTorch's own loop with a
# key-value cache on the same threads.
# Usage: bench/decode.sh [BUILD_DIR] [TOKENS]
set -euo pipefail
build=${1:-build}; tokens=${2:-32}
here=$(dirname "$0")
threads=$(nproc)
for cfg in "$here/configs/llama-124m.json" "$here/configs/llama-1b.json"; do
  for mesh in "" "model=2"; do
    "$build/bench/bench_decode" "$cfg" --tokens "$tokens" ${mesh:+--mesh "$mesh"} >"/tmp/decode_ours.json"
    ours=$(cat /tmp/decode_ours.json); echo "$ours"
    theirs='{}'
    if [ -z "$mesh" ] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
      theirs=$(/usr/bin/python3 "$here/pytorch_decode.py" "$cfg" --tokens "$tokens" --threads "$threads")
      echo "$theirs"
    fi
    /usr/bin/python3 - "$ours" "$theirs" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
line = (f"| {a['config'].split('/')[-1]} | {a['mesh']} | {a['decode_tokens_per_s']:.2f} | "
        f"{a['limit_tokens_per_s']:.2f} | {100 * a['of_limit']:.0f}% |")
if b:
    line += f" {b['decode_tokens_per_s']:.2f} | {a['decode_tokens_per_s'] / b['decode_tokens_per_s']:.2f}x |"
else:
    line += " | |"
print(line, file=sys.stderr)
PY
  done
done
