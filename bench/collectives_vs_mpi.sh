#!/usr/bin/env bash
# The in-process collectives next to OpenMPI's on the same number of ranks,
# every op at every size, and their ratio (autoshard's bandwidth / OpenMPI's).
# Usage: bench/collectives_vs_mpi.sh [BUILD_DIR] [RANKS] [SIZES_KIB]
set -euo pipefail
build=${1:-build}; ranks=${2:-2}; sizes=${3:-4,64,1024,4096,16384,65536,262144}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Two rounds, the two sides taking turns, and each side's best of the two:
# a VM's slow minute then lands on both sides alike rather than on one.
ours="" theirs=""
for round in 1 2; do
  ours+=$("$build/bench/bench_collectives" --ranks "$ranks" --sizes-kib "$sizes" 2>/dev/null)$'\n'
  theirs+=$(mpirun --oversubscribe -np "$ranks" "$build/bench/bench_mpi_collectives" \
            --sizes-kib "$sizes" 2>/dev/null)$'\n'
done
echo "$ours"
echo "$theirs"
python3 - "$ours" "$theirs" <<'PY'
import json, sys
def best(text):  # (op, KiB) -> the run with the highest bus bandwidth
    out = {}
    for r in (json.loads(l) for l in text.splitlines() if l.startswith("{")):
        key = (r["op"], round(r["bytes"] / 1024))
        if key not in out or r["busbw_GBps"] > out[key]["busbw_GBps"]:
            out[key] = r
    return out
ours, theirs = best(sys.argv[1]).values(), best(sys.argv[2])
print(f"\n{'op':<14}{'size':>10}{'autoshard GB/s':>16}{'OpenMPI GB/s':>14}{'ratio':>8}")
worst = None
for r in ours:
    m = theirs.get((r["op"], round(r["bytes"] / 1024)))
    if not m:
        continue
    ratio = r["busbw_GBps"] / m["busbw_GBps"]
    worst = ratio if worst is None else min(worst, ratio)
    kib = r["bytes"] / 1024
    size = f"{kib / 1024:.0f} MiB" if kib >= 1024 else f"{kib:.0f} KiB"
    print(f"{r['op']:<14}{size:>10}{r['busbw_GBps']:>16.2f}{m['busbw_GBps']:>14.2f}{ratio:>7.2f}x")
print(f"\nslowest ratio: {worst:.2f}x (autoshard / OpenMPI busbw, >= 1 means never slower)")
PY
