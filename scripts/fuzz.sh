#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) for what users hand
# autoshard: the safetensors reader (seeded with the test checkpoints), and
# model configs and checkpoint states (seeded with valid ones),
# tokenizer.json, IOPDDL problems (reader, evaluator and a round of the
# solver), cluster files, NumPy .npy/.npz files, Keras files (.keras
# zips, HDF5, TF.js model.json + shard) and KerasHub presets (config.json +
# task.json). Runs each for a tenth of SECONDS (default 60), none with a
# suppression: libhdf5's own crashes, hangs and runaway allocations end in
# the HDF5 pre-flight child as one error (docs/keras-files.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
share=$(( (seconds + 9) / 10 ))

# Each fuzzer: its harness (tests/fuzz/NAME_fuzz.cc), the sources it reads
# with, and the libraries it links. Keras's HDF5 reader widens bfloat16 with
# safetensors.cc's bf16_to_float, which brings the tensor helpers along.
tensors="src/tensor/tensor.cc src/tensor/large_array.cc src/tensor/sharding.cc src/tensor/mesh.cc src/tensor/array_split.cc
  src/tensor/parallel.cc"
keras="src/io/keras/hdf5_file.cc src/io/zip_archive.cc src/io/keras/architecture.cc
  src/io/safetensors.cc src/io/tensor_mapping.cc $tensors"
declare -A sources=(
  [safetensors]="src/io/safetensors.cc src/io/tensor_mapping.cc $tensors"
  [config]="src/models/gpt2/config.cc src/models/llama/config.cc src/models/config_reader.cc
    src/io/checkpoint_state.cc"
  [tokenizer]="src/io/tokenizer/hf_tokenizer.cc src/io/tokenizer/bpe.cc
    src/io/tokenizer/wordpiece.cc src/io/tokenizer/subword_models.cc
    src/io/tokenizer/normalizers.cc src/io/tokenizer/pre_tokenizers.cc
    src/io/tokenizer/post_processors.cc src/io/tokenizer/decoders.cc src/io/tokenizer/unicode.cc"
  [problem]="src/solver/problem.cc src/solver/problem_reader.cc src/solver/reduced.cc
    src/solver/solver.cc src/solver/mip.cc"
  [cluster]="src/plan/cluster.cc src/tensor/mesh.cc"
  [npy]="src/io/npy.cc src/io/zip_archive.cc src/io/safetensors.cc $tensors"
  [keras_zip]="$keras"
  [keras_h5]="$keras"
  [keras_tfjs]="$keras src/io/keras/weight_table.cc"
  [keras_hub_preset]="src/io/keras_hub/config.cc src/models/config_reader.cc
    src/models/keras_hub_model.cc src/models/keras_hub_table.cc src/models/registry.cc
    $(echo src/models/{gpt2,llama,opt,bert,phi3}/{config,family,keras_hub}.cc)"
)
# The config readers reach the model families through their registry
# entries, whose other functions (building a model, reading its weights) pull
# in the whole library: those stay unresolved, and reading a config never
# calls them.
configs_only="-no-pie -Wl,--unresolved-symbols=ignore-all"
declare -A libs=(
  [config]="$configs_only"
  [keras_hub_preset]="$configs_only"
  [tokenizer]="-licui18n -licuuc"
  [problem]="$(pkg-config --libs cbc) -lz"
  [npy]="-lzip"
  [keras_zip]="$(pkg-config --libs hdf5 libzip)"
  [keras_h5]="$(pkg-config --libs hdf5 libzip)"
  [keras_tfjs]="$(pkg-config --libs hdf5 libzip)"
)
# Every source compiles once, on every core (compiling each fuzzer's sources
# again, one compile at a time, took most of this script's time), then each
# fuzzer links its own.
fuzz_flags="-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined
  -fno-sanitize-recover=undefined -Iinclude -Isrc $(pkg-config --cflags cbc hdf5 libzip)"
export fuzz_flags
object_of() { printf 'build-fuzz/obj/%s.o' "${1//\//_}"; }
export -f object_of
mkdir -p build-fuzz/obj
# Split on purpose; bash -c expands its own variables.
# shellcheck disable=SC2068,SC2016
printf '%s\n' ${sources[@]} tests/fuzz/*_fuzz.cc | sort -u |
  xargs -P "$(nproc)" -I{} bash -c 'clang++ $fuzz_flags -c "$1" -o "$(object_of "$1")"' _ {}
for name in "${!sources[@]}"; do
  objects=$(object_of "tests/fuzz/${name}_fuzz.cc")
  for s in ${sources[$name]}; do objects+=" $(object_of "$s")"; done
  # shellcheck disable=SC2086
  clang++ -fsanitize=fuzzer,address,undefined $objects ${libs[$name]:-} -o "build-fuzz/${name}_fuzz"
done
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
./build-fuzz/safetensors_fuzz -max_total_time="$share" -max_len=4096 -rss_limit_mb=2048 \
  -dict=tests/fuzz/safetensors.dict build-fuzz/corpus

mkdir -p build-fuzz/config-corpus
cp tests/data/hf_gpt2/config.json build-fuzz/config-corpus/
cp tests/data/hf_llama/config.json build-fuzz/config-corpus/llama.json
printf '%s' '{"format": "autoshard-checkpoint-1", "step": 4, "data_position": 4, "batch": 8, "seq": 64}' \
  > build-fuzz/config-corpus/state.json
./build-fuzz/config_fuzz -max_total_time="$share" -max_len=2048 -rss_limit_mb=2048 \
  build-fuzz/config-corpus

# tokenizer.json (seeded with the tokenizer fixtures): a per-input timeout
# and memory limit, so a hang or a blow-up is a finding too.
mkdir -p build-fuzz/tokenizer-corpus
for f in tests/data/tokenizers/*/tokenizer.json tests/data/tokenizers/sentencepiece/{legacy,metaspace}.json; do
  cp "$f" "build-fuzz/tokenizer-corpus/$(basename "$(dirname "$f")")-$(basename "$f")"
done
./build-fuzz/tokenizer_fuzz -max_total_time="$share" -max_len=20000 -timeout=10 \
  -rss_limit_mb=2048 -dict=tests/fuzz/tokenizer.dict build-fuzz/tokenizer-corpus

# IOPDDL problems and cluster files (seeded with valid ones, and a problem
# whose usages sum past 2^63): each input within 10 s and 2 GiB.
mkdir -p build-fuzz/problem-corpus build-fuzz/cluster-corpus
cp tests/data/iopddl_example.json build-fuzz/problem-corpus/
printf '%s' '{"problem":{"name":"wrap","nodes":{"intervals":[[0,1],[0,1]],"costs":[[1,2],[1]],"usages":[[4611686018427387904,1],[4611686018427387904]]},"edges":{"nodes":[[0,1]],"costs":[[1,1000000000000000000]]},"usage_limit":4611686018427387905}}' \
  > build-fuzz/problem-corpus/wrap.json
./build-fuzz/problem_fuzz -max_total_time="$share" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  build-fuzz/problem-corpus

printf '%s' '{"name":"c","device":{"flops":{"f32":19.5e12,"bf16":312e12},"gemm_efficiency":[[1e9,0.45],[1e11,0.8]],"gemm_packing_bandwidth":0,"memory_bytes":85899345920,"memory_bandwidth":2.0e12,"stream_efficiency":0.8,"kernel_bandwidth":0,"kernel_flops":0,"process_bytes":0,"op_overhead_s":5e-6},"shared_cores":4,"oversubscribed_efficiency":0.8,"oversubscribed_wait_s":1e-5,"oversubscribed_slice_s":0.004,"links":[{"name":"nvlink","devices_per_group":8,"bandwidth":300e9,"latency_s":2e-6,"efficiency":0.8},{"name":"ib","devices_per_group":0,"bandwidth":25e9,"latency_s":5e-6,"efficiency":0.8}],"mpi_link":{"name":"mpi","devices_per_group":0,"bandwidth":5e9,"latency_s":1e-5,"efficiency":1}}' \
  > build-fuzz/cluster-corpus/cluster.json
./build-fuzz/cluster_fuzz -max_total_time="$share" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  build-fuzz/cluster-corpus

# NumPy .npy and .npz files (seeded with the arrays NumPy wrote): what is
# read must write back and read back the same.
mkdir -p build-fuzz/npy-corpus
cp tests/data/npy/* build-fuzz/npy-corpus/
./build-fuzz/npy_fuzz -max_total_time="$share" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  build-fuzz/npy-corpus

# Keras files (seeded with the .keras/.h5 fixtures and TF.js fixtures): the
# .keras zip and its config.json, HDF5 files (legacy .h5, model.weights.h5)
# and TF.js model.json + shard; each input within 10 s and 2 GiB. libhdf5
# reads every file first in the pre-flight child (5 s, 512 MiB), where its own
# crashes, hangs and runaway allocations become an autoshard::Error; anything
# else is a finding.
mkdir -p build-fuzz/keras-zip-corpus build-fuzz/keras-h5-corpus build-fuzz/keras-tfjs-corpus
cp tests/data/keras_files/*.keras build-fuzz/keras-zip-corpus/
cp tests/data/keras_files/*.h5 build-fuzz/keras-h5-corpus/
for f in tests/data/keras_files/*.keras; do
  python3 -c "import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read('model.weights.h5'))" "$f" > \
    "build-fuzz/keras-h5-corpus/$(basename "$f" .keras).weights.h5"
done
for m in batch_normalization_dense two_outputs lstm_language_model; do
  { cat "tests/data/keras_layers/tfjs/$m.json"; printf '\n--shard--\n'
    cat "tests/data/keras_layers/tfjs/$m.weights.bin"; } > "build-fuzz/keras-tfjs-corpus/$m"
done
for t in zip h5 tfjs; do
  "./build-fuzz/keras_${t}_fuzz" -max_total_time="$share" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="build-fuzz/keras-${t}-" "build-fuzz/keras-${t}-corpus"
done

# KerasHub presets (seeded with the presets in tests/data/keras_hub): a
# config.json, then `--task--` and its task.json when the preset has one.
mkdir -p build-fuzz/keras-hub-corpus
for d in tests/data/keras_hub/*/; do
  [ -f "$d/config.json" ] || continue
  out="build-fuzz/keras-hub-corpus/$(basename "$d")"
  cat "$d/config.json" > "$out"
  if [ -f "$d/task.json" ]; then printf '\n--task--\n' >> "$out"; cat "$d/task.json" >> "$out"; fi
done
./build-fuzz/keras_hub_preset_fuzz -max_total_time="$share" -max_len=8192 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix=build-fuzz/keras-hub- build-fuzz/keras-hub-corpus
