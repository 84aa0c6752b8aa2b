// Models whose every weight is one Hugging Face tensor, reshaped (the Llama
// family, OPT): the list of (weight, tensor) pairs is the whole format;
// loading and saving follow from it.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autoshard/io/checkpoint.h"
#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/io/tensor_mapping.h"

namespace autoshard {

// A weight and the Hugging Face tensor (name, shape) that holds it.
struct HfTensor {
  std::string weight;
  FileTensor file;
};

// Each weight read from its tensor, same element order.
std::map<std::string, TensorMapping> hf_reshape_layout(const std::vector<HfTensor>& tensors);
// Each Hugging Face tensor's shape / each weight's tensor name.
std::map<std::string, Shape> hf_shapes(const std::vector<HfTensor>& tensors);
std::map<std::string, std::string> hf_names(const std::vector<HfTensor>& tensors);

// Loads `model` from a Hugging Face directory (model.safetensors or shards
// with an index) or an autoshard checkpoint; file tensors for which `ignored`
// holds are skipped.
void load_hf_reshaped(Model& model, const std::string& path, const std::vector<HfTensor>& tensors,
                      const std::function<bool(const std::string&)>& ignored = {});
// Writes the weights into `dir`: model.safetensors, or shards and
// model.safetensors.index.json, in the options' dtype.
void write_hf_reshaped(Model& model, const std::filesystem::path& dir,
                       const std::vector<HfTensor>& tensors, const HfSaveOptions& options);

}  // namespace autoshard
