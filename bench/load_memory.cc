// Peak resident memory of loading a checkpoint straight into shards.
//
//   bench_load_memory make FILE [--model gpt2-medium]   writes a checkpoint of random weights
//   bench_load_memory all FILE [--devices 4]            every device's blocks, in one process
//   bench_load_memory one FILE [--devices 4]            device 0's blocks only (what an MPI rank
//   does)
//
// Blocks follow the Megatron layout over `model`. Peak RSS is VmHWM from
// /proc/self/status; printed as JSON and as a line of text.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/nn/models/gpt2.h"
#include "autoshard/io/tensor_mapping.h"

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

void make(const std::string& file, const GPT2Config& cfg) {
  const auto shapes = weight_shapes(cfg);
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [path, shape] : shapes) {
    const uint64_t bytes = numel(shape) * 4;
    header[path] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const uint64_t len = text.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << text;
  std::vector<float> chunk(1 << 20);
  for (size_t i = 0; i < chunk.size(); ++i)
    chunk[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-4f;
  for (const auto& [path, shape] : shapes)
    for (int64_t left = numel(shape); left > 0; left -= static_cast<int64_t>(chunk.size()))
      out.write(reinterpret_cast<const char*>(chunk.data()),
                static_cast<std::streamsize>(std::min<int64_t>(left, chunk.size()) * 4));
  std::printf("{\"file\":\"%s\",\"bytes\":%llu}\n", file.c_str(),
              static_cast<unsigned long long>(8 + len + offset));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: bench_load_memory make|all|one FILE [--model NAME] [--devices N]\n");
    return 2;
  }
  const std::string mode = argv[1], file = argv[2];
  std::string model_name = "gpt2-medium";
  int devices = 4;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--model") == 0) model_name = argv[i + 1];
    if (std::strcmp(argv[i], "--devices") == 0) devices = std::stoi(argv[i + 1]);
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
