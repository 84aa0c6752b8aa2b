// `autoshard convert IN OUT`: GPT-2 weights between Hugging Face directories
// (or .safetensors files beside a config.json), llm.c .bin files and autoshard
// checkpoints. The format of OUT follows its name: ".bin" is llm.c, anything
// else a Hugging Face directory.
#include <filesystem>

#include "autoshard/error.h"
#include "autoshard/io/gpt2_formats.h"
#include "cli/commands.h"

namespace autoshard::cli {

void add_convert_command(CLI::App& app) {
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("convert", "convert GPT-2 weights: Hugging Face <-> llm.c");
  cmd->add_option("IN", *in, "Hugging Face directory or .safetensors, llm.c .bin")->required();
  cmd->add_option("OUT", *out, "llm.c .bin, or a Hugging Face directory")->required();
  cmd->callback([in, out] {
    // Convert makes something new: it never replaces what is there.
    AS_CHECK(!std::filesystem::exists(*out), "convert: '", *out,
             "' already exists (remove it or choose another OUT)");
    const std::filesystem::path parent = std::filesystem::path(*out).parent_path();
    AS_CHECK(parent.empty() || std::filesystem::is_directory(parent), "convert: cannot create '",
             *out, "': '", parent.string(), "' is not a directory");
    GPT2Config cfg = gpt2_config_of(*in);
    GPT2 model(cfg, cfg.n_positions);
    load_gpt2_weights(model, *in);
    if (out->ends_with(".bin"))
      save_llmc_gpt2(model, *out);
    else
      save_hf_gpt2(model, *out);
  });
}

}  // namespace autoshard::cli
