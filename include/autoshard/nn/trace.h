// Trace: the state of one tracing of a model into a Graph. Layers declare
// their weights through it (so every weight gets a stable dotted path, e.g.
// "h.3.attn.query.kernel"), read whether this is a training trace, and take
// their token positions and causal attention from it, so that the same
// model code also runs a generation step over a key-value cache.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/nn/initializer.h"

namespace autoshard {

class Trace {
 public:
  Trace(Graph& graph, bool training, uint64_t seed)
      : graph_(graph), training_(training), seed_(seed) {}

  Graph& graph() { return graph_; }
  bool training() const { return training_; }
  uint64_t seed() const { return seed_; }

  // Declares (or finds) the weight `name` under the current scope. A
  // non-trainable weight (BatchNormalization's moving statistics) is saved
  // and loaded like any weight but takes no gradient and no optimizer step.
  Value weight(const std::string& name, Shape shape, Initializer init, bool trainable = true);
  // The full dotted path of `name` under the current scope.
  std::string path(const std::string& name) const;
  const std::map<std::string, Initializer>& initializers() const { return initializers_; }
  // Paths of the non-trainable weights declared so far.
  const std::set<std::string>& non_trainable() const { return non_trainable_; }

  // Keras's trainable = False: every weight declared under one of these
  // scopes (a layer's name, "base" for a nested model, "base.conv" for one
  // of its layers) is non-trainable, and layers under them read frozen()
  // (a frozen BatchNormalization normalises with its moving statistics
  // and keeps them, Keras 3's rule).
  void freeze(std::set<std::string> scopes) { frozen_ = std::move(scopes); }
  // Whether the current scope is frozen.
  bool frozen() const;

  // A function of a tensor to a scalar term of the training loss (Keras's
  // regularizers).
  using Penalty = std::function<Value(Value)>;
  // Keras's kernel_regularizer and bias_regularizer (`weights`, by weight
  // path: each weight's penalty is added once, when it is first declared)
  // and activity_regularizer (`activities`, by layer path: added on the
  // layer's output at each call).
  void penalize(std::map<std::string, Penalty> weights, std::map<std::string, Penalty> activities);
  // The activity penalty of the layer whose scope is current, or null.
  const Penalty* activity_penalty() const;
  // Keras's layer.add_loss: a scalar term the training loss adds.
  void add_loss(Value term) { losses_.push_back(term); }
  const std::vector<Value>& losses() const { return losses_; }

  // Keras's masks (keras/src/layers/layer.py, Layer.__call__: a tensor's
  // _keras_mask): the mask of a value [batch, time] (f32, 1 for a step that
  // counts, 0 for padding), set on the outputs of the layer that makes it
  // (Embedding(mask_zero), Masking) and passed on by the layers that support
  // masking (LayerImpl::compute_mask). A graph value like any other, so a
  // sharded step splits it with the batch.
  void set_mask(Value v, Value mask);
  // The mask of `v`, or an invalid Value when it has none.
  Value mask(Value v) const;

  // Generation: the traced tokens sit at `positions` [T] (i32) of sequences
  // whose keys and values stay in buffers of `cache_length` positions
  // between runs.
  void use_cache(Value positions, int64_t cache_length);
  bool cached() const { return cache_length_ > 0; }
  // The positions a sequence may reach: the cache's, or the traced length T.
  int64_t sequence_span(int64_t T) const { return cached() ? cache_length_ : T; }
  // The positions of the traced tokens: 0 .. T-1, or the cache's.
  Value positions(int64_t T);
  // Causal self-attention: q [b, t, h, d] (or [b, t, kv, group, d]), k and v
  // [b, t, kv, d]. With a cache, k and v are first written into this
  // scope's buffers "key_cache" and "value_cache" [b, cache_length, kv, d]
  // and the queries attend over those. `window` > 0: each query sees only
  // the last `window` keys up to its own; `softcap` > 0: scores are
  // soft-capped (ops::attention).
  Value causal_attention(Value q, Value k, Value v, double scale, int64_t window = 0,
                         double softcap = 0);

  // RAII name scope: weights declared while it lives are prefixed by `name.`.
  class Scope {
   public:
    Scope(Trace& trace, const std::string& name) : trace_(trace) {
      if (!name.empty()) trace_.prefix_.push_back(name);
      pushed_ = !name.empty();
    }
    ~Scope() {
      if (pushed_) trace_.prefix_.pop_back();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Trace& trace_;
    bool pushed_;
  };

 private:
  Graph& graph_;
  bool training_;
  uint64_t seed_;
  std::vector<std::string> prefix_;
  std::map<std::string, Initializer> initializers_;
  std::set<std::string> non_trainable_;
  std::set<std::string> frozen_;
  std::map<std::string, Penalty> weight_penalties_, activity_penalties_;
  std::vector<Value> losses_;
  std::map<int, Value> masks_;  // by value id
  Value cache_positions_;
  int64_t cache_length_ = 0;
};

}  // namespace autoshard
