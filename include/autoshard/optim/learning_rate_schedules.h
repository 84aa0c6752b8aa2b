// Keras 3's learning-rate schedules (keras.optimizers.schedules), read from
// the form Keras serializes them in: a class name and its config.
//
//   optimizer->schedule = keras_learning_rate_schedule(
//       "ExponentialDecay", {{"initial_learning_rate", 0.1}, {"decay_steps", 100},
//                            {"decay_rate", 0.5}});
//
// The formulas are those of keras/src/optimizers/schedules/
// learning_rate_schedule.py (each class's __call__), evaluated in double
// precision. Keras evaluates a schedule at the optimizer's iteration count
// before the update (0 for the first step); autoshard's steps count from 1,
// so the function returned gives Keras's value at step - 1.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace autoshard {

// The Keras class names keras_learning_rate_schedule knows.
const std::vector<std::string>& keras_learning_rate_schedule_names();

// The schedule `class_name` with `config` (Keras's get_config: unknown keys
// refused, each field typed and in range), as the learning rate of each
// 1-based step. `where` prefixes errors (the file or call).
std::function<double(int64_t step)> keras_learning_rate_schedule(const std::string& class_name,
                                                                 const nlohmann::json& config,
                                                                 const std::string& where = "");

// A serialized schedule as Keras 3 writes it in a compile config
// ({"module": "keras.optimizers.schedules", "class_name": ..., "config": ...,
// "registered_name": ...}; Keras 2 writes only class_name and config).
std::function<double(int64_t step)> keras_learning_rate_schedule(const nlohmann::json& serialized,
                                                                 const std::string& where);

}  // namespace autoshard
