#include "autoshard/io/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/json.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {

// The shard files the index names, each once, checked to lie in `dir`.
std::map<std::string, std::string> read_index(const fs::path& index) {
  require_regular_file(index.string(), "weight index");
  // cat, not "'" + ...: GCC 12 warns falsely (-Wrestrict) on a literal + a temporary.
  const nlohmann::json j =
      parse_json_text(read_input_file(index.string(), "weight index", uint64_t{256} << 20),
                      cat("'", index.string(), "'"));
  AS_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "'",
           index.string(), "' has no \"weight_map\" object (tensor name -> file name)");
  std::map<std::string, std::string> map;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    AS_CHECK(file.is_string(), "'", index.string(), "': the file of '", tensor,
             "' must be a string");
    const std::string name = file.get<std::string>();
    // A NUL would cut the name short where the file system reads it.
    AS_CHECK(!name.empty() && name.find_first_of(std::string("/\0", 2)) == std::string::npos &&
                 name != "." && name != "..",
             "'", index.string(), "': shard file ", file.dump(),
             " must be a file name in the directory (no '/', no NUL byte)");
    map[tensor] = name;
  }
  return map;
}

}  // namespace

std::string HfSaveOptions::torch_dtype() const {
  return dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
}

HFCheckpoint::HFCheckpoint(const std::string& dir) : dir_(dir) {
  const fs::path root(dir);
  const fs::path single = root / "model.safetensors", index = root / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(fs::symlink_status(index, ec))) {
    std::map<std::string, std::shared_ptr<const SafetensorsFile>> files;
    for (const auto& [tensor, name] :
         read_index(file_in_directory(dir, "model.safetensors.index.json", "weight index"))) {
      auto& f = files[name];
      if (!f) {
        AS_CHECK(fs::exists(fs::symlink_status(root / name, ec)), "'", index.string(),
                 "' names shard '", name, "', which is not in '", dir, "'");
        f = std::make_shared<const SafetensorsFile>(file_in_directory(dir, name, "weight shard"));
      }
      AS_CHECK(f->contains(tensor), "'", index.string(), "' places tensor '", tensor, "' in '",
               name, "', which does not hold it");
      file_of_[tensor] = f;
    }
    return;
  }
  AS_CHECK(fs::exists(fs::symlink_status(single, ec)), "'", dir,
           "' has neither model.safetensors nor model.safetensors.index.json");
  auto f = std::make_shared<const SafetensorsFile>(
      file_in_directory(dir, "model.safetensors", "weight file"));
  for (const SafetensorsEntry& e : f->entries()) file_of_[e.name] = f;
}

std::shared_ptr<const SafetensorsFile> HFCheckpoint::file_of(const std::string& tensor) const {
  auto it = file_of_.find(tensor);
  AS_CHECK(it != file_of_.end(), "checkpoint '", dir_, "' has no tensor '", tensor, "'");
  return it->second;
}

std::vector<std::string> HFCheckpoint::tensors() const {
  std::vector<std::string> names;
  for (const auto& [name, f] : file_of_) names.push_back(name);
  return names;
}

void load_mapped_weights(Model& model, const HFCheckpoint& checkpoint,
                         const std::map<std::string, TensorMapping>& layout,
                         const std::function<bool(const std::string&)>& ignored) {
  std::set<std::string> used;
  std::map<std::string, WeightSource> sources;
  for (const auto& [ours, m] : layout) {
    AS_CHECK(checkpoint.contains(m.tensor), "checkpoint '", checkpoint.dir(), "' lacks tensor '",
             m.tensor, "' (the model's weight ", ours, ")");
    sources[ours] = mapped_source(checkpoint.file_of(m.tensor), m);
    used.insert(m.tensor);
  }
  for (const std::string& name : checkpoint.tensors())
    AS_CHECK(used.count(name) || (ignored && ignored(name)), "checkpoint '", checkpoint.dir(),
             "' has tensor '", name,
             "', which a model of this config does not (another architecture or config?)");
  model.load_weights(sources);
}

}  // namespace autoshard
