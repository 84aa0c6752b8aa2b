#!/usr/bin/env bash
# The GEMM libraries Debian packages, side by side on the step's shapes
# (bench/gemm_shapes.cc), each on every core. OpenBLAS always; BLIS, oneDNN
# and libxsmm when installed (AUTOSHARD_WITH_TORCH=1 scripts/setup.sh).
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
if [ -e /usr/include/oneapi/dnnl/dnnl.h ]; then
  g++ -O2 -DGEMM_DNNL "$here/gemm_shapes.cc" -ldnnl -o "$work/dnnl"
  echo "oneDNN, $threads threads"; OMP_NUM_THREADS=$threads "$work/dnnl"
fi
if pkg-config --exists libxsmmext 2>/dev/null; then
  # libxsmm falls back to a BLAS above its small-matrix sizes: OpenBLAS, single-threaded
  # under libxsmm's own OpenMP split.
  g++ -O2 -fopenmp -DGEMM_XSMM $(pkg-config --cflags libxsmmext) "$here/gemm_shapes.cc" \
    $(pkg-config --libs libxsmmext libxsmm) $(pkg-config --libs openblas) -ldl -o "$work/xsmm"
  echo "libxsmm, $threads threads"; OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1 "$work/xsmm"
fi
