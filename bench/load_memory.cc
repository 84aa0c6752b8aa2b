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
//   bench_load_memory make-keras FILE [--mib 384] [--deflate]
//                                         a Keras 3 .keras of Dense layers (4096x4096 f32
//                                         kernels), model.weights.h5 stored or deflated
//   mpirun -np 4 bench_load_memory keras FILE   loads it as the CLI does (load_keras_model)
//                                         with kernels split on model=4 and predicts one row;
//                                         each rank reads its share (also without mpirun:
//                                         every device in one process)
//   bench_load_memory make-preset DIR [--config C.json] [--shards 4]
//                                         a KerasHub Llama preset of random f32 weights:
//                                         model.weights.json over `shards` *.weights.h5
//   mpirun -np 4 bench_load_memory preset DIR  loads it as the CLI does
//                                         (load_language_model_weights) on model=4 and
//                                         predicts one row (also without mpirun)
//
// Blocks follow the Megatron layout over `model`. Peak RSS is VmHWM from
// /proc/self/status; printed as JSON and as a line of text.
#include <zip.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/tensor_mapping.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/models/keras_hub_model.h"
#include "autoshard/models/language_model.h"
#include "autoshard/models/llama/formats.h"
#include "autoshard/plan/distribution.h"
#include "io/keras/hdf5_file.h"
#include "io/zip_archive.h"

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

// ---- Keras 3 .keras files ----

constexpr int64_t kKerasWidth = 4096;  // each Dense layer: 4096 x 4096 f32 (64 MiB) + bias

// One Keras 3 layer entry of a Functional config.json, called on `from`.
nlohmann::json keras3_layer(const std::string& cls, const std::string& name, nlohmann::json config,
                            const std::string& from) {
  config["name"] = name;
  nlohmann::json layer = {{"module", "keras.layers"},
                          {"class_name", cls},
                          {"config", config},
                          {"registered_name", nullptr},
                          {"name", name},
                          {"inbound_nodes", nlohmann::json::array()}};
  if (!from.empty())
    layer["inbound_nodes"].push_back(
        {{"args",
          {{{"class_name", "__keras_tensor__"},
            {"config",
             {{"shape", nullptr}, {"dtype", "float32"}, {"keras_history", {from, 0, 0}}}}}}},
         {"kwargs", nlohmann::json::object()}});
  return layer;
}

// A Functional model of `layers` Dense layers, laid out as Keras 3's
// saving_lib writes it: config.json, metadata.json and model.weights.h5
// (layers/<name>/vars/0 kernel, vars/1 bias); the weights stored (read in
// place) or deflated (inflated to a temporary file when read).
void make_keras(const std::string& file, int64_t mib, bool deflate) {
  const int layers = static_cast<int>(std::max<int64_t>(1, mib / 64));
  const std::filesystem::path parts = file + ".parts";
  std::filesystem::create_directories(parts);
  nlohmann::json list = nlohmann::json::array();
  list.push_back(keras3_layer("InputLayer", "x",
                              {{"batch_shape", {nullptr, kKerasWidth}}, {"dtype", "float32"}}, ""));
  keras::H5Writer h5((parts / "model.weights.h5").string());
  h5.group("vars");
  Tensor kernel({kKerasWidth, kKerasWidth}), bias({kKerasWidth});
  for (int64_t i = 0; i < kernel.numel(); ++i)
    kernel.f32()[i] = static_cast<float>(int((i * 2654435761u) % 2001) - 1000) * 2e-6f;
  std::string from = "x";
  for (int l = 0; l < layers; ++l) {
    const std::string name = l == 0 ? "dense" : "dense_" + std::to_string(l);
    list.push_back(keras3_layer(
        "Dense", name, {{"units", kKerasWidth}, {"activation", "relu"}, {"use_bias", true}}, from));
    h5.dataset("layers/" + name + "/vars/0", kernel);
    h5.dataset("layers/" + name + "/vars/1", bias);
    from = name;
  }
  h5.close();
  const nlohmann::json config = {{"module", "keras"},
                                 {"class_name", "Functional"},
                                 {"config",
                                  {{"name", "dense_stack"},
                                   {"layers", list},
                                   {"input_layers", {{"x", 0, 0}}},
                                   {"output_layers", {{from, 0, 0}}}}},
                                 {"registered_name", "Functional"}};
  std::ofstream(parts / "config.json") << config.dump();
  std::ofstream(parts / "metadata.json") << R"({"keras_version": "3.6.0"})";
  int code = 0;
  zip_t* z = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  AS_CHECK(z != nullptr, "cannot create '", file, "'");
  for (const char* member : {"metadata.json", "config.json", "model.weights.h5"}) {
    zip_source_t* src = zip_source_file(z, (parts / member).c_str(), 0, -1);
    const zip_int64_t at = zip_file_add(z, member, src, ZIP_FL_ENC_UTF_8);
    AS_CHECK(at >= 0, "cannot add '", member, "' to '", file, "'");
    zip_set_file_compression(z, static_cast<zip_uint64_t>(at),
                             deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 1);
  }
  AS_CHECK(zip_close(z) == 0, "writing '", file, "' failed");
  std::filesystem::remove_all(parts);
  std::printf("{\"file\":\"%s\",\"dense_layers\":%d,\"bytes\":%llu,\"deflated\":%s}\n",
              file.c_str(), layers,
              static_cast<unsigned long long>(std::filesystem::file_size(file)),
              deflate ? "true" : "false");
}

// Loads the .keras as `autoshard predict --model` does, every kernel and
// bias split on model=N (Megatron's column split), and predicts one row:
// compiling the step reads this process's blocks straight from the file.
// Under mpirun each rank is one device and reads only its share.
void load_keras(const std::string& file, int devices) {
  const World& world = World::process();
  if (world.distributed()) devices = world.size();
  const int64_t before = peak_rss_bytes();
  KerasLoadOptions options;
  options.inference = true;
  KerasModel k = load_keras_model(file, options);
  // Megatron's pairs: a column-split layer, then a row-split one (its
  // input already split the same way; one all-reduce per pair).
  LayoutMap layout;
  for (size_t l = 0; l < k.weight_names.size(); l += 2) {
    const bool column = (l / 2) % 2 == 0;
    const std::string layer = k.weight_names[l].layer;
    layout[layer + ".kernel"] =
        column ? TensorLayout({std::nullopt, "model"}) : TensorLayout({"model", std::nullopt});
    if (column) layout[layer + ".bias"] = TensorLayout({"model"});
  }
  k.model->set_distribution(
      std::make_shared<ModelParallel>(DeviceMesh({devices}, {"model"}), layout));
  Tensor x({1, kKerasWidth});
  k.model->predict(x, 1);
  const int64_t peak = peak_rss_bytes();
  const int64_t worst = world.max(peak);
  const double model_bytes = 4.0 * double(k.model->count_params()), mib = 1048576.0;
  const double limit = model_bytes / (world.distributed() ? devices : 1) + 100 * mib;
  if (!world.leader()) return;
  std::fprintf(stderr,
               "keras %s onto %d devices (%s): model %.0f MiB, peak RSS %.0f MiB (largest rank "
               "%.0f MiB; %.0f MiB before), limit %.0f MiB\n",
               file.c_str(), devices, world.distributed() ? "one rank each" : "in one process",
               model_bytes / mib, peak / mib, worst / mib, before / mib, limit / mib);
  std::printf("%s\n", nlohmann::json{{"mode", "keras"},
                                     {"devices", devices},
                                     {"ranks", world.size()},
                                     {"model_f32_bytes", model_bytes},
                                     {"peak_rss_bytes", peak},
                                     {"largest_rank_peak_rss_bytes", worst},
                                     {"rss_before_bytes", before},
                                     {"within_limit", double(worst) <= limit}}
                          .dump()
                          .c_str());
}

// ---- KerasHub presets ----

// A Llama preset of `config`'s sizes and random weights, sharded as Keras's
// ShardedH5IOStore does: save_preset's model.weights.h5 split by variable
// into `shards` model_0000k.weights.h5 and a model.weights.json index.
void make_preset(const std::string& dir, const std::string& config_path, int shards) {
  const LlamaConfig cfg = LlamaConfig::from_json_file(config_path);
  {
    Llama model(cfg, 1);
    keras_hub::save_preset(model, *config_of_model(model), dir);
  }
  const std::string single = dir + "/model.weights.h5";
  auto file = keras::H5File::open(single, single);
  std::vector<std::unique_ptr<keras::H5Writer>> out;
  for (int k = 0; k < shards; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "/model_%05d.weights.h5", k);
    out.push_back(std::make_unique<keras::H5Writer>(dir + name));
  }
  nlohmann::json weight_map = nlohmann::json::object();
  int k = 0;
  for (const keras_hub::Variable& v : keras_hub::llama_variables(cfg).variables) {
    Tensor t(v.keras_shape);
    file->read_block(v.h5_path, std::vector<int64_t>(v.keras_shape.size(), 0), v.keras_shape,
                     t.f32());
    const std::string group = v.h5_path.substr(0, v.h5_path.rfind('/'));
    out[k % shards]->group(group);
    out[k % shards]->dataset(v.h5_path, t);
    char name[64];
    std::snprintf(name, sizeof name, "model_%05d.weights.h5", k++ % shards);
    weight_map["/" + group] = name;
  }
  for (auto& w : out) w->close();
  file.reset();
  std::filesystem::remove(single);
  std::ofstream(dir + "/model.weights.json")
      << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump(2);
  std::printf("{\"dir\":\"%s\",\"shards\":%d}\n", dir.c_str(), shards);
}

// Loads the preset as `autoshard generate --model DIR --mesh model=N` does
// (Megatron's layout) and predicts one row: compiling the step reads this
// process's hyperslabs. Under mpirun each rank is one device.
void load_preset(const std::string& dir, int devices) {
  const World& world = World::process();
  if (world.distributed()) devices = world.size();
  const int64_t before = peak_rss_bytes();
  const LanguageModelConfig config = LanguageModelConfig::of(dir);
  std::unique_ptr<Model> model = config.build(8, 0);
  model->set_distribution(
      std::make_shared<ModelParallel>(DeviceMesh({devices}, {"model"}), config.megatron_layout()));
  load_language_model_weights(*model, dir);
  Tensor x({1, 8}, DType::I32);
  model->predict_on_batch(x);
  const int64_t peak = peak_rss_bytes();
  const int64_t worst = world.max(peak);
  const double model_bytes = 4.0 * double(model->count_params()), mib = 1048576.0;
  const double limit = model_bytes / (world.distributed() ? devices : 1) + 100 * mib;
  if (!world.leader()) return;
  std::fprintf(stderr,
               "preset %s onto %d devices (%s): model %.0f MiB, peak RSS %.0f MiB (largest rank "
               "%.0f MiB; %.0f MiB before), limit %.0f MiB\n",
               dir.c_str(), devices, world.distributed() ? "one rank each" : "in one process",
               model_bytes / mib, peak / mib, worst / mib, before / mib, limit / mib);
  std::printf("%s\n", nlohmann::json{{"mode", "preset"},
                                     {"devices", devices},
                                     {"ranks", world.size()},
                                     {"model_f32_bytes", model_bytes},
                                     {"peak_rss_bytes", peak},
                                     {"largest_rank_peak_rss_bytes", worst},
                                     {"rss_before_bytes", before},
                                     {"within_limit", double(worst) <= limit}}
                          .dump()
                          .c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(
        stderr,
        "usage: bench_load_memory make|all|one FILE [--model NAME] [--devices N]\n"
        "       bench_load_memory make-llama|llama DIR [--config C] [--shards S] [--devices N]\n"
        "       bench_load_memory make-keras|keras FILE [--mib M] [--deflate] [--devices N]\n"
        "       bench_load_memory make-preset|preset DIR [--config C] [--shards S] [--devices "
        "N]\n");
    return 2;
  }
  const std::string mode = argv[1], file = argv[2];
  std::string model_name = "gpt2-medium", config = "bench/configs/llama-1b.json";
  int devices = 4, shards = 4;
  int64_t size_mib = 384;
  bool deflate = false;
  for (int i = 3; i < argc; i += 2) {
    if (std::strcmp(argv[i], "--deflate") == 0) {  // the one flag without a value
      deflate = true;
      --i;
      continue;
    }
    if (i + 1 == argc) break;
    if (std::strcmp(argv[i], "--mib") == 0) size_mib = std::stoll(argv[i + 1]);
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
  if (mode == "make-keras") {
    make_keras(file, size_mib, deflate);
    return 0;
  }
  if (mode == "make-preset") {
    make_preset(file, config, shards);
    return 0;
  }
  if (mode == "preset") {
    load_preset(file, devices);
    World::process().finalize();
    return 0;
  }
  if (mode == "keras") {
    load_keras(file, devices);
    World::process().finalize();
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
