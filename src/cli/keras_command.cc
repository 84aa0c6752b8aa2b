#include "cli/keras_command.h"

#include <cctype>
#include <filesystem>
#include <fstream>

#include "autoshard/error.h"
#include "autoshard/tensor/mesh.h"
#include "cli/arguments.h"

namespace autoshard::cli {

void add_keras_common(CLI::App* cmd, CommonOptions& o, int64_t default_batch) {
  o.command = cmd->get_name();
  o.model.clear();
  o.batch = default_batch;
  cmd->add_option("--model", o.model,
                  "a saved Keras model: model.keras, model.h5, or a TensorFlow.js model.json "
                  "(or its directory)")
      ->required();
  add_int(cmd, "--batch", o.batch, 1, kMaxBatch, "examples per batch")->capture_default_str();
  add_seed(cmd, "--seed", o.seed, "seed of dropout and of weights the file does not hold");
  cmd->add_option("--mesh", o.mesh, "device mesh, e.g. data=2,model=3 (in-process devices)");
  add_int(cmd, "--devices", o.devices, 1, kMaxMeshDevices,
          "N devices, the mesh shape chosen for you: by AutoShard's prediction with --plan "
          "auto, else data=gcd(N,B), model=the rest (under mpirun: one per rank)")
      ->default_str("");
  cmd->add_option("--plan", o.plan, "auto (AutoShard), data, or a layout map JSON file")
      ->capture_default_str();
  cmd->add_option("--cluster", o.cluster,
                  "the cluster AutoShard prices plans on: cpu (this machine), a100-80g, "
                  "h100-80g, or a cluster JSON file")
      ->capture_default_str();
  add_bytes(cmd, "--memory-per-device", o.memory_per_device,
            "memory AutoShard may use on each device, e.g. 16GiB (default: the cluster's)");
  add_real(cmd, "--plan-time", o.plan_time, 0, 3600, true,
           "seconds AutoShard's solver may take at most")
      ->default_str("");
  cmd->add_flag("--deterministic", o.deterministic_plan,
                "count --plan-time in work, not seconds: the same plan on every run and machine");
  cmd->add_flag("--strict", o.strict,
                "treat warnings (a layout map key matching no weight) as errors");
}

void add_keras_overrides(CLI::App* cmd, KerasOverrides& o, bool with_optimizer) {
  cmd->add_option("--loss", o.loss,
                  "the loss of every output instead of the file's (Keras names: "
                  "sparse_categorical_crossentropy, categorical_crossentropy, "
                  "binary_crossentropy, mse, mae, huber)");
  if (with_optimizer)
    cmd->add_option("--optimizer", o.optimizer,
                    "the optimizer instead of the file's, with Keras's defaults: adam, adamw, "
                    "sgd, rmsprop, adagrad");
}

bool names_keras_model(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const std::string ext = p.extension().string();
  if (ext == ".keras" || ext == ".h5" || ext == ".hdf5") return true;
  if (fs::is_directory(p, ec)) return fs::is_regular_file(p / "model.json", ec);
  if (ext != ".json" || !fs::is_regular_file(p, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string head(64 << 10, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return head.find("\"modelTopology\"") != std::string::npos;
}

KerasModel load_keras_for(const CommonOptions& o, const KerasLoadOptions& load) {
  AS_CHECK(is_keras_model_path(o.model), "--model '", o.model,
           "' is not a saved Keras model; give a .keras or .h5 file, a TensorFlow.js model.json, "
           "or a directory holding model.json");
  return load_keras_model(o.model, load);
}

namespace {

// Keras's optimizer class for a name given on the command line.
std::string optimizer_class(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::pair<const char*, const char*> known[] = {{"adam", "Adam"},
                                                       {"adamw", "AdamW"},
                                                       {"sgd", "SGD"},
                                                       {"rmsprop", "RMSprop"},
                                                       {"adagrad", "Adagrad"}};
  for (const auto& [flag, cls] : known)
    if (lower == flag) return cls;
  fail("--optimizer '", name, "' is not one of adam, adamw, sgd, rmsprop, adagrad");
}

}  // namespace

KerasCompiled compile_keras(KerasModel& k, const KerasOverrides& over, bool training) {
  KerasCompileConfig c = k.compile;
  if (!over.loss.empty()) {
    c.losses = {KerasCompileConfig::loss_named(over.loss)};
    c.loss_weights.clear();
  }
  if (!over.optimizer.empty()) {
    c.optimizer = optimizer_class(over.optimizer);
    c.optimizer_config = nlohmann::json::object();
  }
  AS_CHECK(!c.losses.empty(), "--model '", k.path,
           "' holds no compile config (it was saved before model.compile): give --loss NAME",
           training && c.optimizer.empty() ? " and --optimizer NAME" : "");
  AS_CHECK(!training || !c.optimizer.empty(), "--model '", k.path,
           "' names no optimizer: give --optimizer NAME");
  std::shared_ptr<Optimizer> optimizer = c.optimizer.empty() ? SGD() : c.make_optimizer();
  if (over.lr) {
    optimizer->learning_rate = *over.lr;
    optimizer->schedule = nullptr;  // --lr replaces the file's schedule too
  }
  k.model->compile(optimizer, c.make_losses(), c.loss_weights, c.make_metrics());
  if (training) {
    // What is trained is what --save writes: its compile config names the
    // optimizer whose state the file holds.
    if (over.lr) c.optimizer_config["learning_rate"] = *over.lr;
    c.present = true;
    k.compile = c;
  }
  KerasCompiled out{{}, optimizer};
  auto name_of = [](const nlohmann::json& loss) {
    return loss.is_object()   ? loss.value("name", "")
           : loss.is_string() ? loss.get<std::string>()
                              : std::string();
  };
  for (const nlohmann::json& loss : c.losses) out.losses.push_back(name_of(loss));
  // Losses keyed by output name ({"classes": ..., "value": ...}) in the outputs' order.
  if (c.losses.size() == k.outputs.size() && c.losses.size() > 1)
    for (size_t i = 0; i < k.outputs.size(); ++i)
      for (const nlohmann::json& loss : c.losses)
        if (loss.is_object() && loss.value("output", "") == k.outputs[i].name)
          out.losses[i] = name_of(loss);
  return out;
}

std::shared_ptr<Distribution> keras_distribution(const CommonOptions& o, Model& model,
                                                 const std::function<Graph()>& step) {
  AS_CHECK(o.plan != "megatron" && o.plan != "megatron-sp", "--plan ", o.plan,
           " is Megatron-LM's layout of GPT weights; for a Keras model give auto, data, fsdp, or "
           "a layout map file");
  std::shared_ptr<Distribution> d = make_distribution(o, model, LanguageModelConfig{}, step);
  // A Keras model has no Megatron layout: beside a model axis, FSDP splits
  // the batch and every weight over all the mesh's devices.
  if (const auto* fsdp = dynamic_cast<const FullyShardedDataParallel*>(d.get());
      fsdp && !fsdp->layout_map().entries().empty()) {
    d = std::make_shared<FullyShardedDataParallel>(d->mesh());
    d->zero1 = o.zero1;
  }
  return d;
}

}  // namespace autoshard::cli
