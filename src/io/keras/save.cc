// save_keras_model: a KerasModel's architecture, compile config and current
// weights written back as a Keras 3 `.keras` zip, a Keras 2 `.h5` or a
// TensorFlow.js directory (see autoshard/io/keras_model.h and
// docs/keras-files.md for the layouts).
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "io/keras/architecture.h"
#include "io/keras/compile_config.h"
#include "io/keras/hdf5_file.h"
#include "io/keras/layer_config.h"
#include "io/keras/optimizer_state.h"
#include "io/zip_archive.h"

namespace autoshard {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace keras;

namespace {

// TF.js writes this as modelTopology's keras_version; Keras 3 as
// metadata.json's when the file came from elsewhere.
constexpr const char* kTfjsVersion = "tfjs-layers 4.22.0";
constexpr const char* kKeras3Version = "3.6.0";
constexpr const char* kKeras2Version = "2.15.0";
constexpr const char* kTfjsShard = "group1-shard1of1.bin";

Dialect dialect_of(const std::string& format) {
  if (format == "keras") return Dialect::Keras3;
  if (format == "h5") return Dialect::Keras2;
  return Dialect::TFJS;
}

// A path beside `out` for writing it aside (removed unless renamed).
class Aside {
 public:
  explicit Aside(const fs::path& out) {
    const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
    // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on the
    // inlined chain of operator+.
    std::string name = ".";
    name += out.filename().string();
    name += ".autoshard-";
    name += std::to_string(::getpid());
    path_ = dir / name;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ~Aside() {
    std::error_code ec;
    if (!kept_) fs::remove_all(path_, ec);
  }
  Aside(const Aside&) = delete;
  Aside& operator=(const Aside&) = delete;
  const fs::path& path() const { return path_; }
  // Renames into `out`, never replacing something there (renameat2's
  // RENAME_NOREPLACE: a file or directory that appeared meanwhile stays).
  void publish(const fs::path& out) {
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) != 0) {
      const int err = errno;
      AS_CHECK(err != EEXIST, "'", out.string(), "' appeared while it was written; it is kept",
               " and the model is not saved: choose another path");
      fail("cannot rename the finished model into '", out.string(), "': ", std::strerror(err));
    }
    kept_ = true;
  }

 private:
  fs::path path_;
  bool kept_ = false;
};

// Renames `from` to `to`, never replacing something at `to`; false with
// errno set when it cannot.
bool rename_new(const fs::path& from, const fs::path& to) {
  return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0;
}

// Moves the TF.js model written into directory `written` to `json_path`
// (the model.json OUT names) and its shard beside it, the shard first so
// that model.json never names a missing file; neither replaces anything.
void publish_tfjs_files(const fs::path& written, const fs::path& json_path) {
  const fs::path shard = json_path.parent_path() / kTfjsShard;
  if (!rename_new(written / kTfjsShard, shard)) {
    const int err = errno;
    fail("cannot write the weights '", shard.string(), "' beside '", json_path.string(), "': ",
         err == EEXIST ? "it exists (autoshard never replaces it); choose another directory"
                       : std::strerror(err));
  }
  if (!rename_new(written / "model.json", json_path)) {
    const int err = errno;
    ::unlink(shard.c_str());  // the shard placed just above
    fail("cannot write '", json_path.string(), "': ",
         err == EEXIST ? "it appeared while it was written; it is kept" : std::strerror(err));
  }
}

std::string today() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d@%H:%M:%S", &tm);
  return buffer;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  AS_CHECK(out.good(), "cannot write '", path.string(), "'");
}

// The compile config as the output format writes it: the file's own while
// unchanged and in the same form, else `compile` converted.
json compile_for(const KerasModel& k, Dialect to, const std::string& where) {
  if (dialect_of(k.format) == to && same_compile_config(k.compile, k.compile_as_read))
    return k.compile_json;
  return write_compile_config(k.compile, to, where);
}

// The architecture in Keras 2's form (h5 model_config, TF.js modelTopology
// less its version keys).
json keras2_architecture(const KerasModel& k) {
  const json from = convert_architecture(k.architecture, dialect_of(k.format), Dialect::Keras2);
  json a = json::object();
  a["class_name"] = from.at("class_name");
  a["config"] = from.at("config");
  return a;
}

// .h5 and TF.js files mean Keras 2's hard_sigmoid, clip(0.2 x + 0.5, 0, 1),
// by the name (TF.js computes it so): a model whose hard_sigmoid is Keras
// 3's (read from a Keras 3 file) cannot be written in their form. A model
// of Keras 2's keeps its meaning in a .keras file, whose metadata carries
// the source's version.
void check_hard_sigmoid_keras2(const KerasModel& k, const json& keras2, const std::string& where) {
  const bool keras3 =
      (k.format == "keras" && k.keras_version.empty()) || !keras_version_is_2(k.keras_version);
  AS_CHECK(!keras3 || keras2.dump().find("\"hard_sigmoid\"") == std::string::npos, where,
           ": the model uses Keras 3's hard_sigmoid (relu6(x + 3) / 6), which .h5 and ",
           "TensorFlow.js files name Keras 2's clip(0.2 x + 0.5, 0, 1): save it as .keras");
}

// Every model weight's current value, gathered whole (a collective).
std::vector<Tensor> gather_all(KerasModel& k) {
  std::vector<Tensor> values;
  for (const KerasWeightName& w : k.weight_names) {
    Tensor t = k.model->gather_weight(w.cpp);
    AS_CHECK(t.dtype() == DType::F32, "weight '", w.cpp, "' is not float32");
    values.push_back(t);
  }
  return values;
}

// Keras 3's model.weights.h5: layers/<name>/vars/<i>, and the optimizer's
// variables when given (keras/src/saving/saving_lib.py, _save_state).
void write_keras3_weights(const KerasModel& k, const std::vector<Tensor>& values,
                          const std::optional<OptimizerVars>& optimizer, const fs::path& path) {
  H5Writer h5(path.string());
  h5.group("vars");  // the model's own (none), as Keras writes it
  for (size_t i = 0; i < values.size(); ++i) h5.dataset(k.weight_names[i].keras3, values[i]);
  for (const KerasCounter& c : k.counters) h5.int64_scalar(c.name.keras3, c.value);
  if (optimizer) {
    // Keras 3's optimizer.variables: iteration, learning_rate, the slots.
    h5.group("optimizer/vars");
    h5.int64_scalar("optimizer/vars/0", optimizer->iterations);
    h5.dataset("optimizer/vars/1", Tensor::scalar(static_cast<float>(optimizer->learning_rate)));
    for (size_t i = 0; i < optimizer->slots.size(); ++i)
      h5.dataset("optimizer/vars/" + std::to_string(i + 2), optimizer->slots[i].second);
  }
  h5.close();
}

// Keras 3: config.json (architecture + compile_config), metadata.json and
// model.weights.h5 (layers/<name>/vars/<i>, as the file was read) stored
// in a zip.
void write_keras3(const KerasModel& k, const std::vector<Tensor>& values,
                  const std::optional<OptimizerVars>& optimizer, const fs::path& dir,
                  const fs::path& zip_path, const std::string& where) {
  json config = convert_architecture(k.architecture, dialect_of(k.format), Dialect::Keras3);
  const json compile = compile_for(k, Dialect::Keras3, where);
  if (compile.is_null())
    config.erase("compile_config");
  else
    config["compile_config"] = compile;
  const json meta = {{"keras_version", k.keras_version.empty() ? kKeras3Version : k.keras_version},
                     {"date_saved", today()}};
  write_text(dir / "config.json", config.dump());
  write_text(dir / "metadata.json", meta.dump());
  write_keras3_weights(k, values, optimizer, dir / "model.weights.h5");
  write_stored_zip(zip_path.string(), {{"metadata.json", (dir / "metadata.json").string()},
                                       {"config.json", (dir / "config.json").string()},
                                       {"model.weights.h5", (dir / "model.weights.h5").string()}});
}

// The model's layer names in the config's order (Keras 2's layer_names),
// those holding weights included even when the config lists them oddly.
std::vector<std::string> layer_names(const KerasModel& k) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  const json& config = k.architecture.at("config");
  const json layers = config.is_array() ? config : config.value("layers", json::array());
  for (const json& l : layers) {
    std::string name;
    if (l.contains("name") && l.at("name").is_string())
      name = l.at("name");
    else if (l.contains("config") && l.at("config").is_object())
      name = l.at("config").value("name", "");
    if (!name.empty() && seen.insert(name).second) names.push_back(name);
  }
  for (const KerasWeightName& w : k.weight_names)
    if (seen.insert(w.layer).second) names.push_back(w.layer);
  return names;
}

// Keras 2: root attributes model_config, training_config, keras_version,
// backend; model_weights/<layer>/ with weight_names and the datasets.
void write_keras2(const KerasModel& k, const std::vector<Tensor>& values,
                  const std::optional<OptimizerVars>& optimizer, const fs::path& path,
                  const std::string& where) {
  const json architecture = keras2_architecture(k);
  check_hard_sigmoid_keras2(k, architecture, where);
  H5Writer h5(path.string());
  const std::string version =
      k.format == "h5" && !k.keras_version.empty() ? k.keras_version : kKeras2Version;
  h5.string_attribute("", "model_config", architecture.dump());
  const json compile = compile_for(k, Dialect::Keras2, where);
  if (!compile.is_null()) h5.string_attribute("", "training_config", compile.dump());
  h5.string_attribute("", "keras_version", version);
  h5.string_attribute("", "backend", "tensorflow");
  h5.group("model_weights");
  const std::vector<std::string> layers = layer_names(k);
  h5.strings_attribute("model_weights", "layer_names", layers);
  h5.string_attribute("model_weights", "keras_version", version);
  h5.string_attribute("model_weights", "backend", "tensorflow");
  for (const std::string& layer : layers) {
    const std::string group = "model_weights/" + layer;
    h5.group(group);
    std::vector<std::string> names;
    for (size_t i = 0; i < values.size(); ++i) {
      const KerasWeightName& w = k.weight_names[i];
      if (w.layer != layer) continue;
      names.push_back(w.tfjs + ":0");
      h5.dataset(group + "/" + names.back(), values[i]);
    }
    // Keras 2 lists the int64 count after mean and variance (tf-keras's
    // Normalization.build adds it last).
    for (const KerasCounter& c : k.counters) {
      if (c.name.layer != layer) continue;
      names.push_back(c.name.tfjs + ":0");
      h5.int64_scalar(group + "/" + names.back(), c.value);
    }
    h5.strings_attribute(group, "weight_names", names);
  }
  if (optimizer) {
    // Keras 2's optimizer.weights: iter, then each slot of every variable.
    std::vector<std::string> names = {k.compile.optimizer + "/iter:0"};
    h5.int64_scalar("optimizer_weights/" + names.front(), optimizer->iterations);
    for (const auto& [name, value] : optimizer->slots) {
      names.push_back(name);
      h5.dataset("optimizer_weights/" + name, value);
    }
    h5.strings_attribute("optimizer_weights", "weight_names", names);
  }
  h5.close();
}

// TensorFlow.js: model.json (modelTopology, trainingConfig, weightsManifest)
// and one float32 shard.
void write_tfjs(const KerasModel& k, const std::vector<Tensor>& values,
                const std::optional<OptimizerVars>& optimizer, const fs::path& dir,
                const std::string& where) {
  json topology = keras2_architecture(k);
  check_hard_sigmoid_keras2(k, topology, where);
  topology["keras_version"] =
      k.format == "tfjs" && !k.keras_version.empty() ? k.keras_version : kTfjsVersion;
  topology["backend"] = "tensor_flow.js";
  json manifest_weights = json::array();
  {
    std::ofstream bin(dir / kTfjsShard, std::ios::binary);
    for (size_t i = 0; i < values.size(); ++i) {
      bin.write(reinterpret_cast<const char*>(values[i].f32()),
                static_cast<std::streamsize>(values[i].numel() * sizeof(float)));
      manifest_weights.push_back(
          {{"name", k.weight_names[i].tfjs}, {"shape", values[i].shape()}, {"dtype", "float32"}});
    }
    if (optimizer) {
      // TF.js's optimizer.getWeights(): iter (int32), then each slot of
      // every variable, marked "group": "optimizer" as model.save does.
      AS_CHECK(optimizer->iterations < (int64_t{1} << 31), where, ": the iteration count ",
               optimizer->iterations, " exceeds TF.js's int32");
      const int32_t iter = static_cast<int32_t>(optimizer->iterations);
      bin.write(reinterpret_cast<const char*>(&iter), sizeof iter);
      manifest_weights.push_back(
          {{"name", "iter"}, {"shape", json::array()}, {"dtype", "int32"}, {"group", "optimizer"}});
      for (const auto& [name, value] : optimizer->slots) {
        bin.write(reinterpret_cast<const char*>(value.f32()),
                  static_cast<std::streamsize>(value.numel() * sizeof(float)));
        manifest_weights.push_back({{"name", name},
                                    {"shape", value.shape()},
                                    {"dtype", "float32"},
                                    {"group", "optimizer"}});
      }
    }
    bin.close();
    AS_CHECK(bin.good(), "cannot write '", (dir / kTfjsShard).string(), "'");
  }
  json doc = {{"format", "layers-model"},
              {"generatedBy", "autoshard"},
              {"convertedBy", nullptr},
              {"modelTopology", topology},
              {"weightsManifest", {{{"paths", {kTfjsShard}}, {"weights", manifest_weights}}}}};
  const json compile = compile_for(k, Dialect::TFJS, where);
  if (!compile.is_null()) doc["trainingConfig"] = compile;
  write_text(dir / "model.json", doc.dump());
}

}  // namespace

void save_keras_model(KerasModel& k, const std::string& out, const std::string& format_in,
                      bool with_optimizer) {
  AS_CHECK(k.model, "save: the Keras model holds no model");
  std::string format = format_in.empty() ? keras_format_of(out) : format_in;
  if (format.empty()) format = k.format;
  AS_CHECK(format == "keras" || format == "h5" || format == "tfjs", "save: format '", format,
           "' is not one of keras, h5, tfjs");
  const std::string where = "saving '" + out + "'";
  AS_CHECK(k.architecture.is_object() && k.architecture.contains("class_name") &&
               k.architecture.contains("config"),
           where, ": the model has no architecture to write");
  const fs::path path(out);
  std::error_code ec;
  AS_CHECK(!fs::exists(fs::symlink_status(path, ec)), "'", out,
           "' exists; autoshard never replaces it: remove it or choose another path");
  AS_CHECK(!path.has_parent_path() || fs::is_directory(path.parent_path(), ec), where, ": '",
           path.parent_path().string(), "' is not a directory");
  // OUT may name the model.json of a TF.js model itself: the file, with its
  // shard beside it (not a directory of that name).
  const bool tfjs_file = format == "tfjs" && path.extension() == ".json";
  const fs::path shard = (path.has_parent_path() ? path.parent_path() : fs::path(".")) / kTfjsShard;
  AS_CHECK(!tfjs_file || !fs::exists(fs::symlink_status(shard, ec)), where, ": its weights go to '",
           shard.string(),
           "', which exists; autoshard never replaces it: choose another directory");
  // Every rank gathers (a collective); the leader writes.
  const std::vector<Tensor> values = gather_all(k);
  const std::optional<OptimizerVars> optimizer =
      with_optimizer ? optimizer_vars(k, dialect_of(format)) : std::nullopt;
  if (!World::process().leader()) return;
  Aside aside(path);
  if (format == "h5") {
    write_keras2(k, values, optimizer, aside.path(), where);
  } else {
    fs::create_directory(aside.path());
    if (format == "tfjs") {
      write_tfjs(k, values, optimizer, aside.path(), where);
      if (tfjs_file) return publish_tfjs_files(aside.path(), path);  // the aside is removed
    } else {
      Aside parts(path.string() + ".parts");
      fs::create_directory(parts.path());
      fs::remove(aside.path());
      write_keras3(k, values, optimizer, parts.path(), aside.path(), where);
    }
  }
  aside.publish(path);
}

void save_keras_weights(KerasModel& k, const std::string& out) {
  AS_CHECK(k.model, "save_weights: the Keras model holds no model");
  AS_CHECK(k.format == "keras", "save_weights: a model read from a ", k.format,
           " file has no Keras 3 weights layout; save it whole");
  const fs::path path(out);
  std::error_code ec;
  AS_CHECK(!fs::exists(fs::symlink_status(path, ec)), "'", out,
           "' exists; autoshard never replaces it: remove it or choose another path");
  const std::vector<Tensor> values = gather_all(k);  // every rank: a collective
  if (!World::process().leader()) return;
  Aside aside(path);
  write_keras3_weights(k, values, std::nullopt, aside.path());
  aside.publish(path);
}

}  // namespace autoshard
