// Models whose every weight is one Hugging Face tensor reshaped, or a run of
// one (the Llama family, OPT; Phi-3's fused qkv_proj and gate_up_proj): the
// list of (weight, tensor) pairs is the whole format; loading and saving
// follow from it.
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

// A weight and the Hugging Face tensor (name, shape) that holds it: the
// whole tensor, or (fused tensors) the run of the weight's element count
// from element `offset` (Phi-3's k_proj: the rows after q_proj's in
// qkv_proj). Parts of one tensor are listed one after another.
struct HfTensor {
  std::string weight;
  FileTensor file;
  int64_t offset = 0;
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
