#include "autoshard/shard/partitioner.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "autoshard/error.h"
#include "autoshard/tensor/array_split.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

// Layouts the consumers would like: an optimizer update wants its gradient in
// the layout of its state; ops that keep their shape pass the wish upstream.
std::vector<std::optional<Sharding>> consumer_hints(const Graph& g, const std::vector<bool>& live,
                                                    const std::vector<Sharding>& leaf_layout) {
  std::vector<std::optional<Sharding>> hint(g.size());
  for (int i = g.size() - 1; i >= 0; --i) {
    if (!live[i]) continue;
    const Node& n = g.node(i);
    if (const int gradient = op_def(n.op).gradient_input; gradient >= 0) {
      // The state follows the gradient among the inputs (adam: m, v; sgd: momentum).
      hint[n.inputs[size_t(gradient)]] =
          without_partial(leaf_layout[n.inputs[size_t(gradient) + 1]]);
      continue;
    }
    if (!hint[i] || n.is_leaf()) continue;
    for (int in : n.inputs)
      if (!hint[in] && g.node(in).shape == n.shape) hint[in] = hint[i];
  }
  return hint;
}

// Megatron-SP (PartitionRequest::sequence_parallel_axis): the rule's
// decision, or when it leaves the output whole over `axis` and the output
// has a sequence dimension, the same loops with that dimension split too.
ShardDecision split_sequence(const Graph& g, const Node& n, ShardDecision rule, int axis,
                             const std::vector<bool>& output_is_seq) {
  if (axis < 0 || !op_def(n.op).loops || rule.output.dim_of(axis) >= 0 ||
      !rule.output.partial.empty())
    return rule;
  const LoopNest nest = op_def(n.op).loops(g, n);
  LoopSplit split(nest.loops.size(), -1);
  int seq_loop = -1;
  for (size_t d = 0; d < nest.output.size(); ++d) {
    const int loop = nest.output[d];
    if (loop < 0) continue;
    if (rule.output.dims[d] >= 0) split[loop] = rule.output.dims[d];
    if (output_is_seq[d] && seq_loop < 0 && rule.output.dims[d] < 0 && nest.splittable(loop))
      seq_loop = loop;
  }
  if (seq_loop < 0) return rule;
  split[seq_loop] = axis;
  return decide(nest, split);
}

std::string value_name(const Graph& g, int id) {
  const Node& n = g.node(id);
  if (n.is_leaf()) return n.leaf().key();
  return cat("%", id, " ", op_name(n.op), shape_str(n.shape));
}

// Sharding::validate with its message built only when it fails: a plan's
// every decision is checked, tens of thousands for a large model.
template <typename... Parts>
void validate_layout(const Sharding& s, const DeviceMesh& mesh, int rank, const Parts&... what) {
  try {
    s.validate(mesh, rank, "");
  } catch (const Error&) {
    s.validate(mesh, rank, cat(what...));
  }
}

// Checks a decision a planner fixed against the op it is for.
void check_decision(const Graph& g, const Node& n, const ShardDecision& d, const DeviceMesh& mesh) {
  AS_CHECK(d.inputs.size() == n.inputs.size(), "plan for ", op_name(n.op), " gives ",
           d.inputs.size(), " input layouts for ", n.inputs.size(), " inputs");
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const int rank = static_cast<int>(g.node(n.inputs[k]).shape.size());
    validate_layout(d.inputs[k], mesh, rank, "plan for ", op_name(n.op), " input ", k);
    if (k < d.via.size() && d.via[k])
      validate_layout(*d.via[k], mesh, rank, "plan for ", op_name(n.op), " input ", k, " (via)");
  }
  AS_CHECK(d.via.size() <= n.inputs.size(), "plan for ", op_name(n.op), " gives ", d.via.size(),
           " staging layouts for ", n.inputs.size(), " inputs");
  AS_CHECK(takes_partial(op_def(n.op).linearity, d.inputs, d.output), "plan for ", op_name(n.op),
           ": partial inputs only where the op is linear in them, and the output partial over "
           "the same axes");
  validate_layout(d.output, mesh, static_cast<int>(n.shape.size()), "plan for ", op_name(n.op));
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
    OpAttrs a = n.attrs;
    const ShardDecision d{{}, p_.sharding[id]};
    std::vector<Shape> no_inputs;
    op_def(n.op).localize(a, LocalizeInfo{n, mesh_, device_, d, no_inputs});
    return local_.add(n.op, {}, std::move(a)).id;
  }

  int op(int id, const ShardDecision& d) {
    const Node& n = g_.node(id);
    std::vector<Value> ins;
    std::vector<Shape> shapes;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int in = n.inputs[k];
      shapes.push_back(g_.node(in).shape);
      const bool staged = k < d.via.size() && d.via[k];
      ins.push_back(local_.value(reshard(in, d.inputs[k], &n, staged ? &*d.via[k] : nullptr)));
    }
    const OpDef& def = op_def(n.op);
    if (def.window) exchange_halos(n, d, ins);
    OpAttrs a = n.attrs;
    if (def.localize) def.localize(a, LocalizeInfo{n, mesh_, device_, d, shapes});
    Value out = local_.add(n.op, ins, std::move(a));
    const Shape expect = d.output.local_shape(n.shape, mesh_, device_);
    AS_CHECK(out.shape() == expect, "internal: ", op_name(n.op), " on device ", device_, " made ",
             shape_str(out.shape()), " where its sharding ", d.output.to_string(mesh_), " gives ",
             shape_str(expect));
    // A state input updated in another layout is written back into place.
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      int in = n.inputs[k];
      if (!def.mutates_input(k) || d.inputs[k] == p_.sharding[in]) continue;
      int back = convert(ins[k].id, d.inputs[k], p_.sharding[in], in);
      local_.add(Op::Assign, {local_.value(p_.local_of[device_][in]), local_.value(back)});
    }
    return out.id;
  }

  // An op that reads a window of a split loop (a convolution's rows, see
  // LoopNest::halos) gets, for each such input dim split over an axis, its
  // band plus the rows of its neighbours that its part of the loop reads.
  void exchange_halos(const Node& n, const ShardDecision& d, std::vector<Value>& ins) {
    const OpDef& def = op_def(n.op);
    const LoopNest nest = def.loops(g_, n);
    for (const LoopNest::Halo& h : nest.halos) {
      const int axis = d.inputs[h.input].dims[h.dim];
      if (axis < 0) continue;
      AS_CHECK(!is_tuple_axis(axis), "internal: ", op_name(n.op),
               " reads a window of a dimension split over a tuple of mesh axes");
      const int global_in = n.inputs[h.input];
      const int64_t rows = g_.node(global_in).shape[h.dim];
      const int64_t extent = nest.loops[nest.inputs[h.input][h.dim]].extent;
      const int parts = mesh_.axis_size(axis);
      HaloAttrs a{axis, h.dim, split_sizes(rows, parts), {}, {}, coords_[axis]};
      for (int c = 0; c < parts; ++c) {
        const int64_t begin = split_offset(extent, parts, c);
        auto [lo, hi] =
            def.window(g_, n, h.input, h.dim, begin, begin + split_size(extent, parts, c));
        lo = std::clamp<int64_t>(lo, 0, rows);
        a.begins.push_back(lo);
        a.ends.push_back(std::clamp<int64_t>(hi, lo, rows));
      }
      ins[h.input] = local_.value(
          collective(Op::HaloExchange, ins[h.input].id, std::move(a), axis, global_in));
    }
  }

  // The local id of global value `id` in layout `to`, for `consumer`. A
  // conversion is made once per part of the step: the consumers in one
  // block's forward pass share it, as do those in its backward pass, but
  // the backward pass converts again rather than keeping a copy (a weight
  // gathered for the forward pass, say) alive across the whole step. The
  // planner prices conversions the same way. With `via`, the conversion
  // passes through that layout, itself made once for the part of the step.
  int reshard(int id, const Sharding& to, const Node* consumer = nullptr,
              const Sharding* via = nullptr) {
    const Sharding& from = p_.sharding[id];
    const int local = p_.local_of[device_][id];
    if (from == to) return local;
    const int region = consumer ? consumer->region : -1, block = consumer ? consumer->block : -1;
    const CacheKey key{id,      region,     block,
                       to.dims, to.partial, to.partial.empty() ? -1 : int(to.partial_op)};
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    if (via && *via != from && *via != to)
      return cache_[key] = convert(reshard(id, *via, consumer), *via, to, id);
    return cache_[key] = convert(local, from, to, id);
  }

 private:
  int convert(int local, const Sharding& from, const Sharding& to, int id) {
    const Shape& global = g_.node(id).shape;
    // This device's extent of dimension `dim` under `s`: the piece a step's
    // axis splits or joins (the whole dimension, or what outer members of a
    // tuple leave: the same on every member of the step's group).
    auto extent = [&](const Sharding& s, int dim) {
      return s.local_shape(global, mesh_, device_)[dim];
    };
    // The pieces of `n` over an axis's group, in its order (a tuple's:
    // nested over its members), made once per (n, axis) and shared by every
    // collective that moves them (BlockSizes: 1,024 of them per list on
    // 1,024 devices).
    auto pieces = [&](int64_t n, int axis) {
      auto [it, fresh] = nested_.try_emplace({n, axis});
      if (fresh) {
        std::vector<int64_t> parts;
        for (int a : axis_members(axis)) parts.push_back(mesh_.axis_size(a));
        it->second = nested_split_sizes(n, parts);
      }
      return it->second;
    };
    // The same flat (an all-to-all's): n split into k.
    auto flat = [&](int64_t n, int k) {
      auto [it, fresh] = flat_.try_emplace({n, k});
      if (fresh) it->second = split_sizes(n, k);
      return it->second;
    };
    for (const ConversionStep& s : conversion_plan(from, to, mesh_)) {
      const int k = mesh_.axis_size(s.axis), c = mesh_.coordinate(device_, s.axis);
      switch (s.kind) {
        case ConversionStep::Kind::AllReduce:
          local = collective(Op::AllReduce, local, AllReduceAttrs{s.axis, s.op}, s.axis, id);
          break;
        case ConversionStep::Kind::ReduceScatter:
          local = collective(Op::ReduceScatter, local,
                             SplitAttrs{s.axis, s.dim, pieces(extent(s.before, s.dim), s.axis), c},
                             s.axis, id);
          break;
        case ConversionStep::Kind::AllGather:
          local = collective(Op::AllGather, local,
                             SplitAttrs{s.axis, s.dim, pieces(extent(s.after, s.dim), s.axis), c},
                             s.axis, id);
          break;
        case ConversionStep::Kind::AllToAll: {
          AllToAllAttrs a{s.axis,
                          s.dim,
                          s.to_dim,
                          flat(extent(s.after, s.dim), k),
                          flat(extent(s.before, s.to_dim), k),
                          c};
          local = collective(Op::AllToAll, local, std::move(a), s.axis, id);
          break;
        }
        case ConversionStep::Kind::Slice: {
          const int64_t whole = extent(s.before, s.dim);
          local = local_
                      .add(Op::Slice, {local_.value(local)},
                           SliceAttrs{s.dim, split_offset(whole, k, c), split_size(whole, k, c)})
                      .id;
          break;
        }
      }
    }
    return local;
  }

  int collective(Op op, int local, OpAttrs attrs, int axis, int id) {
    if (record_)
      p_.collectives.push_back({op_name(op), mesh_.axis_name(axis), value_name(g_, id),
                                static_cast<int64_t>(numel(local_.node(local).shape) * 4)});
    return local_.add(op, {local_.value(local)}, std::move(attrs)).id;
  }

  const Graph& g_;
  Partition& p_;
  const DeviceMesh& mesh_;
  int device_;
  bool record_;
  Graph& local_;
  std::vector<int> coords_;
  // (value, consumer's region and block, the layout converted into: its
  // dims, partial axes and their op when partial), as Sharding's == sees it.
  using CacheKey = std::tuple<int, int, int, std::vector<int>, std::vector<int>, int>;
  std::map<CacheKey, int> cache_;
  // Block sizes by (extent, axis) (nested over a tuple's members) and by
  // (extent, parts) (flat), shared by the collectives (see convert).
  std::map<std::pair<int64_t, int>, BlockSizes> nested_, flat_;
};

}  // namespace

Partition partition(const Graph& g, const DeviceMesh& mesh, const PartitionRequest& request,
                    const std::vector<int>& outputs, const std::vector<int>& devices) {
  Partition p;
  p.mesh = mesh;
  p.sharding.resize(g.size());
  p.decision.resize(g.size());
  p.leaf_name.resize(g.size());
  for (int i = 0; i < g.size(); ++i) {
    p.global_shape.push_back(g.node(i).shape);
    if (g.node(i).is_leaf()) p.leaf_name[i] = g.node(i).leaf().key();
  }
  const std::vector<bool> live = live_nodes(g, outputs);
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (!n.is_leaf()) continue;
    auto it = request.leaves.find(i);
    p.sharding[i] = it == request.leaves.end() ? Sharding::replicated(n.shape.size()) : it->second;
    p.sharding[i].validate(mesh, static_cast<int>(n.shape.size()),
                           "layout of '" + n.leaf().key() + "'");
    // An input may hold partial sums (a gradient summed over micro-batches,
    // reduced once by the step that reads it); a weight holds its value.
    AS_CHECK(p.sharding[i].partial.empty() || n.is_input(), "layout of '", n.leaf().key(),
             "' cannot be partial");
  }
  const auto hints = consumer_hints(g, live, p.sharding);
  // Sequence dimensions: tied to dimension 1 of a [batch, sequence] input.
  const auto seq = request.sequence_parallel_axis >= 0 ? dims_tied_to_inputs(g, 1)
                                                       : std::vector<std::vector<bool>>(g.size());

  // Decide every op's layout once; the decisions are the same on all devices.
  // Rules see the layouts without sequence parallelism (`ruled`), so that
  // Megatron-SP is Megatron's plan with its whole regions split, not a new
  // propagation from split sequences.
  std::vector<Sharding> ruled = p.sharding;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (!live[i] || n.is_leaf()) continue;
    if (auto fixed = request.decisions.find(i); fixed != request.decisions.end()) {
      check_decision(g, n, fixed->second, mesh);
      p.decision[i] = fixed->second;
      ruled[i] = fixed->second.output;
    } else {
      std::vector<Sharding> in;
      std::vector<const Sharding*> in_hints;
      for (int x : n.inputs) {
        in.push_back(ruled[x]);
        in_hints.push_back(hints[x] ? &*hints[x] : nullptr);
      }
      ShardQuery q{g, n, in, mesh, hints[i] ? &*hints[i] : nullptr, in_hints};
      p.decision[i] = op_def(n.op).shard ? op_def(n.op).shard(q) : replicate_all(q);
      ruled[i] = p.decision[i].output;
      if (request.sequence_parallel_axis >= 0)
        p.decision[i] =
            split_sequence(g, n, std::move(p.decision[i]), request.sequence_parallel_axis, seq[i]);
    }
    p.sharding[i] = p.decision[i].output;
  }

  p.devices = devices;
  if (p.devices.empty())
    for (int d = 0; d < mesh.size(); ++d) p.devices.push_back(d);
  // Indexed by device, but only as far as the highest device lowered: a
  // prediction on a mesh of millions lowers device 0 alone.
  const size_t slots = *std::max_element(p.devices.begin(), p.devices.end()) + 1;
  p.local.resize(slots);
  p.local_of.resize(slots);
  p.outputs.resize(slots);
  for (int dev : p.devices) {
    p.local_of[dev].assign(g.size(), -1);
    Lowering lower(g, p, dev, dev == p.devices.front());
    for (int i = 0; i < g.size(); ++i) {
      if (!live[i]) continue;
      p.local_of[dev][i] = g.node(i).is_leaf() ? lower.leaf(i) : lower.op(i, p.decision[i]);
    }
    for (int o : outputs)
      p.outputs[dev].push_back(lower.reshard(o, Sharding::replicated(g.node(o).shape.size())));
  }
  return p;
}

Partition partition(const Graph& g, const DeviceMesh& mesh, const std::map<int, Sharding>& leaves,
                    const std::vector<int>& outputs, const std::vector<int>& devices) {
  return partition(g, mesh, PartitionRequest{leaves, {}}, outputs, devices);
}

}  // namespace autoshard
