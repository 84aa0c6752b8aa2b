#!/usr/bin/env bash
# Ranks started with different options (mpirun's "A : B" form, or files that
# differ between the ranks' directories) must stop at start with one error
# naming the option and both values: never hang in a collective, fail deep
# inside MPI, or train different replicas and exit 0.
#
#   tests/mpi/agreement_test.sh PATH/TO/autoshard
set -euo pipefail
cli=$(readlink -f "$1")
data=$(cd "$(dirname "$0")/../data" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0; passed=0

# disagree NEEDLE "RANK 0 ARGS" "RANK 1 ARGS" [mpirun options of rank 0] [... of rank 1]
disagree() {
  local needle=$1 a=$2 b=$3 wa=${4:-} wb=${5:-} status=0 start=$SECONDS
  # shellcheck disable=SC2086
  timeout -s KILL 60 mpirun $wa -np 1 "$cli" $a : $wb -np 1 "$cli" $b >"$work/out" 2>&1 || status=$?
  if [ "$status" = 0 ] || [ "$status" = 137 ]; then
    failures=$((failures + 1)); echo "FAILED ($([ $status = 0 ] && echo 'exit 0' || echo 'hung')): $needle"
  elif ! grep -qF "$needle" "$work/out" || [ "$(grep -c 'autoshard: error' "$work/out")" != 1 ]; then
    failures=$((failures + 1)); echo "FAILED (message): $needle"; cat "$work/out"
  else
    passed=$((passed + 1)); echo "ok ($((SECONDS - start)) s): $(grep -o 'ranks disagree[^(]*' "$work/out")"
  fi
}

t="train --model tiny --batch 2 --seq 8 --sample 0 --mesh data=2"
disagree "ranks disagree on --steps: rank 0 has 4, rank 1 has 6" "$t --steps 4" "$t --steps 6"
disagree "ranks disagree on --seed: rank 0 has 5, rank 1 has 6" "$t --steps 2 --seed 5" "$t --steps 2 --seed 6"
disagree "ranks disagree on --lr: rank 0 has 1e-3, rank 1 has 2e-3" "$t --steps 2 --lr 1e-3" "$t --steps 2 --lr 2e-3"
disagree "ranks disagree on --batch" "train --model tiny --batch 2 --seq 8 --steps 2 --mesh data=2" \
  "train --model tiny --batch 4 --seq 8 --steps 2 --mesh data=2"
disagree "ranks disagree on --model: rank 0 has tiny, rank 1 has mini" \
  "train --model tiny --steps 2 --mesh model=2" "train --model mini --steps 2 --mesh model=2"
disagree "ranks disagree on --mesh: rank 0 has data=2, rank 1 has model=2" \
  "train --model tiny --steps 2 --mesh data=2" "train --model tiny --steps 2 --mesh model=2"
disagree "ranks disagree on --steps: rank 0 has (not given), rank 1 has 3" "$t" "$t --steps 3"
g="generate --weights $data/hf_llama --max-new-tokens 3 --mesh model=2"
disagree "ranks disagree on --seed: rank 0 has 3, rank 1 has 4" "$g --prompt-ids 5,6 --temperature 1 --seed 3" \
  "$g --prompt-ids 5,6 --temperature 1 --seed 4"
disagree "ranks disagree on --prompt-ids: rank 0 has 5,6, rank 1 has 5,6,7" "$g --prompt-ids 5,6" "$g --prompt-ids 5,6,7"
disagree "ranks disagree on --weights" "generate --weights $data/hf_llama --prompt-ids 5 --mesh model=2" \
  "generate --weights $data/hf_qwen2 --prompt-ids 5 --mesh model=2"
# The same --weights text naming different files (each rank's own directory).
mkdir -p "$work/a" "$work/b"
cp -r "$data/hf_llama" "$work/a/w"; cp -r "$data/hf_qwen2" "$work/b/w"
disagree "ranks disagree on the contents of --weights 'w'" "generate --weights w --prompt-ids 5 --mesh model=2" \
  "generate --weights w --prompt-ids 5 --mesh model=2" "--wdir $work/a" "--wdir $work/b"
disagree "ranks disagree on the command: rank 0 has train, rank 1 has eval" \
  "train --model tiny --steps 2 --mesh data=2" "eval --model tiny --mesh data=2"

echo "$passed passed, $failures failed"
[ "$failures" = 0 ]
