// Decode speed of a Llama-shaped model against the machine's limit: a decode
// step reads every weight once (the embedding row aside), so tokens per
// second cannot exceed the copy bandwidth over the weights' bytes. Both are
// measured in this run (three rounds, each a decode beside a bandwidth
// measurement; medians reported). Prints a readable line on stderr and one
// JSON object on stdout per weight format.
//
//   bench_decode CONFIG.json [--prompt 16] [--tokens 32] [--mesh model=2] [--plan megatron|auto]
//                [--weights-dtype f32|bf16|int8|f32,bf16,int8] [--profile]
//
// With bf16 or int8 weights (nn/generation.h's quantize_weights) the bytes
// read per token are the weights' bytes in that format (int8's scales
// included; norms and biases stay f32), so the limit rises with them.
//
// Several formats (one device only, f32 among them) are compared in turns:
// each compact format is rounded once, then five rounds each decode in f32
// and right after in the format, and its "x_f32" is the median over the
// rounds of its tokens/s over the f32 turn's just before: this VM's copy
// bandwidth drifts by a fifth between minutes, which separate runs would
// take for a difference of the formats. The f32 turns read the same blocks
// (holding the rounded values: no kernel's speed depends on the values)
// with the compact copies switched off (ir/ops/quantized_gemv.h's
// QuantizedReadsOff). Every turn checks that decode read the compact
// copies exactly when it should.
//
// --profile prints the time of each primitive over the measured decodes
// (device 0's, on a mesh).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/nn/generation.h"
#include "autoshard/nn/models/llama.h"
#include "autoshard/tensor/parallel.h"
#include "ir/ops/quantized_gemv.h"

using namespace autoshard;

namespace {

// Bytes per second of a large copy on all cores (best of five).
double copy_bandwidth() {
  const int64_t n = int64_t{64} << 20;  // 256 MiB of floats each way
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(n, int64_t{1} << 20, [&](int64_t begin, int64_t end) {
      std::memcpy(b.data() + begin, a.data() + begin, sizeof(float) * (end - begin));
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * sizeof(float) * double(n) / s);  // read + write
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The bytes a decode step reads with weights in `quantized`'s format: every
// weight but the embedding table (one row), unless the head is tied to it.
double bytes_per_token(const LlamaConfig& cfg, int64_t params, const QuantizedWeights& quantized) {
  const int64_t embedding = cfg.vocab_size * cfg.hidden_size;
  double bytes = 0, embedding_bytes = 4.0 * double(embedding);
  int64_t rounded = 0;
  for (const auto& [path, w] : quantized.weights()) {
    bytes += double(w.bytes);
    rounded += w.elements;
    if (w.elements == embedding && path.find("embed") != std::string::npos)
      embedding_bytes = double(w.bytes);
  }
  return bytes + 4.0 * double(params - rounded) - (cfg.tie_word_embeddings ? 0 : embedding_bytes);
}

// One weight format's measurements, a value per round.
struct Turns {
  WeightsDType dtype;
  double bytes = 0;
  std::vector<double> rates, bandwidths, of_limit;
  std::vector<double> x_f32;  // tokens/s over the f32 turn's just before (several formats)
  Generation last;
};

std::vector<WeightsDType> parse_formats(const std::string& list) {
  std::vector<WeightsDType> out;
  std::stringstream in(list);
  for (std::string one; std::getline(in, one, ',');)
    out.push_back(parse_weights_dtype(one, "--weights-dtype"));
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_decode CONFIG.json [--prompt N] [--tokens N] [--mesh M]\n");
    return 2;
  }
  const std::string config_path = argv[1];
  int64_t prompt_len = 16, tokens = 32;
  std::string mesh_spec, plan = "megatron", weights_dtype = "f32";
  bool profile = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--prompt")
      prompt_len = std::stoll(next());
    else if (a == "--tokens")
      tokens = std::stoll(next());
    else if (a == "--mesh")
      mesh_spec = next();
    else if (a == "--plan")
      plan = next();
    else if (a == "--weights-dtype")
      weights_dtype = next();
    else if (a == "--profile")
      profile = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  std::vector<Turns> formats;
  for (WeightsDType d : parse_formats(weights_dtype)) {
    formats.emplace_back();
    formats.back().dtype = d;
  }
  if (formats.size() > 1 && !mesh_spec.empty()) {
    // On a mesh the compact copies are made with the devices' blocks, before
    // the first step: a format cannot be swapped in once the model has run.
    std::fprintf(stderr, "several --weights-dtype formats need one device (no --mesh)\n");
    return 2;
  }
  const LlamaConfig cfg = LlamaConfig::from_json_file(config_path);
  Llama model(cfg, 1, 0);
  if (!mesh_spec.empty()) {
    const DeviceMesh mesh = DeviceMesh::parse(mesh_spec);
    if (plan == "auto")
      model.set_distribution(std::make_shared<AutoShard>(mesh));
    else
      model.set_distribution(std::make_shared<ModelParallel>(mesh, llama_megatron_layout(cfg)));
  }
  const int64_t params = model.count_params();
  const bool several = formats.size() > 1;
  Turns* f32 = nullptr;
  for (Turns& f : formats)
    if (f.dtype == WeightsDType::F32) f32 = &f;
  if (several && !f32) {
    std::fprintf(stderr, "several --weights-dtype formats are each timed against f32: list f32\n");
    return 2;
  }
  // One format: rounded once, before the first step (as a user would).
  std::optional<QuantizedWeights> held;
  if (!several) held = quantize_weights(model, formats[0].dtype);
  std::vector<int32_t> prompt(prompt_len);
  for (int64_t i = 0; i < prompt_len; ++i) prompt[i] = int32_t((i * 7919) % cfg.vocab_size);
  generate(model, prompt,
           {.max_new_tokens = 3,
            .temperature = 0,
            .cache_length = prompt_len + tokens});  // weights made, caches warm
  OpProfile prof;
  if (profile) model.profile = &prof;
  // One decode in f's format, then the copy bandwidth (this VM's drifts by
  // up to a third within a minute, so each turn has its own).
  auto take_turn = [&](Turns& f, const QuantizedWeights& q) {
    f.bytes = bytes_per_token(cfg, params, q);
    const int64_t compact_reads = quantized_gemv_calls();
    f.last = generate(model, prompt, {.max_new_tokens = tokens + 1, .temperature = 0});
    const bool read_compact = quantized_gemv_calls() > compact_reads;
    if (read_compact != (f.dtype != WeightsDType::F32))
      throw Error(std::string("decode with ") + weights_dtype_name(f.dtype) + " weights " +
                  (read_compact ? "read" : "did not read") + " the compact copies");
    f.rates.push_back(f.last.decode_tokens_per_s());
    f.bandwidths.push_back(copy_bandwidth());
    f.of_limit.push_back(f.rates.back() / (f.bandwidths.back() / f.bytes));
  };
  if (!several) {
    for (int round = 0; round < 3; ++round) take_turn(formats[0], *held);
  } else {
    // Each compact format in turns with f32 on the same rounded blocks
    // (QuantizedReadsOff), five rounds of a turn each.
    const QuantizedWeights none;  // f32's bytes
    for (Turns& f : formats) {
      if (&f == f32) continue;
      const QuantizedWeights q = quantize_weights(model, f.dtype);
      for (int round = 0; round < 5; ++round) {
        {
          const QuantizedReadsOff off;
          take_turn(*f32, none);
        }
        take_turn(f, q);
        f.x_f32.push_back(f.rates.back() / f32->rates.back());
      }
    }
  }
  if (profile) std::fprintf(stderr, "%s", prof.table().c_str());
  for (const Turns& f : formats) {
    const double bandwidth = median(f.bandwidths);
    const double limit = bandwidth / f.bytes;
    const double tps = median(f.rates);
    nlohmann::json out{{"engine", "autoshard"},
                       {"config", config_path},
                       {"weights_dtype", weights_dtype_name(f.dtype)},
                       {"mesh", mesh_spec.empty() ? "1 device" : mesh_spec},
                       {"parameters", params},
                       {"bytes_per_token", f.bytes},
                       {"copy_bytes_per_s", bandwidth},
                       {"limit_tokens_per_s", limit},
                       {"decode_tokens_per_s", tps},
                       {"of_limit", median(f.of_limit)},
                       {"prefill_tokens_per_s", f.last.prefill_tokens_per_s()},
                       {"round_tokens_per_s", f.rates},
                       {"round_copy_bytes_per_s", f.bandwidths}};
    std::string versus;
    if (!f.x_f32.empty()) {  // each over the f32 turn just before it
      out["x_f32"] = median(f.x_f32);
      out["round_x_f32"] = f.x_f32;
      char buf[64];
      std::snprintf(buf, sizeof buf, " | %.2fx f32", median(f.x_f32));
      versus = buf;
    }
    std::fprintf(stderr,
                 "%s: %.1fM parameters, %s, %s weights | decode %.2f tokens/s | copy bandwidth "
                 "%.1f GB/s -> limit %.2f tokens/s | %.0f%% of the limit%s | prefill %.1f "
                 "tokens/s\n",
                 config_path.c_str(), double(params) / 1e6,
                 mesh_spec.empty() ? "1 device" : mesh_spec.c_str(), weights_dtype_name(f.dtype),
                 tps, bandwidth / 1e9, limit, 100 * median(f.of_limit), versus.c_str(),
                 f.last.prefill_tokens_per_s());
    std::printf("%s\n", out.dump().c_str());
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_decode: %s\n", e.what());
  return 1;
}
