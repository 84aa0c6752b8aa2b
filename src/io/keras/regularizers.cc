#include "autoshard/nn/regularizers.h"

#include <cctype>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/io/keras_regularizers.h"

namespace autoshard {

using nlohmann::json;

namespace {

// The class name in snake case without underscores ("L1L2", "l1_l2" ->
// "l1l2"; "MaxNorm", "max_norm", "maxnorm" -> "maxnorm"), and its config.
struct PenaltySpec {
  std::string kind;
  json config = json::object();
};

PenaltySpec penalty_spec(const json& spec, const std::string& where, const char* what) {
  PenaltySpec s;
  std::string name;
  if (spec.is_string()) {
    name = spec.get<std::string>();
  } else if (spec.is_object() && spec.contains("class_name") && spec.at("class_name").is_string()) {
    name = spec.at("class_name").get<std::string>();
    if (spec.contains("config") && !spec.at("config").is_null()) s.config = spec.at("config");
    AS_CHECK(s.config.is_object(), where, ": the ", what, "'s config must be an object, got ",
             s.config.dump().substr(0, 80));
  } else {
    fail(where, ": a ", what, " must be a name or {\"class_name\": ..., \"config\": ...}, got ",
         spec.dump().substr(0, 80));
  }
  for (char c : name)
    if (c != '_') s.kind += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// config[key] as a finite number >= 0 (null or absent: `def`).
double factor_field(const PenaltySpec& s, const char* key, double def, const std::string& where) {
  const json* v = s.config.contains(key) ? &s.config.at(key) : nullptr;
  if (!v || v->is_null()) return def;
  AS_CHECK(v->is_number() && std::isfinite(v->get<double>()) && v->get<double>() >= 0, where, ": ",
           key, " must be a number >= 0, got ", v->dump().substr(0, 40));
  return v->get<double>();
}

// Keras's axis: an int or a list of ints (default 0).
std::vector<int64_t> axis_field(const PenaltySpec& s, const std::string& where) {
  const json* v = s.config.contains("axis") ? &s.config.at("axis") : nullptr;
  if (!v || v->is_null()) return {0};
  std::vector<int64_t> out;
  for (const json& a : v->is_array() ? *v : json::array({*v})) {
    AS_CHECK(a.is_number_integer(), where, ": axis must be an integer or a list of them, got ",
             v->dump().substr(0, 40));
    out.push_back(a.get<int64_t>());
  }
  return out;
}

void only_fields(const PenaltySpec& s, std::initializer_list<const char*> keys,
                 const std::string& where) {
  for (const auto& [k, v] : s.config.items()) {
    bool known = k == "name";
    for (const char* key : keys) known |= k == key;
    AS_CHECK(known, where, ": field '", k, "' of ", s.kind, " is not supported");
  }
}

}  // namespace

// keras/src/regularizers/regularizers.py: L1, L2, L1L2, OrthogonalRegularizer
// (string names take Keras's defaults: 0.01 each, l1_l2's both).
Trace::Penalty keras_regularizer(const json& spec, const std::string& where) {
  const PenaltySpec s = penalty_spec(spec, where, "regularizer");
  const bool named = spec.is_string();
  if (s.kind == "l1") {
    only_fields(s, {"l1"}, where);
    return regularizers::l1_l2(factor_field(s, "l1", 0.01, where), 0);
  }
  if (s.kind == "l2") {
    only_fields(s, {"l2"}, where);
    return regularizers::l1_l2(0, factor_field(s, "l2", 0.01, where));
  }
  if (s.kind == "l1l2") {
    only_fields(s, {"l1", "l2"}, where);
    const double def = named ? 0.01 : 0.0;  // keras.regularizers.l1_l2()'s, L1L2()'s
    return regularizers::l1_l2(factor_field(s, "l1", def, where),
                               factor_field(s, "l2", def, where));
  }
  if (s.kind == "orthogonalregularizer") {
    only_fields(s, {"factor", "mode"}, where);
    const json mode = s.config.value("mode", json("rows"));
    AS_CHECK(mode == json("rows") || mode == json("columns"), where,
             ": OrthogonalRegularizer's mode must be 'rows' or 'columns', got ",
             mode.dump().substr(0, 40));
    return regularizers::orthogonal(factor_field(s, "factor", 0.01, where), mode == json("rows"));
  }
  fail(where, ": regularizer '", spec.is_string() ? spec.get<std::string>() : s.kind,
       "' is not supported (L1, L2, L1L2, OrthogonalRegularizer)");
}

// keras/src/constraints/constraints.py: MaxNorm, MinMaxNorm, NonNeg, UnitNorm.
Trace::Penalty keras_constraint(const json& spec, const std::string& where) {
  const PenaltySpec s = penalty_spec(spec, where, "constraint");
  if (s.kind == "maxnorm") {
    only_fields(s, {"max_value", "axis"}, where);
    return constraints::max_norm(factor_field(s, "max_value", 2.0, where), axis_field(s, where));
  }
  if (s.kind == "minmaxnorm") {
    only_fields(s, {"min_value", "max_value", "rate", "axis"}, where);
    return constraints::min_max_norm(factor_field(s, "min_value", 0.0, where),
                                     factor_field(s, "max_value", 1.0, where),
                                     factor_field(s, "rate", 1.0, where), axis_field(s, where));
  }
  if (s.kind == "nonneg") {
    only_fields(s, {}, where);
    return constraints::non_neg();
  }
  if (s.kind == "unitnorm") {
    only_fields(s, {"axis"}, where);
    return constraints::unit_norm(axis_field(s, where));
  }
  fail(where, ": constraint '", spec.is_string() ? spec.get<std::string>() : s.kind,
       "' is not supported (MaxNorm, MinMaxNorm, NonNeg, UnitNorm)");
}

}  // namespace autoshard
