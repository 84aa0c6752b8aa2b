#include "autoshard/optim/keras_optimizers.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/optim/composed_ops.h"
#include "autoshard/optim/optimizers.h"

namespace autoshard::optimizers {

namespace {

void check_common(const char* name, double learning_rate, double clipnorm) {
  AS_CHECK(learning_rate > 0, name, ": learning_rate must be positive, got ", learning_rate);
  AS_CHECK(clipnorm >= 0, name, ": global_clipnorm must be at least 0, got ", clipnorm);
}

void check_unit(const char* name, const char* field, double v) {
  AS_CHECK(v >= 0 && v < 1, name, ": ", field, " must be in [0, 1), got ", v);
}

// Applies `step` (the update in gradient units) with the step's learning
// rate through SgdUpdate: p -= lr * step, or with momentum, into `buf`:
// u = momentum u + step (the first step u = step), p -= lr * u.
void apply_step(Graph& g, Value p, Value step, Value buf, Value scale, double momentum,
                bool nesterov) {
  g.add(Op::SgdUpdate, {p, step, buf, scale}, SgdAttrs{momentum, 0.0, nesterov});
}

// With no momentum SgdUpdate keeps no state: it reads a zero placeholder.
Value no_state(Graph& g, Value p) {
  return ops::constant(g, p.shape(), 0.0);
}

class KerasSgd : public Optimizer {
 public:
  explicit KerasSgd(SGDOptions o) : o_(o) {
    check_common("SGD", o.learning_rate, o.global_clipnorm);
    check_unit("SGD", "momentum", o.momentum);
    learning_rate = o.learning_rate;
    clipnorm = o.global_clipnorm;
  }

 protected:
  void update_one(Graph& g, Value p, Value grad, Value scale,
                  std::vector<SlotSpec>& slots) const override {
    Value buf = o_.momentum != 0 ? slot(g, "momentum", p, slots) : no_state(g, p);
    apply_step(g, p, grad, buf, scale, o_.momentum, o_.nesterov);
  }

 private:
  SGDOptions o_;
};

class KerasRmsprop : public Optimizer {
 public:
  explicit KerasRmsprop(RMSpropOptions o) : o_(o) {
    check_common("RMSprop", o.learning_rate, o.global_clipnorm);
    check_unit("RMSprop", "rho", o.rho);
    check_unit("RMSprop", "momentum", o.momentum);
    AS_CHECK(o.epsilon > 0, "RMSprop: epsilon must be positive, got ", o.epsilon);
    learning_rate = o.learning_rate;
    clipnorm = o.global_clipnorm;
  }

 protected:
  void update_one(Graph& g, Value p, Value grad, Value scale,
                  std::vector<SlotSpec>& slots) const override {
    Value gc = grad * scale;
    Value s = slot(g, "velocity", p, slots);
    Value s_new = ops::scale(s, o_.rho) + ops::scale(gc * gc, 1 - o_.rho);
    Value denominator = s_new;
    if (o_.centered) {
      Value a = slot(g, "average_gradient", p, slots);
      Value a_new = ops::scale(a, o_.rho) + ops::scale(gc, 1 - o_.rho);
      denominator = s_new - a_new * a_new;
      composed::assign(a, a_new);
    }
    Value step = gc * ops::unary(denominator + ops::constant(g, {}, o_.epsilon), UnaryFn::Rsqrt);
    composed::assign(s, s_new);
    Value buf = o_.momentum != 0 ? slot(g, "momentum", p, slots) : no_state(g, p);
    apply_step(g, p, step, buf, ops::constant(g, {}, 1.0), o_.momentum, false);
  }

 private:
  RMSpropOptions o_;
};

class KerasAdagrad : public Optimizer {
 public:
  explicit KerasAdagrad(AdagradOptions o) : o_(o) {
    check_common("Adagrad", o.learning_rate, o.global_clipnorm);
    AS_CHECK(o.initial_accumulator_value >= 0 && o.epsilon > 0,
             "Adagrad: initial_accumulator_value must be at least 0 and epsilon positive");
    learning_rate = o.learning_rate;
    clipnorm = o.global_clipnorm;
  }
  double slot_initial_value(const std::string&) const override {
    return o_.initial_accumulator_value;
  }

 protected:
  void update_one(Graph& g, Value p, Value grad, Value scale,
                  std::vector<SlotSpec>& slots) const override {
    Value gc = grad * scale;
    Value s = slot(g, "accumulator", p, slots);
    Value s_new = s + gc * gc;
    Value step = gc * ops::unary(s_new + ops::constant(g, {}, o_.epsilon), UnaryFn::Rsqrt);
    composed::assign(s, s_new);
    apply_step(g, p, step, no_state(g, p), ops::constant(g, {}, 1.0), 0.0, false);
  }

 private:
  AdagradOptions o_;
};

}  // namespace

// Keras's Adam decays weights decoupled, as torch's AdamW: the same fused
// update, with Keras's defaults and checks.
std::shared_ptr<Optimizer> Adam(AdamOptions o) {
  check_common("Adam", o.learning_rate, o.global_clipnorm);
  check_unit("Adam", "beta_1", o.beta_1);
  check_unit("Adam", "beta_2", o.beta_2);
  AS_CHECK(o.epsilon > 0 && o.weight_decay >= 0,
           "Adam: epsilon must be positive and weight_decay at least 0");
  return autoshard::AdamW({o.learning_rate, o.beta_1, o.beta_2, o.epsilon, o.weight_decay,
                           o.global_clipnorm, o.epsilon_hat});
}
std::shared_ptr<Optimizer> AdamW(AdamWOptions o) {
  return Adam({o.learning_rate, o.beta_1, o.beta_2, o.epsilon, o.weight_decay, o.global_clipnorm,
               o.epsilon_hat});
}
std::shared_ptr<Optimizer> SGD(SGDOptions o) {
  return std::make_shared<KerasSgd>(o);
}
std::shared_ptr<Optimizer> RMSprop(RMSpropOptions o) {
  return std::make_shared<KerasRmsprop>(o);
}
std::shared_ptr<Optimizer> Adagrad(AdagradOptions o) {
  return std::make_shared<KerasAdagrad>(o);
}

std::shared_ptr<Optimizer> get(const std::string& name) {
  if (name == "adam") return Adam();
  if (name == "adamw") return AdamW();
  if (name == "sgd") return SGD();
  if (name == "rmsprop") return RMSprop();
  if (name == "adagrad") return Adagrad();
  fail("unknown optimizer '", name, "' (known: adam, adamw, sgd, rmsprop, adagrad)");
}

}  // namespace autoshard::optimizers
