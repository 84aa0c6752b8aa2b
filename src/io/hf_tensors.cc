#include "io/hf_tensors.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "io/files.h"

namespace autoshard {

namespace fs = std::filesystem;

std::map<std::string, TensorMapping> hf_reshape_layout(const std::vector<HfTensor>& tensors) {
  std::map<std::string, TensorMapping> m;
  for (const HfTensor& t : tensors) {
    // The weight as one row of the file tensor's elements, from its offset.
    TensorMapping map = TensorMapping::plain(t.file.name);
    map.file_shape = t.file.shape;
    map.row_stride = numel(t.file.shape);
    map.col_offset = t.offset;
    m[t.weight] = map;
  }
  return m;
}

std::map<std::string, Shape> hf_shapes(const std::vector<HfTensor>& tensors) {
  std::map<std::string, Shape> shapes;
  for (const HfTensor& t : tensors) shapes[t.file.name] = t.file.shape;
  return shapes;
}

std::map<std::string, std::string> hf_names(const std::vector<HfTensor>& tensors) {
  std::map<std::string, std::string> names;
  for (const HfTensor& t : tensors) names[t.weight] = t.file.name;
  return names;
}

void load_hf_reshaped(Model& model, const std::string& path, const std::vector<HfTensor>& tensors,
                      const std::function<bool(const std::string&)>& ignored) {
  AS_CHECK(fs::is_directory(path), "weights '", path,
           "' must be a Hugging Face model directory or an autoshard checkpoint");
  if (fs::exists(fs::path(path) / "state.json")) {
    load_checkpoint(model, path, /*with_optimizer=*/false);
    return;
  }
  load_mapped_weights(model, HFCheckpoint(path), hf_reshape_layout(tensors), ignored);
}

void write_hf_reshaped(Model& model, const fs::path& dir, const std::vector<HfTensor>& tensors,
                       const HfSaveOptions& options) {
  const uint64_t elem = safetensors_dtype_size(options.dtype);
  AS_CHECK(options.dtype == "F32" || options.dtype == "F16" || options.dtype == "BF16",
           "saving as ", options.dtype, ": the dtype must be F32, F16 or BF16");
  // Tensors in order, a new shard whenever the next would overflow this one.
  std::vector<std::vector<const HfTensor*>> shards(1);
  uint64_t filled = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const HfTensor& t = tensors[i];
    // A later part of a fused tensor goes where its first part went.
    if (i > 0 && tensors[i - 1].file.name == t.file.name) {
      shards.back().push_back(&t);
      continue;
    }
    const uint64_t bytes = static_cast<uint64_t>(numel(t.file.shape)) * elem;
    if (options.max_shard_bytes > 0 && !shards.back().empty() &&
        filled + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(&t);
    filled += bytes;
    total += bytes;
  }
  const Model::Snapshot snap = model.snapshot(false);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[64] = "model.safetensors";
    if (shards.size() > 1)
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    const std::string file = name;
    std::vector<FileTensor> files;
    std::vector<HfTensor> mine;
    for (const HfTensor* t : shards[k]) {
      if (files.empty() || files.back().name != t->file.name)
        files.push_back({t->file.name, t->file.shape, options.dtype});
      mine.push_back(*t);
      weight_map[t->file.name] = file;
    }
    write_mapped(snap, (dir / file).string(), files, hf_reshape_layout(mine), {{"format", "pt"}});
  }
  if (shards.size() > 1)
    write_text(
        (dir / "model.safetensors.index.json").string(),
        nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) +
            "\n");
}

}  // namespace autoshard
