// A KerasHub preset's config.json (and task.json) as a family's config. The
// backbone's family (by its class) rewrites its fields as the Hugging Face
// config the same model has and reads that with its Hugging Face reader, so
// both ways in share their checks; a KerasHub field autoshard does not run
// or does not know is an error naming it.
#include "autoshard/models/keras_hub_model.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/json.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/keras_hub_fields.h"

namespace autoshard::keras_hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The backbone classes of every family, in the order registered.
std::string known_backbones() {
  std::string known;
  for (const ModelFamily* f : model_families())
    for (const std::string& cls : f->keras_hub_backbones())
      known += (known.empty() ? "" : ", ") + cls;
  return known;
}

// The task's class for a backbone: its CausalLM, or (BERT, RoBERTa) its
// TextClassifier, whose num_classes sets the labels.
void read_task(const fs::path& dir, const ModelFamily& model_family, const std::string& backbone,
               json& hf) {
  const std::string family = backbone.substr(0, backbone.size() - std::string("Backbone").size());
  const bool encoder = model_family.encoder();
  const fs::path path = dir / "task.json";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) {
    AS_CHECK(!encoder, "KerasHub preset '", dir.string(), "' has no task.json: a ", backbone,
             " runs here with its TextClassifier head (task.json with num_classes and "
             "task.weights.h5)");
    return;
  }
  const json task = read_preset_json(
      file_in_directory(dir.string(), "task.json", "KerasHub task.json"), "KerasHub task.json");
  const std::string where = cat("KerasHub preset '", path.string(), "'");
  AS_CHECK(task.is_object() && task.contains("class_name") && task["class_name"].is_string(), where,
           ": \"class_name\" is missing");
  const std::string cls = task["class_name"].get<std::string>();
  const std::string want = family + (encoder ? "TextClassifier" : "CausalLM");
  AS_CHECK(model_family.keras_hub_task_matches(backbone, cls), where, ": \"class_name\" is '", cls,
           "'; autoshard runs ", want, " on a ", backbone);
  Fields f(task.value("config", json::object()), where + " \"config\"", cls);
  ignore_layer_fields(f);
  for (const char* k : {"backbone", "preprocessor", "compile_config"}) f.ignore(k);
  if (encoder && cls == family + "MaskedLM") {
    hf["architectures"] = {family + "ForMaskedLM"};  // the head in task.weights.h5
  } else if (encoder) {
    hf["num_labels"] = f.size("num_classes");
    hf["architectures"] = {family + "ForSequenceClassification"};
    f.real("dropout", 0);  // off in inference; autoshard's classifier dropout follows the backbone
    f.ignore("hidden_dim");
    if (f.has("activation") && task["config"]["activation"] != "linear")
      f.bad("activation", "must be null or \"linear\" (the head gives logits)");
  } else {
    f.ignore("sampler");
  }
  f.done();
}

}  // namespace

namespace {

std::shared_ptr<const FamilyConfig> read_preset_config(const std::string& dir) {
  const fs::path path = file_in_directory(dir, "config.json", "KerasHub config.json");
  const json j = read_preset_json(path, "KerasHub config.json");
  const std::string where = cat("KerasHub preset '", path.string(), "'");
  AS_CHECK(j.is_object() && j.contains("class_name") && j["class_name"].is_string(), where,
           ": \"class_name\" is missing (a KerasHub config.json names the backbone class)");
  const std::string cls = j["class_name"].get<std::string>();
  AS_CHECK(j.contains("config"), where, ": \"config\" is missing");
  Fields f(j["config"], where + " \"config\"", cls);
  ignore_layer_fields(f);
  const ModelFamily* family = family_of_backbone(cls);
  if (!family)
    fail(where, ": \"class_name\" is '", cls, "', which autoshard has no architecture for (",
         known_backbones(), ")");
  json hf = family->keras_hub_to_hf(cls, f);
  f.done();
  read_task(fs::path(dir), *family, cls, hf);
  const ConfigReader reader(hf.dump(), path.string() + " (as Hugging Face fields)");
  return family->read_keras_hub(reader);
}

}  // namespace

std::shared_ptr<const FamilyConfig> preset_config(const std::string& dir) {
  // The backstop for a JSON value read unchecked: one error naming the preset.
  return with_json_errors(cat("KerasHub preset '", dir, "'"),
                          [&] { return read_preset_config(dir); });
}

void load_preset_weights(Model& model, const std::string& dir) {
  load_preset_weights(model, dir, config_of_model(model)->keras_hub_variables());
}

void save_preset(Model& model, const FamilyConfig& config, const std::string& dir,
                 const std::string& tokenizer_from, bool overwrite, double max_shard_gb) {
  save_preset(model, config.keras_hub_variables(), config.keras_hub_backbone(),
              config.keras_hub_task(), dir, tokenizer_from, overwrite, max_shard_gb);
}

}  // namespace autoshard::keras_hub
