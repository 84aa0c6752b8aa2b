#include "cli/options.h"

#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>

#include "autoshard/app/named_distribution.h"
#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/runtime/memory.h"
#include "cli/arguments.h"

namespace autoshard::cli {

void add_common(CLI::App* cmd, CommonOptions& o) {
  o.command = cmd->get_name();
  cmd->add_option("--model", o.model,
                  "GPT-2 preset (test, tiny, mini, gpt2, ...), a config.json (gpt2, llama, "
                  "mistral, qwen2, gemma, gemma2) or a model directory")
      ->capture_default_str()
      ->each([&o](const std::string&) { o.model_given = true; });
  cmd->add_option(
      "--weights", o.weights,
      "initial weights: Hugging Face directory or .safetensors, llm.c .bin, or checkpoint");
  cmd->add_option("--data", o.data,
                  "text file (bytes) or .bin file of uint16 token ids; default: built-in corpus");
  add_int(cmd, "--batch", o.batch, 1, kMaxBatch, "sequences per batch (B)");
  add_int(cmd, "--seq", o.seq, 1, kMaxBatch,
          "tokens per sequence (T); default min(128, n_positions)")
      ->default_str("");
  add_seed(cmd, "--seed", o.seed, "seed of the weight initialisation and of the data windows");
  cmd->add_option("--mesh", o.mesh, "device mesh, e.g. data=2,model=3 (in-process devices)");
  add_int(cmd, "--devices", o.devices, 1, kMaxMeshDevices,
          "N devices, the mesh shape chosen for you: by AutoShard's prediction with --plan "
          "auto, else data=gcd(N,B), model=the rest (under mpirun: one per rank)")
      ->default_str("");
  cmd->add_option(
         "--plan", o.plan,
         "auto (AutoShard), data, fsdp (weights, gradients and state split over data: ZeRO-3), "
         "megatron, megatron-sp (Megatron with sequence parallelism), or a layout map JSON file")
      ->capture_default_str();
  cmd->add_option("--cluster", o.cluster,
                  "the cluster AutoShard prices plans on (and plan --predict predicts for): cpu "
                  "(this machine, calibrated), a100-80g, h100-80g, or a cluster JSON file")
      ->capture_default_str();
  add_int(cmd, "--hosts", o.hosts, 1, kMaxMeshDevices,
          "price the devices as MPI ranks spread evenly over H machines: collectives over the "
          "cluster's calibrated MPI link, each machine's cores shared by its own ranks "
          "(default: as the run was started; under mpirun, the machines its ranks are on)")
      ->default_str("");
  add_bytes(cmd, "--memory-per-device", o.memory_per_device,
            "memory AutoShard may use on each device, e.g. 16GiB (default: the cluster's)");
  add_real(cmd, "--plan-time", o.plan_time, 0, 3600, true,
           "seconds AutoShard's solver may take at most (default: 0.25 to 10 by the model's size)")
      ->default_str("");
  cmd->add_flag("--deterministic", o.deterministic_plan,
                "count --plan-time in work, not seconds: the same plan on every run and machine");
  cmd->add_flag("--zero1", o.zero1, "shard optimizer state and update over the data axis (ZeRO-1)");
  cmd->add_flag("--strict", o.strict,
                "treat warnings (a layout map key matching no weight) as errors");
  cmd->add_flag("--recompute", o.recompute,
                "recompute each transformer block's forward pass during the backward pass "
                "(less activation memory, the same numbers)");
}

namespace {

// --seq (its default: min(128, the model's positions)) against the model, and
// the batch's token ids, targets and logits against the memory there is
// (plan allocates none of them; under mpirun each rank holds its rows).
void check_batch(CommonOptions& o, const LanguageModelConfig& cfg) {
  if (o.seq == 0) o.seq = std::min<int64_t>(128, cfg.max_positions());
  AS_CHECK(o.seq <= cfg.max_positions(), "--seq ", o.seq, " must be between 1 and the model's ",
           cfg.max_positions_field(), " (", cfg.max_positions(), ")");
  const std::optional<int64_t> available = available_memory_bytes();
  if (o.command == "plan" || !available || World::process().distributed()) return;
  const double tokens = double(o.batch) * double(o.seq);
  const double bytes = tokens * (8 + 4 * double(cfg.vocab_size()));
  AS_CHECK(bytes <= double(*available), "--batch ", o.batch, " x --seq ", o.seq,
           ": holding the step's token ids and logits alone (", tokens,
           " tokens x a vocabulary of ", cfg.vocab_size(), ") needs ", format_bytes(bytes), " but ",
           format_bytes(double(*available)),
           " is available (AUTOSHARD_MEMORY_LIMIT caps it); use a smaller --batch or --seq");
}

// --zero1 splits optimizer state over the data axis: a mesh without one
// (of more than one device) would ignore it.
void check_zero1(const CommonOptions& o, const DeviceMesh* mesh) {
  if (!o.zero1) return;
  const int a = mesh ? mesh->axis_index("data") : -1;
  AS_CHECK(a >= 0 && mesh->axis_size(a) > 1, "--zero1 splits optimizer state over the data axis, ",
           "but ",
           mesh ? "the mesh " + mesh->to_string() + " has none of more than one device"
                : std::string("this run has one device"),
           "; give a mesh with one (e.g. --mesh data=2) or drop --zero1");
}

}  // namespace

// The model's config: --model, or the config of --weights when --model was
// left at its default.
LanguageModelConfig model_config(CommonOptions& o) {
  if (!o.weights.empty() && !o.model_given) o.model = o.weights;
  LanguageModelConfig cfg = LanguageModelConfig::of(o.model);
  cfg.bytes_per_parameter = o.command == "train" ? 16 : o.command == "plan" ? 0 : 4;
  if (o.command != "generate") check_batch(o, cfg);
  return cfg;
}

std::unique_ptr<Tokenizer> model_tokenizer(const CommonOptions& o) {
  namespace fs = std::filesystem;
  for (const std::string& given : {o.weights, o.model}) {
    if (given.empty() || !fs::exists(given)) continue;
    const fs::path dir = fs::is_directory(given) ? fs::path(given) : fs::path(given).parent_path();
    if (keras_hub::is_preset(dir.string()))  // its tokenizer.json is KerasHub's
      return keras_hub::has_preset_tokenizer(dir.string())
                 ? keras_hub::load_preset_tokenizer(dir.string())
                 : nullptr;
    if (has_tokenizer(dir.string())) return load_tokenizer(dir.string());
  }
  return nullptr;
}

std::shared_ptr<Distribution> make_distribution(const CommonOptions& o, Model& model,
                                                const LanguageModelConfig& config,
                                                const std::function<Graph()>& step) {
  AS_CHECK(o.mesh.empty() || o.devices == 0, "give either --mesh or --devices, not both");
  const AutoShardOptions auto_options{.cluster = o.cluster,
                                      .hosts = o.hosts,
                                      .bf16 = o.bf16,
                                      .memory_per_device = o.memory_per_device,
                                      .time_limit_s = o.plan_time,
                                      .deterministic = o.deterministic_plan,
                                      .divisible = o.divisible};
  DeviceMesh mesh;
  std::vector<std::string> why;
  std::shared_ptr<AutoShard> chosen;  // planned already, with its mesh
  // Under mpirun with neither flag: one device per rank.
  const int devices = o.mesh.empty() && o.devices == 0 && World::process().distributed()
                          ? World::process().size()
                          : o.devices;
  if (!o.mesh.empty()) {
    mesh = DeviceMesh::parse(o.mesh);
    AS_CHECK(mesh.axis_index("pipe") < 0, "--mesh ", o.mesh,
             ": a pipe axis runs only when training a language model (train --model gpt2 "
             "--mesh data=2,pipe=2); plan --predict prices it for clusters");
  } else if (devices > 1 && o.plan == "auto") {
    const Shape batch{o.batch, o.seq};
    chosen = AutoShard::plan_for_devices(step ? step() : model.training_graph(batch, batch),
                                         devices, "data", auto_options, &why);
    mesh = chosen->mesh();
  } else if (devices > 0) {
    // FSDP shards over the data axis: all of them (the batch split unevenly
    // if need be); otherwise as much data parallelism as the batch divides.
    const int data =
        o.plan == "fsdp" ? devices : static_cast<int>(std::gcd<int64_t>(devices, o.batch));
    mesh = DeviceMesh({data, devices / data}, {"data", "model"});
  } else {
    check_zero1(o, nullptr);
    return nullptr;
  }
  if (!chosen) check_zero1(o, &mesh);  // AutoShard's own meshes may shard state without it
  std::shared_ptr<Distribution> d =
      chosen ? chosen : named_distribution(o.plan, mesh, config, auto_options);
  if (auto* a = dynamic_cast<AutoShard*>(d.get())) a->explain_mesh(why);
  d->zero1 = o.zero1;
  return d;
}

void check_layout_map(const CommonOptions& o, const Distribution* d, Model& model) {
  const auto* mp = dynamic_cast<const ModelParallel*>(d);
  if (mp == nullptr) return;
  std::vector<std::string> paths = model.weight_paths();
  for (const std::string& b : model.buffer_paths()) paths.push_back(b);  // key-value caches
  for (const std::string& key : mp->layout_map().unmatched(paths)) {
    AS_CHECK(!o.strict, "--plan '", o.plan, "': layout map key '", key,
             "' matches no weight of the model (weights look like ", model.weight_paths().front(),
             ")");
    if (World::process().leader())
      std::fprintf(stderr,
                   "autoshard: warning: layout map key '%s' matches no weight of the model; its "
                   "layout is unused (--strict makes this an error)\n",
                   one_line(key).c_str());
  }
}

}  // namespace autoshard::cli
