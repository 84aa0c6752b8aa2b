#include "autoshard/shard/partitioner.h"

#include <algorithm>
#include <optional>

#include "autoshard/tensor/array_split.h"
#include "autoshard/error.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

bool is_leaf(Op op) {
  return op == Op::Parameter || op == Op::Input;
}

// Layouts the consumers would like: an optimizer update wants its gradient in
// the layout of its state; ops that keep their shape pass the wish upstream.
std::vector<std::optional<Sharding>> consumer_hints(const Graph& g, const std::vector<bool>& live,
                                                    const std::vector<Sharding>& leaf_layout) {
  std::vector<std::optional<Sharding>> hint(g.size());
  for (int i = g.size() - 1; i >= 0; --i) {
    if (!live[i]) continue;
    const Node& n = g.node(i);
    if (n.op == Op::AdamUpdate || n.op == Op::SgdUpdate) {
      hint[n.inputs[1]] = without_partial(leaf_layout[n.inputs[2]]);
      continue;
    }
    if (!hint[i] || is_leaf(n.op)) continue;
    for (int in : n.inputs)
      if (!hint[in] && g.node(in).shape == n.shape) hint[in] = hint[i];
  }
  return hint;
}

std::string value_name(const Graph& g, int id) {
  const Node& n = g.node(id);
  if (!n.attrs.text.empty() && (is_leaf(n.op))) return n.attrs.text;
  return cat("%", id, " ", op_name(n.op), shape_str(n.shape));
}

// Builds one device's local graph.
class Lowering {
 public:
  Lowering(const Graph& g, Partition& p, int device, bool record)
      : g_(g),
        p_(p),
        mesh_(p.mesh),
        device_(device),
        record_(record),
        local_(p.local[device]),
        coords_(mesh_.coordinates(device)) {}

  int leaf(int id) {
    const Node& n = g_.node(id);
    Attrs a = n.attrs;
    const ShardDecision d{{}, p_.sharding[id]};
    std::vector<Shape> no_inputs;
    op_def(n.op).localize(a, LocalizeInfo{n, mesh_, device_, d, no_inputs});
    return local_.add(n.op, {}, a).id;
  }

  int op(int id, const ShardDecision& d) {
    const Node& n = g_.node(id);
    std::vector<Value> ins;
    std::vector<Shape> shapes;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int in = n.inputs[k];
      shapes.push_back(g_.node(in).shape);
      ins.push_back(local_.value(reshard(in, d.inputs[k], /*cache=*/true)));
    }
    Attrs a = n.attrs;
    const OpDef& def = op_def(n.op);
    if (def.localize) def.localize(a, LocalizeInfo{n, mesh_, device_, d, shapes});
    Value out = local_.add(n.op, ins, a);
    const Shape expect = d.output.local_shape(n.shape, mesh_, device_);
    AS_CHECK(out.shape() == expect, "internal: ", op_name(n.op), " on device ", device_, " made ",
          shape_str(out.shape()), " where its sharding ", d.output.to_string(mesh_), " gives ",
          shape_str(expect));
    // A state input updated in another layout is written back into place.
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int in = n.inputs[k];
      if (!(def.mutates >> k & 1) || d.inputs[k] == p_.sharding[in]) continue;
      int back = convert(ins[k].id, d.inputs[k], p_.sharding[in], g_.node(in).shape, in);
      local_.add(Op::Assign, {local_.value(p_.local_of[device_][in]), local_.value(back)});
    }
    return out.id;
  }

  // The local id of global value `id` in layout `to`.
  int reshard(int id, const Sharding& to, bool cache) {
    const Sharding& from = p_.sharding[id];
    int local = p_.local_of[device_][id];
    if (from == to) return local;
    auto key = std::make_pair(id, to.to_string(mesh_));
    if (cache)
      if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    int result = convert(local, from, to, g_.node(id).shape, id);
    if (cache) cache_[key] = result;
    return result;
  }

 private:
  int convert(int local, Sharding cur, const Sharding& to, const Shape& global, int id) {
    for (int a : to.partial)
      AS_CHECK(cur.is_partial(a), "internal: cannot make a value partial over '",
            mesh_.axis_names()[a], "'");
    // 1. Sum partial values: straight into the wanted split when there is one.
    for (int a : std::vector<int>(cur.partial)) {
      if (to.is_partial(a)) continue;
      int d = to.dim_of(a);
      if (d >= 0 && cur.dims[d] < 0) {
        local = collective(Op::ReduceScatter, local, a, d, global, id);
        cur.dims[d] = a;
      } else {
        local = collective(Op::AllReduce, local, a, -1, global, id);
      }
      cur.partial.erase(std::find(cur.partial.begin(), cur.partial.end(), a));
    }
    // 2. Gather every split that is not wanted where it is.
    for (int d = 0; d < cur.rank(); ++d)
      if (cur.dims[d] >= 0 && cur.dims[d] != to.dims[d]) {
        local = collective(Op::AllGather, local, cur.dims[d], d, global, id);
        cur.dims[d] = -1;
      }
    // 3. Take this device's block of every newly wanted split (no communication).
    for (int d = 0; d < cur.rank(); ++d)
      if (to.dims[d] >= 0 && cur.dims[d] < 0) {
        const int a = to.dims[d], k = mesh_.axis_size(a);
        Attrs s;
        s.ints = {d, split_offset(global[d], k, coords_[a]), split_size(global[d], k, coords_[a])};
        local = local_.add(Op::Slice, {local_.value(local)}, s).id;
        cur.dims[d] = a;
      }
    return local;
  }

  int collective(Op op, int local, int axis, int dim, const Shape& global, int id) {
    Attrs a;
    a.comm_axis = axis;
    if (op != Op::AllReduce) {
      a.ints = {dim};
      for (int64_t s : split_sizes(global[dim], mesh_.axis_size(axis))) a.ints.push_back(s);
      a.i = coords_[axis];
    }
    if (record_)
      p_.collectives.push_back({op_name(op), mesh_.axis_names()[axis], value_name(g_, id),
                                static_cast<int64_t>(numel(local_.node(local).shape) * 4)});
    return local_.add(op, {local_.value(local)}, a).id;
  }

  const Graph& g_;
  Partition& p_;
  const DeviceMesh& mesh_;
  int device_;
  bool record_;
  Graph& local_;
  std::vector<int> coords_;
  std::map<std::pair<int, std::string>, int> cache_;
};

}  // namespace

Partition partition(const Graph& g, const DeviceMesh& mesh, const std::map<int, Sharding>& leaves,
                    const std::vector<int>& outputs, const std::vector<int>& devices) {
  Partition p;
  p.mesh = mesh;
  p.sharding.resize(g.size());
  p.leaf_name.resize(g.size());
  for (int i = 0; i < g.size(); ++i) {
    p.global_shape.push_back(g.node(i).shape);
    if (is_leaf(g.node(i).op)) p.leaf_name[i] = g.node(i).attrs.text;
  }
  const std::vector<bool> live = live_nodes(g, outputs);
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (!is_leaf(n.op)) continue;
    auto it = leaves.find(i);
    p.sharding[i] = it == leaves.end() ? Sharding::replicated(n.shape.size()) : it->second;
    p.sharding[i].validate(mesh, static_cast<int>(n.shape.size()),
                           "layout of '" + n.attrs.text + "'");
    AS_CHECK(p.sharding[i].partial.empty(), "layout of '", n.attrs.text, "' cannot be partial");
  }
  const auto hints = consumer_hints(g, live, p.sharding);

  // Decide every op's layout once; the decisions are the same on all devices.
  std::vector<ShardDecision> decision(g.size());
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (!live[i] || is_leaf(n.op)) continue;
    std::vector<Sharding> in;
    std::vector<const Sharding*> in_hints;
    for (int x : n.inputs) {
      in.push_back(p.sharding[x]);
      in_hints.push_back(hints[x] ? &*hints[x] : nullptr);
    }
    ShardQuery q{g, n, in, mesh, hints[i] ? &*hints[i] : nullptr, in_hints};
    decision[i] = op_def(n.op).shard ? op_def(n.op).shard(q) : replicate_all(q);
    p.sharding[i] = decision[i].output;
  }

  p.local.resize(mesh.size());
  p.local_of.assign(mesh.size(), std::vector<int>(g.size(), -1));
  p.outputs.resize(mesh.size());
  std::vector<int> lowered = devices;
  if (lowered.empty())
    for (int d = 0; d < mesh.size(); ++d) lowered.push_back(d);
  for (int dev : lowered) {
    Lowering lower(g, p, dev, dev == lowered.front());
    for (int i = 0; i < g.size(); ++i) {
      if (!live[i]) continue;
      p.local_of[dev][i] = is_leaf(g.node(i).op) ? lower.leaf(i) : lower.op(i, decision[i]);
    }
    for (int o : outputs)
      p.outputs[dev].push_back(
          lower.reshard(o, Sharding::replicated(g.node(o).shape.size()), true));
  }
  return p;
}

}  // namespace autoshard
