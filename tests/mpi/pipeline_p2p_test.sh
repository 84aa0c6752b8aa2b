#!/usr/bin/env bash
# Point-to-point send/receive between MPI ranks (what pipeline stages pass):
# the PointToPointMpi tests of the test binary under mpirun on 2, 3 and 4
# ranks, and with at most 5 floats per MPI call (messages in many rounds).
#
#   tests/mpi/pipeline_p2p_test.sh PATH/TO/autoshard_tests
set -euo pipefail
tests=$(readlink -f "$1")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0; passed=0

run() {  # NP [ENV=VALUE]
  local np=$1 status=0
  timeout -s KILL 120 env ${2:+"$2"} mpirun -np "$np" "$tests" --gtest_filter='PointToPointMpi.*' --gtest_color=no \
    >"$work/out" 2>&1 || status=$?
  # Every rank must have run the test (not skipped it) and passed.
  if [ "$status" = 0 ] && [ "$(grep -c '\[       OK \] PointToPointMpi.RingOverRanks' "$work/out")" = "$np" ]; then
    passed=$((passed + 1)); echo "ok: $np ranks ${2:-}"
  else
    failures=$((failures + 1)); echo "FAILED (status $status): $np ranks ${2:-}"; cat "$work/out"
  fi
}
run 2
run 3
run 4
run 3 AUTOSHARD_MPI_MAX_COUNT=5

echo "$passed passed, $failures failed"
[ "$failures" = 0 ]
