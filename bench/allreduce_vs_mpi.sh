#!/usr/bin/env bash
# All-reduce bus bandwidth: in-process threads next to OpenMPI on the same ranks.
# Usage: bench/allreduce_vs_mpi.sh [BUILD_DIR] [RANKS] [SIZES_MIB]
set -euo pipefail
build=${1:-build}; ranks=${2:-2}; sizes=${3:-4,64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$build/bench/bench_allreduce" --ranks "$ranks" --sizes-mib "$sizes"
mpirun --oversubscribe -np "$ranks" "$build/bench/bench_mpi_allreduce" --sizes-mib "$sizes"
