// Writes a model as a KerasHub preset: config.json (the backbone's
// KerasHub config, which each model family writes), metadata.json,
// model.weights.h5 (or its shards and model.weights.json) at the datasets
// of keras_hub.h, task.json and
// task.weights.h5 for a TextClassifier, and the tokenizer files of the
// preset it came from. The directory appears whole or not at all.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "io/files.h"
#include "io/keras/hdf5_file.h"
#include "io/keras_hub/blocks.h"

namespace autoshard::keras_hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json layer(const std::string& module, const std::string& cls, json config) {
  std::string snake;
  for (size_t i = 0; i < cls.size(); ++i) {
    const char c = cls[i];
    const bool upper = c >= 'A' && c <= 'Z';
    // Keras's to_snake_case: "_" before an upper-case letter that starts a word.
    if (upper && i > 0 &&
        ((cls[i - 1] >= 'a' && cls[i - 1] <= 'z') ||
         (i + 1 < cls.size() && cls[i + 1] >= 'a' && cls[i + 1] <= 'z' && cls[i - 1] != '_')))
      snake += '_';
    snake += upper ? static_cast<char>(c - 'A' + 'a') : c;
  }
  config["name"] = snake;
  config["trainable"] = true;
  config["dtype"] = "float32";
  return {{"module", module},
          {"class_name", cls},
          {"config", config},
          {"registered_name", "keras_hub>" + cls}};
}

std::string family_of(const std::string& backbone) {
  std::string f = backbone.substr(0, backbone.size() - 8);  // less "Backbone"
  for (char& c : f) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return f;
}

// A variable's value as Keras holds it. gather_weight is collective under
// mpirun: every rank gathers.
Tensor variable_value(Model& model, const Variables& v, const Variable& var) {
  Tensor value = var.weight.empty() ? Tensor::zeros(var.keras_shape)
                                    : keras_value(var, model.gather_weight(var.weight));
  if (var.row_offset != 0 && !v.zero_weights.empty()) {
    // RoBERTa: the token-type row every token adds goes into the positions.
    const Tensor type = model.gather_weight(v.zero_weights.front());
    for (int64_t r = 0; r < value.dim(0); ++r)
      for (int64_t c = 0; c < value.dim(1); ++c) value.f32()[r * value.dim(1) + c] += type.f32()[c];
  }
  return value;
}

void write_weights(Model& model, const Variables& v, const fs::path& dir, bool task) {
  std::unique_ptr<keras::H5Writer> out;
  if (World::process().leader())
    out = std::make_unique<keras::H5Writer>(
        (dir / (task ? "task.weights.h5" : "model.weights.h5")).string());
  for (const Variable& var : v.variables)
    if (var.task == task) {
      const Tensor value = variable_value(model, v, var);
      if (out) out->dataset(var.h5_path, value);
    }
  if (out) out->close();
}

// The group of a variable's dataset as Keras's weight_map names it
// ("/layers/dense/vars": h5py's Group.name of the H5IOStore entry).
std::string h5_group(const std::string& h5_path) {
  const size_t slash = h5_path.find_last_of('/');
  std::string group(1, '/');
  if (slash != std::string::npos) group.append(h5_path.data(), slash);
  return group;
}

// The backbone's variables in shards of at most `max_gb` GB (float32,
// Keras's accounting: elements x dtype size / 1024^3), in saving order: the
// shard index of each. Keras's ShardedH5IOStore.__setitem__ starts a new
// shard when the next variable would pass the limit, which can leave a
// layer's variables in two shards while weight_map names only the first
// (Keras's reader then looks in one): here a new shard starts at a layer's
// first variable, so a layer that fits in a shard stays in the shard
// weight_map names; one larger than a shard is split as Keras splits it. A
// variable larger than a shard is an error, as in Keras.
std::vector<int> shard_of_each(const Variables& v, double max_gb) {
  std::map<std::string, double> group_gb;
  for (const Variable& var : v.variables)
    if (!var.task)
      group_gb[h5_group(var.h5_path)] += double(numel(var.keras_shape)) * 4 / (1 << 30);
  std::vector<int> shard;
  int current = 0;
  double filled = 0;
  std::string group;
  for (const Variable& var : v.variables) {
    if (var.task) {
      shard.push_back(-1);
      continue;
    }
    const double gb = double(numel(var.keras_shape)) * 4 / (1 << 30);
    AS_CHECK(gb <= max_gb, "save_to_preset: variable '", var.path, "' takes ", gb * 1024,
             " MB, more than max_shard_size (", max_gb * 1024, " MB); raise max_shard_size");
    if (h5_group(var.h5_path) != group) {
      group = h5_group(var.h5_path);
      if (filled > 0 && filled + group_gb[group] > max_gb) {
        ++current;
        filled = 0;
      }
    }
    if (filled > 0 && filled + gb > max_gb) {  // a layer larger than a shard
      ++current;
      filled = 0;
    }
    filled += gb;
    shard.push_back(current);
  }
  return shard;
}

// The backbone in shards and their index model.weights.json ({"metadata":
// {"total_size": bytes}, "weight_map": {group: shard file}}), as Keras's
// ShardedH5IOStore writes them (shards named model_00000.weights.h5, ...).
void write_sharded_weights(Model& model, const Variables& v, const fs::path& dir, double max_gb) {
  const std::vector<int> shard = shard_of_each(v, max_gb);
  auto name = [](int i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "model_%05d.weights.h5", i);
    return std::string(buf);
  };
  const bool leader = World::process().leader();
  std::map<int, std::unique_ptr<keras::H5Writer>> out;
  json weight_map = json::object();
  double total = 0;
  for (size_t i = 0; i < v.variables.size(); ++i) {
    const Variable& var = v.variables[i];
    if (var.task) continue;
    const Tensor value = variable_value(model, v, var);
    total += double(value.numel()) * 4;
    if (!weight_map.contains(h5_group(var.h5_path)))
      weight_map[h5_group(var.h5_path)] = name(shard[i]);
    if (!leader) continue;
    auto& w = out[shard[i]];
    if (!w) w = std::make_unique<keras::H5Writer>((dir / name(shard[i])).string());
    w->dataset(var.h5_path, value);
  }
  for (auto& [i, w] : out) w->close();
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_text((dir / "model.weights.json").string(), index.dump(4) + "\n");
}

// KerasHub's KerasPresetSaver.save_backbone: shards when the backbone is
// larger than max_shard_size GB, else one model.weights.h5.
void write_backbone_weights(Model& model, const Variables& v, const fs::path& dir, double max_gb) {
  double gb = 0;
  for (const Variable& var : v.variables)
    if (!var.task) gb += double(numel(var.keras_shape)) * 4 / (1 << 30);
  if (max_gb > 0 && gb > max_gb)
    write_sharded_weights(model, v, dir, max_gb);
  else
    write_weights(model, v, dir, false);
}

// Copies the preset `from`'s tokenizer (tokenizer.json, preprocessor.json,
// assets/) into `out`, file by file, each checked to lie inside `from` after
// symbolic links: a link to a file elsewhere is refused, not copied out.
void copy_tokenizer(const fs::path& from, const fs::path& out) {
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "preprocessor.json"})
    if (fs::exists(fs::symlink_status(from / name, ec)))
      fs::copy_file(file_in_directory(from.string(), name, "KerasHub tokenizer file"), out / name);
  if (!fs::is_directory(from / "assets", ec)) return;
  directory_in_directory(from.string(), "assets", "KerasHub tokenizer assets");
  for (const auto& e : fs::recursive_directory_iterator(from / "assets")) {
    const fs::path rel = fs::relative(e.path(), from);
    if (e.is_directory() && !e.is_symlink())
      fs::create_directories(out / rel);
    else
      fs::copy_file(file_in_directory(from.string(), rel.string(), "KerasHub tokenizer asset"),
                    out / rel);
  }
}

}  // namespace

void save_preset(Model& model, const Variables& v, const json& backbone_config,
                 const json& task_fields, const std::string& dir, const std::string& tokenizer_from,
                 bool overwrite, double max_shard_gb) {
  AS_CHECK(max_shard_gb >= 0, "save_to_preset: max_shard_size must be positive (GB)");
  const json backbone = layer(cat("keras_hub.src.models.", family_of(v.class_name), ".",
                                  family_of(v.class_name), "_backbone"),
                              v.class_name, backbone_config);
  write_directory_atomically(
      dir,
      [&](const fs::path& out) {
        write_text((out / "config.json").string(), backbone.dump(2) + "\n");
        const json metadata = {{"keras_version", "3.8.0"},
                               {"keras_hub_version", "0.19.0"},
                               {"parameter_count", model.count_params()},
                               {"date_saved", "autoshard"}};
        write_text((out / "metadata.json").string(), metadata.dump(2) + "\n");
        json task_config = {{"backbone", backbone}, {"preprocessor", nullptr}};
        const bool has_task = task_fields.is_object() && !task_fields.empty();
        if (has_task) task_config.update(task_fields);
        write_text(
            (out / "task.json").string(),
            layer("keras_hub.src.models." + family_of(v.class_name), v.task_class_name, task_config)
                    .dump(2) +
                "\n");
        write_backbone_weights(model, v, out, max_shard_gb);
        // A classifier's head, BertMaskedLM's mlm_head (whose config is the backbone's alone).
        const bool task_weights = std::any_of(v.variables.begin(), v.variables.end(),
                                              [](const Variable& var) { return var.task; });
        if (task_weights) write_weights(model, v, out, true);
        // The tokenizer of the preset the model came from, unchanged.
        if (!tokenizer_from.empty() && World::process().leader())
          filesystem_step("copying the preset's tokenizer",
                          [&] { copy_tokenizer(fs::path(tokenizer_from), out); });
      },
      {.overwrite = overwrite,
       .read_names = {"model.weights.h5", "model.weights.json", "task.weights.h5"}});
}

}  // namespace autoshard::keras_hub
