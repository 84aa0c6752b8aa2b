#include "autoshard/optim/optimizers.h"

#include <algorithm>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard {

Value Optimizer::slot(Graph& g, const std::string& slot_name, Value param,
                      std::vector<SlotSpec>& slots) {
  Value v = g.optimizer_slot(slot_name, param.node().leaf().name, param.shape());
  slots.push_back({v.node().leaf().key(), param.shape()});
  return v;
}

double Optimizer::slot_initial_value(const std::string&) const {
  return 0.0;
}

Value Optimizer::sum_of_squares(Graph& g, const std::vector<Value>& params,
                                const std::vector<Value>& grads) {
  AS_CHECK(!grads.empty() && params.size() == grads.size(),
           "optimizer: parameters and gradients differ in number");
  // Each parameter's share of the work belongs to its block (Node::block).
  g.set_block(params[0].node().block);
  Value sumsq = g.add(Op::SumSquares, {grads[0]});
  for (size_t i = 1; i < grads.size(); ++i) {
    g.set_block(params[i].node().block);
    sumsq = sumsq + g.add(Op::SumSquares, {grads[i]});
  }
  g.set_block(-1);
  return sumsq;
}

std::vector<SlotSpec> Optimizer::append_update(Graph& g, const std::vector<Value>& params,
                                               const std::vector<Value>& grads) const {
  AS_CHECK(params.size() == grads.size(), "optimizer: parameters and gradients differ in number");
  const Value one = ops::constant(g, {}, 1.0);
  Value sumsq;
  if (clipnorm > 0 && !grads.empty()) sumsq = sum_of_squares(g, params, grads);
  return update_all(g, params, grads, one, sumsq);
}

std::vector<SlotSpec> Optimizer::append_update(Graph& g, const std::vector<Value>& params,
                                               const std::vector<Value>& grads, Value sumsq) const {
  AS_CHECK(params.size() == grads.size(), "optimizer: parameters and gradients differ in number");
  return update_all(g, params, grads, ops::constant(g, {}, 1.0), sumsq);
}

std::vector<SlotSpec> Optimizer::update_all(Graph& g, const std::vector<Value>& params,
                                            const std::vector<Value>& grads, Value one,
                                            Value sumsq) const {
  Value scale = one;
  if (clipnorm > 0 && sumsq.valid()) scale = g.add(Op::ClipScale, {sumsq}, ClipAttrs{clipnorm});
  std::vector<SlotSpec> slots;
  for (size_t i = 0; i < params.size(); ++i) {
    g.set_block(params[i].node().block);
    update_one(g, params[i], grads[i], scale, slots);
  }
  g.set_block(-1);
  return slots;
}

namespace {

class SgdOptimizer : public Optimizer {
 public:
  explicit SgdOptimizer(SGDOptions o) : o_(o) {
    learning_rate = o.learning_rate;
    clipnorm = o.clipnorm;
  }

 protected:
  void update_one(Graph& g, Value p, Value grad, Value scale,
                  std::vector<SlotSpec>& slots) const override {
    g.add(Op::SgdUpdate, {p, grad, slot(g, "momentum", p, slots), scale},
          SgdAttrs{o_.momentum, o_.weight_decay, o_.nesterov});
  }

 private:
  SGDOptions o_;
};

class AdamOptimizer : public Optimizer {
 public:
  AdamOptimizer(AdamOptions o, bool decoupled) : o_(o), decoupled_(decoupled) {
    learning_rate = o.learning_rate;
    clipnorm = o.clipnorm;
  }

 protected:
  void update_one(Graph& g, Value p, Value grad, Value scale,
                  std::vector<SlotSpec>& slots) const override {
    Value m = slot(g, "m", p, slots);
    Value v = slot(g, "v", p, slots);
    g.add(Op::AdamUpdate, {p, grad, m, v, scale},
          AdamAttrs{o_.beta_1, o_.beta_2, o_.epsilon, o_.weight_decay, decoupled_, o_.epsilon_hat});
  }

 private:
  AdamOptions o_;
  bool decoupled_;
};

}  // namespace

std::shared_ptr<Optimizer> SGD(SGDOptions o) {
  return std::make_shared<SgdOptimizer>(o);
}
std::shared_ptr<Optimizer> Adam(AdamOptions o) {
  return std::make_shared<AdamOptimizer>(o, false);
}
std::shared_ptr<Optimizer> AdamW(AdamWOptions o) {
  const AdamOptions same{o.learning_rate, o.beta_1,   o.beta_2,     o.epsilon,
                         o.weight_decay,  o.clipnorm, o.epsilon_hat};
  return std::make_shared<AdamOptimizer>(same, true);
}

std::function<double(int64_t)> cosine_decay(double peak, int64_t decay_steps, double alpha,
                                            int64_t warmup_steps) {
  AS_CHECK(peak > 0 && decay_steps >= 0 && warmup_steps >= 0 && alpha >= 0 && alpha <= 1,
           "cosine_decay: needs peak > 0, steps >= 0 and alpha in [0, 1]");
  return [=](int64_t step) {
    if (step <= warmup_steps)
      return peak * double(step) / double(std::max<int64_t>(1, warmup_steps));
    const double t =
        std::min(1.0, double(step - warmup_steps) / double(std::max<int64_t>(1, decay_steps)));
    return peak * (alpha + (1 - alpha) * 0.5 * (1 + std::cos(M_PI * t)));
  };
}

}  // namespace autoshard
