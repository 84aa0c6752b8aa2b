// Tracing builders: functions that append primitive ops to a Value's Graph.
// Layers, losses, autodiff and optimizers are all written with these.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autoshard/ir/graph.h"

namespace autoshard::ops {

// General two-operand einsum ("btc,cd->btd", "bqhd,bkhd->bhqk"). Letters
// that appear in only one operand and not in the output are summed first.
Value einsum(const std::string& equation, Value a, Value b);

Value add(Value a, Value b);
Value sub(Value a, Value b);
Value mul(Value a, Value b);
Value div(Value a, Value b);
Value scale(Value x, double factor);
Value constant(Graph& g, Shape shape, double value);
// i32 positions 0..n-1 along the last axis.
Value iota(Graph& g, Shape shape);

Value gelu(Value x, bool tanh_approximation = true);
Value relu(Value x);
Value tanh(Value x);
// x * sigmoid(x), Llama's MLP activation.
Value silu(Value x);

// One elementwise function of x (UnaryFn: sigmoid, elu, exp, ...); `alpha`
// is LeakyRelu's negative slope or Elu's alpha.
Value unary(Value x, UnaryFn fn, double alpha = 0);
Value sigmoid(Value x);
// cap * tanh(x / cap): x squashed smoothly into (-cap, cap) (Gemma 2's
// final_logit_softcapping); cap > 0.
Value soft_cap(Value x, double cap);
// x - log(sum(exp(x))) over the last axis, shifted by the row maximum.
Value log_softmax(Value x);

// Convolution, channels last, 1 or 2 spatial dims: x [b, *s, cin], w [*k,
// cin/groups, cout] -> [b, *o, cout] (see ConvAttrs; attrs.shape unused).
Value conv(Value x, Value w, ConvAttrs attrs);
// Its gradient with respect to x, given dy [b, *o, cout] and w: x's shape is
// attrs.shape. Also the transposed convolution of dy.
Value conv_grad_input(Value dy, Value w, ConvAttrs attrs);
// Max or average pooling over the spatial dims of x [b, *s, c].
Value pool(Value x, PoolAttrs attrs);
// Zeros before (`lo`) and after (`hi`) each dim; negative values crop.
Value pad(Value x, std::vector<int64_t> lo, std::vector<int64_t> hi);
// The parts (equal off `axis`) one after another along `axis`: each element
// moves once, where pads and adds would move the whole once per part.
Value concat(const std::vector<Value>& parts, int64_t axis);
// x resampled along `dim` to `size` positions: half-pixel centres, no
// antialiasing, bilinear (clamped at the edges) or nearest (Keras's
// Resizing; see ResizeAttrs). Linear in x, with its transpose as gradient.
Value resize(Value x, int dim, int64_t size, bool nearest);
// TensorFlow's 'same' padding of one spatial dim: the output has
// ceil(in / stride) positions; the odd zero goes after. Returns {lo, hi}.
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t window, int64_t stride,
                                         int64_t dilation = 1);

Value reduce_sum(Value x, std::vector<int64_t> axes);
Value reduce_mean(Value x, std::vector<int64_t> axes);
Value broadcast_to(Value x, Shape shape);
// Sums x down to `shape` (the adjoint of numpy broadcasting).
Value sum_to(Value x, Shape shape);

Value softmax(Value x, bool causal = false);
// softmax(scale * q k^T) v per batch and head, fused: q [b,t,h,dk], k
// [b,s,h,dk], v [b,s,h,dv] -> [b,t,h,dv], never forming the t x s scores.
// With `window` > 0 (causal), a query sees only the last `window` keys up
// to its own (sliding-window attention). With `softcap` > 0 each score
// becomes softcap * tanh(score / softcap) before the softmax (Gemma 2).
Value attention(Value q, Value k, Value v, bool causal, double scale, int64_t window = 0,
                double softcap = 0);
// Causal attention of queries at `positions` [t] (i32) among the keys: query
// i sees keys 0 .. positions[i] (generation over a key-value cache; no
// gradient).
Value attention(Value q, Value k, Value v, Value positions, double scale, int64_t window = 0,
                double softcap = 0);
// Writes rows [b, t, ...] into cache [b, s, ...] at `positions` [t] (i32), in
// place; returns the cache, to read after the write.
Value cache_write(Value cache, Value rows, Value positions);
// Over the last axis: (x - mean) / sqrt(var + epsilon), or with
// center = false x / sqrt(mean(x^2) + epsilon) (RMSNorm's).
// Rotary position embedding of x [b, t, ..., d] (heads in the middle) at
// `positions` [t] (i32): pairs (i, i + d/2) turned by position * inv_freq[i].
Value rotary(Value x, Value positions, RotaryAttrs attrs);
// One step of Keras's LSTM (activation tanh, recurrent_activation sigmoid)
// in one kernel: z = x + r [b, 4, u] holds the gates i, f, c, o; state
// [2, b, u] holds h then c. Returns the next state: c' = f c + i tanh(c_z),
// h' = o tanh(c'); with `mask` [b, 1] each row becomes state + m (next -
// state), so a masked step (m = 0) carries the state over.
Value lstm_cell(Value x, Value r, Value state, Value mask = {});
// One step of Keras's GRU with reset_after (activation tanh,
// recurrent_activation sigmoid) in one kernel: x [b, 3, u] is the step's
// input projection and r [b, 3, u] its recurrent product with the recurrent
// bias, each holding the rows z, r, h. Returns the next h [b, u]: z and the
// reset gate are sigmoids of x + r, the candidate tanh(x_h + reset r_h),
// and h' = z h + (1 - z) candidate; with `mask` [b, 1] each row becomes h +
// m (h' - h).
Value gru_cell(Value x, Value r, Value h, Value mask = {});
Value normalize(Value x, double epsilon, bool center = true);
// Per-row softmax cross-entropy; targets are i32 class ids. Traced as three
// steps (row maxima, statistics, loss) so a split class axis shards cleanly.
Value cross_entropy(Value logits, Value targets);

// Rows of `table` [n, ...] at `ids` (i32) + `id_offset`: [ids..., ...].
Value gather(Value table, Value ids, int64_t id_offset = 0);
Value reshape(Value x, Shape shape);
Value transpose(Value x, std::vector<int64_t> perm);
Value dropout(Value x, double rate, uint64_t seed);

}  // namespace autoshard::ops

namespace autoshard {
inline Value operator+(Value a, Value b) {
  return ops::add(a, b);
}
inline Value operator-(Value a, Value b) {
  return ops::sub(a, b);
}
inline Value operator*(Value a, Value b) {
  return ops::mul(a, b);
}
inline Value operator/(Value a, Value b) {
  return ops::div(a, b);
}
}  // namespace autoshard
