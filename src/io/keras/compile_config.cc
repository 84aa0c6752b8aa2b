#include "io/keras/compile_config.h"

#include <cctype>
#include <cmath>
#include <map>

#include "autoshard/error.h"
#include "autoshard/json.h"
#include "autoshard/optim/keras_optimizers.h"
#include "autoshard/optim/learning_rate_schedules.h"

namespace autoshard {

using nlohmann::json;

namespace keras {

namespace {

// "meanSquaredError" -> "mean_squared_error"; snake_case stays.
std::string camel_to_snake(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      if (!out.empty() && out.back() != '_') out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

const std::map<std::string, std::string> kLossAliases = {
    {"mse", "mean_squared_error"},
    {"mae", "mean_absolute_error"},
    {"huber_loss", "huber"},
};

json loss_of(const json& v, const std::string& where) {
  if (v.is_string()) {
    std::string name = camel_to_snake(v.get<std::string>());
    if (kLossAliases.count(name)) name = kLossAliases.at(name);
    return {{"name", name}};
  }
  AS_CHECK(v.is_object() && v.contains("class_name") && v.at("class_name").is_string(), where,
           ": loss ", v.dump().substr(0, 200), " is neither a name nor a Keras loss object");
  const std::string cls = v.at("class_name").get<std::string>();
  AS_CHECK(!v.contains("registered_name") || v.at("registered_name").is_null() ||
               v.at("registered_name") == cls,
           where, ": loss '", cls, "' is a custom class; autoshard never runs code from a file");
  std::string name = camel_to_snake(cls);
  if (kLossAliases.count(name)) name = kLossAliases.at(name);
  json out = {{"name", name}};
  const json c = v.value("config", json::object());
  for (const auto& [k, val] : c.items()) {
    if (k == "name" || k == "dtype" || (k == "axis" && val == json(-1)) ||
        (k == "reduction" && (val == "sum_over_batch_size" || val == "auto")) ||
        (k == "fn" && val.is_string()))
      continue;
    if (k == "from_logits" || k == "label_smoothing" || k == "delta") {
      // Typed here: make_losses reads them long after the file is closed.
      AS_CHECK(k == "from_logits" ? val.is_boolean() : val.is_number(), where, ": loss '", cls,
               "': field '", k, "' must be ", k == "from_logits" ? "true or false" : "a number",
               ", not ", json_type_phrase(val));
      out[k] = val;
      continue;
    }
    if (k == "ignore_class" && val.is_null()) continue;
    fail(where, ": loss '", cls, "': field '", k, "' = ", val.dump().substr(0, 200),
         " is not supported");
  }
  return out;
}

std::string metric_of(const json& v, const std::string& where) {
  if (v.is_string()) return camel_to_snake(v.get<std::string>());
  if (v.is_object() && v.contains("config") && v.at("config").is_object() &&
      v.at("config").contains("name") && v.at("config").at("name").is_string())
    return v.at("config").at("name").get<std::string>();
  fail(where, ": metric ", v.dump().substr(0, 200), " is not understood");
}

// TF.js optimizer names and camelCase keys, as Keras 3's.
void optimizer_from_tfjs(const std::string& cls, const json& c, KerasCompileConfig& out,
                         const std::string& where) {
  static const std::map<std::string, std::string> keys = {
      {"learningRate", "learning_rate"},
      {"beta1", "beta_1"},
      {"beta2", "beta_2"},
      {"epsilon", "epsilon"},
      {"momentum", "momentum"},
      {"useNesterov", "nesterov"},
      {"decay", "rho"},
      {"centered", "centered"},
      {"initialAccumulatorValue", "initial_accumulator_value"}};
  if (cls == "Adam")
    out.optimizer = "Adam";
  else if (cls == "SGD")
    out.optimizer = "SGD";
  else if (cls == "Momentum")
    out.optimizer = "SGD";
  else if (cls == "RMSProp")
    out.optimizer = "RMSprop";
  else if (cls == "Adagrad")
    out.optimizer = "Adagrad";
  else
    fail(where, ": optimizer '", cls, "' is not supported (Adam, SGD, Momentum, RMSProp, Adagrad)");
  for (const auto& [k, v] : c.items()) {
    AS_CHECK(keys.count(k), where, ": optimizer ", cls, ": field '", k, "' = ", v.dump(),
             " is not supported");
    if (v.is_null()) continue;
    AS_CHECK(v.is_number() || v.is_boolean(), where, ": optimizer ", cls, ": field '", k,
             "' must be a number or a boolean, not ", json_type_phrase(v));
    out.optimizer_config[keys.at(k)] = v;
  }
}

}  // namespace

KerasCompileConfig read_compile_config(const json& config, Dialect dialect,
                                       const std::string& where) {
  KerasCompileConfig out;
  out.epsilon = dialect == Dialect::TFJS ? "after" : "before";
  if (config.is_null()) return out;
  AS_CHECK(config.is_object(), where, ": the compile config must be an object");
  out.present = true;
  const std::string at = where + ": compile config";
  // The optimizer.
  json opt = config.contains("optimizer_config") ? config.at("optimizer_config")
                                                 : config.value("optimizer", json());
  if (opt.is_string()) {
    out.optimizer = opt.get<std::string>();
  } else if (opt.is_object()) {
    const std::string cls = json_string_or(opt, "class_name", "", at + ": optimizer");
    const json c = opt.value("config", json::object());
    AS_CHECK(c.is_object(), at, ": optimizer config must be an object");
    AS_CHECK(!opt.contains("registered_name") || opt.at("registered_name").is_null() ||
                 opt.at("registered_name") == cls,
             at, ": optimizer '", cls, "' is a custom class");
    if (dialect == Dialect::TFJS) {
      optimizer_from_tfjs(cls, c, out, at);
    } else {
      out.optimizer = cls;
      for (const auto& [k, v] : c.items()) {
        if (k == "name" || v.is_null()) continue;
        if ((k == "use_ema" || k == "amsgrad" || k == "nesterov" || k == "centered") &&
            v.is_boolean()) {
          if (!v.get<bool>() || k == "nesterov" || k == "centered")
            out.optimizer_config[k] = v;
          else
            fail(at, ": optimizer '", cls, "': field '", k, "' = true is not supported");
          continue;
        }
        if (k == "ema_momentum" || k == "ema_overwrite_frequency" || k == "jit_compile" ||
            k == "is_legacy_optimizer")
          continue;
        if (k == "decay" && v.is_number() && v.get<double>() == 0) continue;
        if (k == "learning_rate" && v.is_object()) {
          // A LearningRateSchedule, serialized: checked now, built by make_optimizer.
          keras_learning_rate_schedule(v, at + ": optimizer's learning_rate");
          out.optimizer_config[k] = v;
          continue;
        }
        AS_CHECK(v.is_number() || v.is_boolean(), at, ": optimizer '", cls, "': field '", k,
                 "' = ", v.dump().substr(0, 200), " is not supported");
        if (k == "lr") {
          out.optimizer_config["learning_rate"] = v;
          continue;
        }
        out.optimizer_config[k] = v;
      }
    }
  } else if (!opt.is_null()) {
    fail(at, ": optimizer ", opt.dump().substr(0, 200), " is not understood");
  } else if (dialect == Dialect::Keras3 && !config.contains("optimizer")) {
    // Keras 3 loads a compile config by calling compile(**config)
    // (Trainer.compile_from_config, keras/src/trainers/trainer.py), so one
    // saved without an optimizer (Keras 3.8 writes such files) compiles
    // with compile's default, optimizer="rmsprop", at its defaults.
    out.optimizer = "RMSprop";
  }
  // Losses: one, a list (per output) or a dict by output name (kept in order).
  const json loss = config.value("loss", json());
  if (loss.is_array()) {
    for (const json& l : loss) out.losses.push_back(loss_of(l, at));
  } else if (loss.is_object() && !loss.contains("class_name")) {
    for (const auto& [k, l] : loss.items()) {
      json one = loss_of(l, at);
      one["output"] = k;
      out.losses.push_back(one);
    }
  } else if (!loss.is_null()) {
    out.losses.push_back(loss_of(loss, at));
  }
  const json weights = config.contains("loss_weights") ? config.at("loss_weights")
                                                       : config.value("lossWeights", json());
  if (weights.is_array()) {
    for (const json& w : weights) {
      AS_CHECK(w.is_number() && std::isfinite(w.get<double>()) && w.get<double>() >= 0, at,
               ": loss_weights must be numbers >= 0");
      out.loss_weights.push_back(w.get<double>());
    }
  } else if (weights.is_object()) {
    for (const auto& [k, w] : weights.items()) {
      AS_CHECK(w.is_number(), at, ": loss_weights['", k, "'] must be a number");
      out.loss_weights.push_back(w.get<double>());
    }
  } else if (!weights.is_null()) {
    fail(at, ": loss_weights ", weights.dump(), " is not a list");
  }
  const json metrics = config.value("metrics", json());
  std::function<void(const json&)> add_metrics = [&](const json& m) {
    if (m.is_null()) return;
    if (m.is_array()) {
      for (const json& e : m) add_metrics(e);
      return;
    }
    if (m.is_object() && !m.contains("class_name") && !m.contains("config")) {
      for (const auto& [k, e] : m.items()) add_metrics(e);
      return;
    }
    const std::string name = metric_of(m, at);
    if (std::find(out.metrics.begin(), out.metrics.end(), name) == out.metrics.end())
      out.metrics.push_back(name);
  };
  add_metrics(metrics);
  return out;
}

namespace {

// "sparse_categorical_crossentropy" -> "SparseCategoricalCrossentropy".
std::string snake_to_camel(const std::string& s) {
  std::string out;
  bool up = true;
  for (char c : s) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out;
}

json write_loss(const json& loss, Dialect dialect, const std::string& where) {
  const std::string name = loss.at("name");
  json params = json::object();
  for (const auto& [k, v] : loss.items())
    if (k != "name" && k != "output") params[k] = v;
  if (params.empty()) return name;
  AS_CHECK(dialect != Dialect::TFJS, where, ": loss '", name, "' with ", params.dump(),
           " has no TensorFlow.js form (TF.js losses take no options)");
  json config = params;
  config["name"] = name;
  config["reduction"] = "sum_over_batch_size";
  json out = {{"class_name", snake_to_camel(name)}, {"config", config}};
  if (dialect == Dialect::Keras3) {
    out["module"] = "keras.losses";
    out["registered_name"] = nullptr;
  }
  return out;
}

json write_optimizer(const KerasCompileConfig& c, Dialect dialect, const std::string& where) {
  if (dialect != Dialect::TFJS) {
    json config = c.optimizer_config;
    std::string lower = c.optimizer;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    config["name"] = lower;
    json out = {{"class_name", c.optimizer}, {"config", config}};
    if (dialect == Dialect::Keras3) {
      out["module"] = "keras.optimizers";
      out["registered_name"] = nullptr;
    }
    return out;
  }
  // TF.js's classes and camelCase keys.
  static const std::map<std::string, std::string> keys = {
      {"learning_rate", "learningRate"},
      {"beta_1", "beta1"},
      {"beta_2", "beta2"},
      {"epsilon", "epsilon"},
      {"momentum", "momentum"},
      {"nesterov", "useNesterov"},
      {"rho", "decay"},
      {"centered", "centered"},
      {"initial_accumulator_value", "initialAccumulatorValue"}};
  std::string cls = c.optimizer;
  if (cls == "RMSprop") cls = "RMSProp";
  // TF.js's fromConfig hands its keys to the constructor: the learning rate
  // (every class) and Adam's betas have no default there, so Keras's
  // defaults are written where the config leaves them out.
  static const std::map<std::string, json> defaults = {
      {"Adam", {{"learning_rate", 1e-3}, {"beta_1", 0.9}, {"beta_2", 0.999}}},
      {"SGD", {{"learning_rate", 0.01}}},
      {"RMSProp", {{"learning_rate", 1e-3}}},
      {"Adagrad", {{"learning_rate", 1e-3}}}};
  json oc = c.optimizer_config;
  if (defaults.count(cls))
    for (const auto& [k, v] : defaults.at(cls).items())
      if (!oc.contains(k) || oc.at(k).is_null()) oc[k] = v;
  if (cls == "SGD" && oc.contains("momentum") && oc.at("momentum").is_number() &&
      oc.at("momentum").get<double>() != 0)
    cls = "Momentum";
  AS_CHECK(
      cls == "Adam" || cls == "SGD" || cls == "Momentum" || cls == "RMSProp" || cls == "Adagrad",
      where, ": optimizer '", c.optimizer,
      "' has no TensorFlow.js class (Adam, SGD, Momentum, RMSProp, Adagrad)");
  json config = json::object();
  for (const auto& [k, v] : oc.items()) {
    if (k == "global_clipnorm" && v.is_number() && v.get<double>() == 0) continue;
    if (k == "weight_decay" && v.is_number() && v.get<double>() == 0) continue;
    if ((k == "amsgrad" || k == "use_ema") && v == json(false)) continue;
    if (cls == "SGD" && k == "momentum") continue;
    if (cls == "SGD" && k == "nesterov" && v == json(false)) continue;
    AS_CHECK(keys.count(k), where, ": optimizer '", c.optimizer, "' field '", k, "' = ", v.dump(),
             " has no TensorFlow.js form");
    config[keys.at(k)] = v;
  }
  return {{"class_name", cls}, {"config", config}};
}

}  // namespace

json write_compile_config(const KerasCompileConfig& c, Dialect dialect, const std::string& where) {
  if (!c.present) return nullptr;
  json out = json::object();
  if (!c.optimizer.empty()) {
    const json opt = write_optimizer(c, dialect, where);
    out[dialect == Dialect::Keras3 ? "optimizer" : "optimizer_config"] = opt;
  }
  json loss;
  const bool by_output = !c.losses.empty() && c.losses.front().contains("output");
  if (c.losses.size() == 1 && !by_output) {
    loss = write_loss(c.losses.front(), dialect, where);
  } else if (by_output) {
    loss = json::object();
    for (const json& l : c.losses)
      loss[l.at("output").get<std::string>()] = write_loss(l, dialect, where);
  } else if (!c.losses.empty()) {
    loss = json::array();
    for (const json& l : c.losses) loss.push_back(write_loss(l, dialect, where));
  }
  out["loss"] = loss;
  out[dialect == Dialect::TFJS ? "lossWeights" : "loss_weights"] =
      c.loss_weights.empty() ? json() : json(c.loss_weights);
  out["metrics"] = c.metrics;
  if (dialect == Dialect::Keras3) {
    out["weighted_metrics"] = nullptr;
    out["run_eagerly"] = false;
    out["steps_per_execution"] = 1;
    out["jit_compile"] = false;
  } else if (dialect == Dialect::Keras2) {
    out["weighted_metrics"] = nullptr;
  }
  return out;
}

bool same_compile_config(const KerasCompileConfig& a, const KerasCompileConfig& b) {
  return a.present == b.present && a.optimizer == b.optimizer &&
         a.optimizer_config == b.optimizer_config && a.losses == b.losses &&
         a.loss_weights == b.loss_weights && a.metrics == b.metrics;
}

}  // namespace keras

namespace {
double num(const json& c, const char* key, double def) {
  if (!c.contains(key) || c.at(key).is_null()) return def;
  AS_CHECK(c.at(key).is_number(), "compile config: optimizer field '", key, "' must be a number");
  return c.at(key).get<double>();
}
}  // namespace

namespace {
// The optimizer `k` names; `scheduled` >= 0: a schedule's first value in
// place of the learning rate.
std::shared_ptr<Optimizer> optimizer_of(const KerasCompileConfig& k, double scheduled) {
  const std::string& optimizer = k.optimizer;
  const std::string& epsilon = k.epsilon;
  AS_CHECK(!optimizer.empty(), "the model file has no optimizer in its compile config; give one");
  const json& c = k.optimizer_config;
  for (const auto& [k, v] : c.items())
    AS_CHECK(k != "clipnorm" && k != "clipvalue", "compile config: optimizer field '", k,
             "' = ", v.dump(), " is not supported (global_clipnorm is)");
  std::string name = optimizer;
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // A schedule's first value stands for the optimizer's learning rate.
  const double lr =
      scheduled >= 0 ? scheduled : num(c, "learning_rate", name == "sgd" ? 0.01 : 1e-3);
  const double clip = num(c, "global_clipnorm", 0);
  AS_CHECK(epsilon == "before" || epsilon == "after", "compile config: epsilon placement '",
           epsilon,
           "' is neither 'before' (Keras) nor 'after' (TensorFlow.js) the bias correction");
  if (name == "adam" || name == "adamw") {
    if (name == "adamw")
      return optimizers::AdamW({.learning_rate = lr,
                                .beta_1 = num(c, "beta_1", 0.9),
                                .beta_2 = num(c, "beta_2", 0.999),
                                .epsilon = num(c, "epsilon", 1e-7),
                                .weight_decay = num(c, "weight_decay", 0.004),
                                .global_clipnorm = clip,
                                .epsilon_hat = epsilon != "after"});
    return optimizers::Adam({.learning_rate = lr,
                             .beta_1 = num(c, "beta_1", 0.9),
                             .beta_2 = num(c, "beta_2", 0.999),
                             .epsilon = num(c, "epsilon", 1e-7),
                             .weight_decay = num(c, "weight_decay", 0),
                             .global_clipnorm = clip,
                             .epsilon_hat = epsilon != "after"});
  }
  AS_CHECK(num(c, "weight_decay", 0) == 0, "compile config: optimizer '", optimizer,
           "': weight_decay is not supported");
  if (name == "sgd")
    return optimizers::SGD({.learning_rate = lr,
                            .momentum = num(c, "momentum", 0),
                            .nesterov = c.value("nesterov", false),
                            .global_clipnorm = clip});
  if (name == "rmsprop")
    return optimizers::RMSprop({.learning_rate = lr,
                                .rho = num(c, "rho", 0.9),
                                .momentum = num(c, "momentum", 0),
                                .epsilon = num(c, "epsilon", 1e-7),
                                .centered = c.value("centered", false),
                                .global_clipnorm = clip});
  if (name == "adagrad")
    return optimizers::Adagrad(
        {.learning_rate = lr,
         .initial_accumulator_value = num(c, "initial_accumulator_value", 0.1),
         .epsilon = num(c, "epsilon", 1e-7),
         .global_clipnorm = clip});
  fail("compile config: optimizer '", optimizer,
       "' is not supported (Adam, AdamW, SGD, RMSprop, Adagrad)");
}

std::shared_ptr<Optimizer> with_schedule(std::shared_ptr<Optimizer> optimizer,
                                         std::function<double(int64_t)> schedule) {
  optimizer->schedule = std::move(schedule);
  return optimizer;
}
}  // namespace

std::shared_ptr<Optimizer> KerasCompileConfig::make_optimizer() const {
  std::function<double(int64_t)> schedule;
  if (const json* rate = json_member(optimizer_config, "learning_rate"); rate && rate->is_object())
    schedule = keras_learning_rate_schedule(*rate, "compile config: optimizer's learning_rate");
  return with_schedule(optimizer_of(*this, schedule ? schedule(1) : -1), schedule);
}

nlohmann::json KerasCompileConfig::loss_named(const std::string& name) {
  return keras::loss_of(name, "--loss");
}

std::vector<Loss> KerasCompileConfig::make_losses() const {
  AS_CHECK(!losses.empty(), "the model file has no loss in its compile config; give one");
  std::vector<Loss> out;
  for (const json& l : losses) {
    const std::string name = l.at("name");
    const bool logits = l.value("from_logits", false);
    const double smoothing = l.value("label_smoothing", 0.0);
    if (name == "categorical_crossentropy")
      out.push_back(
          losses::CategoricalCrossentropy({.from_logits = logits, .label_smoothing = smoothing}));
    else if (name == "sparse_categorical_crossentropy")
      out.push_back(losses::SparseCategoricalCrossentropy({.from_logits = logits}));
    else if (name == "binary_crossentropy")
      out.push_back(
          losses::BinaryCrossentropy({.from_logits = logits, .label_smoothing = smoothing}));
    else if (name == "mean_squared_error")
      out.push_back(losses::MeanSquaredError());
    else if (name == "mean_absolute_error")
      out.push_back(losses::MeanAbsoluteError());
    else if (name == "huber")
      out.push_back(losses::Huber(l.value("delta", 1.0)));
    else
      fail("compile config: loss '", name,
           "' is not supported (categorical_crossentropy, "
           "sparse_categorical_crossentropy, binary_crossentropy, mean_squared_error, "
           "mean_absolute_error, huber)");
  }
  return out;
}

std::vector<Metric> KerasCompileConfig::make_metrics() const {
  std::vector<Metric> out;
  for (const std::string& m : metrics) {
    if (m == "loss") continue;
    out.push_back(metrics::by_name(m));
  }
  return out;
}

}  // namespace autoshard
