#!/usr/bin/env bash
# The same benchmarks from two build trees, in turns (before, after, before,
# ...), so that both see the same machine: the GPT-2 step and the two Keras
# models of bench_keras_layers. Prints one JSON line per run, then a table of
# the median steps and their ratio (after / before).
#   bench/compare_builds.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]
# BEFORE_BUILD is a build of another commit (a git worktree), with
# -DAUTOSHARD_BENCH=ON and its bench_gpt2_step and bench_keras_layers made.
set -euo pipefail
before=$1; after=$2; rounds=${3:-3}
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
for round in $(seq "$rounds"); do
  for side in before after; do
    build=$before; [ "$side" = after ] && build=$after
    for bench in "bench_gpt2_step --model gpt2 --batch 4 --seq 64 --steps 5 --warmup 2" \
                 "bench_keras_layers --model lstm --steps 3 --warmup 1" \
                 "bench_keras_layers --model resnet --steps 3 --warmup 1"; do
      # shellcheck disable=SC2086 (the benchmark's arguments split on purpose)
      result=$("$build/bench/"$bench 2>/dev/null | tail -1)
      echo "{\"round\": $round, \"side\": \"$side\", \"bench\": \"$bench\", \"result\": $result}" |
        tee -a "$runs"
    done
  done
done
/usr/bin/python3 - "$runs" <<'PY'
import json, statistics, sys
from collections import defaultdict
steps = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    name = r["bench"].split()[0] + " " + r["bench"].split("--model ")[1].split()[0]
    steps[(name, r["side"])].append(r["result"]["median_step_s"])
print("| benchmark | before (s) | after (s) | after / before |")
print("|---|---|---|---|")
for name in sorted({n for n, _ in steps}):
    b, a = steps[(name, "before")], steps[(name, "after")]
    print(f"| {name} | {', '.join(f'{x:.3f}' for x in b)} | {', '.join(f'{x:.3f}' for x in a)} "
          f"| {statistics.median(a) / statistics.median(b):.3f} |")
PY
