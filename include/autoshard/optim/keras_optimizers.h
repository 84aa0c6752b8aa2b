// Keras 3's optimizers, with Keras's names and defaults:
//
//   model.compile(optimizers::Adam(), loss);                       // epsilon 1e-7
//   model.compile(optimizers::SGD({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true}),
//   loss); model.compile(optimizers::RMSprop(), loss);
//
// (The optimizers at namespace level, SGD, Adam and AdamW, are PyTorch's,
// epsilon 1e-8 and AdamW's weight decay 0.01; these are Keras's.)
//
// The rules, with g the gradient (clipped by global_clipnorm first) and lr
// the learning rate of the step:
//   Adam     m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
//            p -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon):
//            epsilon before the bias correction, as Keras 2 and 3 define it
//            (epsilon_hat); with epsilon_hat false, after it, as TensorFlow.js
//            and PyTorch do: p -= lr * m_hat / (sqrt(v_hat) + epsilon) with
//            the bias-corrected moments. A weight_decay
//            decays p by lr * weight_decay first (decoupled, as Keras does
//            for every optimizer); AdamW is Adam with weight_decay 0.004.
//   SGD      v = momentum * v - lr * g; p += v, or with nesterov
//            p += momentum * v - lr * g. The velocity is kept as PyTorch
//            keeps it, in gradient units (v / -lr), which is the same under
//            a constant learning rate.
//   RMSprop  s = rho s + (1 - rho) g^2 (centered: a = rho a + (1 - rho) g,
//            s - a^2 below), step = lr g / sqrt(s + epsilon); with momentum,
//            u = momentum u + step, p -= u; else p -= step.
//   Adagrad  s += g^2 (s starts at initial_accumulator_value),
//            p -= lr g / sqrt(s + epsilon).
#pragma once

#include <memory>

#include "autoshard/optim/optimizers.h"

namespace autoshard::optimizers {

struct AdamOptions {
  double learning_rate = 1e-3, beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-7;
  double weight_decay = 0, global_clipnorm = 0;
  bool epsilon_hat = true;  // false: TensorFlow.js's placement (after the correction)
};
struct AdamWOptions {
  double learning_rate = 1e-3, beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-7;
  double weight_decay = 0.004, global_clipnorm = 0;
  bool epsilon_hat = true;
};
struct SGDOptions {
  double learning_rate = 0.01, momentum = 0;
  bool nesterov = false;
  double global_clipnorm = 0;
};
struct RMSpropOptions {
  double learning_rate = 1e-3, rho = 0.9, momentum = 0, epsilon = 1e-7;
  bool centered = false;
  double global_clipnorm = 0;
};
struct AdagradOptions {
  double learning_rate = 1e-3, initial_accumulator_value = 0.1, epsilon = 1e-7;
  double global_clipnorm = 0;
};

std::shared_ptr<Optimizer> Adam(AdamOptions options = {});
std::shared_ptr<Optimizer> AdamW(AdamWOptions options = {});
std::shared_ptr<Optimizer> SGD(SGDOptions options = {});
std::shared_ptr<Optimizer> RMSprop(RMSpropOptions options = {});
std::shared_ptr<Optimizer> Adagrad(AdagradOptions options = {});

// By Keras name with its defaults: "adam", "adamw", "sgd", "rmsprop", "adagrad".
std::shared_ptr<Optimizer> get(const std::string& name);

}  // namespace autoshard::optimizers
