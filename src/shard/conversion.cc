#include "autoshard/shard/conversion.h"

#include <algorithm>

#include "autoshard/error.h"

namespace autoshard {

const char* step_name(ConversionStep::Kind kind) {
  switch (kind) {
    case ConversionStep::Kind::AllReduce:
      return "all_reduce";
    case ConversionStep::Kind::ReduceScatter:
      return "reduce_scatter";
    case ConversionStep::Kind::AllGather:
      return "all_gather";
    case ConversionStep::Kind::AllToAll:
      return "all_to_all";
    case ConversionStep::Kind::Slice:
      return "slice";
  }
  return "?";
}

namespace {

using Kind = ConversionStep::Kind;

// The mesh axes splitting dimension `d`, outermost first.
std::vector<int> stack(const Sharding& s, int d) {
  return axis_members(s.dims[d]);
}

Sharding with_stack(Sharding s, int d, const std::vector<int>& members) {
  s.dims[d] = members.empty() ? -1 : tuple_axis(members);
  return s;
}

// The axis `to` splits dimension d over next, once `cur`'s members there
// are the outer ones `to` wants; -1 when none (or `cur` has others).
int next_wanted(const Sharding& cur, const Sharding& to, int d) {
  const std::vector<int> have = stack(cur, d), want = stack(to, d);
  if (have.size() >= want.size() || !std::equal(have.begin(), have.end(), want.begin())) return -1;
  return want[have.size()];
}

bool prefix_of(const Sharding& cur, const Sharding& to, int d) {
  const std::vector<int> have = stack(cur, d), want = stack(to, d);
  return have.size() <= want.size() && std::equal(have.begin(), have.end(), want.begin());
}

int dim_wanting(const Sharding& cur, const Sharding& to, int axis, int except) {
  for (int e = 0; e < cur.rank(); ++e)
    if (e != except && next_wanted(cur, to, e) == axis) return e;
  return -1;
}

}  // namespace

std::vector<ConversionStep> conversion_plan(const Sharding& from, const Sharding& to,
                                            const DeviceMesh& mesh) {
  AS_CHECK(from.rank() == to.rank(), "internal: converting a rank-", from.rank(), " value to rank ",
           to.rank());
  for (int a : to.partial)
    AS_CHECK(from.is_partial(a) && from.partial_op == to.partial_op,
             "internal: cannot make a value partial over '", mesh.axis_names()[a], "'");
  std::vector<ConversionStep> steps;
  Sharding cur = from;
  auto emit = [&](Kind kind, int axis, int dim, const Sharding& after, int to_dim = -1) {
    steps.push_back({kind, axis, dim, cur.partial_op, cur, to_dim, after});
    cur = after;
  };
  // 1. Combine partial values: sums straight into the wanted split when
  // that split is the next one wanted on its dimension; the rest
  // all-reduced, over all their axes at once where the mesh groups them.
  auto without = [](Sharding s, const std::vector<int>& axes) {
    for (int a : axes) s.partial.erase(std::find(s.partial.begin(), s.partial.end(), a));
    if (s.partial.empty()) s.partial_op = ReduceOp::Sum;
    return s;
  };
  // Runs of wanted axes that are all partial: one reduce-scatter over the
  // run's joint group where the mesh has one (its pieces, nested, are in
  // the group's order).
  for (int d = 0; d < cur.rank() && cur.partial_op == ReduceOp::Sum; ++d) {
    if (!prefix_of(cur, to, d)) continue;
    const std::vector<int> want = stack(to, d);
    std::vector<int> run;
    for (size_t k = stack(cur, d).size();
         k < want.size() && cur.is_partial(want[k]) && !to.is_partial(want[k]); ++k)
      run.push_back(want[k]);
    if (run.size() < 2 || !mesh.collective_axis(tuple_axis(run))) continue;
    std::vector<int> members = stack(cur, d);
    members.insert(members.end(), run.begin(), run.end());
    emit(Kind::ReduceScatter, tuple_axis(run), d, with_stack(without(cur, run), d, members));
  }
  std::vector<int> reduced;
  for (int a : std::vector<int>(cur.partial)) {
    if (to.is_partial(a)) continue;
    const int d = cur.partial_op == ReduceOp::Sum ? dim_wanting(cur, to, a, -1) : -1;
    if (d < 0) {
      reduced.push_back(a);
      continue;
    }
    std::vector<int> members = stack(cur, d);
    members.push_back(a);
    emit(Kind::ReduceScatter, a, d, with_stack(without(cur, {a}), d, members));
  }
  if (reduced.size() > 1 && mesh.collective_axis(tuple_axis(reduced)))
    emit(Kind::AllReduce, tuple_axis(reduced), -1, without(cur, reduced));
  else
    for (int a : reduced) emit(Kind::AllReduce, a, -1, without(cur, {a}));
  // 2. Remove every split that is not wanted where it is, innermost member
  // first: moved to the dimension that wants that axis next, if one does;
  // gathered otherwise.
  for (int d = 0; d < cur.rank(); ++d)
    while (!prefix_of(cur, to, d)) {
      std::vector<int> members = stack(cur, d);
      // Several members to gather, none wanted elsewhere: one all-gather
      // over their joint group where the mesh has one.
      const std::vector<int> want = stack(to, d);
      size_t keep = 0;
      while (keep < members.size() && keep < want.size() && members[keep] == want[keep]) ++keep;
      const std::vector<int> gone(members.begin() + long(keep), members.end());
      if (gone.size() > 1 && mesh.collective_axis(tuple_axis(gone)) &&
          std::all_of(gone.begin(), gone.end(),
                      [&](int m) { return dim_wanting(cur, to, m, d) < 0; })) {
        members.resize(keep);
        emit(Kind::AllGather, tuple_axis(gone), d, with_stack(cur, d, members));
        continue;
      }
      const int a = members.back();
      members.pop_back();
      Sharding after = with_stack(cur, d, members);
      if (const int e = dim_wanting(cur, to, a, d); e >= 0) {
        std::vector<int> grown = stack(cur, e);
        grown.push_back(a);
        emit(Kind::AllToAll, a, d, with_stack(after, e, grown), e);
      } else {
        emit(Kind::AllGather, a, d, after);
      }
    }
  // 3. Take this device's block of every newly wanted split (no communication).
  for (int d = 0; d < cur.rank(); ++d)
    for (int a = next_wanted(cur, to, d); a >= 0; a = next_wanted(cur, to, d)) {
      std::vector<int> members = stack(cur, d);
      members.push_back(a);
      emit(Kind::Slice, a, d, with_stack(cur, d, members));
    }
  return steps;
}

}  // namespace autoshard
