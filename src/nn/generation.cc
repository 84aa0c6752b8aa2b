#include "autoshard/nn/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>

#include "autoshard/error.h"
#include "autoshard/ir/graph.h"
#include "autoshard/plan/distribution.h"
#include "tensor/quantize.h"

namespace autoshard {

namespace {

void check(const GenerationOptions& o) {
  AS_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  AS_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
           "generate: temperature must be >= 0 (0: greedy), got ", o.temperature);
  AS_CHECK(o.top_k >= 0, "generate: top_k must be >= 0 (0: all tokens), got ", o.top_k);
  AS_CHECK(o.top_p > 0 && o.top_p <= 1, "generate: top_p must be in (0, 1], got ", o.top_p);
}

// A uniform draw in [0, 1) from 53 bits: the same on every platform
// (mt19937_64's output is fixed by the standard; std's distributions are not).
double uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

double Generation::prefill_tokens_per_s() const {
  return prefill_seconds > 0 ? double(prompt_tokens) / prefill_seconds : 0;
}

double Generation::decode_tokens_per_s() const {
  const double decoded = output_ids.size() > 1 ? double(output_ids.size() - 1) : 0;
  return decode_seconds > 0 ? decoded / decode_seconds : 0;
}

int32_t choose_token(std::span<const float> logits, const GenerationOptions& o,
                     std::mt19937_64& rng) {
  AS_CHECK(!logits.empty(), "generate: no logits to choose from");
  // A NaN or infinite logit would silently pick token 0 (every comparison false).
  for (size_t v = 0; v < logits.size(); ++v)
    AS_CHECK(std::isfinite(logits[v]), "generate: the logit of token ", v, " is ", logits[v],
             "; the weights overflow in f32 or are damaged (check them, or run `autoshard eval`)");
  if (o.temperature == 0)  // the first of the largest, as torch.argmax
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Candidates by probability, most likely first (ties: lower id first).
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = order.size();
  if (o.top_k > 0) keep = std::min<size_t>(keep, size_t(o.top_k));
  const double top = logits[order[0]] / o.temperature;
  std::vector<double> p(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i)
    total += p[i] = std::exp(logits[order[i]] / o.temperature - top);
  if (o.top_p < 1) {  // the smallest head of the order whose mass reaches top_p
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < o.top_p * total) mass += p[n++];
    keep = std::max<size_t>(n, 1);
    total = mass;
  }
  double u = uniform(rng) * total;
  for (size_t i = 0; i < keep; ++i) {
    if (u < p[i]) return order[i];
    u -= p[i];
  }
  return order[keep - 1];  // rounding left u just past the last kept token
}

Generation generate(Model& model, const std::vector<int32_t>& prompt, const GenerationOptions& o,
                    const std::function<void(int32_t)>& on_token) {
  check(o);
  AS_CHECK(!prompt.empty(), "generate: the prompt needs at least one token");
  const int64_t P = static_cast<int64_t>(prompt.size());
  // The last new token is never fed back: the cache holds P + N - 1 positions.
  const int64_t needed = P + std::max<int64_t>(o.max_new_tokens - 1, 0);
  const int64_t cache = o.cache_length > 0 ? o.cache_length : needed;
  AS_CHECK(needed <= cache, "generate: ", P, " prompt tokens and ", o.max_new_tokens,
           " new ones need a key-value cache of ", needed, " positions, not ", cache);
  std::mt19937_64 rng(o.seed);
  Generation out;
  out.prompt_tokens = P;
  using Clock = std::chrono::steady_clock;
  auto emit = [&](const Tensor& logits) {  // logits [1, T, V]: choose from the last position
    const int64_t V = logits.dim(2), T = logits.dim(1);
    const int32_t token =
        choose_token({logits.f32() + (T - 1) * V, static_cast<size_t>(V)}, o, rng);
    out.output_ids.push_back(token);
    if (on_token) on_token(token);
    return token;
  };
  if (o.max_new_tokens == 0) return out;
  // Both steps compiled (and planned) first: the times are the runs'.
  model.prepare_generation(1, P, cache);
  if (o.max_new_tokens > 1) model.prepare_generation(1, 1, cache);
  auto t0 = Clock::now();
  int32_t token = emit(model.predict_cached(Tensor::from({1, P}, prompt), 0, cache));
  out.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int64_t i = 1; i < o.max_new_tokens; ++i) {
    if (std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), token) !=
        o.stop_token_ids.end())
      break;
    token = emit(model.predict_cached(Tensor::from({1, 1}, std::span<const int32_t>(&token, 1)),
                                      P + i - 1, cache));
  }
  out.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

// ---- Quantized weights ----

struct QuantizedWeights::State {
  WeightsDType dtype = WeightsDType::F32;
  std::map<std::string, Weight> weights;
  // The weights with compact copies, as the model's generation steps hold
  // them (Model::held_weights; the model may be gone before this).
  std::weak_ptr<Model::HeldWeights> model;
  std::vector<std::string> held;
  // The device blocks given a compact copy, with their copies.
  struct Block {
    Tensor f32;
    std::shared_ptr<const QuantizedMatrix> copy;
  };
  std::mutex mutex;  // guards `blocks` (devices may make their blocks at once)
  std::vector<Block> blocks;
  bool paused = false;

  void attach(Tensor block, std::shared_ptr<const QuantizedMatrix> copy) {
    std::lock_guard lock(mutex);
    if (!paused) block.set_quantized(copy);
    blocks.push_back({std::move(block), std::move(copy)});
  }
  // The model's next generation steps read the compact copies (or not).
  void hold(bool on) {
    if (std::shared_ptr<Model::HeldWeights> m = model.lock())
      for (const std::string& path : held) on ? m->hold(path, dtype) : m->release(path, dtype);
  }
  // Takes the copies off their blocks (those another QuantizedWeights has
  // since given its own copy keep it) and the formats off the model's graphs.
  void detach() {
    for (Block& b : blocks)
      if (b.f32.quantized() == b.copy.get()) b.f32.set_quantized(nullptr);
    hold(false);
  }
  ~State() { detach(); }
};

QuantizedWeights::QuantizedWeights() : state_(std::make_shared<State>()) {}
QuantizedWeights::~QuantizedWeights() = default;
QuantizedWeights::QuantizedWeights(QuantizedWeights&&) noexcept = default;
QuantizedWeights& QuantizedWeights::operator=(QuantizedWeights&&) noexcept = default;
WeightsDType QuantizedWeights::dtype() const {
  return state_->dtype;
}
const std::map<std::string, QuantizedWeights::Weight>& QuantizedWeights::weights() const {
  return state_->weights;
}
int64_t QuantizedWeights::compact_blocks() const {
  std::lock_guard lock(state_->mutex);
  return static_cast<int64_t>(state_->blocks.size());
}

void QuantizedWeights::pause() {
  std::lock_guard lock(state_->mutex);
  if (!state_->paused) state_->detach();
  state_->paused = true;
}

void QuantizedWeights::resume() {
  std::lock_guard lock(state_->mutex);
  if (state_->paused) {
    for (State::Block& b : state_->blocks) b.f32.set_quantized(b.copy);
    state_->hold(true);
  }
  state_->paused = false;
}

namespace {

// Which axes of each weight are its outputs in the products that read it:
// the letters an einsum keeps. A weight no einsum reads (a gathered table)
// has one channel per row.
std::map<std::string, std::vector<bool>> output_axes(const Graph& g) {
  std::map<std::string, std::vector<bool>> out;
  for (int id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    const EinsumAttrs* product = n.attr_if<EinsumAttrs>();
    if (product == nullptr) continue;
    const EinsumAttrs& e = *product;
    for (int i = 0; i < 2; ++i) {
      const Node& w = g.node(n.inputs[i]);
      if (!w.is_weight() || out.count(w.leaf().name)) continue;
      const std::string& letters = i == 0 ? e.a : e.b;
      std::vector<bool> axes;
      for (char c : letters) axes.push_back(e.out.find(c) != std::string::npos);
      out[w.leaf().name] = axes;
    }
  }
  return out;
}

// A weight rounded whole: its elements in the format and, for int8, one
// scale per output channel (channels numbered row-major over the output
// axes).
struct Rounded {
  Shape shape;
  std::vector<bool> outputs;  // per axis
  std::vector<uint16_t> bf16;
  std::vector<int8_t> codes;
  std::vector<float> scales;
};

// Row-major strides over the output axes only (0 on the others): element
// index -> channel.
std::vector<int64_t> channel_strides(const Shape& shape, const std::vector<bool>& outputs) {
  std::vector<int64_t> s(shape.size(), 0);
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;)
    if (outputs[d]) s[d] = stride, stride *= shape[d];
  return s;
}

// Calls f(flat, channel) for every element of `shape` in row-major order.
template <typename F>
void for_each_channel(const Shape& shape, const std::vector<int64_t>& cs, F f) {
  const int64_t total = numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t channel = 0;
  for (int64_t i = 0; i < total; ++i) {
    f(i, channel);
    for (size_t d = shape.size(); d-- > 0;) {
      channel += cs[d];
      if (++idx[d] < shape[d]) break;
      channel -= cs[d] * shape[d];
      idx[d] = 0;
    }
  }
}

Rounded round_whole(const std::string& path, const Tensor& w, std::vector<bool> outputs,
                    WeightsDType dtype) {
  Rounded r{w.shape(), std::move(outputs), {}, {}, {}};
  const float* x = w.f32();
  const int64_t n = w.numel();
  if (dtype == WeightsDType::BF16) {
    r.bf16.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) r.bf16[i] = bf16_round(x[i]);
    return r;
  }
  const std::vector<int64_t> cs = channel_strides(r.shape, r.outputs);
  int64_t channels = 1;
  for (size_t d = 0; d < r.shape.size(); ++d)
    if (r.outputs[d]) channels *= r.shape[d];
  std::vector<float> max_abs(size_t(channels), 0.0f);
  for_each_channel(r.shape, cs, [&](int64_t i, int64_t c) {
    AS_CHECK(std::isfinite(x[i]), "weight '", path, "' holds ", x[i], " at element ", i,
             "; int8 needs finite weights (use f32 or bf16)");
    max_abs[c] = std::max(max_abs[c], std::fabs(x[i]));
  });
  r.scales.resize(size_t(channels));
  for (int64_t c = 0; c < channels; ++c) r.scales[c] = int8_scale(max_abs[c]);
  r.codes.resize(size_t(n));
  for_each_channel(r.shape, cs,
                   [&](int64_t i, int64_t c) { r.codes[i] = int8_code(x[i], r.scales[c]); });
  return r;
}

// The output axes lead ([outputs, inner]), trail ([inner, outputs]), or
// interleave (no matrix view: the kernels never see this weight).
enum class Orientation { OutputsFirst, InnerFirst, Neither };
Orientation orientation(const std::vector<bool>& outputs) {
  size_t lead = 0;
  while (lead < outputs.size() && outputs[lead]) ++lead;
  size_t trail = 0;
  while (trail < outputs.size() && outputs[outputs.size() - 1 - trail]) ++trail;
  const size_t count = size_t(std::count(outputs.begin(), outputs.end(), true));
  if (count == 0 || count == outputs.size()) return Orientation::Neither;
  if (lead == count) return Orientation::OutputsFirst;
  if (trail == count) return Orientation::InnerFirst;
  return Orientation::Neither;
}

// Device `device`'s block of a rounded weight: its dequantized f32 values
// and the compact copy in the block's own element order.
Tensor block_of_rounded(const Rounded& r, const Sharding& layout, const DeviceMesh& mesh,
                        int device, WeightsDType dtype, QuantizedMatrix* q) {
  const Shape local = layout.local_shape(r.shape, mesh, device);
  const std::vector<int64_t> off = layout.offsets(r.shape, mesh, device);
  const std::vector<int64_t> gs = strides_of(r.shape);
  const std::vector<int64_t> cs = channel_strides(r.shape, r.outputs);
  Tensor block(local);
  float* out = block.f32();
  const int64_t n = block.numel();
  if (q) {
    (dtype == WeightsDType::BF16 ? q->bf16.resize(size_t(n)) : q->codes.resize(size_t(n)));
    q->outputs = 1;
    for (size_t d = 0; d < local.size(); ++d)
      if (r.outputs[d]) q->outputs *= local[d];
    q->inner = q->outputs ? n / q->outputs : 0;
    if (dtype == WeightsDType::Int8) q->scales.assign(size_t(q->outputs), 0.0f);
  }
  const std::vector<int64_t> lcs = channel_strides(local, r.outputs);
  std::vector<int64_t> idx(local.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t g = 0, c = 0, lc = 0;
    for (size_t d = 0; d < local.size(); ++d)
      g += (idx[d] + off[d]) * gs[d], c += (idx[d] + off[d]) * cs[d], lc += idx[d] * lcs[d];
    if (dtype == WeightsDType::BF16) {
      out[i] = bf16_widen(r.bf16[g]);
      if (q) q->bf16[i] = r.bf16[g];
    } else {
      out[i] = int8_value(r.codes[g], r.scales[c]);
      if (q) q->codes[i] = r.codes[g], q->scales[lc] = r.scales[c];
    }
    for (size_t d = local.size(); d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
  return block;
}

}  // namespace

QuantizedWeights quantize_weights(Model& model, WeightsDType dtype) {
  QuantizedWeights result;
  std::shared_ptr<QuantizedWeights::State> state = result.state_;
  state->dtype = dtype;
  if (dtype == WeightsDType::F32) return result;
  const std::map<std::string, std::vector<bool>> used =
      output_axes(model.generation_graph(1, 1, 1));
  // On one device gather_weight returns the live storage (made now if it
  // was not); on a mesh a copy, and the blocks are made from a source.
  const std::shared_ptr<Distribution>& dist = model.distribution_strategy();
  const bool one_device = !dist || dist->mesh().size() <= 1;
  std::map<std::string, WeightSource> sources;
  for (const std::string& path : model.weight_paths()) {
    // (Its compact copy would sit beside a widened copy, not the live storage.)
    AS_CHECK(model.weight_dtype(path) == DType::F32, "quantize_weights: weight '", path,
             "' is held in bf16 (Model::hold_frozen_weights_in_bf16); quantize a model whose "
             "weights are f32 (hold_frozen_weights_in_bf16(false) first)");
    const Tensor whole = model.gather_weight(path);
    if (whole.rank() < 2) continue;  // norms and biases stay f32
    std::vector<bool> outputs(size_t(whole.rank()), false);
    outputs[0] = true;  // a gathered table: one channel per row
    if (auto it = used.find(path); it != used.end()) outputs = it->second;
    auto rounded = std::make_shared<const Rounded>(round_whole(path, whole, outputs, dtype));
    state->weights[path] = {whole.numel(), int64_t(rounded->bf16.size()) * 2 +
                                               int64_t(rounded->codes.size()) +
                                               int64_t(rounded->scales.size()) * 4};
    const Orientation o = orientation(outputs);
    if (o != Orientation::Neither) state->held.push_back(path);
    if (one_device) {  // `whole` is the live block: round it in place
      auto q = std::make_shared<QuantizedMatrix>();
      q->dtype = dtype;
      q->outputs_first = o == Orientation::OutputsFirst;
      const Tensor block = block_of_rounded(*rounded, Sharding::replicated(whole.rank()),
                                            DeviceMesh(), 0, dtype, q.get());
      model.set_weight(path, block);
      if (o != Orientation::Neither) state->attach(whole, std::move(q));
      continue;
    }
    WeightSource source;
    source.check = [](const std::string&, const Shape&) {};
    source.read = [rounded, state, dtype, o](const Shape&, const Sharding& layout,
                                             const DeviceMesh& mesh, int device) {
      if (o == Orientation::Neither)
        return block_of_rounded(*rounded, layout, mesh, device, dtype, nullptr);
      auto q = std::make_shared<QuantizedMatrix>();
      q->dtype = dtype;
      q->outputs_first = o == Orientation::OutputsFirst;
      Tensor block = block_of_rounded(*rounded, layout, mesh, device, dtype, q.get());
      state->attach(block, std::move(q));
      return block;
    };
    sources[path] = std::move(source);
  }
  model.load_weights(sources);
  state->model = model.held_weights();
  state->hold(true);
  return result;
}

}  // namespace autoshard
