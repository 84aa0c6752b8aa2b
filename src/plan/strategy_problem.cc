#include "autoshard/plan/strategy_problem.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "autoshard/error.h"
#include "autoshard/plan/cost_model.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

int64_t nanoseconds(double seconds) {
  return static_cast<int64_t>(std::llround(seconds * 1e9));
}

// A leaf's candidate layouts: each mesh axis on at most one dimension (the
// loops of a value that only exists).
std::vector<ShardDecision> leaf_choices(const Node& n, const DeviceMesh& mesh) {
  LoopNest nest;
  for (int64_t d : n.shape) nest.output.push_back(nest.add({d}));
  std::vector<ShardDecision> out;
  for (const LoopSplit& s : enumerate_splits(nest, mesh)) out.push_back(decide(nest, s));
  return out;
}

// Bytes per element of a value in the chosen precision: optimizer state and
// master weights stay fp32, a bf16 copy sits beside each weight.
double element_bytes(const Node& n, bool bf16) {
  if (n.dtype != DType::F32) return double(dtype_size(n.dtype));
  if (!bf16) return 4;
  if (n.op == Op::Parameter) return n.leaf().is_slot() ? 4 : 6;
  return 2;
}

// conversion_seconds, remembered: the layers of a model repeat the same
// shapes and layouts many times.
class ConversionPrices {
 public:
  ConversionPrices(const Cluster& c, const DeviceMesh& mesh, bool bf16)
      : cluster_(c), mesh_(mesh), bf16_(bf16) {}

  int64_t operator()(const Sharding& from, const Sharding& to, const Shape& shape) {
    if (from == to) return 0;
    // Nothing makes a value partial: a consumer that needs partial values
    // takes them only from a producer that leaves them.
    for (int a : to.partial)
      if (!from.is_partial(a) || from.partial_op != to.partial_op) return kForbiddenCost;
    std::string key;
    for (int64_t d : shape) key += std::to_string(d) + ",";
    append(key, from);
    append(key, to);
    auto [it, inserted] = cache_.try_emplace(key, 0);
    if (inserted)
      it->second = nanoseconds(conversion_seconds(cluster_, mesh_, from, to, shape, bf16_));
    return it->second;
  }

 private:
  static void append(std::string& key, const Sharding& s) {
    key += '|';
    for (int d : s.dims) key += char('a' + d + 1);
    key += '/';
    for (int a : s.partial) key += char('a' + a);
    if (!s.partial.empty()) key += s.partial_op == ReduceOp::Sum ? '+' : '^';
  }

  const Cluster& cluster_;
  const DeviceMesh& mesh_;
  bool bf16_;
  std::unordered_map<std::string, int64_t> cache_;
};

}  // namespace

StrategyProblem build_strategy_problem(const Graph& g, const DeviceMesh& mesh, const Cluster& c,
                                       const StrategyOptions& o) {
  c.check_mesh(mesh);
  StrategyProblem sp;
  ShardingProblem& p = sp.problem;
  p.name = "autoshard step on " + mesh.to_string();
  const int n = g.size();
  std::vector<int> index(n, -1);  // graph node -> problem node

  // Live ranges in the traced order: leaves for the whole step; an op from
  // itself to its last user (through the users of views that alias it).
  std::vector<int64_t> last_use(n, -1);
  for (int i = 0; i < n; ++i)
    for (int in : g.node(i).inputs) last_use[in] = std::max<int64_t>(last_use[in], i);
  for (int i = n - 1; i >= 0; --i) {
    const Node& node = g.node(i);
    if (node.is_leaf() || !op_def(node.op).aliases_input) continue;
    for (int in : node.inputs) last_use[in] = std::max(last_use[in], last_use[i]);
  }

  std::vector<Shape> local_inputs;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    ShardingProblem::Node pn;
    std::vector<ShardDecision> choices;
    if (node.is_leaf()) {
      if (auto it = o.fixed.find(i); it != o.fixed.end())
        choices.push_back({{}, it->second});
      else
        choices = leaf_choices(node, mesh);
      pn.lo = 0;
      pn.hi = n;
    } else {
      const OpDef& def = op_def(node.op);
      choices = enumerate_strategies(def.loops(g, node), mesh, def.linear);
      pn.lo = i;
      pn.hi = std::max<int64_t>(i + 1, last_use[i] + 1);
    }
    const bool view = !node.is_leaf() && op_def(node.op).aliases_input;
    for (const ShardDecision& d : choices) {
      const Shape local = d.output.local_shape(node.shape, mesh, 0);
      pn.usage.push_back(view ? 0 : int64_t(double(numel(local)) * element_bytes(node, o.bf16)));
      if (node.is_leaf()) {
        pn.cost.push_back(0);
        continue;
      }
      local_inputs.clear();
      for (size_t k = 0; k < node.inputs.size(); ++k)
        local_inputs.push_back(d.inputs[k].local_shape(g.node(node.inputs[k]).shape, mesh, 0));
      pn.cost.push_back(nanoseconds(op_seconds(c, node, local_inputs, local, mesh.size(), o.bf16)));
    }
    index[i] = static_cast<int>(p.nodes.size());
    sp.graph_node.push_back(i);
    sp.leaf.push_back(node.is_leaf());
    sp.choices.push_back(std::move(choices));
    p.nodes.push_back(std::move(pn));
  }

  // Edges: producer -> consumer, one per pair (inputs used twice add up).
  ConversionPrices price(c, mesh, o.bf16);
  std::map<std::pair<int, int>, size_t> edge_of;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    if (node.is_leaf()) continue;
    const unsigned mutates = op_def(node.op).mutates;
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int in = node.inputs[k];
      const int u = index[in], v = index[i];
      const auto& from = sp.choices[u];
      const auto& to = sp.choices[v];
      auto [it, inserted] = edge_of.try_emplace({u, v}, p.edges.size());
      if (inserted) p.edges.push_back({u, v, std::vector<int64_t>(from.size() * to.size(), 0)});
      std::vector<int64_t>& cost = p.edges[it->second].cost;
      const Shape& shape = g.node(in).shape;
      for (size_t a = 0; a < from.size(); ++a)
        for (size_t b = 0; b < to.size(); ++b) {
          const Sharding& need = to[b].inputs[k];
          int64_t t = price(from[a].output, need, shape);
          if (mutates >> k & 1) t += price(need, from[a].output, shape);  // written back
          int64_t& entry = cost[a * to.size() + b];
          entry = std::min(kForbiddenCost, entry + t);
        }
    }
  }

  double limit = o.memory_per_device;
  if (limit <= 0) {
    limit = c.memory_bytes - c.process_bytes;
    if (c.shared_cores > 0) limit /= mesh.size();  // in-process devices share the machine
  }
  AS_CHECK(limit > 0, "the memory per device must be positive (cluster '", c.name, "' has ",
           c.memory_bytes, " bytes, the process ", c.process_bytes, ")");
  p.usage_limit = static_cast<int64_t>(std::min(limit, 9e18));
  p.validate("AutoShard");
  return sp;
}

PartitionRequest StrategyProblem::request(const std::vector<int>& strategy) const {
  AS_CHECK(strategy.size() == choices.size(), "StrategyProblem: ", strategy.size(),
           " strategies for ", choices.size(), " nodes");
  PartitionRequest r;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ShardDecision& d = choices[i].at(strategy[i]);
    if (leaf[i])
      r.leaves[graph_node[i]] = d.output;
    else
      r.decisions[graph_node[i]] = d;
  }
  return r;
}

std::string StrategyProblem::describe(const DeviceMesh& mesh, int i, int s) const {
  const ShardDecision& d = choices.at(i).at(s);
  std::string out = d.output.to_string(mesh);
  for (size_t k = 0; k < d.inputs.size(); ++k)
    out += (k ? ", " : " from ") + d.inputs[k].to_string(mesh);
  return out;
}

}  // namespace autoshard
