// LstmCell and its two gradients: a time step of Keras's LSTM (activation
// tanh, recurrent_activation sigmoid) in one pass over [batch, units], where
// the composed step (nn/recurrent_layers.cc, still used for other
// activations) is four crops of the gates, three sigmoids, two tanh, three
// products and two sums, and with a mask three more ops per state: ops
// that each move little data, whose calls took more time than their work.
//
// Keras's cell (keras/src/layers/rnn/lstm.py, LSTMCell.call and
// _compute_carry_and_output_fused): z = x W + h U + b split into i, f, c, o
// along the last axis; c' = f c + i tanh(c_z), h' = o tanh(c'). Masked
// steps (keras/src/backend/jax/rnn.py, rnn): a row whose mask is 0 keeps
// its states. The input projection x W + b of all steps is one product
// before the loop, the recurrent product h U one per step: both are inputs
// here (x and r), so their sum needs no op of its own.
//
// The gradients recompute the gates from x, r and the state (a few
// transcendental functions per unit, cheaper than keeping them) and are two
// ops, dz (of x and r alike) and dstate, so that each is one output.
//
// GruCell and its three gradients: Keras's GRU with reset_after (its
// default; keras/src/layers/rnn/gru.py, GRUCell.call): x W + b_in and h U +
// b_rec split into z, r, h rows; z and r are sigmoids of their sums, the
// candidate tanh(x_h + r (h U + b_rec)_h), h' = z h + (1 - z) candidate.
// Composed, a step was 22 ops (crops, sums, products, the activations),
// and pad and add took a fifth of a GRU language model's step. The gradients
// of x and of r differ in the candidate's row (r's is scaled by the reset
// gate), so there are three: dx, dr and dh.
#include <type_traits>

#include "autoshard/error.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"
#include "tensor/fast_math.h"
#include "tensor/vec16.h"

namespace autoshard {
namespace {

// The operands of a step, read from the op's inputs: x, r [b, 4, u], state
// [2, b, u] and the mask [b, 1] (null: every row steps).
struct LstmOperands {
  const float *x, *r, *state, *mask;
  int64_t batch, units;
};

LstmOperands lstm_operands(std::span<Tensor* const> in, bool masked) {
  const Shape& s = in[2]->shape();
  return {in[0]->f32(), in[1]->f32(), in[2]->f32(), masked ? in[3]->f32() : nullptr, s[1], s[2]};
}

// The cell's functions on one float or on 16 (F is float or f32x16, so a
// row runs as vectors and its tail as floats, the same steps on each lane).
template <typename F>
F load_as(const float* p) {
  if constexpr (std::is_same_v<F, float>)
    return *p;
  else
    return load16(p);
}
template <typename F>
void store_as(float* p, F v) {
  if constexpr (std::is_same_v<F, float>)
    *p = v;
  else
    store16(p, v);
}
template <typename F>
F lanes_sigmoid(F x) {
  const F one = F{} + 1.0f;
  return one / (one + fast_exp(F{} - x));
}
template <typename F>
F lanes_tanh(F x) {
  const F lo = F{} - 9.0f, hi = F{} + 9.0f, one = F{} + 1.0f;
  x = x < lo ? lo : (x > hi ? hi : x);
  return one - (one + one) / (fast_exp(x + x) + one);
}

// The gates of unit u: i, f, tanh(c_z), o.
template <typename F>
struct Gates {
  F i, f, g, o;
};
template <typename F>
Gates<F> gates_at(const float* x, const float* r, int64_t U, int64_t u) {
  auto z = [&](int k) { return load_as<F>(x + k * U + u) + load_as<F>(r + k * U + u); };
  return {lanes_sigmoid(z(0)), lanes_sigmoid(z(1)), lanes_tanh(z(2)), lanes_sigmoid(z(3))};
}

// Row b's forward pass, written to next [2, b, u] (h' then c').
template <typename F>
void lstm_units(const LstmOperands& a, int64_t b, int64_t u, float* next) {
  const int64_t U = a.units, BU = a.batch * U, at = b * U + u;
  const Gates<F> q = gates_at<F>(a.x + b * 4 * U, a.r + b * 4 * U, U, u);
  const F c = load_as<F>(a.state + BU + at);
  F cn = q.f * c + q.i * q.g;
  F hn = q.o * lanes_tanh(cn);
  if (a.mask != nullptr) {
    const F m = F{} + a.mask[b], h = load_as<F>(a.state + at);
    hn = h + m * (hn - h);
    cn = c + m * (cn - c);
  }
  store_as(next + at, hn);
  store_as(next + BU + at, cn);
}

// Row b's gradients from dnext [2, b, u]: dz [b, 4, u] and dstate [2, b, u]
// (either may be null).
template <typename F>
void lstm_units_grad(const LstmOperands& a, const float* dnext, int64_t b, int64_t u, float* dz,
                     float* dstate) {
  const int64_t U = a.units, BU = a.batch * U, at = b * U + u;
  const Gates<F> q = gates_at<F>(a.x + b * 4 * U, a.r + b * 4 * U, U, u);
  const F c = load_as<F>(a.state + BU + at), one = F{} + 1.0f;
  const F tc = lanes_tanh(q.f * c + q.i * q.g);
  // The next state is state + m (new - state): new gets m of dnext, state
  // keeps (1 - m) of it.
  const F m = F{} + (a.mask == nullptr ? 1.0f : a.mask[b]);
  const F dh = load_as<F>(dnext + at), dc = load_as<F>(dnext + BU + at);
  const F dh_new = m * dh;
  const F dc_new = m * dc + dh_new * q.o * (one - tc * tc);
  if (dz != nullptr) {
    float* row = dz + b * 4 * U + u;
    store_as(row, dc_new * q.g * q.i * (one - q.i));
    store_as(row + U, dc_new * c * q.f * (one - q.f));
    store_as(row + 2 * U, dc_new * q.i * (one - q.g * q.g));
    store_as(row + 3 * U, dh_new * tc * q.o * (one - q.o));
  }
  if (dstate != nullptr) {
    store_as(dstate + at, (one - m) * dh);
    store_as(dstate + BU + at, dc_new * q.f + (one - m) * dc);
  }
}

// Runs `units(F, u)` over a row: 16 units at a time, then one at a time.
template <typename Units>
void over_units(int64_t U, Units units) {
  int64_t u = 0;
  for (; u + 16 <= U; u += 16) units(f32x16{}, u);
  for (; u < U; ++u) units(0.0f, u);
}

// Inputs x, r, state, then the mask if there is one, then (gradients) dnext.
bool has_mask(const Node& n, bool gradient) {
  return n.inputs.size() == (gradient ? 5u : 4u);
}

// A cell's input count and dtypes (`op` and `state` name them in errors).
void check_cell_inputs(const Graph& g, const Node& n, bool gradient, const char* op,
                       const char* state) {
  AS_CHECK(n.inputs.size() >= (gradient ? 4u : 3u) && n.inputs.size() <= (gradient ? 5u : 4u), op,
           " takes x, r, ", state, ", an optional mask", gradient ? " and dnext" : "", ", got ",
           n.inputs.size(), " inputs");
  for (size_t k = 0; k < n.inputs.size(); ++k)
    AS_CHECK(input_dtype(g, n, int(k)) == DType::F32, op, ": input ", k, " must be f32");
}

// A cell's mask [batch, 1] and (gradients) dnext, of the state's shape.
void check_mask_and_dnext(const Graph& g, const Node& n, bool gradient, const char* op,
                          int64_t batch, const Shape& state) {
  if (has_mask(n, gradient))
    AS_CHECK(input_shape(g, n, 3) == (Shape{batch, 1}), op, ": mask must be [", batch, ", 1], got ",
             shape_str(input_shape(g, n, 3)));
  if (gradient)
    AS_CHECK(input_shape(g, n, int(n.inputs.size()) - 1) == state, op,
             ": dnext must be the state's shape ", shape_str(state));
}

// units(F, b, u) over every row b of a batch and its units, rows spread
// over the cores.
template <typename Units>
void over_rows(int64_t batch, int64_t U, const Units& units) {
  parallel_for(batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      over_units(U, [&](auto lanes, int64_t u) { units(lanes, b, u); });
  });
}

// A cell's inputs, then dnext: what its gradient ops read.
std::vector<Value> inputs_and(Graph& g, int id, Value dnext) {
  std::vector<Value> in;
  for (int k : g.node(id).inputs) in.push_back(g.value(k));
  in.push_back(dnext);
  return in;
}

ShapeAndType lstm_check(const Graph& g, const Node& n, bool gradient) {
  check_cell_inputs(g, n, gradient, "lstm_cell", "state");
  const Shape& state = input_shape(g, n, 2);
  AS_CHECK(state.size() == 3 && state[0] == 2,
           "lstm_cell: state must be [2, batch, units] (h, c), got ", shape_str(state));
  const Shape z{state[1], 4, state[2]};
  AS_CHECK(input_shape(g, n, 0) == z && input_shape(g, n, 1) == z, "lstm_cell: x and r must be ",
           shape_str(z), " (batch, gates i f c o, units) for a state ", shape_str(state), ", got ",
           shape_str(input_shape(g, n, 0)), " and ", shape_str(input_shape(g, n, 1)));
  check_mask_and_dnext(g, n, gradient, "lstm_cell", state[1], state);
  return {state, DType::F32};
}

ShapeAndType lstm_cell_infer(const Graph& g, const Node& n) {
  return lstm_check(g, n, false);
}
ShapeAndType lstm_dz_infer(const Graph& g, const Node& n) {
  const Shape& state = lstm_check(g, n, true).shape;
  return {{state[1], 4, state[2]}, DType::F32};
}
ShapeAndType lstm_dstate_infer(const Graph& g, const Node& n) {
  return lstm_check(g, n, true);
}

void lstm_cell_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                      const KernelContext&) {
  const LstmOperands a = lstm_operands(in, has_mask(n, false));
  float* next = out.f32();
  over_rows(a.batch, a.units,
            [&](auto lanes, int64_t b, int64_t u) { lstm_units<decltype(lanes)>(a, b, u, next); });
}

void lstm_grad_rows(const Node& n, std::span<Tensor* const> in, float* dz, float* dstate) {
  const LstmOperands a = lstm_operands(in, has_mask(n, true));
  const float* dnext = in.back()->f32();
  over_rows(a.batch, a.units, [&](auto lanes, int64_t b, int64_t u) {
    lstm_units_grad<decltype(lanes)>(a, dnext, b, u, dz, dstate);
  });
}
void lstm_dz_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  lstm_grad_rows(n, in, out.f32(), nullptr);
}
void lstm_dstate_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                        const KernelContext&) {
  lstm_grad_rows(n, in, nullptr, out.f32());
}

// dz goes to x and r alike (z = x + r); the mask takes no gradient.
std::vector<Value> lstm_cell_vjp(Graph& g, int id, Value dnext) {
  const Node& n = g.node(id);
  const std::vector<Value> in = inputs_and(g, id, dnext);
  Value dz = g.add(Op::LstmCellGrad, in);
  Value dstate = g.add(Op::LstmCellStateGrad, in);
  std::vector<Value> grads{dz, dz, dstate};
  if (n.inputs.size() == 4) grads.push_back(Value{});
  return grads;
}

// The GRU's operands: x, r [b, 3, u], h [b, u] and the mask [b, 1] (null:
// every row steps).
struct GruOperands {
  const float *x, *r, *h, *mask;
  int64_t batch, units;
};

GruOperands gru_operands(std::span<Tensor* const> in, bool masked) {
  const Shape& s = in[2]->shape();
  return {in[0]->f32(), in[1]->f32(), in[2]->f32(), masked ? in[3]->f32() : nullptr, s[0], s[1]};
}

// The gates of unit u in a row: z, the reset gate, the recurrent candidate
// row (h U + b)_h it scales, and the candidate.
template <typename F>
struct GruGates {
  F z, reset, rec_h, cand;
};
template <typename F>
GruGates<F> gru_gates_at(const float* x, const float* r, int64_t U, int64_t u) {
  auto sum = [&](int k) { return load_as<F>(x + k * U + u) + load_as<F>(r + k * U + u); };
  GruGates<F> q;
  q.z = lanes_sigmoid(sum(0));
  q.reset = lanes_sigmoid(sum(1));
  q.rec_h = load_as<F>(r + 2 * U + u);
  q.cand = lanes_tanh(load_as<F>(x + 2 * U + u) + q.reset * q.rec_h);
  return q;
}

// Row b's forward pass, written to next [b, u].
template <typename F>
void gru_units(const GruOperands& a, int64_t b, int64_t u, float* next) {
  const int64_t U = a.units, at = b * U + u;
  const GruGates<F> q = gru_gates_at<F>(a.x + b * 3 * U, a.r + b * 3 * U, U, u);
  const F h = load_as<F>(a.h + at);
  F hn = q.cand + q.z * (h - q.cand);
  if (a.mask != nullptr) hn = h + (F{} + a.mask[b]) * (hn - h);
  store_as(next + at, hn);
}

// Row b's gradients from dnext [b, u]: dx and dr [b, 3, u] (either may be
// null).
template <typename F>
void gru_units_grad(const GruOperands& a, const float* dnext, int64_t b, int64_t u, float* dx,
                    float* dr) {
  const int64_t U = a.units, at = b * U + u;
  const GruGates<F> q = gru_gates_at<F>(a.x + b * 3 * U, a.r + b * 3 * U, U, u);
  const F h = load_as<F>(a.h + at), one = F{} + 1.0f;
  // h_out = h + m (h' - h): h' gets m of dnext, h keeps (1 - m) of it.
  const F m = F{} + (a.mask == nullptr ? 1.0f : a.mask[b]);
  const F d = load_as<F>(dnext + at), d_new = m * d;
  const F dz = d_new * (h - q.cand) * q.z * (one - q.z);
  const F dcand = d_new * (one - q.z) * (one - q.cand * q.cand);
  const F dreset = dcand * q.rec_h * q.reset * (one - q.reset);
  const int64_t row = b * 3 * U + u;
  if (dx != nullptr) {
    store_as(dx + row, dz);
    store_as(dx + row + U, dreset);
    store_as(dx + row + 2 * U, dcand);
  }
  if (dr != nullptr) {
    store_as(dr + row, dz);
    store_as(dr + row + U, dreset);
    store_as(dr + row + 2 * U, dcand * q.reset);
  }
}

// Row b's dh alone: it needs z only, not the reset gate or the candidate.
template <typename F>
void gru_units_dh(const GruOperands& a, const float* dnext, int64_t b, int64_t u, float* dh) {
  const int64_t U = a.units, at = b * U + u, row = b * 3 * U + u;
  const F z = lanes_sigmoid(load_as<F>(a.x + row) + load_as<F>(a.r + row));
  const F m = F{} + (a.mask == nullptr ? 1.0f : a.mask[b]), d = load_as<F>(dnext + at);
  store_as(dh + at, (F{} + 1.0f - m) * d + m * d * z);
}

ShapeAndType gru_check(const Graph& g, const Node& n, bool gradient) {
  check_cell_inputs(g, n, gradient, "gru_cell", "h");
  const Shape& h = input_shape(g, n, 2);
  AS_CHECK(h.size() == 2, "gru_cell: h must be [batch, units], got ", shape_str(h));
  const Shape z{h[0], 3, h[1]};
  AS_CHECK(input_shape(g, n, 0) == z && input_shape(g, n, 1) == z, "gru_cell: x and r must be ",
           shape_str(z), " (batch, rows z r h, units) for an h ", shape_str(h), ", got ",
           shape_str(input_shape(g, n, 0)), " and ", shape_str(input_shape(g, n, 1)));
  check_mask_and_dnext(g, n, gradient, "gru_cell", h[0], h);
  return {h, DType::F32};
}

ShapeAndType gru_cell_infer(const Graph& g, const Node& n) {
  return gru_check(g, n, false);
}
ShapeAndType gru_rows_grad_infer(const Graph& g, const Node& n) {
  const Shape& h = gru_check(g, n, true).shape;
  return {{h[0], 3, h[1]}, DType::F32};
}
ShapeAndType gru_dh_infer(const Graph& g, const Node& n) {
  return gru_check(g, n, true);
}

void gru_cell_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                     const KernelContext&) {
  const GruOperands a = gru_operands(in, has_mask(n, false));
  float* next = out.f32();
  over_rows(a.batch, a.units,
            [&](auto lanes, int64_t b, int64_t u) { gru_units<decltype(lanes)>(a, b, u, next); });
}

// units(a, dnext, b, u) over every row b and unit u of the gradient op n.
template <typename Units>
void gru_grad_rows(const Node& n, std::span<Tensor* const> in, const Units& units) {
  const GruOperands a = gru_operands(in, has_mask(n, true));
  const float* dnext = in.back()->f32();
  over_rows(a.batch, a.units,
            [&](auto lanes, int64_t b, int64_t u) { units(lanes, a, dnext, b, u); });
}
void gru_dx_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  gru_grad_rows(n, in, [&](auto lanes, const GruOperands& a, const float* d, int64_t b, int64_t u) {
    gru_units_grad<decltype(lanes)>(a, d, b, u, out.f32(), nullptr);
  });
}
void gru_dr_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  gru_grad_rows(n, in, [&](auto lanes, const GruOperands& a, const float* d, int64_t b, int64_t u) {
    gru_units_grad<decltype(lanes)>(a, d, b, u, nullptr, out.f32());
  });
}
void gru_dh_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  gru_grad_rows(n, in, [&](auto lanes, const GruOperands& a, const float* d, int64_t b, int64_t u) {
    gru_units_dh<decltype(lanes)>(a, d, b, u, out.f32());
  });
}

// The mask takes no gradient.
std::vector<Value> gru_cell_vjp(Graph& g, int id, Value dnext) {
  const Node& n = g.node(id);
  const std::vector<Value> in = inputs_and(g, id, dnext);
  std::vector<Value> grads{g.add(Op::GruCellGradX, in), g.add(Op::GruCellGradR, in),
                           g.add(Op::GruCellGradH, in)};
  if (n.inputs.size() == 4) grads.push_back(Value{});
  return grads;
}

// Batch and units are parallel; the three rows of a unit stay on one
// device (a whole loop).
LoopNest gru_loops(const Graph& g, const Node& n) {
  const Shape& h = input_shape(g, n, 2);
  LoopNest nest;
  const int b = nest.add({h[0]}), u = nest.add({h[1]});
  const int row = nest.add({3, Loop::Kind::Whole});
  const std::vector<int> z{b, row, u}, hu{b, u};
  nest.inputs = {z, z, hu};
  const bool gradient = n.op != Op::GruCell;
  if (has_mask(n, gradient)) nest.inputs.push_back({b, -1});
  if (gradient) nest.inputs.push_back(hu);
  nest.output = n.op == Op::GruCellGradX || n.op == Op::GruCellGradR ? z : hu;
  return nest;
}

ShardDecision gru_rule(const ShardQuery& q) {
  return follow_inputs(gru_loops(q.graph, q.node), q.inputs);
}

// Per unit: two sigmoids and a tanh (~12 operations each) and about eight
// more; the gradients recompute them and add about fifteen.
OpCost gru_cell_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 45.0);
}
OpCost gru_rows_grad_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 60.0 / 3);
}
OpCost gru_dh_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 20.0);  // z's sigmoid and four more
}

// Batch and units are parallel; the four gates of a unit and its two
// states stay on one device (whole loops).
LoopNest lstm_loops(const Graph& g, const Node& n) {
  const Shape& state = input_shape(g, n, 2);
  LoopNest nest;
  const int b = nest.add({state[1]}), u = nest.add({state[2]});
  const int gate = nest.add({4, Loop::Kind::Whole}), s = nest.add({2, Loop::Kind::Whole});
  const std::vector<int> z{b, gate, u}, st{s, b, u};
  nest.inputs = {z, z, st};
  const bool gradient = n.op != Op::LstmCell;
  if (has_mask(n, gradient)) nest.inputs.push_back({b, -1});
  if (gradient) nest.inputs.push_back(st);
  nest.output = n.op == Op::LstmCellGrad ? z : st;
  return nest;
}

ShardDecision lstm_rule(const ShardQuery& q) {
  return follow_inputs(lstm_loops(q.graph, q.node), q.inputs);
}

// Per unit: three sigmoids and two tanh (~12 operations each) and about
// ten more; the gradients recompute them and add about twenty.
OpCost lstm_cell_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 70.0 / 2);  // two outputs (h, c) per unit
}
OpCost lstm_dz_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 90.0 / 4);
}
OpCost lstm_dstate_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 90.0 / 2);
}

}  // namespace

void register_recurrent_ops(std::vector<OpDef>& t) {
  t[size_t(Op::LstmCell)] = {.name = "lstm_cell",
                             .infer = lstm_cell_infer,
                             .kernel = lstm_cell_kernel,
                             .vjp = lstm_cell_vjp,
                             .shard = lstm_rule,
                             .loops = lstm_loops,
                             .cost = lstm_cell_cost};
  t[size_t(Op::LstmCellGrad)] = {.name = "lstm_cell_grad",
                                 .infer = lstm_dz_infer,
                                 .kernel = lstm_dz_kernel,
                                 .shard = lstm_rule,
                                 .loops = lstm_loops,
                                 .cost = lstm_dz_cost};
  t[size_t(Op::LstmCellStateGrad)] = {.name = "lstm_cell_state_grad",
                                      .infer = lstm_dstate_infer,
                                      .kernel = lstm_dstate_kernel,
                                      .shard = lstm_rule,
                                      .loops = lstm_loops,
                                      .cost = lstm_dstate_cost};
  t[size_t(Op::GruCell)] = {.name = "gru_cell",
                            .infer = gru_cell_infer,
                            .kernel = gru_cell_kernel,
                            .vjp = gru_cell_vjp,
                            .shard = gru_rule,
                            .loops = gru_loops,
                            .cost = gru_cell_cost};
  t[size_t(Op::GruCellGradX)] = {.name = "gru_cell_grad_x",
                                 .infer = gru_rows_grad_infer,
                                 .kernel = gru_dx_kernel,
                                 .shard = gru_rule,
                                 .loops = gru_loops,
                                 .cost = gru_rows_grad_cost};
  t[size_t(Op::GruCellGradR)] = {.name = "gru_cell_grad_r",
                                 .infer = gru_rows_grad_infer,
                                 .kernel = gru_dr_kernel,
                                 .shard = gru_rule,
                                 .loops = gru_loops,
                                 .cost = gru_rows_grad_cost};
  t[size_t(Op::GruCellGradH)] = {.name = "gru_cell_grad_h",
                                 .infer = gru_dh_infer,
                                 .kernel = gru_dh_kernel,
                                 .shard = gru_rule,
                                 .loops = gru_loops,
                                 .cost = gru_dh_cost};
}

}  // namespace autoshard
