// The KerasHub variable of every autoshard weight, backbone by backbone
// (keras_hub.h). The names and shapes follow keras-hub's layers; the
// correspondence with Hugging Face's tensors (and so with autoshard's
// weights) follows its utils/transformers/convert_<family>.py.
#include <numeric>
#include <tuple>

#include "autoshard/error.h"
#include "autoshard/io/keras_hub.h"

namespace autoshard::keras_hub {

Shape Variable::weight_shape() const {
  Shape s;
  for (int p : perm) s.push_back(split[p]);
  if (!s.empty()) s[0] += row_offset;
  return s;
}

namespace {

// For each dim of `split`, the Keras dim it is part of, and whether it is
// that Keras dim's first (outermost) factor.
void split_owners(const Variable& v, std::vector<int>& owner, std::vector<bool>& major) {
  owner.assign(v.split.size(), 0);
  major.assign(v.split.size(), false);
  // A Keras dim is the product of one or more consecutive split dims.
  size_t s = 0;
  for (size_t k = 0; k < v.keras_shape.size(); ++k) {
    int64_t covered = 1;
    for (bool first = true; first || covered < v.keras_shape[k]; first = false, ++s) {
      AS_CHECK(s < v.split.size(), "KerasHub variable '", v.path, "': split does not cover it");
      owner[s] = static_cast<int>(k);
      major[s] = covered == 1;  // only size-1 dims before it
      covered *= v.split[s];
    }
  }
  // Trailing size-1 dims belong to the last Keras dim.
  for (; s < v.split.size(); ++s) owner[s] = static_cast<int>(v.keras_shape.size()) - 1;
}

}  // namespace

std::vector<int> Variable::keras_dims() const {
  std::vector<int> owner;
  std::vector<bool> major;
  split_owners(*this, owner, major);
  std::vector<int> dims;
  for (int p : perm) dims.push_back(owner[p]);
  return dims;
}

bool Variable::major_in_keras_dim(int i) const {
  std::vector<int> owner;
  std::vector<bool> major;
  split_owners(*this, owner, major);
  return major[perm[i]];
}

namespace {

std::string numbered(const std::string& name, int64_t k) {
  return k == 0 ? name : cat(name, "_", k);
}

// Collects variables: `path` and `h5` prefixes joined to each variable's own
// name and index.
class Table {
 public:
  Variables out;

  // A variable stored as the weight is (same shape, same order).
  void same(const std::string& weight, const std::string& path, const std::string& h5,
            const Shape& shape, bool task = false) {
    std::vector<int> id(shape.size());
    std::iota(id.begin(), id.end(), 0);
    add(weight, path, h5, shape, shape, id, task);
  }
  // A Keras (in, out) kernel of an (out, in) weight.
  void transposed(const std::string& weight, const std::string& path, const std::string& h5,
                  int64_t in, int64_t out, bool task = false) {
    add(weight, path, h5, {in, out}, {in, out}, {1, 0}, task);
  }
  void add(const std::string& weight, const std::string& path, const std::string& h5,
           const Shape& keras, const Shape& split, const std::vector<int>& perm, bool task = false,
           int64_t row_offset = 0) {
    out.variables.push_back({weight, path, h5, task, keras, split, perm, row_offset});
  }
  // A LayerNormalization's gamma and beta.
  void layer_norm(const std::string& weight, const std::string& path, const std::string& h5,
                  int64_t C) {
    same(weight + ".gamma", path + "/gamma", h5 + "/vars/0", {C});
    same(weight + ".beta", path + "/beta", h5 + "/vars/1", {C});
  }
};

// Keras's MultiHeadAttention (TransformerEncoder/Decoder): kernels
// (C, H, D) and (H, D, C), biases (H, D) and (C); autoshard's weight paths
// for query, key, value and output, and their layouts.
struct MhaNames {
  std::string q, k, v, o;  // autoshard prefixes ("" for a Keras-only variable)
  bool heads_first;        // autoshard q/k/v kernels [H, D, C] (else [C, H, D], GPT-2)
  bool key_bias;           // autoshard has the key's bias
};

void multi_head_attention(Table& t, const std::string& path, const std::string& h5, int64_t C,
                          int64_t H, int64_t D, const MhaNames& n) {
  const std::pair<const char*, const std::string*> qkv[] = {
      {"query", &n.q}, {"key", &n.k}, {"value", &n.v}};
  for (auto [name, ours] : qkv) {
    const std::string p = cat(path, "/", name), g = cat(h5, "/_", name, "_dense/vars/");
    if (n.heads_first)
      t.add(*ours + ".kernel", p + "/kernel", g + "0", {C, H, D}, {C, H, D}, {1, 2, 0});
    else
      t.same(*ours + ".kernel", p + "/kernel", g + "0", {C, H, D});
    const bool has_bias = std::string(name) != "key" || n.key_bias;
    t.same(has_bias ? *ours + ".bias" : "", p + "/bias", g + "1", {H, D});
  }
  const std::string p = path + "/attention_output", g = h5 + "/_output_dense/vars/";
  if (n.heads_first)
    t.add(n.o + ".kernel", p + "/kernel", g + "0", {H, D, C}, {H, D, C}, {2, 0, 1});
  else
    t.same(n.o + ".kernel", p + "/kernel", g + "0", {H, D, C});
  t.same(n.o + ".bias", p + "/bias", g + "1", {C});
}

// TransformerEncoder/Decoder's feed-forward: the intermediate (C -> F) and
// output (F -> C) Dense layers, under autoshard's prefixes `up` and `down`;
// autoshard's kernels are Keras's transposed, but GPT-2's (Conv1D's layout).
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

}  // namespace

Variables gpt2_variables(const GPT2Config& c) {
  const int64_t C = c.n_embd, H = c.n_head, D = c.head_dim(), I = 4 * C;
  Table t;
  t.out.class_name = "GPT2Backbone";
  t.out.task_class_name = "GPT2CausalLM";
  t.same("wte.embeddings", "token_embedding/embeddings", "layers/reversible_embedding/vars/0",
         {c.vocab_size, C});
  t.same("wpe.embeddings", "position_embedding/embeddings", "layers/position_embedding/vars/0",
         {c.n_positions, C});
  for (int64_t b = 0; b < c.n_layer; ++b) {
    const std::string ours = cat("h.", b, "."), path = cat("transformer_layer_", b, "/");
    const std::string g = "layers/" + numbered("transformer_decoder", b) + "/";
    t.layer_norm(ours + "ln_1", path + "self_attention_layer_norm",
                 g + "_self_attention_layer_norm", C);
    const std::string a = ours + "attn.";
    multi_head_attention(t, path + "self_attention", g + "_self_attention_layer", C, H, D,
                         {a + "query", a + "key", a + "value", a + "attention_output",
                          /*heads_first=*/false, /*key_bias=*/false});
    t.layer_norm(ours + "ln_2", path + "feedforward_layer_norm", g + "_feedforward_layer_norm", C);
    feedforward(t, path, g, C, I, ours + "mlp.c_fc", ours + "mlp.c_proj", false);
  }
  t.layer_norm("ln_f", "layer_norm", "layers/layer_normalization", C);
  return t.out;
}

Variables opt_variables(const OPTConfig& c) {
  const int64_t C = c.hidden_size, H = c.num_attention_heads, D = c.head_dim(), F = c.ffn_dim;
  Table t;
  t.out.class_name = "OPTBackbone";
  t.out.task_class_name = "OPTCausalLM";
  const std::string e = "layers/token_and_position_embedding/";
  t.same("embed_tokens.embeddings", "embeddings/token_embedding/embeddings",
         e + "token_embedding/vars/0", {c.vocab_size, C});
  t.add("embed_positions.embeddings", "embeddings/position_embedding/embeddings",
        e + "position_embedding/vars/0", {c.max_position_embeddings, C},
        {c.max_position_embeddings, C}, {0, 1}, false, OPT::kPositionOffset);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = cat("layers.", i, "."), path = cat("transformer_layer_", i, "/");
    const std::string g = "layers/" + numbered("transformer_decoder", i) + "/";
    t.layer_norm(ours + "self_attn_layer_norm", path + "self_attention_layer_norm",
                 g + "_self_attention_layer_norm", C);
    const std::string a = ours + "self_attn.";
    multi_head_attention(t, path + "self_attention", g + "_self_attention_layer", C, H, D,
                         {a + "q_proj", a + "k_proj", a + "v_proj", a + "out_proj",
                          /*heads_first=*/true, /*key_bias=*/true});
    t.layer_norm(ours + "final_layer_norm", path + "feedforward_layer_norm",
                 g + "_feedforward_layer_norm", C);
    feedforward(t, path, g, C, F, ours + "fc1", ours + "fc2", true);
  }
  t.layer_norm("final_layer_norm", "layer_norm", "layers/layer_normalization", C);
  return t.out;
}

Variables bert_variables(const BertConfig& c) {
  AS_CHECK(!c.masked_lm, "KerasHub presets: the masked-LM head of ", c.model_type,
           " is not mapped (TextClassifier heads are)");
  const int64_t C = c.hidden_size, H = c.num_attention_heads, D = c.head_dim();
  const int64_t I = c.intermediate_size, L = c.num_labels;
  const bool rob = c.roberta();
  Table t;
  t.out.class_name = rob ? "RobertaBackbone" : "BertBackbone";
  t.out.task_class_name = rob ? "RobertaTextClassifier" : "BertTextClassifier";
  if (rob) {
    // TokenAndPositionEmbedding; Hugging Face numbers positions from
    // pad_token_id + 1, KerasHub from 0; no token types.
    const std::string e = "layers/token_and_position_embedding/";
    const int64_t offset = c.pad_token_id + 1, P = c.max_position_embeddings - offset;
    t.same("embeddings.word_embeddings.embeddings", "embeddings/token_embedding/embeddings",
           e + "token_embedding/vars/0", {c.vocab_size, C});
    t.add("embeddings.position_embeddings.embeddings", "embeddings/position_embedding/embeddings",
          e + "position_embedding/vars/0", {P, C}, {P, C}, {0, 1}, false, offset);
    t.out.zero_weights.push_back("embeddings.token_type_embeddings.embeddings");
  } else {
    t.same("embeddings.word_embeddings.embeddings", "token_embedding/embeddings",
           "layers/reversible_embedding/vars/0", {c.vocab_size, C});
    t.same("embeddings.position_embeddings.embeddings", "position_embedding/embeddings",
           "layers/position_embedding/vars/0", {c.max_position_embeddings, C});
    t.same("embeddings.token_type_embeddings.embeddings", "segment_embedding/embeddings",
           "layers/embedding/vars/0", {c.type_vocab_size, C});
  }
  t.layer_norm("embeddings.LayerNorm", "embeddings_layer_norm", "layers/layer_normalization", C);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = cat("encoder.layer.", i, "."),
                      path = cat("transformer_layer_", i, "/");
    const std::string g = "layers/" + numbered("transformer_encoder", i) + "/";
    const std::string a = ours + "attention.self.";
    multi_head_attention(t, path + "self_attention_layer", g + "_self_attention_layer", C, H, D,
                         {a + "query", a + "key", a + "value", ours + "attention.output.dense",
                          /*heads_first=*/true, /*key_bias=*/true});
    t.layer_norm(ours + "attention.output.LayerNorm", path + "self_attention_layer_norm",
                 g + "_self_attention_layer_norm", C);
    feedforward(t, path, g, C, I, ours + "intermediate.dense", ours + "output.dense", true);
    t.layer_norm(ours + "output.LayerNorm", path + "feedforward_layer_norm",
                 g + "_feedforward_layer_norm", C);
  }
  // BERT's pooler is the backbone's pooled_dense; RoBERTa's classifier
  // head (dense + tanh, then out_proj) is the task's pooled_dense and logits.
  const std::string pooled = rob ? "classifier.dense" : "pooler.dense";
  const std::string logits = rob ? "classifier.out_proj" : "classifier";
  t.transposed(pooled + ".kernel", "pooled_dense/kernel", "layers/dense/vars/0", C, C, rob);
  t.same(pooled + ".bias", "pooled_dense/bias", "layers/dense/vars/1", {C}, rob);
  const std::string lg = rob ? "layers/dense_1/vars/" : "layers/dense/vars/";
  t.transposed(logits + ".kernel", "logits/kernel", lg + "0", C, L, true);
  t.same(logits + ".bias", "logits/bias", lg + "1", {L}, true);
  return t.out;
}

namespace {

// The Llama-style decoders (LlamaBackbone, MistralBackbone, QwenBackbone):
// classes differ, attributes and names agree.
struct LlamaStyle {
  const char *backbone, *task, *decoder, *norm;
};

LlamaStyle llama_style(const std::string& model_type) {
  if (model_type == "llama")
    return {"LlamaBackbone", "LlamaCausalLM", "llama_transformer_decoder", "llama_layer_norm"};
  if (model_type == "mistral")
    return {"MistralBackbone", "MistralCausalLM", "mistral_transformer_decoder",
            "mistral_layer_normalization"};
  if (model_type == "qwen2")
    return {"QwenBackbone", "QwenCausalLM", "qwen_transformer_decoder", "qwen_layer_norm"};
  fail("KerasHub presets: no backbone for model_type '", model_type, "'");
}

}  // namespace

Variables llama_variables(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, K = c.num_key_value_heads, G = c.group(), D = c.head_dim;
  const int64_t H = c.num_attention_heads, I = c.intermediate_size, V = c.vocab_size;
  const bool gemma = c.model_type == "gemma" || c.model_type == "gemma2";
  Table t;
  const LlamaStyle style = gemma ? LlamaStyle{"GemmaBackbone", "GemmaCausalLM",
                                              "gemma_decoder_block", "rms_normalization"}
                                 : llama_style(c.model_type);
  t.out.class_name = style.backbone;
  t.out.task_class_name = style.task;
  t.same("embed_tokens.embeddings", "token_embedding/embeddings",
         "layers/reversible_embedding/vars/0", {V, C});
  if (!c.tie_word_embeddings)
    t.transposed("lm_head.kernel", "token_embedding/reverse_embeddings",
                 "layers/reversible_embedding/vars/1", C, V);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = cat("layers.", i, "."), a = ours + "self_attn.";
    const std::string path = cat(gemma ? "decoder_block_" : "transformer_layer_", i, "/");
    const std::string g = cat("layers/", numbered(style.decoder, i), "/");
    auto norm = [&](const std::string& weight, const std::string& keras, const std::string& attr) {
      t.same(ours + weight + ".gamma", path + keras + "/scale", g + attr + "/vars/0", {C});
    };
    if (gemma) {
      // Gemma's EinsumDense kernels: query (heads, hidden, head_dim), output
      // (heads, head_dim, hidden).
      norm("input_layernorm", "pre_attention_norm", "pre_attention_norm");
      if (c.post_norms) {
        norm("post_attention_layernorm", "post_attention_norm", "post_attention_norm");
        norm("pre_feedforward_layernorm", "pre_ffw_norm", "pre_ffw_norm");
        norm("post_feedforward_layernorm", "post_ffw_norm", "post_ffw_norm");
      } else {
        norm("post_attention_layernorm", "pre_ffw_norm", "pre_ffw_norm");
      }
      const std::string p = path + "attention/", h = g + "attention/";
      t.add(a + "q_proj.kernel", p + "query/kernel", h + "query_dense/vars/0", {H, C, D},
            {K, G, C, D}, {0, 1, 3, 2});
      t.add(a + "k_proj.kernel", p + "key/kernel", h + "key_dense/vars/0", {K, C, D}, {K, C, D},
            {0, 2, 1});
      t.add(a + "v_proj.kernel", p + "value/kernel", h + "value_dense/vars/0", {K, C, D}, {K, C, D},
            {0, 2, 1});
      t.add(a + "o_proj.kernel", p + "attention_output/kernel", h + "output_dense/vars/0",
            {H, D, C}, {K, G, D, C}, {3, 0, 1, 2});
      t.transposed(ours + "mlp.gate_proj.kernel", path + "ffw_gating/kernel",
                   g + "gating_ffw/vars/0", C, I);
      t.transposed(ours + "mlp.up_proj.kernel", path + "ffw_gating_2/kernel",
                   g + "gating_ffw_2/vars/0", C, I);
      t.transposed(ours + "mlp.down_proj.kernel", path + "ffw_linear/kernel",
                   g + "ffw_linear/vars/0", I, C);
      continue;
    }
    norm("input_layernorm", "self_attention_layernorm", "_self_attention_layernorm");
    norm("post_attention_layernorm", "feedforward_layernorm", "_feedforward_layernorm");
    // Query (hidden, heads, head_dim), key and value (hidden, kv heads,
    // head_dim), output (heads, head_dim, hidden); Qwen's biases (heads,
    // head_dim).
    const std::string p = path + "self_attention/", h = g + "_self_attention_layer/";
    t.add(a + "q_proj.kernel", p + "query/kernel", h + "_query_dense/vars/0", {C, H, D},
          {C, K, G, D}, {1, 2, 3, 0});
    if (c.attention_bias)
      t.add(a + "q_proj.bias", p + "query/bias", h + "_query_dense/vars/1", {H, D}, {K, G, D},
            {0, 1, 2});
    for (const char* kv : {"key", "value"}) {
      const std::string w = a + (std::string(kv) == "key" ? "k_proj" : "v_proj");
      const std::string d = cat(h, "_", kv, "_dense/vars/");
      t.add(w + ".kernel", cat(p, kv, "/kernel"), d + "0", {C, K, D}, {C, K, D}, {1, 2, 0});
      if (c.attention_bias) t.same(w + ".bias", cat(p, kv, "/bias"), d + "1", {K, D});
    }
    t.add(a + "o_proj.kernel", p + "attention_output/kernel", h + "_output_dense/vars/0", {H, D, C},
          {K, G, D, C}, {3, 0, 1, 2});
    t.transposed(ours + "mlp.gate_proj.kernel", path + "feedforward_gate_dense/kernel",
                 g + "_feedforward_gate_dense/vars/0", C, I);
    t.transposed(ours + "mlp.up_proj.kernel", path + "feedforward_intermediate_dense/kernel",
                 g + "_feedforward_intermediate_dense/vars/0", C, I);
    t.transposed(ours + "mlp.down_proj.kernel", path + "feedforward_output_dense/kernel",
                 g + "_feedforward_output_dense/vars/0", I, C);
  }
  if (gemma)
    t.same("norm.gamma", "final_normalization/scale", "layers/rms_normalization/vars/0", {C});
  else
    t.same("norm.gamma", "sequence_output_layernorm/scale", cat("layers/", style.norm, "/vars/0"),
           {C});
  return t.out;
}

}  // namespace autoshard::keras_hub
