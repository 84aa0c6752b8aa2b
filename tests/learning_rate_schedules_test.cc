// Keras's learning-rate schedules (optim/learning_rate_schedules.h) against
// values worked out here another way: the closed forms of Keras's
// docstrings at chosen steps, and SGDR's restarts found by walking the
// periods one by one (the schedule computes them with logarithms).
#include "autoshard/optim/learning_rate_schedules.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autoshard/error.h"

namespace autoshard {
namespace {

using nlohmann::json;

// Keras's value at its 0-based step k is the engine's at step k + 1.
double keras_at(const std::function<double(int64_t)>& f, int64_t k) {
  return f(k + 1);
}

TEST(LearningRateSchedules, ExponentialAndInverseTime) {
  auto e = keras_learning_rate_schedule(
      "ExponentialDecay",
      {{"initial_learning_rate", 0.1}, {"decay_steps", 4}, {"decay_rate", 0.5}});
  EXPECT_DOUBLE_EQ(keras_at(e, 0), 0.1);
  EXPECT_DOUBLE_EQ(keras_at(e, 4), 0.05);
  EXPECT_DOUBLE_EQ(keras_at(e, 2), 0.1 * std::sqrt(0.5));
  auto stair = keras_learning_rate_schedule("ExponentialDecay", {{"initial_learning_rate", 0.1},
                                                                 {"decay_steps", 4},
                                                                 {"decay_rate", 0.5},
                                                                 {"staircase", true}});
  EXPECT_DOUBLE_EQ(keras_at(stair, 3), 0.1);
  EXPECT_DOUBLE_EQ(keras_at(stair, 9), 0.025);
  auto inv = keras_learning_rate_schedule(
      "InverseTimeDecay",
      {{"initial_learning_rate", 0.1}, {"decay_steps", 1.0}, {"decay_rate", 0.5}});
  EXPECT_DOUBLE_EQ(keras_at(inv, 2), 0.1 / 2.0);
}

TEST(LearningRateSchedules, PiecewiseConstantIncludesEachBoundaryInTheRangeBelow) {
  auto p = keras_learning_rate_schedule("PiecewiseConstantDecay",
                                        {{"boundaries", {3, 6}}, {"values", {1.0, 0.5, 0.1}}});
  const double want[] = {1, 1, 1, 1, 0.5, 0.5, 0.5, 0.1, 0.1};
  for (int k = 0; k < 9; ++k) EXPECT_DOUBLE_EQ(keras_at(p, k), want[k]) << k;
}

TEST(LearningRateSchedules, PolynomialWithAndWithoutCycles) {
  const json c = {{"initial_learning_rate", 0.1},
                  {"decay_steps", 10},
                  {"end_learning_rate", 0.01},
                  {"power", 0.5}};
  auto p = keras_learning_rate_schedule("PolynomialDecay", c);
  EXPECT_DOUBLE_EQ(keras_at(p, 0), 0.1);
  EXPECT_NEAR(keras_at(p, 5), 0.09 * std::sqrt(0.5) + 0.01, 1e-15);
  EXPECT_DOUBLE_EQ(keras_at(p, 25), 0.01);  // held at the end
  json cycled = c;
  cycled["cycle"] = true;
  auto q = keras_learning_rate_schedule("PolynomialDecay", cycled);
  // Step 15 lies in the second cycle: decay over 20 steps.
  EXPECT_NEAR(keras_at(q, 15), 0.09 * std::sqrt(1 - 15.0 / 20) + 0.01, 1e-15);
  EXPECT_DOUBLE_EQ(keras_at(q, 0), 0.1);
}

TEST(LearningRateSchedules, CosineWithWarmup) {
  auto c = keras_learning_rate_schedule(
      "CosineDecay", {{"initial_learning_rate", 0.1}, {"decay_steps", 10}, {"alpha", 0.2}});
  EXPECT_DOUBLE_EQ(keras_at(c, 0), 0.1);
  EXPECT_NEAR(keras_at(c, 5), 0.1 * (0.8 * 0.5 + 0.2), 1e-15);
  EXPECT_NEAR(keras_at(c, 50), 0.1 * 0.2, 1e-15);
  auto w = keras_learning_rate_schedule("CosineDecay", {{"initial_learning_rate", 0.0},
                                                        {"decay_steps", 10},
                                                        {"warmup_target", 0.4},
                                                        {"warmup_steps", 4}});
  EXPECT_DOUBLE_EQ(keras_at(w, 1), 0.1);  // a quarter of the way up
  EXPECT_DOUBLE_EQ(keras_at(w, 4), 0.4);  // the top, then the cosine
  EXPECT_NEAR(keras_at(w, 9), 0.4 * 0.5, 1e-15);
}

// SGDR by walking the periods: period i lasts first * t_mul^i steps and
// starts at m_mul^i of the rate.
double sgdr_by_walking(double lr, double first, double t_mul, double m_mul, double alpha, int k) {
  double start = 0, length = first, scale = 1;
  while (k >= start + length) start += length, length *= t_mul, scale *= m_mul;
  const double cosine = 0.5 * scale * (1 + std::cos(M_PI * (k - start) / length));
  return lr * ((1 - alpha) * cosine + alpha);
}

TEST(LearningRateSchedules, CosineDecayRestartsMatchesWalkingThePeriods) {
  for (double t_mul : {1.0, 2.0, 1.5}) {
    auto r = keras_learning_rate_schedule("CosineDecayRestarts", {{"initial_learning_rate", 0.3},
                                                                  {"first_decay_steps", 4},
                                                                  {"t_mul", t_mul},
                                                                  {"m_mul", 0.7},
                                                                  {"alpha", 0.1}});
    for (int k = 0; k < 60; ++k)
      EXPECT_NEAR(keras_at(r, k), sgdr_by_walking(0.3, 4, t_mul, 0.7, 0.1, k), 1e-9)
          << "t_mul " << t_mul << " step " << k;
  }
}

TEST(LearningRateSchedules, SerializedFormsAsKerasWritesThem) {
  const json keras3 = {{"module", "keras.optimizers.schedules"},
                       {"class_name", "ExponentialDecay"},
                       {"config",
                        {{"initial_learning_rate", 0.1},
                         {"decay_steps", 4},
                         {"decay_rate", 0.5},
                         {"staircase", false},
                         {"name", "ExponentialDecay"}}},
                       {"registered_name", nullptr}};
  EXPECT_DOUBLE_EQ(keras_at(keras_learning_rate_schedule(keras3, "f.keras"), 4), 0.05);
}

void expect_refused(const std::string& cls, const json& config, const std::string& needle) {
  try {
    keras_learning_rate_schedule(cls, config, "model.keras");
    ADD_FAILURE() << "accepted " << config.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LearningRateSchedules, BadConfigsAreRefusedByName) {
  const json ok = {{"initial_learning_rate", 0.1}, {"decay_steps", 4}, {"decay_rate", 0.5}};
  expect_refused("StepDecay", ok, "'StepDecay' is not one of Keras's (CosineDecay");
  json c = ok;
  c["decay_steps"] = 0;
  expect_refused("ExponentialDecay", c, "'decay_steps' must be > 0");
  c = ok;
  c["decay_rat"] = 0.5;
  expect_refused("ExponentialDecay", c, "unknown field 'decay_rat'");
  c = ok;
  c.erase("decay_rate");
  expect_refused("ExponentialDecay", c, "'decay_rate' is missing");
  c = ok;
  c["initial_learning_rate"] = "0.1";
  expect_refused("ExponentialDecay", c, "'initial_learning_rate' must be a number, not a string");
  expect_refused("PiecewiseConstantDecay", {{"boundaries", {3}}, {"values", {1.0}}},
                 "one value more than boundaries");
  expect_refused("CosineDecay", json::array(), "the config must be an object");
}

}  // namespace
}  // namespace autoshard
