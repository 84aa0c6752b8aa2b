// A preset's weight files, opened once, and a WeightSource per autoshard
// weight that reads the device's block of its Keras variable.
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/json.h"
#include "io/keras/hdf5_file.h"
#include "io/keras_hub/blocks.h"

namespace autoshard::keras_hub {

namespace fs = std::filesystem;
using keras::H5File;

namespace {

// The backbone's weight files (model.weights.h5, or the shards a
// model.weights.json index lists) and the task's.
class PresetFiles {
 public:
  PresetFiles(const std::string& dir, bool task) : dir_(dir) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(fs::path(dir) / "model.weights.json", ec))) {
      const fs::path index =
          file_in_directory(dir, "model.weights.json", "KerasHub model.weights.json");
      for (const std::string& name : shard_names(index)) open(name, files_);
    } else {
      open("model.weights.h5", files_);
    }
    if (task) open("task.weights.h5", task_files_);
  }

  // The open file holding `v`'s dataset, and the dataset's path there: the
  // table's, or the same variable in the other layout Keras has written
  // (other_keras_layout); an error naming both and what the group holds
  // when neither is there.
  std::pair<std::shared_ptr<H5File>, std::string> holding(const Variable& v) const {
    const std::string other = other_keras_layout(v.h5_path);
    for (const auto& f : v.task ? task_files_ : files_)
      for (const std::string& path : {v.h5_path, other})
        if (!path.empty() && f->is_dataset(path)) return {f, path};
    fail("KerasHub preset '", dir_, "': ", v.task ? "task.weights.h5" : "the model weights",
         " have no dataset '", v.h5_path, "'", other.empty() ? "" : cat(" (nor '", other, "')"),
         " (Keras variable '", v.path, "'",
         v.weight.empty() ? "" : cat(", autoshard weight '", v.weight, "'"), ")",
         present_near(v.h5_path, v.task),
         "; the preset was saved by another KerasHub layout or is incomplete");
  }

 private:
  // What the nearest group that exists above `h5_path` holds, for the error.
  std::string present_near(std::string path, bool task) const {
    while (!path.empty()) {
      const size_t slash = path.rfind('/');
      path = slash == std::string::npos ? "" : path.substr(0, slash);
      for (const auto& f : task ? task_files_ : files_)
        if (!path.empty() && f->is_group(path)) {
          std::string names;
          for (const std::string& c : f->children(path)) {
            if (names.size() > 300) {
              names += ", ...";
              break;
            }
            names += (names.empty() ? "" : ", ") + c;
          }
          return cat("; group '", path, "' holds: ", names.empty() ? "nothing" : names);
        }
    }
    return "";
  }

  // The shard files of a model.weights.json index: its weight_map's values
  // (a file name, or a list of them for a variable spread over shards).
  std::vector<std::string> shard_names(const fs::path& index) const {
    const std::string text =
        read_input_file(index.string(), "KerasHub model.weights.json", 64 << 20);
    const nlohmann::json j =
        parse_json_text(text, "KerasHub model.weights.json '" + index.string() + "'");
    AS_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
             "KerasHub model.weights.json '", index.string(), "' has no \"weight_map\" object");
    std::set<std::string> names;
    for (const auto& [key, value] : j["weight_map"].items()) {
      const nlohmann::json list = value.is_array() ? value : nlohmann::json::array({value});
      for (const auto& name : list) {
        AS_CHECK(name.is_string(), "KerasHub model.weights.json '", index.string(),
                 "': \"weight_map\" entry '", key, "' must name a file");
        const std::string n = name.get<std::string>();
        AS_CHECK(!n.empty() && n.find('/') == std::string::npos && n != "." && n != "..",
                 "KerasHub model.weights.json '", index.string(), "': shard '", n,
                 "' must be a file name in the preset directory");
        names.insert(n);
      }
    }
    AS_CHECK(!names.empty(), "KerasHub model.weights.json '", index.string(),
             "' lists no shard files");
    return {names.begin(), names.end()};
  }

  void open(const std::string& name, std::vector<std::shared_ptr<H5File>>& into) const {
    // Inside the preset after symbolic links, and a regular file.
    const std::string path = file_in_directory(dir_, name, "KerasHub weights file");
    into.push_back(H5File::open(path, "KerasHub weights file"));
  }

  std::string dir_;
  std::vector<std::shared_ptr<H5File>> files_, task_files_;
};

WeightSource variable_source(std::shared_ptr<H5File> file, const Variable& v) {
  WeightSource s;
  s.check = [file, v](const std::string& weight, const Shape& shape) {
    const keras::H5Dataset d = file->dataset(v.h5_path);
    const std::string where =
        cat(file->what(), ": dataset '", v.h5_path, "' (Keras variable '", v.path, "')");
    AS_CHECK(d.floating, where,
             " is not a float dataset (f16, f32, f64, or 2-byte opaque bfloat16 with attribute "
             "dtype=\"bfloat16\" as Keras writes it); save the preset with float weights");
    AS_CHECK(d.shape == v.keras_shape, where, " has shape ", shape_str(d.shape), " but weight '",
             weight, "' needs ", shape_str(v.keras_shape),
             " (the preset's config.json disagrees with its weights)");
    AS_CHECK(shape == v.weight_shape(), "internal: weight '", weight, "' has shape ",
             shape_str(shape), ", its KerasHub variable maps ", shape_str(v.weight_shape()));
  };
  s.read = [file, v](const Shape& shape, const Sharding& layout, const DeviceMesh& mesh,
                     int device) {
    const HyperslabRead read = [&](const std::vector<int64_t>& offset, const Shape& count,
                                   float* dst) { file->read_block(v.h5_path, offset, count, dst); };
    Tensor block = read_weight_block(v, layout.offsets(shape, mesh, device),
                                     layout.local_shape(shape, mesh, device), read);
    for (int64_t i = 0; i < block.numel(); ++i)
      if (!std::isfinite(block.f32()[i])) [[unlikely]]
        fail(file->what(), ": dataset '", v.h5_path, "' (Keras variable '", v.path, "') holds ",
             std::isnan(block.f32()[i]) ? "NaN" : "an infinite value",
             ": the file is damaged or was saved from a run that diverged; use other weights");
    return block;
  };
  return s;
}

WeightSource zero_source() {
  WeightSource s;
  s.check = [](const std::string&, const Shape&) {};
  s.read = [](const Shape& shape, const Sharding& layout, const DeviceMesh& mesh, int device) {
    return Tensor::zeros(layout.local_shape(shape, mesh, device));
  };
  return s;
}

}  // namespace

std::string other_keras_layout(const std::string& h5_path) {
  for (const char* name : {"query_dense", "key_dense", "value_dense", "output_dense"}) {
    const std::string pub = cat("/", name, "/"), priv = cat("/_", name, "/");
    if (const size_t at = h5_path.find(priv); at != std::string::npos)
      return h5_path.substr(0, at) + pub + h5_path.substr(at + priv.size());
    if (const size_t at = h5_path.find(pub); at != std::string::npos)
      return h5_path.substr(0, at) + priv + h5_path.substr(at + pub.size());
  }
  return "";
}

void load_preset_weights(Model& model, const std::string& dir, const Variables& variables) {
  bool task = false;
  for (const Variable& v : variables.variables) task = task || v.task;
  const PresetFiles files(dir, task);
  std::map<std::string, WeightSource> sources;
  for (const Variable& v : variables.variables) {
    auto [file, h5_path] = files.holding(v);  // Keras-only ones must exist too
    Variable found = v;
    found.h5_path = h5_path;
    if (!v.weight.empty()) sources[v.weight] = variable_source(file, found);
  }
  for (const std::string& w : variables.zero_weights) sources[w] = zero_source();
  // LoRA adapters (autoshard/nn/lora.h) are not in a preset: they keep
  // their initial values (b zeros: the model is the preset's).
  for (const std::string& w : model.weight_paths())
    AS_CHECK(sources.count(w) || w.find(".lora_kernel_") != std::string::npos, "internal: weight '",
             w, "' has no KerasHub variable");
  model.load_weights(sources);
}

}  // namespace autoshard::keras_hub
