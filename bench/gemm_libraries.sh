#!/usr/bin/env bash
# The GEMM libraries Debian packages, side by side on the step's shapes
# (bench/gemm_shapes.cc), each on every core. OpenBLAS always; BLIS when
# libblis-dev is installed (AUTOSHARD_WITH_TORCH=1 scripts/setup.sh).
set -euo pipefail
here=$(dirname "$0"); work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
threads=$(nproc)
inc=$(pkg-config --cflags openblas)
g++ -O2 $inc "$here/gemm_shapes.cc" $(pkg-config --libs openblas) -o "$work/openblas"
echo "OpenBLAS, $threads threads"; OPENBLAS_NUM_THREADS=$threads "$work/openblas"
blis=/usr/lib/x86_64-linux-gnu/libblis.so.4
if [ -e "$blis" ]; then
  g++ -O2 $inc "$here/gemm_shapes.cc" "$blis" -o "$work/blis"
  echo "BLIS, $threads threads"; BLIS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$work/blis"
fi
