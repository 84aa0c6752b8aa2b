#include "autoshard/nn/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "autoshard/error.h"

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

}  // namespace autoshard
