// Optimizers append their update to the training-step Graph, so forward,
// backward and update are one Graph. The rules are PyTorch's exactly
// (torch.optim.SGD, Adam, AdamW; clip_grad_norm_ for clipnorm).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"

namespace autoshard {

// One optimizer state tensor (e.g. Adam's first moment) of one parameter.
struct SlotSpec {
  std::string path;  // "optimizer.<slot>.<parameter path>"
  Shape shape;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Appends the update of every parameter and returns the slot variables it
  // created (all start at zero).
  std::vector<SlotSpec> append_update(Graph& g, const std::vector<Value>& params,
                                      const std::vector<Value>& grads) const;
  // The same, clipping by `sumsq`, the squared global norm computed
  // elsewhere (a pipeline's stages on other ranks hold other gradients).
  std::vector<SlotSpec> append_update(Graph& g, const std::vector<Value>& params,
                                      const std::vector<Value>& grads, Value sumsq) const;
  // The sum of the gradients' squares, as the clip norm adds it up.
  static Value sum_of_squares(Graph& g, const std::vector<Value>& params,
                              const std::vector<Value>& grads);
  double learning_rate = 1e-3;
  double clipnorm = 0;  // > 0: clip the global gradient norm to this
  // When set, the learning rate of each 1-based step (Keras's
  // LearningRateSchedule); learning_rate is then unused.
  std::function<double(int64_t step)> schedule;
  double learning_rate_at(int64_t step) const { return schedule ? schedule(step) : learning_rate; }
  // The value every element of a slot starts at (Adagrad's accumulator: its
  // initial_accumulator_value); 0 for most.
  virtual double slot_initial_value(const std::string& slot) const;

 protected:
  virtual void update_one(Graph& g, Value param, Value grad, Value clip_scale,
                          std::vector<SlotSpec>& slots) const = 0;
  static Value slot(Graph& g, const std::string& slot_name, Value param,
                    std::vector<SlotSpec>& slots);

 private:
  // Every parameter's update, scaled by the clip of `sumsq` (or by `one`).
  std::vector<SlotSpec> update_all(Graph& g, const std::vector<Value>& params,
                                   const std::vector<Value>& grads, Value one, Value sumsq) const;
};

struct SGDOptions {
  double learning_rate = 0.01, momentum = 0, weight_decay = 0, clipnorm = 0;
  bool nesterov = false;
};
// torch.optim.Adam's defaults: no weight decay (an L2 term when set).
// epsilon_hat: epsilon added before the bias correction, as Keras does
// (AdamAttrs::epsilon_hat); PyTorch adds it after.
struct AdamOptions {
  double learning_rate = 1e-3, beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-8;
  double weight_decay = 0, clipnorm = 0;
  bool epsilon_hat = false;
};
// torch.optim.AdamW's defaults: decoupled weight decay 0.01. A separate type
// so that `AdamW({.learning_rate = 3e-4})` keeps that decay.
struct AdamWOptions {
  double learning_rate = 1e-3, beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-8;
  double weight_decay = 0.01, clipnorm = 0;
  bool epsilon_hat = false;
};

std::shared_ptr<Optimizer> SGD(SGDOptions options = {});
// Adam with L2 weight decay added to the gradient (torch.optim.Adam).
std::shared_ptr<Optimizer> Adam(AdamOptions options = {});
// AdamW: decoupled weight decay (torch.optim.AdamW).
std::shared_ptr<Optimizer> AdamW(AdamWOptions options = {});

// keras.optimizers.schedules.CosineDecay with warmup: a linear rise from 0
// to `peak` over `warmup_steps`, then a cosine from `peak` down to
// `alpha * peak` at `decay_steps` after the warmup (flat after that).
std::function<double(int64_t)> cosine_decay(double peak, int64_t decay_steps, double alpha = 0.0,
                                            int64_t warmup_steps = 0);

}  // namespace autoshard
