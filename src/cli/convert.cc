// `autoshard convert IN OUT`: weights between Hugging Face directories (or
// .safetensors files beside a config.json), autoshard checkpoints and (GPT-2)
// llm.c .bin files, and KerasHub presets (IN: a preset directory; OUT: with
// --keras-hub). The format of OUT follows its name: ".bin" is llm.c,
// anything else a Hugging Face directory, in --dtype and --max-shard-size.
// A saved Keras model as IN (.keras, .h5, a TF.js model.json or directory)
// is written whole as the Keras format OUT names: .keras, .h5, or a TF.js
// directory (docs/keras-files.md, "Converting").
#include <cctype>
#include <filesystem>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/models/keras_hub_model.h"
#include "autoshard/models/language_model.h"
#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/output_file.h"

namespace autoshard::cli {

namespace {

struct ConvertOptions {
  std::string in, out, model, dtype = "f32";
  double max_shard_bytes = 0;
  bool keras_hub = false;  // OUT is a KerasHub preset
};

// A Keras model file to another Keras format: architecture, weights and
// compile config (each in the output's own form).
void convert_keras(const ConvertOptions& o) {
  AS_CHECK(o.model.empty() && !o.keras_hub && o.max_shard_bytes == 0 && o.dtype == "f32",
           "convert: IN '", o.in,
           "' is a Keras model, written whole as OUT's format: --model, --keras-hub, --dtype "
           "and --max-shard-size do not apply");
  const std::string format = keras_format_of(o.out);
  AS_CHECK(!format.empty(), "convert: OUT '", o.out,
           "' names no Keras format for the Keras model '", o.in,
           "': give a .keras or .h5 file, or a directory (TensorFlow.js)");
  KerasModel k = load_keras_model(o.in);
  save_keras_model(k, o.out, format);
}

void convert(const ConvertOptions& o) {
  if (is_keras_model_path(o.in)) return convert_keras(o);
  const LanguageModelConfig cfg = LanguageModelConfig::of(o.model.empty() ? o.in : o.model);
  if (o.out.ends_with(".bin")) {  // llm.c: GPT-2 only
    cfg.config->convert_to_file(o.in, o.out);
    return;
  }
  std::unique_ptr<Model> model = cfg.build(1, 0);
  load_language_model_weights(*model, o.in);
  if (o.keras_hub) {  // the tokenizer comes along when IN is a preset too
    keras_hub::save_preset(*model, *cfg.config, o.out, keras_hub::is_preset(o.in) ? o.in : "");
    return;
  }
  std::string dtype = o.dtype;
  for (char& c : dtype) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  save_language_model_hf(*model, o.out,
                         {.dtype = dtype, .max_shard_bytes = uint64_t(o.max_shard_bytes)});
}

void run_convert(const ConvertOptions& o) {
  // Convert makes something new: it never replaces what is there (not even
  // with --overwrite, which it does not take: OUT may be a directory).
  // Under mpirun the ranks convert together into one OUT (io/files.h).
  check_output_path(o.out, "convert: OUT", /*overwrite=*/false, /*offer_overwrite=*/false);
  World::process().barrier();  // every rank has seen OUT absent
  convert(o);
}

}  // namespace

void add_convert_command(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "convert weights: Hugging Face directories, autoshard checkpoints, llm.c files; Keras "
      "models between .keras, .h5 and TensorFlow.js");
  cmd->add_option("IN", o->in,
                  "Hugging Face directory or .safetensors, checkpoint, llm.c .bin, or a Keras "
                  "model (.keras, .h5, TF.js model.json)")
      ->required();
  cmd->add_option("OUT", o->out,
                  "a Hugging Face directory, (GPT-2) an llm.c .bin, or for a Keras IN a .keras, "
                  ".h5 or TF.js directory")
      ->required();
  cmd->add_option("--model", o->model,
                  "the config (a config.json or model directory) when IN has none, e.g. a "
                  "checkpoint");
  cmd->add_option("--dtype", o->dtype, "dtype of the written tensors (Llama family, OPT)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}, CLI::ignore_case))
      ->capture_default_str();
  cmd->add_flag("--keras-hub", o->keras_hub,
                "write OUT as a KerasHub preset (config.json, model.weights.h5; IN's tokenizer "
                "when IN is a preset)");
  add_bytes(cmd, "--max-shard-size", o->max_shard_bytes,
            "write shards of at most this size with model.safetensors.index.json, e.g. 5GB "
            "(default: one file)");
  cmd->callback([o] { run_convert(*o); });
}

}  // namespace autoshard::cli
