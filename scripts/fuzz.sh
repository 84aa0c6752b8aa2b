#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) for what users hand
# autoshard: the safetensors reader (seeded with the test checkpoints), and
# model configs and checkpoint states (seeded with valid ones),
# tokenizer.json, IOPDDL problems (reader, evaluator and a round of the
# solver), cluster files and NumPy .npy/.npz files. Runs each for a sixth
# of SECONDS (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
share=$(( (seconds + 5) / 6 ))
mkdir -p build-fuzz/corpus
cp tests/data/*.safetensors tests/data/hf_gpt2/model.safetensors build-fuzz/corpus/ 2>/dev/null || true
# Seeds near the size limits, so the fuzzer starts where byte counts could wrap.
seed() {  # NAME HEADER: an 8-byte little-endian length, the header, 16 data bytes
  local n=${#2} out="build-fuzz/corpus/$1"
  printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' \
    $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)))" > "$out"
  printf '%s' "$2" >> "$out"
  head -c 16 /dev/zero >> "$out"
}
seed huge_f64 '{"w":{"dtype":"F64","shape":[1152921504606846976],"data_offsets":[0,0]}}'
seed wrap_dims '{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}}'
seed split_bf16 '{"w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,12]}}'
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc tests/fuzz/safetensors_fuzz.cc src/io/safetensors.cc src/io/tensor_mapping.cc \
  src/tensor/tensor.cc src/tensor/sharding.cc src/tensor/mesh.cc src/tensor/array_split.cc \
  -o build-fuzz/safetensors_fuzz
./build-fuzz/safetensors_fuzz -max_total_time="$share" -max_len=4096 -rss_limit_mb=2048 \
  -dict=tests/fuzz/safetensors.dict build-fuzz/corpus

mkdir -p build-fuzz/config-corpus
cp tests/data/hf_gpt2/config.json build-fuzz/config-corpus/
cp tests/data/hf_llama/config.json build-fuzz/config-corpus/llama.json
printf '%s' '{"format": "autoshard-checkpoint-1", "step": 4, "data_position": 4, "batch": 8, "seq": 64}' \
  > build-fuzz/config-corpus/state.json
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc tests/fuzz/config_fuzz.cc src/nn/models/gpt2_config.cc \
  src/nn/models/llama_config.cc src/nn/models/config_reader.cc src/io/checkpoint_state.cc \
  -o build-fuzz/config_fuzz
./build-fuzz/config_fuzz -max_total_time="$share" -max_len=2048 -rss_limit_mb=2048 \
  build-fuzz/config-corpus

# tokenizer.json (seeded with the tokenizer fixtures): a per-input timeout
# and memory limit, so a hang or a blow-up is a finding too.
mkdir -p build-fuzz/tokenizer-corpus
for f in tests/data/tokenizers/*/tokenizer.json tests/data/tokenizers/sentencepiece/{legacy,metaspace}.json; do
  cp "$f" "build-fuzz/tokenizer-corpus/$(basename "$(dirname "$f")")-$(basename "$f")"
done
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc tests/fuzz/tokenizer_fuzz.cc src/io/tokenizer/hf_tokenizer.cc \
  src/io/tokenizer/json_field.cc src/io/tokenizer/bpe.cc src/io/tokenizer/wordpiece.cc \
  src/io/tokenizer/subword_models.cc src/io/tokenizer/normalizers.cc \
  src/io/tokenizer/pre_tokenizers.cc src/io/tokenizer/post_processors.cc \
  src/io/tokenizer/decoders.cc src/io/tokenizer/unicode.cc -licui18n -licuuc \
  -o build-fuzz/tokenizer_fuzz
./build-fuzz/tokenizer_fuzz -max_total_time="$share" -max_len=20000 -timeout=10 \
  -rss_limit_mb=2048 -dict=tests/fuzz/tokenizer.dict build-fuzz/tokenizer-corpus

# IOPDDL problems and cluster files (seeded with valid ones, and a problem
# whose usages sum past 2^63): each input within 10 s and 2 GiB.
mkdir -p build-fuzz/problem-corpus build-fuzz/cluster-corpus
cp tests/data/iopddl_example.json build-fuzz/problem-corpus/
printf '%s' '{"problem":{"name":"wrap","nodes":{"intervals":[[0,1],[0,1]],"costs":[[1,2],[1]],"usages":[[4611686018427387904,1],[4611686018427387904]]},"edges":{"nodes":[[0,1]],"costs":[[1,1000000000000000000]]},"usage_limit":4611686018427387905}}' \
  > build-fuzz/problem-corpus/wrap.json
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc $(pkg-config --cflags cbc) tests/fuzz/problem_fuzz.cc src/plan/problem.cc \
  src/plan/problem_reader.cc src/plan/reduced.cc src/plan/solver.cc src/plan/mip.cc \
  src/runtime/memory.cc $(pkg-config --libs cbc) -lz -o build-fuzz/problem_fuzz
./build-fuzz/problem_fuzz -max_total_time="$share" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  build-fuzz/problem-corpus

printf '%s' '{"name":"c","device":{"flops":{"f32":19.5e12,"bf16":312e12},"gemm_efficiency":[[1e9,0.45],[1e11,0.8]],"gemm_packing_bandwidth":0,"memory_bytes":85899345920,"memory_bandwidth":2.0e12,"stream_efficiency":0.8,"kernel_bandwidth":0,"kernel_flops":0,"process_bytes":0,"op_overhead_s":5e-6},"shared_cores":4,"oversubscribed_efficiency":0.8,"oversubscribed_wait_s":1e-5,"oversubscribed_slice_s":0.004,"links":[{"name":"nvlink","devices_per_group":8,"bandwidth":300e9,"latency_s":2e-6,"efficiency":0.8},{"name":"ib","devices_per_group":0,"bandwidth":25e9,"latency_s":5e-6,"efficiency":0.8}],"mpi_link":{"name":"mpi","devices_per_group":0,"bandwidth":5e9,"latency_s":1e-5,"efficiency":1}}' \
  > build-fuzz/cluster-corpus/cluster.json
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc tests/fuzz/cluster_fuzz.cc src/plan/cluster.cc src/runtime/memory.cc \
  src/tensor/mesh.cc -o build-fuzz/cluster_fuzz
./build-fuzz/cluster_fuzz -max_total_time="$share" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  build-fuzz/cluster-corpus

# NumPy .npy and .npz files (seeded with the arrays NumPy wrote): what is
# read must write back and read back the same.
mkdir -p build-fuzz/npy-corpus
cp tests/data/npy/* build-fuzz/npy-corpus/
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc tests/fuzz/npy_fuzz.cc src/io/npy.cc src/io/safetensors.cc src/tensor/tensor.cc \
  src/tensor/sharding.cc src/tensor/mesh.cc src/tensor/array_split.cc -lzip \
  -o build-fuzz/npy_fuzz
./build-fuzz/npy_fuzz -max_total_time="$share" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  build-fuzz/npy-corpus
