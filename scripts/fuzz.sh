#!/usr/bin/env bash
# Builds the libFuzzer target for the safetensors reader (clang, ASan + UBSan)
# and runs it for SECONDS (default 60), seeded with the test checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
mkdir -p build-fuzz/corpus
cp tests/data/*.safetensors tests/data/hf_gpt2/model.safetensors build-fuzz/corpus/ 2>/dev/null || true
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc tests/fuzz/safetensors_fuzz.cc src/io/safetensors.cc src/tensor/tensor.cc \
  -o build-fuzz/safetensors_fuzz
./build-fuzz/safetensors_fuzz -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 \
  build-fuzz/corpus
