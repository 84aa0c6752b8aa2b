#include "io/hf_tensors.h"

#include "autoshard/error.h"
#include "autoshard/io/hf_checkpoint.h"

namespace autoshard {

namespace fs = std::filesystem;

std::map<std::string, TensorMapping> hf_reshape_layout(const std::vector<HfTensor>& tensors) {
  std::map<std::string, TensorMapping> m;
  for (const HfTensor& t : tensors) {
    TensorMapping map = TensorMapping::plain(t.file.name);
    map.file_shape = t.file.shape;
    m[t.weight] = map;
  }
  return m;
}

std::map<std::string, Shape> hf_shapes(const std::vector<HfTensor>& tensors) {
  std::map<std::string, Shape> shapes;
  for (const HfTensor& t : tensors) shapes[t.file.name] = t.file.shape;
  return shapes;
}

std::map<std::string, std::string> hf_names(const std::vector<HfTensor>& tensors) {
  std::map<std::string, std::string> names;
  for (const HfTensor& t : tensors) names[t.weight] = t.file.name;
  return names;
}

void load_hf_reshaped(Model& model, const std::string& path, const std::vector<HfTensor>& tensors,
                      const std::function<bool(const std::string&)>& ignored) {
  AS_CHECK(fs::is_directory(path), "weights '", path,
           "' must be a Hugging Face model directory or an autoshard checkpoint");
  if (fs::exists(fs::path(path) / "state.json")) {
    load_checkpoint(model, path, /*with_optimizer=*/false);
    return;
  }
  load_mapped_weights(model, HFCheckpoint(path), hf_reshape_layout(tensors), ignored);
}

void write_hf_reshaped(Model& model, const fs::path& dir, const std::vector<HfTensor>& tensors) {
  std::vector<FileTensor> files;
  for (const HfTensor& t : tensors) files.push_back(t.file);
  write_mapped(model.snapshot(false), (dir / "model.safetensors").string(), files,
               hf_reshape_layout(tensors), {{"format", "pt"}});
}

}  // namespace autoshard
