// A distribution named as `--plan` names it, on a given mesh: what the
// command line, the pipeline pricing (app/pipeline_pricing.h) and Python
// share. The names:
//
//   auto          AutoShard (plan/distribution.h), planned when the model is
//   data          DataParallel
//   fsdp          ZeRO-3 over the data axis (Megatron's layout beside a model axis)
//   megatron      ModelParallel with the model's Megatron-LM layout
//   megatron-sp   the same, sequence parallel over the model axis
//   a path        ModelParallel with that layout map JSON file
//
//   auto d = named_distribution("megatron", DeviceMesh::parse("data=2,model=2"), config, {});
#pragma once

#include <memory>
#include <string>

#include "autoshard/models/language_model.h"
#include "autoshard/plan/distribution.h"

namespace autoshard {

// Errors name `--plan`: a name that is none of the above and no file, or
// fsdp on a mesh without a data axis of more than one device. The batch
// axis is "data". `autoshard` is AutoShard's options (for `auto` only).
std::shared_ptr<Distribution> named_distribution(const std::string& plan, const DeviceMesh& mesh,
                                                 const LanguageModelConfig& config,
                                                 const AutoShardOptions& autoshard);

}  // namespace autoshard
