// Options shared by the subcommands: the model, the data, and how to lay the
// model out over devices.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "autoshard/io/tokenizer.h"
#include "autoshard/models/language_model.h"
#include "autoshard/plan/distribution.h"

namespace autoshard::cli {

// The largest batch or sequence length accepted (token ids and BLAS sizes are
// ints); B x T and the model's memory are checked against the data and the
// machine when the run starts.
constexpr int64_t kMaxBatch = (int64_t{1} << 31) - 1;

struct CommonOptions {
  std::string command;  // the subcommand: train, eval, generate, plan
  std::string model = "mini";
  std::string data;            // empty: the built-in corpus
  int64_t batch = 8, seq = 0;  // seq 0: min(128, n_positions)
  uint64_t seed = 0;
  std::string mesh;  // "data=2,model=3"
  int devices = 0;   // > 0: a mesh of this many devices chosen automatically
  std::string plan = "auto";
  bool zero1 = false;
  std::string weights;       // a Hugging Face directory, checkpoint, or llm.c file
  bool model_given = false;  // --model was on the command line
  bool strict = false;       // warnings are errors
  bool recompute = false;    // recompute each block's forward pass in the backward
  // AutoShard: the cluster it prices on, the memory each device may hold (0:
  // the cluster's), its solver's time, and whether to price bf16 (plan --dtype).
  std::string cluster = "cpu";
  int hosts = 0;  // > 0: price the devices as MPI ranks over this many machines
  double memory_per_device = 0;
  double plan_time = 0;             // 0: by the size of the step
  bool deterministic_plan = false;  // --deterministic: --plan-time counted in work
  bool bf16 = false;
  bool divisible = false;  // AutoShard: only splits that divide (plan --divisible)
};

void add_common(CLI::App* cmd, CommonOptions& o);
// The model's config: --model, or the config of --weights when --model was
// left at its default (then --model names the weights). Its memory check
// (LanguageModelConfig::check_fits, when built) counts what the command
// holds of each parameter; --seq (given or its default) must fit the model,
// and for train and eval the batch's token ids and logits the memory there
// is, before anything is allocated.
LanguageModelConfig model_config(CommonOptions& o);
// The tokenizer of the model's directory (that of --weights, else of
// --model), or null when it has none.
std::unique_ptr<Tokenizer> model_tokenizer(const CommonOptions& o);
// Layout map keys that match no weight of `model`: a warning on stderr, or
// with --strict an error.
void check_layout_map(const CommonOptions& o, const Distribution* d, Model& model);
// The distribution the options ask for, or null for one device. With
// --devices and --plan auto, AutoShard chooses the mesh's shape for `step`
// (default: the training step of --batch x --seq, which needs `model`
// compiled). `config` gives --plan megatron its layout.
std::shared_ptr<Distribution> make_distribution(const CommonOptions& o, Model& model,
                                                const LanguageModelConfig& config,
                                                const std::function<Graph()>& step = {});

}  // namespace autoshard::cli
