#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: once optimised, once under
# AddressSanitizer + UndefinedBehaviorSanitizer. Set AUTOSHARD_QUICK=1 to skip
# the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

# The three CMake builds here (release, ASan, TSan) are unity builds (16
# sources a compile), which take about 0.6 of the time of file by file; see
# CMakeLists.txt.
unity="-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16"

# AUTOSHARD_PYTHON=ON: a missing pybind11 or NumPy fails here instead of
# silently skipping the Python tests (ctest runs them as PythonTests).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAUTOSHARD_PYTHON=ON -DAUTOSHARD_TESTS=ON -DAUTOSHARD_BENCH=ON $unity >/dev/null
cmake --build build -j"$jobs"
(cd build && ctest -j"$jobs" --output-on-failure)

if [ "${AUTOSHARD_QUICK:-0}" != 1 ]; then
  cmake -S . -B build-asan -DAUTOSHARD_SANITIZE=ON -DAUTOSHARD_TESTS=ON $unity -DAUTOSHARD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-asan -j"$jobs"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 ctest -j"$jobs" --output-on-failure)
  # ThreadSanitizer over the tests that run several devices as threads (halo
  # exchanges of split images and batch statistics, pipeline stages included).
  cmake -S . -B build-tsan -DAUTOSHARD_TSAN=ON -DAUTOSHARD_TESTS=ON $unity -DAUTOSHARD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-tsan -j"$jobs"
  (cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest -j"$jobs" --output-on-failure \
     -R 'ParallelFor|Lanes|Attention|Collectives|ShardedTraining|Partitioner|Cli.TrainOnAMesh|OpSharding|Dropout|AutoShardPlan|Generation|KerasLayersSpatial|ConvLayers|BatchNormalization|Recurrent|Pipeline|PipeSchedules|Fsdp|Quantized|KerasInitializers|Convolution|LstmCell|GruCell|ThinGemm|Concat|Einsum')
  # The readers of users' files (safetensors, configs, tokenizers, problems,
  # clusters, NumPy, Keras) under libFuzzer for a short while.
  scripts/fuzz.sh "${AUTOSHARD_FUZZ_SECONDS:-30}" 2>&1 | tail -n 2
fi
