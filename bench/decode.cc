// Decode speed of a Llama-shaped model against the machine's limit: a decode
// step reads every weight once (the embedding row aside), so tokens per
// second cannot exceed the copy bandwidth over the weights' bytes. Both are
// measured in this run (three rounds, each a decode beside a bandwidth
// measurement; medians reported). Prints a readable line on stderr and one
// JSON object on stdout.
//
//   bench_decode CONFIG.json [--prompt 16] [--tokens 32] [--mesh model=2] [--plan megatron|auto]
//                [--weights-dtype f32|bf16|int8] [--profile]
//
// With bf16 or int8 weights (nn/generation.h's quantize_weights) the bytes
// read per token are the weights' bytes in that format (int8's scales
// included; norms and biases stay f32), so the limit rises with them.
// --profile prints the time of each primitive over the measured decodes
// (device 0's, on a mesh).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/nn/generation.h"
#include "autoshard/nn/models/llama.h"
#include "autoshard/tensor/parallel.h"

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

}  // namespace

int main(int argc, char** argv) {
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
  const QuantizedWeights quantized =
      quantize_weights(model, parse_weights_dtype(weights_dtype, "--weights-dtype"));
  // Read per token: every weight but the embedding table (one row), unless
  // the head is tied to it; each in the format it is held in.
  const int64_t embedding = cfg.vocab_size * cfg.hidden_size;
  double bytes = 0, embedding_bytes = 4.0 * double(embedding);
  int64_t rounded = 0;
  for (const auto& [path, w] : quantized.weights()) {
    bytes += double(w.bytes);
    rounded += w.elements;
    if (w.elements == embedding && path.find("embed") != std::string::npos)
      embedding_bytes = double(w.bytes);
  }
  bytes += 4.0 * double(params - rounded) - (cfg.tie_word_embeddings ? 0 : embedding_bytes);
  std::vector<int32_t> prompt(prompt_len);
  for (int64_t i = 0; i < prompt_len; ++i) prompt[i] = int32_t((i * 7919) % cfg.vocab_size);
  generate(model, prompt,
           {.max_new_tokens = 3,
            .temperature = 0,
            .cache_length = prompt_len + tokens});  // weights made, caches warm
  // This VM's memory bandwidth drifts by up to a third within a minute: each
  // round pairs a decode with a bandwidth measurement taken right after it,
  // and the medians of three rounds are reported.
  OpProfile prof;
  if (profile) model.profile = &prof;
  constexpr int kRounds = 3;
  std::vector<double> rates, bandwidths, ratios;
  Generation g;
  for (int round = 0; round < kRounds; ++round) {
    g = generate(model, prompt, {.max_new_tokens = tokens + 1, .temperature = 0});
    rates.push_back(g.decode_tokens_per_s());
    bandwidths.push_back(copy_bandwidth());
    ratios.push_back(rates.back() / (bandwidths.back() / bytes));
  }
  if (profile) std::fprintf(stderr, "%s", prof.table().c_str());
  const double bandwidth = median(bandwidths);
  const double limit = bandwidth / bytes;
  const double tps = median(rates);
  const double of_limit = median(ratios);
  std::fprintf(stderr,
               "%s: %.1fM parameters, %s, %s weights | decode %.2f tokens/s | copy bandwidth %.1f GB/s -> "
               "limit %.2f tokens/s | %.0f%% of the limit | prefill %.1f tokens/s\n",
               config_path.c_str(), double(params) / 1e6,
               mesh_spec.empty() ? "1 device" : mesh_spec.c_str(), weights_dtype.c_str(), tps, bandwidth / 1e9, limit,
               100 * of_limit, g.prefill_tokens_per_s());
  std::printf("%s\n", nlohmann::json{{"engine", "autoshard"},
                                     {"config", config_path},
                                     {"weights_dtype", weights_dtype},
                                     {"mesh", mesh_spec.empty() ? "1 device" : mesh_spec},
                                     {"parameters", params},
                                     {"bytes_per_token", bytes},
                                     {"copy_bytes_per_s", bandwidth},
                                     {"limit_tokens_per_s", limit},
                                     {"decode_tokens_per_s", tps},
                                     {"of_limit", of_limit},
                                     {"prefill_tokens_per_s", g.prefill_tokens_per_s()}}
                          .dump()
                          .c_str());
}
