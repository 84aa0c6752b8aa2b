#!/usr/bin/env bash
# The OpenBLAS core type for PyTorch's runs: the one autoshard runs on this
# CPU (src/ir/blas_core.cc), so that PyTorch, which loads the same OpenBLAS,
# multiplies with the same kernels (on a CPU OpenBLAS 0.3.21 does not know,
# it would otherwise fall back to Prescott's and run several times slower).
# A user's OPENBLAS_CORETYPE is kept, as autoshard keeps it. Prints nothing
# when the BLAS is not OpenBLAS.
# Usage: bench/torch_blas_core.sh [BUILD_DIR]
set -euo pipefail
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  echo "$OPENBLAS_CORETYPE"
  exit 0
fi
"${1:-build}/autoshard" --version | sed -n 's/^BLAS: OpenBLAS.*, core \([A-Za-z0-9_]*\) (.*/\1/p'
