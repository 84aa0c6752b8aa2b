// AutoShard, first version: union-find over the dimensions that ops tie
// together, then a greedy choice of which groups to split over the model axis.
//
// The ties come from each op's LoopNest (src/ir/loop_nest.h). A group is a
// candidate when it holds weights, some op indexes two of its tensors with
// it (so splitting it splits that op's work), and no op needs it whole (the
// last axis of softmax and layer norm: for a transformer that rules out the
// residual stream). Candidates are taken by weight bytes, ties broken by the
// bytes of partial sums their contractions leave; a group is skipped when one
// of its weights already has a dimension on the model axis.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "autoshard/plan/distribution.h"
#include "autoshard/error.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

class DimGroups {
 public:
  explicit DimGroups(const Graph& g) {
    for (int i = 0; i < g.size(); ++i) {
      base_.push_back(static_cast<int>(parent_.size()));
      for (size_t d = 0; d < g.node(i).shape.size(); ++d)
        parent_.push_back(static_cast<int>(parent_.size()));
    }
  }
  int id(int node, int dim) const { return base_[node] + dim; }
  int find(int x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void unite(int node_a, int dim_a, int node_b, int dim_b) {
    parent_[find(id(node_a, dim_a))] = find(id(node_b, dim_b));
  }
 private:
  std::vector<int> base_, parent_;
};

struct GroupInfo {
  int64_t weight_bytes = 0;
  int64_t partial_bytes = 0;
  int64_t extent = 0;
  bool shared = false;  // some loop of the group indexes two tensors of one (non-update) op
  bool must_stay_whole = false;
  std::vector<std::pair<int, int>> weight_dims;  // (parameter node, dim)
};

// Ties the dimensions each loop of the op indexes (the op's own LoopNest).
void tie_op(const Graph& g, int i, DimGroups& groups, std::map<int, GroupInfo>& info_of_dim) {
  const Node& n = g.node(i);
  const LoopNest nest = op_def(n.op).loops(g, n);
  std::vector<std::vector<std::pair<int, int>>> dims_of(nest.loops.size());  // (node, dim)
  for (size_t k = 0; k < nest.inputs.size(); ++k)
    for (size_t j = 0; j < nest.inputs[k].size(); ++j)
      if (nest.inputs[k][j] >= 0) dims_of[nest.inputs[k][j]].emplace_back(n.inputs[k], int(j));
  for (size_t o = 0; o < nest.output.size(); ++o)
    if (nest.output[o] >= 0) dims_of[nest.output[o]].emplace_back(i, int(o));
  for (size_t l = 0; l < nest.loops.size(); ++l) {
    if (dims_of[l].empty()) continue;
    const auto [first_node, first_dim] = dims_of[l][0];
    for (const auto& [node, dim] : dims_of[l]) groups.unite(first_node, first_dim, node, dim);
    GroupInfo& f = info_of_dim[groups.id(first_node, first_dim)];
    // An update op only follows its parameter's layout; it splits no compute
    // that decides anything.
    f.shared |= dims_of[l].size() >= 2 && !op_def(n.op).side_effect;
    f.must_stay_whole |= nest.loops[l].kind == Loop::Kind::Whole;
    if (nest.loops[l].kind == Loop::Kind::Reduction) f.partial_bytes += numel(n.shape) * 4;
  }
}

std::string mb(int64_t bytes) {
  std::ostringstream s;
  s.precision(3);
  s << bytes / 1048576.0 << " MiB";
  return s.str();
}

}  // namespace

AutoShard::AutoShard(DeviceMesh mesh, std::string batch_dim_name, std::string model_dim_name)
    : Distribution(std::move(mesh), std::move(batch_dim_name)),
      model_dim_name_(std::move(model_dim_name)) {}

void AutoShard::prepare(const Graph& g) {
  if (prepared_) return;
  prepared_ = true;
  DimGroups groups(g);
  std::map<int, GroupInfo> per_dim;  // facts noted on single dims, merged below
  for (int i = 0; i < g.size(); ++i) tie_op(g, i, groups, per_dim);
  std::map<int, GroupInfo> info;
  for (auto& [dim_id, f] : per_dim) {
    GroupInfo& gi = info[groups.find(dim_id)];
    gi.partial_bytes += f.partial_bytes;
    gi.shared |= f.shared;
    gi.must_stay_whole |= f.must_stay_whole;
  }
  for (int id : g.parameters()) {
    const Node& n = g.node(id);
    if (!n.is_weight()) continue;
    plan_[n.leaf().name] = Sharding::replicated(n.shape.size());
    for (size_t d = 0; d < n.shape.size(); ++d) {
      GroupInfo& gi = info[groups.find(groups.id(id, static_cast<int>(d)))];
      gi.weight_bytes += numel(n.shape) * 4;
      gi.extent = n.shape[d];
      gi.weight_dims.emplace_back(id, static_cast<int>(d));
    }
  }
  const int axis = mesh().axis_index(model_dim_name_);
  if (axis < 0 || mesh().axis_size(axis) == 1) {
    reasons_.push_back("no '" + model_dim_name_ + "' axis of size > 1 in mesh " +
                       mesh().to_string() + ": every weight replicated");
    return;
  }
  std::vector<int> order;
  for (auto& [root, gi] : info)
    if (gi.weight_bytes > 0) order.push_back(root);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (info[a].weight_bytes != info[b].weight_bytes)
      return info[a].weight_bytes > info[b].weight_bytes;
    return info[a].partial_bytes < info[b].partial_bytes;
  });
  for (int root : order) {
    const GroupInfo& gi = info[root];
    std::string dims;
    for (size_t k = 0; k < gi.weight_dims.size() && k < 3; ++k)
      dims += (k ? ", " : "") + g.node(gi.weight_dims[k].first).leaf().name + "[" +
              std::to_string(gi.weight_dims[k].second) + "]";
    if (gi.weight_dims.size() > 3) dims += ", ...";
    std::string why;
    if (gi.must_stay_whole)
      why = "kept whole: softmax or layer norm needs it whole";
    else if (!gi.shared)
      why = "kept whole: no op shares it between two tensors";
    else if (gi.extent < 2)
      why = "kept whole: extent 1";
    for (const auto& [id, d] : gi.weight_dims)
      if (why.empty() && plan_[g.node(id).leaf().name].dim_of(axis) >= 0)
        why = "kept whole: " + g.node(id).leaf().name + " is already split on another dimension";
    if (why.empty()) {
      for (const auto& [id, d] : gi.weight_dims) plan_[g.node(id).leaf().name].dims[d] = axis;
      why = "split over " + model_dim_name_;
    }
    reasons_.push_back(why + " (" + mb(gi.weight_bytes) + " of weights: " + dims + ")");
  }
}

Sharding AutoShard::weight_layout(const std::string& path, const Shape& shape) const {
  auto it = plan_.find(path);
  return it == plan_.end() ? Sharding::replicated(shape.size()) : it->second;
}

}  // namespace autoshard
