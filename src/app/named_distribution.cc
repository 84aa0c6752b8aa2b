#include "autoshard/app/named_distribution.h"

#include <filesystem>

#include "autoshard/error.h"

namespace autoshard {
namespace {

// ZeRO-3 over the data axis; beside a model axis, inside Megatron's layout.
std::shared_ptr<Distribution> fully_sharded(const DeviceMesh& mesh,
                                            const LanguageModelConfig& config) {
  const int data = mesh.axis_index("data"), model = mesh.axis_index("model");
  AS_CHECK(data >= 0 && mesh.axis_size(data) > 1, "--plan fsdp splits every weight over the ",
           "data axis, and mesh ", mesh.to_string(), " has none of more than one device; give ",
           "one (e.g. --mesh data=4) or another --plan");
  const bool tensor_parallel = model >= 0 && mesh.axis_size(model) > 1;
  return std::make_shared<FullyShardedDataParallel>(
      mesh, tensor_parallel ? config.megatron_layout() : LayoutMap{});
}

}  // namespace

std::shared_ptr<Distribution> named_distribution(const std::string& plan, const DeviceMesh& mesh,
                                                 const LanguageModelConfig& config,
                                                 const AutoShardOptions& autoshard) {
  if (plan == "auto") return std::make_shared<AutoShard>(mesh, "data", autoshard);
  if (plan == "data") return std::make_shared<DataParallel>(mesh);
  if (plan == "fsdp") return fully_sharded(mesh, config);
  if (plan == "megatron" || plan == "megatron-sp") {
    auto d = std::make_shared<ModelParallel>(mesh, config.megatron_layout());
    if (plan == "megatron-sp") d->sequence_parallel_axis = "model";
    return d;
  }
  AS_CHECK(std::filesystem::is_regular_file(plan), "--plan '", plan,
           "' is none of auto, data, fsdp, megatron, megatron-sp, and no layout map file of that "
           "name exists");
  return std::make_shared<ModelParallel>(mesh, LayoutMap::from_json_file(plan));
}

}  // namespace autoshard
