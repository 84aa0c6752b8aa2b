// AutoShard, first version: union-find over the dimensions that ops tie
// together, then a greedy choice of which groups to split over the model axis.
//
// A group is a candidate when it holds weights, takes part in a contraction
// (so splitting it also splits compute), and no op needs it whole (the last
// axis of softmax and layer norm: for a transformer that rules out the
// residual stream). Candidates are taken by weight bytes, ties broken by the
// bytes of partial sums their contractions leave; a group is skipped when one
// of its weights already has a dimension on the model axis.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "autoshard/shard/distribution.h"
#include "autoshard/error.h"
#include "ir/einsum_equation.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

class DimGroups {
 public:
  explicit DimGroups(const Graph& g) : g_(g) {
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
  // Ties equal-extent dims of `in` and `out` aligned from the right.
  void tie_aligned(int in, int out) {
    const Shape& si = g_.node(in).shape;
    const Shape& so = g_.node(out).shape;
    for (size_t k = 1; k <= std::min(si.size(), so.size()); ++k)
      if (si[si.size() - k] == so[so.size() - k])
        unite(in, static_cast<int>(si.size() - k), out, static_cast<int>(so.size() - k));
  }

 private:
  const Graph& g_;
  std::vector<int> base_, parent_;
};

struct GroupInfo {
  int64_t weight_bytes = 0;
  int64_t partial_bytes = 0;
  int64_t extent = 0;
  bool contracted_or_free = false;  // appears in some einsum
  bool must_stay_whole = false;
  std::vector<std::pair<int, int>> weight_dims;  // (parameter node, dim)
};

bool is_weight(const Node& n) {
  return n.op == Op::Parameter && n.attrs.text.rfind("optimizer.", 0) != 0;
}

void tie_op(const Graph& g, int i, DimGroups& groups, std::map<int, GroupInfo>& info_of_dim) {
  const Node& n = g.node(i);
  auto whole = [&](int node, int dim) { info_of_dim[groups.id(node, dim)].must_stay_whole = true; };
  switch (n.op) {
    case Op::Einsum: {
      EinsumEquation e = parse_einsum(n.attrs.text);
      const std::string* terms[3] = {&e.a, &e.b, &e.out};
      const int nodes[3] = {n.inputs[0], n.inputs[1], i};
      for (char c : e.a + e.b) {
        int first_node = -1, first_dim = -1;
        for (int t = 0; t < 3; ++t) {
          size_t p = terms[t]->find(c);
          if (p == std::string::npos) continue;
          if (first_node < 0)
            first_node = nodes[t], first_dim = static_cast<int>(p);
          else
            groups.unite(first_node, first_dim, nodes[t], static_cast<int>(p));
          info_of_dim[groups.id(nodes[t], static_cast<int>(p))].contracted_or_free = true;
        }
        if (e.out.find(c) == std::string::npos)  // contracted: partial sums of the output
          info_of_dim[groups.id(first_node, first_dim)].partial_bytes += numel(n.shape) * 4;
      }
      break;
    }
    case Op::Softmax:
    case Op::SoftmaxGrad:
    case Op::Normalize:
    case Op::NormalizeGrad: {
      for (int in : n.inputs) groups.tie_aligned(in, i);
      const int r = static_cast<int>(n.shape.size());
      whole(i, r - 1);
      if (n.op == Op::Softmax && n.attrs.i && r >= 2) whole(i, r - 2);
      break;
    }
    case Op::CrossEntropy:
    case Op::CrossEntropyGrad:
      for (size_t d = 0; d + 1 < g.node(n.inputs[0]).shape.size(); ++d) {
        groups.unite(n.inputs[0], static_cast<int>(d), n.inputs[1], static_cast<int>(d));
        groups.unite(n.inputs[0], static_cast<int>(d), i, static_cast<int>(d));
      }
      if (n.op == Op::CrossEntropyGrad) groups.tie_aligned(n.inputs[0], i);
      break;
    case Op::Gather: {
      const size_t ids = g.node(n.inputs[1]).shape.size();
      for (size_t d = 0; d < ids; ++d)
        groups.unite(n.inputs[1], static_cast<int>(d), i, static_cast<int>(d));
      for (size_t d = 1; d < g.node(n.inputs[0]).shape.size(); ++d)
        groups.unite(n.inputs[0], static_cast<int>(d), i, static_cast<int>(ids + d - 1));
      info_of_dim[groups.id(n.inputs[0], 0)].partial_bytes += numel(n.shape) * 4;
      break;
    }
    case Op::ScatterAdd: {
      const size_t ids = g.node(n.inputs[0]).shape.size();
      for (size_t d = 0; d < ids; ++d)
        groups.unite(n.inputs[0], static_cast<int>(d), n.inputs[1], static_cast<int>(d));
      for (size_t d = 1; d < n.shape.size(); ++d)
        groups.unite(n.inputs[1], static_cast<int>(ids + d - 1), i, static_cast<int>(d));
      break;
    }
    case Op::Transpose:
      for (size_t d = 0; d < n.attrs.ints.size(); ++d)
        groups.unite(n.inputs[0], static_cast<int>(n.attrs.ints[d]), i, static_cast<int>(d));
      break;
    case Op::AdamUpdate:
    case Op::SgdUpdate:
      for (size_t k = 1; k + 1 < n.inputs.size(); ++k) groups.tie_aligned(n.inputs[k], n.inputs[0]);
      break;
    case Op::ReduceSum: {
      int o = 0;
      for (size_t d = 0; d < g.node(n.inputs[0]).shape.size(); ++d)
        if (std::find(n.attrs.ints.begin(), n.attrs.ints.end(), int64_t(d)) == n.attrs.ints.end())
          groups.unite(n.inputs[0], static_cast<int>(d), i, o++);
      break;
    }
    case Op::SumSquares:
    case Op::ClipScale:
    case Op::Parameter:
    case Op::Input:
    case Op::Constant:
    case Op::Iota:
      break;
    default:  // elementwise, broadcast, reshape: equal extents aligned from the right
      for (int in : n.inputs) groups.tie_aligned(in, i);
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
    gi.contracted_or_free |= f.contracted_or_free;
    gi.must_stay_whole |= f.must_stay_whole;
  }
  for (int id : g.parameters()) {
    const Node& n = g.node(id);
    if (!is_weight(n)) continue;
    plan_[n.attrs.text] = Sharding::replicated(n.shape.size());
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
      dims += (k ? ", " : "") + g.node(gi.weight_dims[k].first).attrs.text + "[" +
              std::to_string(gi.weight_dims[k].second) + "]";
    if (gi.weight_dims.size() > 3) dims += ", ...";
    std::string why;
    if (gi.must_stay_whole)
      why = "kept whole: softmax or layer norm needs it whole";
    else if (!gi.contracted_or_free)
      why = "kept whole: no contraction to split";
    else if (gi.extent < 2)
      why = "kept whole: extent 1";
    for (const auto& [id, d] : gi.weight_dims)
      if (why.empty() && plan_[g.node(id).attrs.text].dim_of(axis) >= 0)
        why = "kept whole: " + g.node(id).attrs.text + " is already split on another dimension";
    if (why.empty()) {
      for (const auto& [id, d] : gi.weight_dims) plan_[g.node(id).attrs.text].dims[d] = axis;
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
