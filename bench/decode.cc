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
// Several formats (one device only, f32 first) are compared in turns: each
// compact format is rounded once, then five rounds each decode in f32 and
// in the format, one right after the other, and its "x_f32" is the median
// over the rounds of its tokens/s over the round's f32 turn's: this VM's copy
// bandwidth drifts by a fifth between minutes, which separate runs would
// take for a difference of the formats. The f32 turns read the same blocks
// (holding the rounded values: no kernel's speed depends on the values)
// with the compact copies taken off (QuantizedWeights::pause). Every turn checks that decode read
// the compact copies exactly when it should.
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
#include "autoshard/models/llama/llama.h"
#include "autoshard/nn/generation.h"
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

// One weight format's measurements, a value per turn.
struct Turns {
  WeightsDType dtype = WeightsDType::F32;
  double bytes = 0;
  std::vector<double> rates, bandwidths, of_limit;
  std::vector<double> x_f32;  // tokens/s over the same round's f32 turn (several formats)
  Generation last;
};

struct Options {
  std::string config_path, mesh_spec, plan = "megatron";
  int64_t prompt_len = 16, tokens = 32;
  std::vector<Turns> formats;
  bool profile = false;
};

// "f32,bf16,int8": each format once, at least one.
std::vector<Turns> parse_formats(const std::string& list) {
  std::vector<Turns> out;
  std::stringstream in(list);
  for (std::string one; std::getline(in, one, ',');) {
    const WeightsDType d = parse_weights_dtype(one, "--weights-dtype");
    for (const Turns& t : out)
      if (t.dtype == d) throw Error("--weights-dtype lists " + one + " twice");
    out.emplace_back().dtype = d;
  }
  if (out.empty()) throw Error("--weights-dtype needs f32, bf16, int8 or a list of them");
  return out;
}

Options parse_options(int argc, char** argv) {
  if (argc < 2)
    throw Error(
        "usage: bench_decode CONFIG.json [--prompt N] [--tokens N] [--mesh M] "
        "[--plan megatron|auto] [--weights-dtype f32|bf16|int8|f32,bf16,int8] [--profile]");
  Options o;
  o.config_path = argv[1];
  std::string formats = "f32";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--prompt")
      o.prompt_len = std::stoll(next());
    else if (a == "--tokens")
      o.tokens = std::stoll(next());
    else if (a == "--mesh")
      o.mesh_spec = next();
    else if (a == "--plan")
      o.plan = next();
    else if (a == "--weights-dtype")
      formats = next();
    else if (a == "--profile")
      o.profile = true;
    else
      throw Error("unknown argument " + a);
  }
  o.formats = parse_formats(formats);
  if (o.formats.size() > 1) {
    // On a mesh the compact copies are made with the devices' blocks, before
    // the first step: a format cannot be swapped in once the model has run.
    if (!o.mesh_spec.empty()) throw Error("several --weights-dtype formats need one device");
    if (o.formats[0].dtype != WeightsDType::F32)
      throw Error("several --weights-dtype formats are timed against f32: list f32 first");
  }
  return o;
}

// Decodes and measures every format of `o` on `model` (see the top); the
// measured decodes' primitives are timed into `profile` when given.
void measure(Model& model, const LlamaConfig& cfg, Options& o, OpProfile* profile) {
  const int64_t params = model.count_params();
  const bool several = o.formats.size() > 1;
  // One format: rounded once, before the first step (as a user would).
  std::optional<QuantizedWeights> held;
  if (!several) held = quantize_weights(model, o.formats[0].dtype);
  std::vector<int32_t> prompt(o.prompt_len);
  for (int64_t i = 0; i < o.prompt_len; ++i) prompt[i] = int32_t((i * 7919) % cfg.vocab_size);
  generate(model, prompt,
           {.max_new_tokens = 3,
            .temperature = 0,
            .cache_length = o.prompt_len + o.tokens});  // weights made, caches warm
  model.profile = profile;
  // One decode in f's format, then the copy bandwidth (this VM's drifts by
  // up to a third within a minute, so each turn has its own).
  auto take_turn = [&](Turns& f, const QuantizedWeights& q) {
    f.bytes = bytes_per_token(cfg, params, q);
    const int64_t compact_reads = quantized_gemv_calls();
    f.last = generate(model, prompt, {.max_new_tokens = o.tokens + 1, .temperature = 0});
    const bool read_compact = quantized_gemv_calls() > compact_reads;
    if (read_compact != (f.dtype != WeightsDType::F32))
      throw Error(std::string("decode with ") + weights_dtype_name(f.dtype) + " weights " +
                  (read_compact ? "read" : "did not read") + " the compact copies");
    f.rates.push_back(f.last.decode_tokens_per_s());
    f.bandwidths.push_back(copy_bandwidth());
    f.of_limit.push_back(f.rates.back() / (f.bandwidths.back() / f.bytes));
  };
  if (!several) {
    for (int round = 0; round < 3; ++round) take_turn(o.formats[0], *held);
    return;
  }
  // Each compact format against f32 on the same blocks (QuantizedWeights::pause),
  // five rounds of a turn each, f32 first in even rounds and second in odd
  // ones so that a steady drift does not lean the ratio one way. A second
  // format is rounded from the first's values (int8 from bf16's): no
  // kernel's speed depends on the values.
  Turns& f32 = o.formats[0];
  const QuantizedWeights none;  // f32's bytes
  for (size_t k = 1; k < o.formats.size(); ++k) {
    Turns& f = o.formats[k];
    QuantizedWeights q = quantize_weights(model, f.dtype);
    auto f32_turn = [&] {
      q.pause();
      take_turn(f32, none);
      q.resume();
    };
    for (int round = 0; round < 5; ++round) {
      if (round % 2 == 0) f32_turn();
      take_turn(f, q);
      if (round % 2 == 1) f32_turn();
      f.x_f32.push_back(f.rates.back() / f32.rates.back());
    }
  }
}

// A readable line on stderr and a JSON object on stdout per format.
void report(const Options& o, int64_t params) {
  for (const Turns& f : o.formats) {
    const double bandwidth = median(f.bandwidths);
    const double limit = bandwidth / f.bytes;
    const double tps = median(f.rates);
    const std::string mesh = o.mesh_spec.empty() ? "1 device" : o.mesh_spec;
    nlohmann::json out{{"engine", "autoshard"},
                       {"config", o.config_path},
                       {"weights_dtype", weights_dtype_name(f.dtype)},
                       {"mesh", mesh},
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
    if (!f.x_f32.empty()) {
      out["x_f32"] = median(f.x_f32);
      out["round_x_f32"] = f.x_f32;
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, " | %.2fx f32", median(f.x_f32));
      versus = ratio;
    }
    std::fprintf(stderr,
                 "%s: %.1fM parameters, %s, %s weights | decode %.2f tokens/s | copy bandwidth "
                 "%.1f GB/s -> limit %.2f tokens/s | %.0f%% of the limit%s | prefill %.1f "
                 "tokens/s\n",
                 o.config_path.c_str(), double(params) / 1e6, mesh.c_str(),
                 weights_dtype_name(f.dtype), tps, bandwidth / 1e9, limit, 100 * median(f.of_limit),
                 versus.c_str(), f.last.prefill_tokens_per_s());
    std::printf("%s\n", out.dump().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) try {
  Options o = parse_options(argc, argv);
  const LlamaConfig cfg = LlamaConfig::from_json_file(o.config_path);
  Llama model(cfg, 1, 0);
  if (!o.mesh_spec.empty()) {
    const DeviceMesh mesh = DeviceMesh::parse(o.mesh_spec);
    if (o.plan == "auto")
      model.set_distribution(std::make_shared<AutoShard>(mesh));
    else
      model.set_distribution(std::make_shared<ModelParallel>(mesh, llama_megatron_layout(cfg)));
  }
  OpProfile prof;
  measure(model, cfg, o, o.profile ? &prof : nullptr);
  if (o.profile) std::fprintf(stderr, "%s", prof.table().c_str());
  report(o, model.count_params());
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_decode: %s\n", e.what());
  return 1;
}
