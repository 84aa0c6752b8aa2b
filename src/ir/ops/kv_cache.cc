// CacheWrite: the key-value cache of generation. A decoder that produces one
// token at a time keeps each layer's keys and values of the positions seen
// so far in a buffer [batch, cache positions, heads..., dim]; each run
// writes its new rows at their positions, in place, and attends over the
// buffer (attention with query positions masks what is not written yet).
#include <cstring>

#include "autoshard/error.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

ShapeAndType cache_write_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 3);
  const Shape &cache = input_shape(g, n, 0), &rows = input_shape(g, n, 1);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32 && input_dtype(g, n, 1) == DType::F32,
           "cache_write needs an f32 cache and f32 rows");
  AS_CHECK(cache.size() >= 2 && rows.size() == cache.size() && rows[0] == cache[0] &&
               std::equal(rows.begin() + 2, rows.end(), cache.begin() + 2) && rows[1] <= cache[1],
           "cache_write: rows ", shape_str(rows), " do not fit the cache ", shape_str(cache),
           " (cache [batch, positions, ...], rows [batch, t, ...] with t <= positions)");
  AS_CHECK(input_dtype(g, n, 2) == DType::I32 && input_shape(g, n, 2) == Shape{rows[1]},
           "cache_write: positions must be i32 [", rows[1], "], not ",
           shape_str(input_shape(g, n, 2)));
  return {cache, DType::F32};
}

// `out` is the cache's own storage (the op aliases input 0).
void cache_write_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                        const KernelContext&) {
  const Shape& cache = in[0]->shape();
  const int64_t batch = cache[0], positions = cache[1], t = in[1]->shape()[1];
  const int64_t row = batch * positions == 0 ? 0 : in[0]->numel() / (batch * positions);
  const int32_t* pos = in[2]->i32();
  for (int64_t i = 0; i < t; ++i)
    AS_CHECK(pos[i] >= 0 && pos[i] < positions, "generation: position ", pos[i],
             " is outside the key-value cache of ", positions,
             " positions; ask for fewer new tokens or a longer cache");
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < t; ++i)
      std::memcpy(out.f32() + (b * positions + pos[i]) * row, in[1]->f32() + (b * t + i) * row,
                  sizeof(float) * row);
}

// Batch and the per-position dims (heads, dim) split alike on cache and
// rows; the positions of both stay whole (a row goes wherever its position
// says).
LoopNest cache_write_loops(const Graph& g, const Node& n) {
  const Shape &cache = input_shape(g, n, 0), &rows = input_shape(g, n, 1);
  LoopNest nest;
  std::vector<int> cache_dims, row_dims;
  const int b = nest.add({cache[0]});
  const int s = nest.add({cache[1], Loop::Kind::Whole}), t = nest.add({rows[1], Loop::Kind::Whole});
  cache_dims = {b, s};
  row_dims = {b, t};
  for (size_t i = 2; i < cache.size(); ++i) {
    const int d = nest.add({cache[i]});
    cache_dims.push_back(d);
    row_dims.push_back(d);
  }
  nest.inputs = {cache_dims, row_dims, {t}};
  nest.output = cache_dims;
  return nest;
}

ShardDecision cache_write_rule(const ShardQuery& q) {
  return follow_inputs(cache_write_loops(q.graph, q.node), q.inputs);
}

// Reads the new rows and writes them once.
OpCost cache_write_cost(const Node&, const CostShapes& s) {
  return {0, 8 * elements(s.inputs[1]), false};
}

}  // namespace

void register_cache_ops(std::vector<OpDef>& t) {
  t[size_t(Op::CacheWrite)] = {.name = "cache_write",
                               .infer = cache_write_infer,
                               .kernel = cache_write_kernel,
                               .side_effect = true,
                               .aliases_input = true,
                               .shard = cache_write_rule,
                               .loops = cache_write_loops,
                               .cost = cache_write_cost,
                               .mutates = 1};
}

}  // namespace autoshard
