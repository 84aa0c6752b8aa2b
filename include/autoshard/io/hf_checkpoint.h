// A Hugging Face model directory's weights: one model.safetensors, or the
// shards model-0000k-of-0000N.safetensors that model.safetensors.index.json
// lists ({"weight_map": {tensor name: file name}}). F32, F16 and BF16 load
// as f32; each device reads only the byte runs of its own block.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autoshard/io/tensor_mapping.h"
#include "autoshard/nn/model.h"

namespace autoshard {

// How a model directory is written (save_hf_llama, save_hf_opt).
struct HfSaveOptions {
  std::string dtype = "F32";     // F32, F16 or BF16 (rounded to nearest even)
  uint64_t max_shard_bytes = 0;  // 0: one model.safetensors; otherwise shards
                                 // model-0000k-of-0000N.safetensors of at most this
                                 // size (a larger tensor alone) and the index
  // A directory that exists and is not empty is refused unless this is set;
  // even then only the files the save writes are replaced (io/files.h).
  bool overwrite = false;
  // The config's "torch_dtype" for `dtype`.
  std::string torch_dtype() const;
};

class HFCheckpoint {
 public:
  // Opens every file of the directory (headers only); errors name the file.
  explicit HFCheckpoint(const std::string& dir);
  const std::string& dir() const { return dir_; }
  bool contains(const std::string& tensor) const { return file_of_.count(tensor) > 0; }
  // The open file holding `tensor` (an error naming it when none does).
  std::shared_ptr<const SafetensorsFile> file_of(const std::string& tensor) const;
  // Every tensor name, sorted.
  std::vector<std::string> tensors() const;

 private:
  std::string dir_;
  std::map<std::string, std::shared_ptr<const SafetensorsFile>> file_of_;
};

// Loads `model`'s weights through `layout` (weight path -> where it lives).
// A weight whose tensor is missing or has another shape, and a tensor no
// weight reads (unless `ignored(name)`), are errors naming them; an error
// leaves the model as it was.
void load_mapped_weights(Model& model, const HFCheckpoint& checkpoint,
                         const std::map<std::string, TensorMapping>& layout,
                         const std::function<bool(const std::string&)>& ignored = {});

}  // namespace autoshard
