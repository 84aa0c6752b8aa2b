#include "autoshard/plan/strategy_problem.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
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

// For every node, the node whose strategy it shares (itself when untied):
// the blocks (Node::block) whose node lists match the first such block node
// for node (op, shapes, strategies, and where each input comes from) are
// tied position by position, so the solver decides a transformer layer once.
std::vector<int> tied_representatives(const Graph& g, const std::vector<int>& choice_count) {
  const int n = g.size();
  std::vector<int> rep(n);
  for (int i = 0; i < n; ++i) rep[i] = i;
  std::map<int, std::vector<int>> blocks;
  for (int i = 0; i < n; ++i)
    if (g.node(i).block >= 0) blocks[g.node(i).block].push_back(i);
  std::vector<int> position(n, -1);
  for (auto& [b, ids] : blocks)
    for (size_t p = 0; p < ids.size(); ++p) position[ids[p]] = int(p);
  auto signature = [&](const std::vector<int>& ids) {
    std::string sig;
    for (int i : ids) {
      const Node& node = g.node(i);
      sig += std::to_string(int(node.op));
      sig += shape_str(node.shape);
      sig += std::to_string(choice_count[i]);
      sig += '(';
      for (int in : node.inputs) {  // inside the block: its position; else its shape
        if (g.node(in).block == node.block) {
          sig += std::to_string(position[in]);
        } else {
          sig += 'x';
          sig += shape_str(g.node(in).shape);
        }
        sig += ',';
      }
      sig += ')';
    }
    return sig;
  };
  std::map<std::string, int> first_with;
  for (auto& [b, ids] : blocks) {
    auto [it, inserted] = first_with.try_emplace(signature(ids), b);
    if (inserted) continue;
    const std::vector<int>& model = blocks[it->second];
    for (size_t p = 0; p < ids.size(); ++p) rep[ids[p]] = model[p];
  }
  return rep;
}

}  // namespace

StrategyProblem build_strategy_problem(const Graph& g, const DeviceMesh& mesh, const Cluster& c,
                                       const StrategyOptions& o) {
  c.check_mesh(mesh);
  StrategyProblem sp;
  ShardingProblem& p = sp.problem;
  p.name = "autoshard step on " + mesh.to_string();
  const int n = g.size();

  // Live ranges in the traced order: leaves for the whole step; an op from
  // itself to its last user (through the users of views that alias it).
  std::vector<int64_t> lo(n), hi(n);
  std::vector<int64_t> last_use(n, -1);
  for (int i = 0; i < n; ++i)
    for (int in : g.node(i).inputs) last_use[in] = std::max<int64_t>(last_use[in], i);
  for (int i = n - 1; i >= 0; --i) {
    const Node& node = g.node(i);
    if (node.is_leaf() || !op_def(node.op).aliases_input) continue;
    for (int in : node.inputs) last_use[in] = std::max(last_use[in], last_use[i]);
  }
  for (int i = 0; i < n; ++i) {
    const bool leaf = g.node(i).is_leaf();
    lo[i] = leaf ? 0 : i;
    hi[i] = leaf ? n : std::max<int64_t>(i + 1, last_use[i] + 1);
  }

  // Strategies, per node.
  std::vector<std::vector<ShardDecision>> choices(n);
  std::vector<int> count(n);
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    if (!node.is_leaf()) {
      const OpDef& def = op_def(node.op);
      choices[i] = enumerate_strategies(def.loops(g, node), mesh, def.linear);
    } else if (auto it = o.fixed.find(i); it != o.fixed.end()) {
      choices[i].push_back({{}, it->second});
    } else {
      choices[i] = leaf_choices(node, mesh);
    }
    count[i] = int(choices[i].size());
  }
  const std::vector<int> rep = tied_representatives(g, count);

  // Bytes of each node's value per strategy (device 0's block); tied nodes
  // have their representative's.
  std::vector<std::vector<int64_t>> usage(n);
  for (int i = 0; i < n; ++i) {
    if (rep[i] != i) continue;  // (a representative may come later: backward nodes)
    const Node& node = g.node(i);
    const bool view = !node.is_leaf() && op_def(node.op).aliases_input;
    for (const ShardDecision& d : choices[i])
      usage[i].push_back(view ? 0
                              : int64_t(double(numel(d.output.local_shape(node.shape, mesh, 0))) *
                                        element_bytes(node, o.bf16)));
  }
  for (int i = 0; i < n; ++i)
    if (rep[i] != i) usage[i] = usage[rep[i]];
  // Tied nodes are counted at the moment the replicated plan peaks (the end
  // of the forward pass, for a transformer): every layer's saved
  // activations, weights and state are live then. (AutoShard then checks
  // the real peak of its plan and tightens the limit if it is over.)
  std::vector<int64_t> profile(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    const int64_t u = usage[i][0];
    profile[lo[i]] += u;
    profile[hi[i]] -= u;
  }
  int64_t peak_time = 0, level = 0, highest = -1;
  for (int t = 0; t < n; ++t)
    if ((level += profile[t]) > highest) highest = level, peak_time = t;

  // Problem nodes: one per representative.
  std::vector<int> index(n, -1);
  std::vector<Shape> local_inputs;
  for (int i = 0; i < n; ++i) {
    if (rep[i] != i) continue;
    const Node& node = g.node(i);
    ShardingProblem::Node pn;
    for (const ShardDecision& d : choices[i]) {
      if (node.is_leaf()) {
        pn.cost.push_back(0);
        continue;
      }
      local_inputs.clear();
      for (size_t k = 0; k < node.inputs.size(); ++k)
        local_inputs.push_back(d.inputs[k].local_shape(g.node(node.inputs[k]).shape, mesh, 0));
      const Shape local = d.output.local_shape(node.shape, mesh, 0);
      pn.cost.push_back(nanoseconds(op_seconds(c, node, local_inputs, local, mesh.size(), o.bf16)));
    }
    pn.usage.assign(choices[i].size(), 0);
    index[i] = static_cast<int>(p.nodes.size());
    sp.members.push_back({});
    sp.leaf.push_back(node.is_leaf());
    sp.choices.push_back(std::move(choices[i]));
    p.nodes.push_back(std::move(pn));
  }
  std::vector<bool> tied(p.nodes.size(), false);
  for (int i = 0; i < n; ++i) {
    sp.members[index[rep[i]]].push_back(i);
    if (rep[i] != i) tied[index[rep[i]]] = true;
  }
  for (size_t q = 0; q < p.nodes.size(); ++q) {
    ShardingProblem::Node& pn = p.nodes[q];
    const std::vector<int>& m = sp.members[q];
    for (int64_t& cost : pn.cost) cost *= int64_t(m.size());  // tied members cost the same
    if (!tied[q]) {
      pn.lo = lo[m[0]], pn.hi = hi[m[0]], pn.usage = usage[m[0]];
      continue;
    }
    pn.lo = peak_time, pn.hi = peak_time + 1;
    const std::vector<int64_t>& u = usage[m[0]];
    for (int i : m)
      if (lo[i] <= peak_time && peak_time < hi[i])
        for (size_t s = 0; s < u.size(); ++s) pn.usage[s] += u[s];
  }

  // Edges: producer -> consumer, priced once per tied class of edge and
  // counted for each; a pair of problem nodes holds one edge.
  ConversionPrices price(c, mesh, o.bf16);
  std::map<std::tuple<int, int, int>, int64_t>
      times;  // (rep producer, rep consumer, input) -> count
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    for (size_t k = 0; k < node.inputs.size(); ++k) ++times[{rep[node.inputs[k]], rep[i], int(k)}];
  }
  std::map<std::pair<int, int>, size_t> edge_of;
  for (const auto& [key, times_used] : times) {
    const auto [producer, consumer, k] = key;
    const int u = index[producer], v = index[consumer];
    const auto& from = sp.choices[u];
    const auto& to = sp.choices[v];
    const Shape& shape = g.node(g.node(consumer).inputs[k]).shape;
    const bool written_back = op_def(g.node(consumer).op).mutates >> k & 1;
    auto cell = [&](size_t a, size_t b) {
      const Sharding& need = to[b].inputs[k];
      int64_t t = price(from[a].output, need, shape);
      if (written_back) t += price(need, from[a].output, shape);
      return t >= kForbiddenCost ? kForbiddenCost : std::min(kForbiddenCost, t * times_used);
    };
    if (u == v) {  // a tied node feeding its own class: the same strategy on both ends
      for (size_t a = 0; a < from.size(); ++a)
        p.nodes[u].cost[a] = std::min(kForbiddenCost, p.nodes[u].cost[a] + cell(a, a));
      continue;
    }
    const bool flip = u > v;  // one edge per pair, stored lower node first
    const int first = flip ? v : u, second = flip ? u : v;
    const size_t width = p.nodes[second].cost.size();
    auto [it, inserted] = edge_of.try_emplace({first, second}, p.edges.size());
    if (inserted)
      p.edges.push_back(
          {first, second, std::vector<int64_t>(p.nodes[first].cost.size() * width, 0)});
    std::vector<int64_t>& cost = p.edges[it->second].cost;
    for (size_t a = 0; a < from.size(); ++a)
      for (size_t b = 0; b < to.size(); ++b) {
        int64_t& entry = flip ? cost[b * width + a] : cost[a * width + b];
        entry = std::min(kForbiddenCost, entry + cell(a, b));
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
    for (int node : members[i]) {
      if (leaf[i])
        r.leaves[node] = d.output;
      else
        r.decisions[node] = d;
    }
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
