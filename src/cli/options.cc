#include "cli/options.h"

#include <numeric>

#include "autoshard/error.h"

namespace autoshard::cli {

void add_common(CLI::App* cmd, CommonOptions& o) {
  cmd->add_option("--model", o.model, "preset (test, tiny, mini, gpt2, ...) or a config.json")
      ->capture_default_str()
      ->each([&o](const std::string&) { o.model_given = true; });
  cmd->add_option(
      "--weights", o.weights,
      "initial weights: Hugging Face directory or .safetensors, llm.c .bin, or checkpoint");
  cmd->add_option("--data", o.data,
                  "text file (bytes) or .bin file of uint16 token ids; default: built-in corpus");
  cmd->add_option("--batch", o.batch, "sequences per batch (B)")->capture_default_str();
  cmd->add_option("--seq", o.seq, "tokens per sequence (T); default min(128, n_positions)");
  cmd->add_option("--seed", o.seed, "seed of the weight initialisation")->capture_default_str();
  cmd->add_option("--mesh", o.mesh, "device mesh, e.g. data=2,model=3 (in-process devices)");
  cmd->add_option("--devices", o.devices,
                  "N devices, mesh chosen automatically: data=gcd(N,B), model=the rest");
  cmd->add_option("--plan", o.plan, "auto (AutoShard), data, megatron, or a layout map JSON file")
      ->capture_default_str();
  cmd->add_flag("--zero1", o.zero1, "shard optimizer state and update over the data axis (ZeRO-1)");
}

std::shared_ptr<Distribution> make_distribution(const CommonOptions& o) {
  AS_CHECK(o.mesh.empty() || o.devices == 0, "give either --mesh or --devices, not both");
  DeviceMesh mesh;
  if (!o.mesh.empty()) {
    mesh = DeviceMesh::parse(o.mesh);
  } else if (o.devices > 0) {
    const int data = static_cast<int>(std::gcd<int64_t>(o.devices, o.batch));
    mesh = DeviceMesh({data, o.devices / data}, {"data", "model"});
  } else {
    return nullptr;
  }
  std::shared_ptr<Distribution> d;
  if (o.plan == "auto")
    d = std::make_shared<AutoShard>(mesh);
  else if (o.plan == "data")
    d = std::make_shared<DataParallel>(mesh);
  else if (o.plan == "megatron")
    d = std::make_shared<ModelParallel>(mesh, gpt2_megatron_layout());
  else
    d = std::make_shared<ModelParallel>(mesh, LayoutMap::from_json_file(o.plan));
  d->zero1 = o.zero1;
  return d;
}

}  // namespace autoshard::cli
