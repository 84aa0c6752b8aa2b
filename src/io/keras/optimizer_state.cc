#include "io/keras/optimizer_state.h"

#include <algorithm>
#include <set>

#include "autoshard/error.h"

namespace autoshard::keras {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

double config_number(const KerasCompileConfig& c, const char* key, double fallback) {
  const nlohmann::json& o = c.optimizer_config;
  return o.contains(key) && o.at(key).is_number() ? o.at(key).get<double>() : fallback;
}

// The file's index of slot j of trainable variable i.
size_t index_of(const OptimizerLayout& l, size_t i, size_t j, size_t variables, size_t slots) {
  return static_cast<size_t>(l.lead) + (l.interleaved ? i * slots + j : j * variables + i);
}

// A source whose values are the stored ones times `factor`.
WeightSource scaled(WeightSource s, double factor) {
  if (factor == 1.0) return s;
  auto read = s.read;
  s.read = [read, factor](const Shape& shape, const Sharding& layout, const DeviceMesh& mesh,
                          int device) {
    Tensor t = read(shape, layout, mesh, device);
    for (int64_t e = 0; e < t.numel(); ++e)
      t.f32()[e] = static_cast<float>(static_cast<double>(t.f32()[e]) * factor);
    return t;
  };
  return s;
}

// The trainable weights among `names`, in order.
std::vector<const KerasWeightName*> trainable_of(KerasModel& k) {
  const std::vector<std::string> frozen = k.model->non_trainable_weight_paths();
  const std::set<std::string> skip(frozen.begin(), frozen.end());
  std::vector<const KerasWeightName*> out;
  for (const KerasWeightName& w : k.weight_names)
    if (!skip.count(w.cpp)) out.push_back(&w);
  return out;
}

}  // namespace

std::optional<std::vector<std::string>> optimizer_slots(const KerasCompileConfig& c) {
  const std::string name = lower(c.optimizer);
  if (name == "adam" || name == "adamw") return std::vector<std::string>{"m", "v"};
  if (name == "sgd")
    return config_number(c, "momentum", 0) != 0 ? std::vector<std::string>{"momentum"}
                                                : std::vector<std::string>{};
  return std::nullopt;
}

double slot_factor(const KerasCompileConfig& c, Dialect dialect, const std::string& slot) {
  if (slot != "momentum" || dialect == Dialect::TFJS) return 1.0;
  return -config_number(c, "learning_rate", 0.01);
}

std::string add_optimizer_sources(const KerasCompileConfig& compile, Dialect dialect,
                                  const FileOptimizerState& file,
                                  const std::vector<std::string>& trainable,
                                  const std::map<std::string, Shape>& shapes,
                                  std::map<std::string, WeightSource>& sources) {
  if (file.values.empty()) return "the file holds no optimizer state";
  if (compile.optimizer.empty()) return "the compile config names no optimizer";
  const auto slots = optimizer_slots(compile);
  if (!slots) return "autoshard does not read " + compile.optimizer + "'s state";
  const size_t n = trainable.size(), k = slots->size();
  const size_t want = static_cast<size_t>(file.layout.lead) + n * k;
  // Keras 2.3 lists a placeholder vhat_<i> per variable after Adam's moments.
  size_t extra = 0;
  for (size_t i = want; i < file.values.size(); ++i)
    if (file.names[i].find("vhat") != std::string::npos) ++extra;
  if (file.values.size() != want + extra)
    return "the file's optimizer holds " + std::to_string(file.values.size()) +
           " variables, the model's " + compile.optimizer + " needs " + std::to_string(want) +
           " (another optimizer or model?)";
  std::map<std::string, WeightSource> found;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < k; ++j) {
      const size_t at = index_of(file.layout, i, j, n, k);
      const StoredWeight& w = file.values[at];
      const Shape& shape = shapes.at(trainable[i]);
      if (w.shape != shape)
        return "optimizer variable '" + file.names[at] + "' is " + shape_str(w.shape) +
               " but slot '" + (*slots)[j] + "' of '" + trainable[i] + "' is " + shape_str(shape) +
               " (variables in another order?)";
      const std::string key = "optimizer." + (*slots)[j] + "." + trainable[i];
      found[key] = scaled(stored_source(w, file.names[at]),
                          1.0 / slot_factor(compile, dialect, (*slots)[j]));
    }
  }
  for (auto& [key, src] : found) sources[key] = std::move(src);
  return "";
}

std::optional<OptimizerVars> optimizer_vars(KerasModel& k, Dialect dialect) {
  const auto slots = optimizer_slots(k.compile);
  if (!slots) return std::nullopt;
  const std::vector<const KerasWeightName*> trainable = trainable_of(k);
  const std::vector<std::string> have = k.model->slot_paths();
  const std::set<std::string> present(have.begin(), have.end());
  for (const std::string& slot : *slots)
    for (const KerasWeightName* w : trainable)
      if (!present.count("optimizer." + slot + "." + w->cpp)) return std::nullopt;
  OptimizerVars out;
  out.iterations = k.model->iterations();
  out.learning_rate =
      config_number(k.compile, "learning_rate", lower(k.compile.optimizer) == "sgd" ? 0.01 : 1e-3);
  const OptimizerLayout layout{dialect == Dialect::Keras3 ? 2 : 1, dialect == Dialect::Keras3};
  const size_t n = trainable.size(), s = slots->size();
  out.slots.resize(n * s);
  // Gathered in one order on every rank (a collective), placed in the file's.
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < s; ++j) {
      const std::string& slot = (*slots)[j];
      Tensor t = k.model->gather_weight("optimizer." + slot + "." + trainable[i]->cpp).clone();
      const double factor = slot_factor(k.compile, dialect, slot);
      if (factor != 1.0)
        for (int64_t e = 0; e < t.numel(); ++e)
          t.f32()[e] = static_cast<float>(static_cast<double>(t.f32()[e]) * factor);
      std::string name = trainable[i]->tfjs + "/" + slot;
      if (dialect == Dialect::Keras2) name = k.compile.optimizer + "/" + name + ":0";
      out.slots[index_of(layout, i, j, n, s) - static_cast<size_t>(layout.lead)] = {name, t};
    }
  }
  return out;
}

}  // namespace autoshard::keras
