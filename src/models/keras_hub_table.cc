#include "models/keras_hub_table.h"

#include <tuple>

namespace autoshard::keras_hub {

std::string numbered(const std::string& name, int64_t k) {
  return k == 0 ? name : cat(name, "_", k);
}

void multi_head_attention(Table& t, const std::string& path, const std::string& h5, int64_t C,
                          int64_t H, int64_t D, const MhaNames& n) {
  const std::pair<const char*, const std::string*> qkv[] = {
      {"query", &n.q}, {"key", &n.k}, {"value", &n.v}};
  for (auto [name, ours] : qkv) {
    // Keras >= 3.3's public names of MultiHeadAttention's sublayers (io/keras_hub.h).
    const std::string p = cat(path, "/", name), g = cat(h5, "/", name, "_dense/vars/");
    if (n.heads_first)
      t.add(*ours + ".kernel", p + "/kernel", g + "0", {C, H, D}, {C, H, D}, {1, 2, 0});
    else
      t.same(*ours + ".kernel", p + "/kernel", g + "0", {C, H, D});
    const bool has_bias = std::string(name) != "key" || n.key_bias;
    t.same(has_bias ? *ours + ".bias" : "", p + "/bias", g + "1", {H, D});
  }
  const std::string p = path + "/attention_output", g = h5 + "/output_dense/vars/";
  if (n.heads_first)
    t.add(n.o + ".kernel", p + "/kernel", g + "0", {H, D, C}, {H, D, C}, {2, 0, 1});
  else
    t.same(n.o + ".kernel", p + "/kernel", g + "0", {H, D, C});
  t.same(n.o + ".bias", p + "/bias", g + "1", {C});
}

void feedforward(Table& t, const std::string& path, const std::string& h5, int64_t C, int64_t F,
                 const std::string& up, const std::string& down, bool transposed) {
  const std::tuple<const char*, const std::string*, int64_t, int64_t> dense[] = {
      {"intermediate", &up, C, F}, {"output", &down, F, C}};
  for (auto [name, ours, in, out] : dense) {
    const std::string p = cat(path, "feedforward_", name, "_dense/"),
                      g = cat(h5, "_feedforward_", name, "_dense/vars/");
    if (transposed)
      t.transposed(*ours + ".kernel", p + "kernel", g + "0", in, out);
    else
      t.same(*ours + ".kernel", p + "kernel", g + "0", {in, out});
    t.same(*ours + ".bias", p + "bias", g + "1", {out});
  }
}

}  // namespace autoshard::keras_hub
