// Peak resident memory of loading a checkpoint straight into shards.
//
//   bench_load_memory make FILE [--model gpt2-medium]   writes a checkpoint of random weights
//   bench_load_memory all FILE [--devices 4]            every device's blocks, in one process
//   bench_load_memory one FILE [--devices 4]            device 0's blocks only (what an MPI rank
//   does)
//   bench_load_memory make-llama DIR [--config C.json] [--shards 4]
//                                         a Hugging Face directory: BF16 in shards + index
//   bench_load_memory llama DIR [--devices 4]  loads it as the CLI does (load_llama_weights)
//                                         onto every device, then compiles a step (which
//                                         reads every device's blocks)
//
// Blocks follow the Megatron layout over `model`. Peak RSS is VmHWM from
// /proc/self/status; printed as JSON and as a line of text.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/error.h"
#include "autoshard/io/llama_formats.h"
#include "autoshard/io/tensor_mapping.h"
#include "autoshard/nn/models/gpt2.h"

using namespace autoshard;

namespace {

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Shapes of every weight of a GPT-2 config, by path (traced, no tensors made).
std::map<std::string, Shape> weight_shapes(const GPT2Config& cfg) {
  GPT2 model(cfg, 8);
  Graph g;
  model.trace_forward(g, 1, false);
  std::map<std::string, Shape> shapes;
  for (int id : g.parameters()) shapes[g.node(id).leaf().key()] = g.node(id).shape;
  return shapes;
}

// One safetensors file of F32 or BF16 tensors with made-up values (small,
// around zero); returns its size in bytes.
uint64_t write_filler_file(const std::string& file, const std::map<std::string, Shape>& tensors,
                           bool bf16) {
  const uint64_t element = bf16 ? 2 : 4;
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    const uint64_t bytes = numel(shape) * element;
    header[name] = {{"dtype", bf16 ? "BF16" : "F32"},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << text;
  std::vector<float> values(1 << 20);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(int((i * 2654435761u) % 2001) - 1000) * 2e-5f;
  std::vector<uint16_t> halves(values.size());  // bf16: the top 16 bits
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    halves[i] = static_cast<uint16_t>(bits >> 16);
  }
  const char* chunk = bf16 ? reinterpret_cast<const char*>(halves.data())
                           : reinterpret_cast<const char*>(values.data());
  for (const auto& [name, shape] : tensors)
    for (int64_t left = numel(shape); left > 0; left -= static_cast<int64_t>(values.size()))
      out.write(chunk, static_cast<std::streamsize>(std::min<int64_t>(left, values.size()) *
                                                    int64_t(element)));
  AS_CHECK(out.good(), "writing '", file, "' failed");
  return 8 + len + offset;
}

void make(const std::string& file, const GPT2Config& cfg) {
  const uint64_t bytes = write_filler_file(file, weight_shapes(cfg), /*bf16=*/false);
  std::printf("{\"file\":\"%s\",\"bytes\":%llu}\n", file.c_str(),
              static_cast<unsigned long long>(bytes));
}

// A Hugging Face Llama directory: config.json, `shards` BF16 files and the index.
void make_llama(const std::string& dir, const std::string& config_path, int shards) {
  const LlamaConfig cfg = LlamaConfig::from_json_file(config_path);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(config_path, dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto shard_name = [&](int s) {  // Hugging Face's model-0000k-of-0000N.safetensors
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, shards);
    return std::string(file);
  };
  std::vector<std::map<std::string, Shape>> parts(shards);
  nlohmann::json weight_map = nlohmann::json::object();
  int k = 0;
  for (const auto& [name, shape] : llama_hf_shapes(cfg)) {
    parts[k % shards][name] = shape;
    weight_map[name] = shard_name(k++ % shards);
  }
  for (int s = 0; s < shards; ++s)
    write_filler_file(dir + "/" + shard_name(s), parts[s], /*bf16=*/true);
  std::ofstream(dir + "/model.safetensors.index.json")
      << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump(2);
  std::printf("{\"dir\":\"%s\",\"shards\":%d}\n", dir.c_str(), shards);
}

// Loads the directory onto `devices` in-process devices (Megatron's layout)
// as `autoshard train --weights DIR` does, then compiles a generation step,
// which reads every device's blocks straight from the shards.
void load_llama(const std::string& dir, int devices) {
  const int64_t before = peak_rss_bytes();
  const LlamaConfig cfg = llama_config_of(dir);
  Llama model(cfg, 1);
  const DeviceMesh mesh({devices}, {"model"});
  model.set_distribution(std::make_shared<ModelParallel>(mesh, llama_megatron_layout(cfg)));
  load_llama_weights(model, dir);
  model.prepare_generation(1, 1, 1);
  const int64_t peak = peak_rss_bytes();
  const double model_bytes = 4.0 * double(model.count_params()), mib = 1048576.0;
  std::fprintf(stderr,
               "llama BF16 shards onto %d devices: model %.0f MiB as f32, peak RSS %.0f MiB (%.0f "
               "MiB before), limit %.0f MiB\n",
               devices, model_bytes / mib, peak / mib, before / mib, model_bytes / mib + 100);
  std::printf("%s\n", nlohmann::json{{"mode", "llama"},
                                     {"devices", devices},
                                     {"model_f32_bytes", model_bytes},
                                     {"peak_rss_bytes", peak},
                                     {"rss_before_bytes", before},
                                     {"within_limit", double(peak) <= model_bytes + 100 * mib}}
                          .dump()
                          .c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(
        stderr,
        "usage: bench_load_memory make|all|one FILE [--model NAME] [--devices N]\n"
        "       bench_load_memory make-llama|llama DIR [--config C] [--shards S] [--devices N]\n");
    return 2;
  }
  const std::string mode = argv[1], file = argv[2];
  std::string model_name = "gpt2-medium", config = "bench/configs/llama-1b.json";
  int devices = 4, shards = 4;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--model") == 0) model_name = argv[i + 1];
    if (std::strcmp(argv[i], "--devices") == 0) devices = std::stoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--config") == 0) config = argv[i + 1];
    if (std::strcmp(argv[i], "--shards") == 0) shards = std::stoi(argv[i + 1]);
  }
  if (mode == "make-llama") {
    make_llama(file, config, shards);
    return 0;
  }
  if (mode == "llama") {
    load_llama(file, devices);
    return 0;
  }
  const GPT2Config cfg = GPT2Config::preset(model_name);
  if (mode == "make") {
    make(file, cfg);
    return 0;
  }
  const auto shapes = weight_shapes(cfg);
  const int64_t before = peak_rss_bytes();
  SafetensorsFile f(file);
  DeviceMesh mesh({devices}, {"model"});
  ModelParallel layout(mesh, gpt2_megatron_layout());
  std::vector<Tensor> blocks;
  int64_t model_bytes = 0, held = 0;
  for (const auto& [path, shape] : shapes) {
    model_bytes += numel(shape) * 4;
    for (int d = 0; d < (mode == "one" ? 1 : devices); ++d) {
      blocks.push_back(read_block(f, TensorMapping::plain(path), shape,
                                  layout.weight_layout(path, shape), mesh, d));
      held += static_cast<int64_t>(blocks.back().nbytes());
    }
  }
  const int64_t peak = peak_rss_bytes();
  const double mib = 1048576.0;
  std::fprintf(
      stderr,
      "%s: model %.0f MiB, blocks held %.0f MiB, peak RSS %.0f MiB (%.0f MiB before loading)\n",
      mode.c_str(), model_bytes / mib, held / mib, peak / mib, before / mib);
  std::printf("%s\n", nlohmann::json{{"mode", mode},
                                     {"devices", devices},
                                     {"model_bytes", model_bytes},
                                     {"blocks_bytes", held},
                                     {"peak_rss_bytes", peak},
                                     {"rss_before_bytes", before}}
                          .dump()
                          .c_str());
}
