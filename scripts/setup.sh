#!/usr/bin/env bash
# Installs every build and test dependency of autoshard from Debian's packages.
# Idempotent: packages already present are skipped. Set AUTOSHARD_WITH_TORCH=1
# to also install PyTorch and BLIS (only needed to regenerate reference data
# and for the side-by-side benchmarks; the tests never need them), and
# AUTOSHARD_WITH_CHROMIUM=1 for Chromium (autoshard report --png).
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-dev          # GEMM kernels (cblas_sgemm)
  nlohmann-json3-dev       # JSON: plans, logs, safetensors headers
  zlib1g-dev               # gzip-compressed sharding problems
  coinor-libcbc-dev        # mixed-integer programs in the sharding solver
  libcli11-dev             # command-line parsing
  libicu-dev               # Unicode regexes and normalisation for tokenizers
  libsentencepiece-dev     # tokenizer.model files
  libzip-dev               # .npz arrays and .keras files (zip archives)
  libhdf5-dev              # Keras .h5 files and model.weights.h5 (HDF5)
  libgtest-dev googletest  # tests
  libbenchmark-dev         # micro-benchmarks
  openmpi-bin libopenmpi-dev  # multi-process devices
  iproute2                    # network namespaces for the two-host MPI test
  clang libclang-rt-14-dev    # libFuzzer for the safetensors reader (scripts/fuzz.sh)
  python3-dev python3-numpy pybind11-dev python3-pybind11  # the Python package (python/)
  python3-pytest              # its tests (python/tests, run by ctest)
  graphviz                    # keras.utils.plot_model (its `dot` draws the PNG or SVG)
  python3-venv python3-pip python3-setuptools  # `pip install ./python`, the README's way in
)
if [ "${AUTOSHARD_WITH_TORCH:-0}" = 1 ]; then
  packages+=(python3-torch python3-numpy)
  packages+=(python3-sentencepiece)  # tools/make_tokenizer_fixtures.py
  packages+=(python3-h5py)           # tools/keras_files/make_fixtures.py (.keras and .h5 fixtures)
  packages+=(libblis-dev libdnnl-dev libxsmm-dev)  # the other GEMM libraries of bench/gemm_libraries.sh
  packages+=(python3-markdown)       # tools/render_notebook.py (the examples' rendered pages)
fi
if [ "${AUTOSHARD_WITH_CHROMIUM:-0}" = 1 ]; then
  # Headless rendering of the HTML pages to PNG (autoshard report --png,
  # tools/render_pages.sh); big, so not installed by default.
  packages+=(chromium fonts-dejavu-core)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
