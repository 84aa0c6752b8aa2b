// Writes a model as a KerasHub preset: config.json (the backbone's
// KerasHub config, which each model family writes), metadata.json,
// model.weights.h5 at the datasets of keras_hub.h, task.json and
// task.weights.h5 for a TextClassifier, and the tokenizer files of the
// preset it came from. The directory appears whole or not at all.
#include <filesystem>
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

void write_weights(Model& model, const Variables& v, const fs::path& dir, bool task) {
  const bool leader = World::process().leader();
  std::unique_ptr<keras::H5Writer> out;
  if (leader)
    out = std::make_unique<keras::H5Writer>(
        (dir / (task ? "task.weights.h5" : "model.weights.h5")).string());
  for (const Variable& var : v.variables) {
    if (var.task != task) continue;
    // gather_weight is collective under mpirun: every rank gathers.
    Tensor value = var.weight.empty() ? Tensor::zeros(var.keras_shape)
                                      : keras_value(var, model.gather_weight(var.weight));
    if (var.row_offset != 0 && !v.zero_weights.empty()) {
      // RoBERTa: the token-type row every token adds goes into the positions.
      const Tensor type = model.gather_weight(v.zero_weights.front());
      for (int64_t r = 0; r < value.dim(0); ++r)
        for (int64_t c = 0; c < value.dim(1); ++c)
          value.f32()[r * value.dim(1) + c] += type.f32()[c];
    }
    if (out) out->dataset(var.h5_path, value);
  }
  if (out) out->close();
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
                 bool overwrite) {
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
        write_weights(model, v, out, false);
        if (has_task) write_weights(model, v, out, true);
        // The tokenizer of the preset the model came from, unchanged.
        if (!tokenizer_from.empty() && World::process().leader())
          filesystem_step("copying the preset's tokenizer",
                          [&] { copy_tokenizer(fs::path(tokenizer_from), out); });
      },
      {.overwrite = overwrite,
       .read_names = {"model.weights.h5", "model.weights.json", "task.weights.h5"}});
}

}  // namespace autoshard::keras_hub
