// KerasHub presets as models of the registered families: a preset's
// config.json and task.json read as its family's config (the backbone class
// picks the family), the weights loaded and saved through that family's
// variable table. The files themselves are io's (autoshard/io/
// keras_hub_preset.h). See docs/keras-hub.md.
#pragma once

#include <memory>
#include <string>

#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/models/registry.h"

namespace autoshard::keras_hub {

// The config of a preset's backbone (and task). A config field autoshard
// does not run, or an unknown one, is an error naming it.
std::shared_ptr<const FamilyConfig> preset_config(const std::string& dir);
// Loads a model built from preset_config(dir) (or any model of a registered
// family), through its family's variable table.
void load_preset_weights(Model& model, const std::string& dir);
// Writes `model` (built from `config`) as a KerasHub preset in `dir`
// (keras_hub_preset.h's save_preset), with the tokenizer files of the preset
// `tokenizer_from`, if given. A model KerasHub cannot express (an untied
// OPT, a Llama whose head_dim is not hidden / heads) is an error. A backbone
// of more than `max_shard_gb` GB (> 0) is written in shards (keras_hub_preset.h).
void save_preset(Model& model, const FamilyConfig& config, const std::string& dir,
                 const std::string& tokenizer_from = "", bool overwrite = false,
                 double max_shard_gb = 0);

}  // namespace autoshard::keras_hub
