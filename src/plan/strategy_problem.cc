#include "autoshard/plan/strategy_problem.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include "autoshard/error.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/tensor/array_split.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

// A time in whole nanoseconds, saturated far below kForbiddenCost: an op
// priced at days is slow, not forbidden, and the problem's sums stay exact.
int64_t nanoseconds(double seconds) {
  AS_CHECK(!std::isnan(seconds), "internal: the cost model priced an op at NaN seconds");
  constexpr double kMost = double(kForbiddenCost / 1024);
  return static_cast<int64_t>(std::llround(std::clamp(seconds * 1e9, 0.0, kMost)));
}

// A leaf's candidate layouts: each mesh axis on at most one dimension of
// `nest`, the loops of a value that only exists; with `divisible`, only
// those whose every split divides (the first, replicated, always does).
std::vector<ShardDecision> leaf_choices(const LoopNest& nest, const DeviceMesh& mesh,
                                        bool divisible) {
  Shape shape;
  for (const Loop& l : nest.loops) shape.push_back(l.extent);
  std::vector<ShardDecision> out;
  for (const LoopSplit& s : enumerate_splits(nest, mesh)) {
    ShardDecision d = decide(nest, s);
    if (!divisible || uneven_dims(d.output, shape, mesh).empty()) out.push_back(std::move(d));
  }
  return out;
}

// Bytes per element of a value in the chosen precision: optimizer state and
// master weights stay fp32, a bf16 copy sits beside each weight.
double element_bytes(const Node& n, bool bf16) {
  if (n.dtype != DType::F32) return double(dtype_size(n.dtype));
  if (!bf16) return 4;
  if (n.is_parameter()) return n.leaf().is_slot() ? 4 : 6;
  return 2;
}

// conversion_seconds, remembered: the layers of a model repeat the same
// shapes and layouts many times. Layouts and shapes are numbered once, and a
// price is looked up by the numbers (GPT-3 on a three-axis mesh of 1,024
// devices looks up a quarter of a million pairs, once per pair of layout
// lists; a string key per pair of each edge, 1.1 million of them, took 0.4
// of its 1 s of posing).
class ConversionPrices {
 public:
  ConversionPrices(const Cluster& c, const DeviceMesh& mesh, bool bf16)
      : cluster_(c), mesh_(mesh), bf16_(bf16) {}

  // The number of a layout, and of a shape: equal ones get the same.
  int layout_id(const Sharding& s) {
    key_.clear();
    append(key_, s);
    auto [it, fresh] = layout_ids_.try_emplace(key_, int(layouts_.size()));
    if (fresh) layouts_.push_back(s);
    return it->second;
  }
  int shape_id(const Shape& shape) {
    auto [it, fresh] = shape_ids_.try_emplace(shape, int(shapes_.size()));
    if (fresh) shapes_.push_back(shape);
    return it->second;
  }

  // Converting layout `from` into `to` (numbers of layout_id) for a value
  // of shape `shape` (shape_id); `write_back`: converting an updated state
  // back into its own layout (the conversion and the assign).
  int64_t operator()(int from, int to, int shape, bool write_back = false) {
    if (from == to) return 0;
    AS_CHECK(from < kIds && to < kIds && shape < kIds, "internal: too many layouts to price");
    const uint64_t key =
        (uint64_t(shape) << 42 | uint64_t(from) << 21 | uint64_t(to)) << 1 | uint64_t(write_back);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    const int64_t price = priced(layouts_[from], layouts_[to], shapes_[shape], write_back);
    cache_.emplace(key, price);
    return price;
  }

 private:
  static constexpr int kIds = 1 << 21;

  int64_t priced(const Sharding& from, const Sharding& to, const Shape& shape,
                 bool write_back) const {
    // Nothing makes a value partial: a consumer that needs partial values
    // takes them only from a producer that leaves them.
    for (int a : to.partial)
      if (!from.is_partial(a) || from.partial_op != to.partial_op) return kForbiddenCost;
    return nanoseconds(write_back ? write_back_seconds(cluster_, mesh_, from, to, shape, bf16_)
                                  : conversion_seconds(cluster_, mesh_, from, to, shape, bf16_));
  }

  static void append(std::string& key, const Sharding& s) {
    for (int d : s.dims) {
      if (!is_tuple_axis(d)) {
        key += char('a' + d + 1);
        continue;
      }
      key += '(';
      for (int a : axis_members(d)) key += char('a' + a + 1);
      key += ')';
    }
    key += '/';
    for (int a : s.partial) key += char('a' + a);
    if (!s.partial.empty()) key += s.partial_op == ReduceOp::Sum ? '+' : '^';
  }

  const Cluster& cluster_;
  const DeviceMesh& mesh_;
  bool bf16_;
  std::unordered_map<std::string, int> layout_ids_;
  std::vector<Sharding> layouts_;
  std::map<Shape, int> shape_ids_;
  std::vector<Shape> shapes_;
  std::unordered_map<uint64_t, int64_t> cache_;
  std::string key_;
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

// Builds the problem in steps, each over every node of the step graph.
class Builder {
 public:
  Builder(const Graph& g, const DeviceMesh& mesh, const Cluster& c, const StrategyOptions& o)
      : g_(g), mesh_(mesh), c_(c), o_(o), n_(g.size()), price_(c, mesh, o.bf16) {}

  StrategyProblem build() {
    c_.check_mesh(mesh_);
    sp_.problem.name = "autoshard step on " + mesh_.to_string();
    live_ranges();
    strategies();
    rep_ = tied_representatives(g_, count_);
    usages();
    add_nodes();
    add_edges();
    sp_.problem.usage_limit = memory_limit();
    sp_.problem.validate("AutoShard");
    return std::move(sp_);
  }

 private:
  // In the traced order: leaves for the whole step; an op from itself to its
  // last user (through the users of views that alias it).
  void live_ranges() {
    lo_.resize(n_);
    hi_.resize(n_);
    std::vector<int64_t> last_use(n_, -1);
    for (int i = 0; i < n_; ++i)
      for (int in : g_.node(i).inputs) last_use[in] = std::max<int64_t>(last_use[in], i);
    for (int i = n_ - 1; i >= 0; --i) {
      const Node& node = g_.node(i);
      if (node.is_leaf() || !op_def(node.op).aliases_input) continue;
      for (int in : node.inputs) last_use[in] = std::max(last_use[in], last_use[i]);
    }
    for (int i = 0; i < n_; ++i) {
      const bool leaf = g_.node(i).is_leaf();
      lo_[i] = leaf ? 0 : i;
      hi_[i] = leaf ? n_ : std::max<int64_t>(i + 1, last_use[i] + 1);
    }
  }

  // Each node's strategies, enumerated once per distinct loop nest (the
  // layers of a model repeat the same few nests many times).
  void strategies() {
    choices_.resize(n_);
    count_.resize(n_);
    std::unordered_map<std::string, std::shared_ptr<const std::vector<ShardDecision>>> by_nest;
    auto shared = [&](const LoopNest& nest, const std::string& kind, auto enumerate) {
      std::string key = kind;
      for (const Loop& l : nest.loops)
        key += std::to_string(l.extent) + char('a' + int(l.kind)) + char('a' + int(l.reduce));
      for (const auto& dims : nest.inputs) {
        key += '|';
        for (int d : dims) key += std::to_string(d) + ',';
      }
      key += '>';
      for (int d : nest.output) key += std::to_string(d) + ',';
      auto [it, inserted] = by_nest.try_emplace(key);
      if (inserted) it->second = std::make_shared<const std::vector<ShardDecision>>(enumerate());
      return it->second;
    };
    // An op splits over every device at once (the tuple of all mesh axes)
    // only along the batch: the loops tied to the inputs' first dimension.
    // (Anywhere would make every op's strategies and edges grow by a half
    // for a split nobody asks of a weight's own dimensions.)
    const auto batch = dims_tied_to_inputs(g_, 0);
    for (int i = 0; i < n_; ++i) {
      const Node& node = g_.node(i);
      if (!node.is_leaf()) {
        const OpDef& def = op_def(node.op);
        const LoopNest nest = def.loops(g_, node);
        const std::vector<bool> batch_loops = tied_loops(g_, i, nest, batch);
        std::string kind(1, char('0' + int(def.linearity)));
        for (bool b : batch_loops) kind += b ? 'b' : '-';
        choices_[i] = shared(nest, kind, [&] {
          return enumerate_strategies(nest, mesh_, def.linearity, &batch_loops);
        });
      } else if (auto it = o_.fixed.find(i); it != o_.fixed.end()) {
        choices_[i] = std::make_shared<const std::vector<ShardDecision>>(
            std::vector<ShardDecision>{{{}, it->second}});
      } else {
        LoopNest nest;  // a value that only exists: each axis on at most one dimension
        for (int64_t d : node.shape) nest.output.push_back(nest.add({d}));
        choices_[i] = shared(nest, "v", [&] { return leaf_choices(nest, mesh_, o_.divisible); });
      }
      count_[i] = int(choices_[i]->size());
    }
  }

  // Bytes of each node's value per strategy (device 0's block); tied nodes
  // have their representative's (which may come later: backward nodes).
  void usages() {
    usage_.resize(n_);
    for (int i = 0; i < n_; ++i) {
      if (rep_[i] != i) continue;
      const Node& node = g_.node(i);
      const bool view = !node.is_leaf() && op_def(node.op).aliases_input;
      for (const ShardDecision& d : *choices_[i]) {
        const double elements = double(numel(d.output.local_shape(node.shape, mesh_, 0)));
        usage_[i].push_back(view ? 0 : int64_t(elements * element_bytes(node, o_.bf16)));
      }
    }
    for (int i = 0; i < n_; ++i)
      if (rep_[i] != i) usage_[i] = usage_[rep_[i]];
  }

  // The op's compute time under each of its strategies.
  std::vector<int64_t> node_costs(int i) {
    const Node& node = g_.node(i);
    std::vector<int64_t> costs;
    for (const ShardDecision& d : *choices_[i]) {
      if (node.is_leaf()) {
        costs.push_back(0);
        continue;
      }
      local_inputs_.clear();
      for (size_t k = 0; k < node.inputs.size(); ++k)
        local_inputs_.push_back(d.inputs[k].local_shape(g_.node(node.inputs[k]).shape, mesh_, 0));
      const Shape local = d.output.local_shape(node.shape, mesh_, 0);
      costs.push_back(
          nanoseconds(op_seconds(c_, node, local_inputs_, local, mesh_.size(), o_.bf16) +
                      halo_seconds(node, d)));
    }
    return costs;
  }

  // An op that reads a window of a split loop (a convolution's rows split
  // over an axis, LoopNest::halos) first receives the rows its window reads
  // beyond its band (the partitioner's HaloExchange): priced as an
  // all-gather of every member's halo over that axis.
  double halo_seconds(const Node& node, const ShardDecision& d) {
    const OpDef& def = op_def(node.op);
    if (!def.window) return 0;
    double seconds = 0;
    const LoopNest nest = def.loops(g_, node);
    for (const LoopNest::Halo& h : nest.halos) {
      const int axis = d.inputs[h.input].dims[h.dim];
      if (axis < 0) continue;
      const Shape& in = g_.node(node.inputs[h.input]).shape;
      const int parts = mesh_.axis_size(axis);
      const int64_t band = split_size(nest.loops[nest.inputs[h.input][h.dim]].extent, parts, 0);
      auto [lo, hi] = def.window(g_, node, h.input, h.dim, 0, band);
      const int64_t halo = std::max<int64_t>(0, hi - lo - split_size(in[h.dim], parts, 0));
      if (halo == 0) continue;
      Shape rows = in;
      rows[h.dim] = halo * parts;
      Sharding gathered = d.inputs[h.input];
      gathered.dims[h.dim] = -1;
      seconds += conversion_seconds(c_, mesh_, d.inputs[h.input], gathered, rows, o_.bf16);
    }
    return seconds;
  }

  // One problem node per representative: its members' costs added up, its
  // memory over its live range (untied) or over time as its members come
  // and go (tied: see add_pieces).
  void add_nodes() {
    ShardingProblem& p = sp_.problem;
    index_.assign(n_, -1);
    for (int i = 0; i < n_; ++i) {
      if (rep_[i] != i) continue;
      index_[i] = static_cast<int>(p.nodes.size());
      p.nodes.push_back({0, 0, node_costs(i), std::vector<int64_t>(choices_[i]->size(), 0)});
      sp_.members.push_back({});
      sp_.leaf.push_back(g_.node(i).is_leaf());
      sp_.choices.emplace_back(choices_[i]);
    }
    for (int i = 0; i < n_; ++i) sp_.members[index_[rep_[i]]].push_back(i);
    const size_t classes = p.nodes.size();
    for (size_t q = 0; q < classes; ++q) {
      ShardingProblem::Node& pn = p.nodes[q];
      const std::vector<int>& m = sp_.members[q];
      for (int64_t& cost : pn.cost) cost *= int64_t(m.size());
      if (m.size() == 1) {
        pn.lo = lo_[m[0]], pn.hi = hi_[m[0]], pn.usage = usage_[m[0]];
        continue;
      }
      add_pieces(int(q));
    }
  }

  // A tied class holds count(t) values at time t (a layer's saved
  // activation lives from its forward to its backward pass: the count climbs
  // through the forward pass and falls through the backward). That step
  // function is bounded from above by a few constant pieces, each within a
  // tenth of the class's largest count: the first on the class's own node,
  // the others on nodes tied to it one-to-one (same strategy, no cost),
  // which the solver merges back into one decision. Plain IOPDDL, exact to
  // that tenth.
  void add_pieces(int q) {
    std::map<int64_t, int> change;  // time -> change of the count
    for (int i : sp_.members[q]) ++change[lo_[i]], --change[hi_[i]];
    int most = 0;
    for (int count = 0; const auto& [t, d] : change) most = std::max(most, count += d);
    const int slack = std::max(1, most / 10);
    struct Piece {
      int64_t lo, hi;
      int low, high;  // least and largest count inside
    };
    std::vector<Piece> pieces;
    int count = 0;
    for (auto it = change.begin(); std::next(it) != change.end(); ++it) {
      count += it->second;
      const int64_t lo = it->first, hi = std::next(it)->first;
      Piece* last = pieces.empty() ? nullptr : &pieces.back();
      if (last && std::max(last->high, count) - std::min(last->low, count) <= slack) {
        last->hi = hi, last->low = std::min(last->low, count),
        last->high = std::max(last->high, count);
      } else if (count > 0 || last) {
        pieces.push_back({lo, hi, count, count});
      }
    }
    while (!pieces.empty() && pieces.back().high == 0) pieces.pop_back();
    ShardingProblem& p = sp_.problem;
    const std::vector<int64_t>& unit = usage_[sp_.members[q][0]];
    const size_t width = unit.size();
    for (size_t k = 0; k < pieces.size(); ++k) {
      std::vector<int64_t> usage(width);
      for (size_t s = 0; s < width; ++s) usage[s] = unit[s] * pieces[k].high;
      if (k == 0) {
        p.nodes[q].lo = pieces[k].lo, p.nodes[q].hi = pieces[k].hi;
        p.nodes[q].usage = std::move(usage);
        continue;
      }
      const int shadow = static_cast<int>(p.nodes.size());
      p.nodes.push_back(
          {pieces[k].lo, pieces[k].hi, std::vector<int64_t>(width, 0), std::move(usage)});
      sp_.members.push_back({});
      sp_.leaf.push_back(sp_.leaf[q]);
      sp_.choices.push_back(sp_.choices[q]);
      std::vector<int64_t> same(width * width, kForbiddenCost);
      for (size_t s = 0; s < width; ++s) same[s * width + s] = 0;
      p.edges.push_back({q, shadow, std::move(same)});
    }
  }

  // Producer -> consumer conversions, priced once per tied class of edge
  // and counted for each; a pair of problem nodes holds one edge. The
  // partitioner converts a value once for all its consumers in one part of
  // the step (Node::region and Node::block: a block's forward or backward
  // pass), so two or more such consumers read it through a staging node:
  // the layout it is converted into once (its own: no conversion), then on
  // into what each consumer needs.
  void add_edges() {
    using Part = std::tuple<int, int, int>;                    // value, consumer's region and block
    std::map<Part, std::vector<std::pair<int, int>>> readers;  // (consumer, input)
    std::map<std::tuple<int, int, int>, int64_t> direct;       // (producer, consumer, input) reps
    for (int i = 0; i < n_; ++i) {
      const Node& node = g_.node(i);
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const int in = node.inputs[k];
        if (op_def(node.op).mutates_input(k))  // written back: its own edge
          ++direct[{rep_[in], rep_[i], int(k)}];
        else
          readers[{in, node.region, node.block}].push_back({i, int(k)});
      }
    }
    std::map<Part, int> stage_of;                             // tied part -> staging node
    std::map<int, int64_t> stage_times;                       // staging node -> parts
    std::map<std::tuple<int, int, int>, int64_t> from_stage;  // (stage, consumer rep, input)
    for (const auto& [part, list] : readers) {
      const int value = std::get<0>(part);
      if (list.size() < 2) {
        for (const auto& [consumer, k] : list) ++direct[{rep_[value], rep_[consumer], k}];
        continue;
      }
      const Node& first = g_.node(rep_[list[0].first]);
      auto [it, inserted] = stage_of.try_emplace({rep_[value], first.region, first.block}, -1);
      if (inserted) it->second = add_stage(rep_[value], list);
      ++stage_times[it->second];
      for (const auto& [consumer, k] : list) ++from_stage[{it->second, rep_[consumer], k}];
      for (const auto& [consumer, k] : list) sp_.staged.push_back({consumer, k, it->second});
    }
    for (const auto& [key, count] : direct) {
      const auto [producer, consumer, k] = key;
      add_edge(producer, consumer, k, count);
    }
    for (const auto& [stage, count] : stage_times) {
      const int value = stage_value_.at(stage);
      add_conversions(index_[value], stage, distinct_outputs(index_[value]),
                      distinct_outputs(stage), g_.node(value).shape, count, false);
    }
    for (const auto& [key, count] : from_stage) {
      const auto [stage, consumer, k] = key;
      add_conversions(stage, index_[consumer], distinct_outputs(stage),
                      distinct_needs(index_[consumer], k), g_.node(stage_value_.at(stage)).shape,
                      count, false);
    }
  }

  // Per strategy of problem node q: its output layout; the layout it needs input k in.
  std::vector<const Sharding*> outputs(int q) const {
    std::vector<const Sharding*> out;
    for (const ShardDecision& d : sp_.choices[q]) out.push_back(&d.output);
    return out;
  }
  std::vector<const Sharding*> needs(int q, int k) const {
    std::vector<const Sharding*> out;
    for (const ShardDecision& d : sp_.choices[q]) out.push_back(&d.inputs[k]);
    return out;
  }

  // The distinct layouts of a list, their numbers (ConversionPrices), and
  // which one each entry is: strategies share few layouts, so each
  // distinct pair is priced once.
  struct Distinct {
    std::vector<const Sharding*> unique;
    std::vector<int> layout;  // per unique entry: its number
    std::vector<size_t> id;
    Distinct() = default;
    explicit Distinct(const std::vector<const Sharding*>& layouts) {
      for (const Sharding* s : layouts) {
        size_t i = 0;
        while (i < unique.size() && !(*unique[i] == *s)) ++i;
        if (i == unique.size()) unique.push_back(s);
        id.push_back(i);
      }
    }
  };
  Distinct numbered(const std::vector<const Sharding*>& layouts) {
    Distinct d(layouts);
    for (const Sharding* s : d.unique) d.layout.push_back(price_.layout_id(*s));
    return d;
  }

  // The distinct layouts of problem node q's outputs and of what it needs
  // as input k, made once per node (a value read by many ops was scanned
  // again for each of its edges).
  const Distinct& distinct_outputs(int q) {
    auto [it, fresh] = distinct_.try_emplace({q, -1});
    if (fresh) it->second = numbered(outputs(q));
    return it->second;
  }
  const Distinct& distinct_needs(int q, int k) {
    auto [it, fresh] = distinct_.try_emplace({q, k});
    if (fresh) it->second = numbered(needs(q, k));
    return it->second;
  }

  // Adds to the edge between problem nodes u and v, for each pair of their
  // strategies, `count` conversions from layouts `f` into `t` (written back:
  // and back again after the update).
  void add_conversions(int u, int v, const Distinct& f, const Distinct& t, const Shape& shape,
                       int64_t count, bool written_back) {
    const std::vector<int64_t>& table = prices(f, t, price_.shape_id(shape), written_back);
    const size_t width = t.unique.size();
    connect(u, v,
            [&](size_t a, size_t b) { return scaled(table[f.id[a] * width + t.id[b]], count); });
  }

  // The prices of converting each distinct layout of `f` into each of `t`
  // (row-major), made once per pair of layout lists: the edges of a
  // model's layers read the same lists of layouts over and over.
  const std::vector<int64_t>& prices(const Distinct& f, const Distinct& t, int shape,
                                     bool written_back) {
    auto [it, fresh] = tables_.try_emplace({shape, written_back, f.layout, t.layout});
    if (!fresh) return it->second;
    std::vector<int64_t>& table = it->second;
    table.reserve(f.layout.size() * t.layout.size());
    for (int from : f.layout)
      for (int to : t.layout) {
        int64_t price = price_(from, to, shape);
        if (written_back && price < kForbiddenCost) price += price_(to, from, shape, true);
        table.push_back(price);
      }
    return table;
  }

  static int64_t scaled(int64_t t, int64_t count) {
    return t >= kForbiddenCost ? kForbiddenCost : std::min(kForbiddenCost, t * count);
  }

  // A staging node for representative `value` read by `list` (consumer,
  // input): its choices are the value's own layouts and those its readers
  // need; no cost or memory of its own.
  int add_stage(int value, const std::vector<std::pair<int, int>>& list) {
    std::vector<const Sharding*> candidates = outputs(index_[value]);
    for (const auto& [consumer, k] : list) {
      const std::vector<const Sharding*> need = needs(index_[rep_[consumer]], k);
      candidates.insert(candidates.end(), need.begin(), need.end());
    }
    std::vector<ShardDecision> layouts;
    for (const Sharding* s : Distinct(candidates).unique) layouts.push_back({{}, *s});
    ShardingProblem& p = sp_.problem;
    const int node = static_cast<int>(p.nodes.size());
    p.nodes.push_back(
        {0, 0, std::vector<int64_t>(layouts.size(), 0), std::vector<int64_t>(layouts.size(), 0)});
    sp_.members.push_back({});
    sp_.leaf.push_back(false);
    sp_.choices.push_back(std::move(layouts));
    stage_value_[node] = value;
    return node;
  }

  void add_edge(int producer, int consumer, int k, int64_t count) {
    const int u = index_[producer], v = index_[consumer];
    add_conversions(u, v, distinct_outputs(u), distinct_needs(v, k), g_.node(producer).shape, count,
                    op_def(g_.node(consumer).op).mutates_input(k));
  }

  // Adds cell(a, b) (strategy a of problem node u, b of v) to their edge.
  template <typename Cell>
  void connect(int u, int v, Cell cell) {
    ShardingProblem& p = sp_.problem;
    const size_t from_size = p.nodes[u].cost.size(), to_size = p.nodes[v].cost.size();
    if (u == v) {  // a tied node feeding its own class: one strategy on both ends
      for (size_t a = 0; a < from_size; ++a)
        p.nodes[u].cost[a] = std::min(kForbiddenCost, p.nodes[u].cost[a] + cell(a, a));
      return;
    }
    const bool flip = u > v;  // stored lower node first
    const int first = flip ? v : u, second = flip ? u : v;
    const size_t width = p.nodes[second].cost.size();
    auto [it, inserted] = edge_of_.try_emplace({first, second}, p.edges.size());
    if (inserted)
      p.edges.push_back(
          {first, second, std::vector<int64_t>(p.nodes[first].cost.size() * width, 0)});
    std::vector<int64_t>& cost = p.edges[it->second].cost;
    for (size_t a = 0; a < from_size; ++a)
      for (size_t b = 0; b < to_size; ++b) {
        int64_t& entry = flip ? cost[b * width + a] : cost[a * width + b];
        entry = std::min(kForbiddenCost, entry + cell(a, b));
      }
  }

  int64_t memory_limit() const {
    double limit = o_.memory_per_device;
    if (limit <= 0) {
      limit = c_.memory_bytes - c_.process_bytes;
      // Devices on one machine (in-process, or MPI ranks on one host) share it.
      if (c_.shared_cores > 0) limit /= c_.devices_per_host(mesh_.size());
    }
    AS_CHECK(limit > 0, "the memory per device must be positive (cluster '", c_.name, "' has ",
             c_.memory_bytes, " bytes, the process ", c_.process_bytes, ")");
    return static_cast<int64_t>(std::min(limit, 9e18));
  }

  const Graph& g_;
  const DeviceMesh& mesh_;
  const Cluster& c_;
  const StrategyOptions& o_;
  const int n_;
  ConversionPrices price_;
  std::map<std::pair<int, int>, Distinct> distinct_;  // (node, input or -1 for outputs)
  // Unscaled conversion prices by (shape, written back, layouts from, layouts to).
  std::map<std::tuple<int, bool, std::vector<int>, std::vector<int>>, std::vector<int64_t>> tables_;
  StrategyProblem sp_;
  std::vector<int64_t> lo_, hi_;  // per graph node: live range
  // Per graph node (shared by nodes with the same loops; copied to sp_ for reps).
  std::vector<std::shared_ptr<const std::vector<ShardDecision>>> choices_;
  std::vector<int> count_, rep_, index_;     // strategies, representative, problem node
  std::vector<std::vector<int64_t>> usage_;  // per graph node, per strategy
  std::map<std::pair<int, int>, size_t> edge_of_;
  std::map<int, int> stage_value_;  // staging node -> the representative value it converts
  std::vector<Shape> local_inputs_;
};

}  // namespace

std::vector<int> uneven_dims(const Sharding& layout, const Shape& shape, const DeviceMesh& mesh) {
  std::vector<int> out;
  for (int d = 0; d < layout.rank() && d < int(shape.size()); ++d)
    if (layout.dims[d] >= 0 && shape[d] % mesh.axis_size(layout.dims[d]) != 0) out.push_back(d);
  return out;
}

StrategyProblem build_strategy_problem(const Graph& g, const DeviceMesh& mesh, const Cluster& c,
                                       const StrategyOptions& o) {
  return Builder(g, mesh, c, o).build();
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
  for (const Staged& s : staged) {
    ShardDecision& d = r.decisions.at(s.consumer);
    d.via.resize(d.inputs.size());
    d.via[s.input] = choices[s.stage].at(strategy[s.stage]).output;
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
