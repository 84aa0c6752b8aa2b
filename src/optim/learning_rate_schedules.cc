#include "autoshard/optim/learning_rate_schedules.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "autoshard/error.h"
#include "autoshard/json.h"

namespace autoshard {
namespace {

using nlohmann::json;
// Keras's value at its 0-based step.
using KerasStepRate = std::function<double(double step)>;

// The config's fields, typed, with unknown keys refused: a misspelt key
// would otherwise train with a default silently.
class ScheduleFields {
 public:
  ScheduleFields(const std::string& cls, const json& config, const std::string& where)
      : cls_(cls), config_(config), where_(where + (where.empty() ? "" : ": ") + cls) {
    AS_CHECK(config.is_object(), where_, ": the config must be an object, not ",
             json_type_phrase(config));
  }

  double number(const char* key, std::optional<double> otherwise = std::nullopt) {
    used_.insert(key);
    if (!json_member(config_, key)) {
      AS_CHECK(otherwise.has_value(), where_, ": '", key, "' is missing");
      return *otherwise;
    }
    const double v = json_number_or(config_, key, 0, where_);
    AS_CHECK(std::isfinite(v), where_, ": '", key, "' must be finite");
    return v;
  }
  double positive(const char* key, std::optional<double> otherwise = std::nullopt) {
    const double v = number(key, otherwise);
    AS_CHECK(v > 0, where_, ": '", key, "' must be > 0, got ", v);
    return v;
  }
  bool flag(const char* key) {
    used_.insert(key);
    return json_bool_or(config_, key, false, where_);
  }
  std::optional<double> optional_number(const char* key) {
    if (!json_member(config_, key)) {
      used_.insert(key);
      return std::nullopt;
    }
    return number(key);
  }
  std::vector<double> numbers(const char* key) {
    used_.insert(key);
    const json* v = json_member(config_, key);
    AS_CHECK(v && v->is_array(), where_, ": '", key, "' must be a list of numbers");
    std::vector<double> out;
    for (const json& x : *v) {
      AS_CHECK(x.is_number() && std::isfinite(x.get<double>()), where_, ": '", key,
               "' must be a list of finite numbers");
      out.push_back(x.get<double>());
    }
    return out;
  }
  // After reading: keys Keras does not define for this class are refused.
  void no_others() {
    used_.insert("name");
    for (const auto& [key, value] : config_.items())
      AS_CHECK(used_.count(key), where_, ": unknown field '", key, "'");
  }

 private:
  std::string cls_;
  const json& config_;
  std::string where_;
  std::set<std::string> used_;
};

KerasStepRate exponential_decay(ScheduleFields& f) {
  const double lr = f.number("initial_learning_rate"), steps = f.positive("decay_steps");
  const double rate = f.number("decay_rate");
  const bool staircase = f.flag("staircase");
  return [=](double step) {
    const double p = staircase ? std::floor(step / steps) : step / steps;
    return lr * std::pow(rate, p);
  };
}

KerasStepRate inverse_time_decay(ScheduleFields& f) {
  const double lr = f.number("initial_learning_rate"), steps = f.positive("decay_steps");
  const double rate = f.number("decay_rate");
  const bool staircase = f.flag("staircase");
  return [=](double step) {
    const double p = staircase ? std::floor(step / steps) : step / steps;
    return lr / (1 + rate * p);
  };
}

// values[0] up to and including boundaries[0], values[i] in
// (boundaries[i-1], boundaries[i]], the last value past the last boundary.
KerasStepRate piecewise_constant_decay(ScheduleFields& f, const std::string& where) {
  const std::vector<double> bounds = f.numbers("boundaries"), values = f.numbers("values");
  AS_CHECK(bounds.size() + 1 == values.size(), where,
           ": PiecewiseConstantDecay needs one value more than boundaries (", bounds.size(),
           " boundaries, ", values.size(), " values)");
  AS_CHECK(std::is_sorted(bounds.begin(), bounds.end()), where,
           ": PiecewiseConstantDecay's boundaries must increase");
  return [=](double step) {
    const auto it = std::lower_bound(bounds.begin(), bounds.end(), step);
    return values[size_t(it - bounds.begin())];
  };
}

KerasStepRate polynomial_decay(ScheduleFields& f) {
  const double lr = f.number("initial_learning_rate"), steps = f.positive("decay_steps");
  const double end = f.number("end_learning_rate", 1e-4), power = f.number("power", 1.0);
  const bool cycle = f.flag("cycle");
  return [=](double step) {
    double span = steps;
    if (cycle)
      span *= step == 0 ? 1.0 : std::ceil(step / steps);
    else
      step = std::min(step, steps);
    return (lr - end) * std::pow(1 - step / span, power) + end;
  };
}

KerasStepRate cosine_decay_keras(ScheduleFields& f) {
  const double lr = f.number("initial_learning_rate"), steps = f.positive("decay_steps");
  const double alpha = f.number("alpha", 0.0);
  const std::optional<double> target = f.optional_number("warmup_target");
  const double warmup = f.number("warmup_steps", 0.0);  // used only with a target, as Keras
  const auto decay = [=](double step, double from) {
    return from * ((1 - alpha) * 0.5 * (1 + std::cos(M_PI * step / steps)) + alpha);
  };
  if (!target) return [=](double step) { return decay(std::min(step, steps), lr); };
  return [=](double step) {
    step = std::min(step, steps + warmup);
    if (step < warmup) return (*target - lr) * (step / warmup) + lr;
    return decay(step - warmup, *target);
  };
}

KerasStepRate cosine_decay_restarts(ScheduleFields& f) {
  const double lr = f.number("initial_learning_rate"), first = f.positive("first_decay_steps");
  const double t_mul = f.number("t_mul", 2.0), m_mul = f.number("m_mul", 1.0);
  const double alpha = f.number("alpha", 0.0);
  return [=](double step) {
    double fraction = step / first, restart = 0;
    if (t_mul == 1.0) {
      restart = std::floor(fraction);
      fraction -= restart;
    } else {
      // Periods of first, first t_mul, first t_mul^2, ...: which one holds
      // the step, and how far into it.
      restart = std::floor(std::log(1 - fraction * (1 - t_mul)) / std::log(t_mul));
      const double before = (1 - std::pow(t_mul, restart)) / (1 - t_mul);
      fraction = (fraction - before) / std::pow(t_mul, restart);
    }
    const double cosine = 0.5 * std::pow(m_mul, restart) * (1 + std::cos(M_PI * fraction));
    return lr * ((1 - alpha) * cosine + alpha);
  };
}

const std::map<std::string, KerasStepRate (*)(ScheduleFields&)>& simple_schedules() {
  static const std::map<std::string, KerasStepRate (*)(ScheduleFields&)> table = {
      {"ExponentialDecay", exponential_decay},
      {"InverseTimeDecay", inverse_time_decay},
      {"PolynomialDecay", polynomial_decay},
      {"CosineDecay", cosine_decay_keras},
      {"CosineDecayRestarts", cosine_decay_restarts}};
  return table;
}

}  // namespace

const std::vector<std::string>& keras_learning_rate_schedule_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out{"PiecewiseConstantDecay"};
    for (const auto& [name, make] : simple_schedules()) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  }();
  return names;
}

std::function<double(int64_t)> keras_learning_rate_schedule(const std::string& class_name,
                                                            const json& config,
                                                            const std::string& where) {
  ScheduleFields fields(class_name, config, where);
  KerasStepRate rate;
  if (class_name == "PiecewiseConstantDecay") {
    rate = piecewise_constant_decay(fields, where);
  } else {
    const auto it = simple_schedules().find(class_name);
    if (it == simple_schedules().end()) {
      std::string known;
      for (const std::string& n : keras_learning_rate_schedule_names())
        known += (known.empty() ? "" : ", ") + n;
      fail(where, where.empty() ? "" : ": ", "learning-rate schedule '", class_name,
           "' is not one of Keras's (", known, ")");
    }
    rate = it->second(fields);
  }
  fields.no_others();
  return [rate](int64_t step) { return rate(double(std::max<int64_t>(0, step - 1))); };
}

std::function<double(int64_t)> keras_learning_rate_schedule(const json& serialized,
                                                            const std::string& where) {
  AS_CHECK(serialized.is_object(), where, ": a learning-rate schedule must be an object");
  const std::string cls = json_string_or(serialized, "class_name", "", where);
  AS_CHECK(!cls.empty(), where, ": the learning-rate schedule has no class_name");
  const json* config = json_member(serialized, "config");
  return keras_learning_rate_schedule(cls, config ? *config : json::object(), where);
}

}  // namespace autoshard
