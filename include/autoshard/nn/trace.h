// Trace: the state of one tracing of a model into a Graph. Layers declare
// their weights through it (so every weight gets a stable dotted path, e.g.
// "h.3.attn.query.kernel") and read whether this is a training trace.
#pragma once

#include <map>
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

  // Declares (or finds) the weight `name` under the current scope.
  Value weight(const std::string& name, Shape shape, Initializer init);
  // The full dotted path of `name` under the current scope.
  std::string path(const std::string& name) const;
  const std::map<std::string, Initializer>& initializers() const { return initializers_; }

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
};

}  // namespace autoshard
