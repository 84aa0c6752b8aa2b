#include "autoshard/models/gpt2/formats.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/checkpoint.h"
#include "io/files.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {

constexpr int32_t kLlmcMagic = 20240326;

// Where each autoshard GPT-2 weight lives in Hugging Face's tensors.
std::map<std::string, TensorMapping> hf_layout(const GPT2Config& c, const std::string& prefix) {
  const int64_t C = c.n_embd;
  std::map<std::string, TensorMapping> m;
  auto plain = [&](const std::string& ours, const std::string& theirs) {
    m[ours] = TensorMapping::plain(prefix + theirs);
  };
  plain("wte.embeddings", "wte.weight");
  plain("wpe.embeddings", "wpe.weight");
  plain("ln_f.gamma", "ln_f.weight");
  plain("ln_f.beta", "ln_f.bias");
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".", hf = prefix + h;
    plain(h + "ln_1.gamma", h + "ln_1.weight");
    plain(h + "ln_1.beta", h + "ln_1.bias");
    plain(h + "ln_2.gamma", h + "ln_2.weight");
    plain(h + "ln_2.beta", h + "ln_2.bias");
    const char* names[3] = {"query", "key", "value"};
    for (int k = 0; k < 3; ++k) {
      m[h + "attn." + names[k] + ".kernel"] = {
          hf + "attn.c_attn.weight", 1, 3 * C, k * C, {C, 3 * C}};
      if (k != 1)
        m[h + "attn." + names[k] + ".bias"] = {hf + "attn.c_attn.bias", 0, 3 * C, k * C, {3 * C}};
    }
    m[h + "attn.attention_output.kernel"] = {hf + "attn.c_proj.weight", 2, -1, 0, {C, C}};
    plain(h + "attn.attention_output.bias", h + "attn.c_proj.bias");
    plain(h + "mlp.c_fc.kernel", h + "mlp.c_fc.weight");
    plain(h + "mlp.c_fc.bias", h + "mlp.c_fc.bias");
    plain(h + "mlp.c_proj.kernel", h + "mlp.c_proj.weight");
    plain(h + "mlp.c_proj.bias", h + "mlp.c_proj.bias");
  }
  return m;
}

bool same_bytes(const SafetensorsFile& f, const SafetensorsEntry& a, const SafetensorsEntry& b) {
  if (a.dtype != b.dtype || a.shape != b.shape) return false;
  std::vector<char> x(1 << 20), y(1 << 20);
  for (uint64_t at = 0; at < a.end - a.begin; at += x.size()) {
    const uint64_t n = std::min<uint64_t>(x.size(), a.end - a.begin - at);
    f.read_bytes(a, at, x.data(), n);
    f.read_bytes(b, at, y.data(), n);
    if (std::memcmp(x.data(), y.data(), n) != 0) return false;
  }
  return true;
}

void load_hf(GPT2& model, const std::string& file) {
  auto f = std::make_shared<const SafetensorsFile>(file);
  const std::string prefix = f->contains("transformer.wte.weight") ? "transformer." : "";
  AS_CHECK(f->contains(prefix + "wte.weight"), "'", file,
           "' is not a GPT-2 checkpoint: it has no wte.weight");
  const std::map<std::string, TensorMapping> layout = hf_layout(model.config(), prefix);
  std::set<std::string> used;
  std::map<std::string, WeightSource> sources;
  for (const auto& [ours, m] : layout) {
    sources[ours] = mapped_source(f, m);
    used.insert(m.tensor);
  }
  for (const SafetensorsEntry& e : f->entries()) {
    const std::string name = e.name;
    if (used.count(name) || name.ends_with("attn.bias") || name.ends_with("attn.masked_bias"))
      continue;
    if (name == "lm_head.weight") {
      AS_CHECK(same_bytes(*f, e, f->entry(prefix + "wte.weight")), "'", file,
               "': lm_head.weight differs from wte.weight; autoshard's GPT-2 ties them");
      continue;
    }
    fail("'", file, "' has tensor '", name,
         "', which a GPT-2 of this config does not (another architecture?)");
  }
  model.load_weights(sources);
}

// llm.c's 16 tensors, in file order, with our weight for each layer's slice.
struct LlmcHeader {
  int32_t max_t, vocab, layers, heads, channels, padded_vocab;
};

LlmcHeader read_llmc_header(std::ifstream& in, const std::string& path) {
  int32_t h[256];
  in.read(reinterpret_cast<char*>(h), sizeof h);
  AS_CHECK(in.gcount() == sizeof h, "'", path, "' is too short for an llm.c header");
  AS_CHECK(h[0] == kLlmcMagic, "'", path, "' is not an llm.c GPT-2 file (magic ", h[0],
           ", expected ", kLlmcMagic, ")");
  AS_CHECK(h[1] == 3, "'", path, "': llm.c version ", h[1], " is not supported (only 3, fp32)");
  LlmcHeader r{h[2], h[3], h[4], h[5], h[6], h[7]};
  AS_CHECK(r.max_t > 0 && r.vocab > 0 && r.layers > 0 && r.heads > 0 && r.channels > 0 &&
               r.padded_vocab >= r.vocab && r.channels % r.heads == 0,
           "'", path, "': inconsistent llm.c header");
  // The sizes the header claims must match the file before anything is read
  // or allocated (a corrupt header could ask for terabytes or hours).
  const unsigned __int128 C = r.channels, L = r.layers;
  const unsigned __int128 floats = (unsigned __int128)r.padded_vocab * C +
                                   (unsigned __int128)r.max_t * C + L * (12 * C * C + 13 * C) +
                                   2 * C;
  const unsigned __int128 want = 256 * 4 + floats * 4;
  in.seekg(0, std::ios::end);
  const auto have = static_cast<unsigned __int128>(in.tellg());
  in.seekg(256 * 4);
  AS_CHECK(want == have, "'", path, "': its header describes a GPT-2 with L=", r.layers,
           " NH=", r.heads, " C=", r.channels, " V=", r.vocab, " maxT=", r.max_t, " (",
           want > (unsigned __int128)1 << 62 ? std::string("more than 2^62")
                                             : std::to_string((uint64_t)want),
           " bytes), but the file has ", (uint64_t)have,
           " bytes: a truncated or corrupt llm.c file");
  return r;
}

// Visits llm.c's tensors in order: fn(name, rows, cols, layer, transposed) for
// every (tensor, layer) piece; rows x cols is llm.c's own (out, in) layout.
template <typename Fn>
void for_each_llmc_piece(const LlmcHeader& h, Fn fn) {
  const int64_t C = h.channels, L = h.layers;
  fn("wte", h.padded_vocab, C, -1);
  fn("wpe", h.max_t, C, -1);
  const char* per_layer[] = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                             "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw",  "fcprojb"};
  const int64_t rows[] = {1, 1, 3 * C, 1, C, 1, 1, 1, 4 * C, 1, C, 1};
  const int64_t cols[] = {C, C, C, 3 * C, C, C, C, C, C, 4 * C, 4 * C, C};
  for (int t = 0; t < 12; ++t)
    for (int64_t l = 0; l < L; ++l) fn(per_layer[t], rows[t], cols[t], l);
  fn("lnfw", 1, C, -1);
  fn("lnfb", 1, C, -1);
}

// Copies between one llm.c piece (out, in layout) and our weights.
void llmc_piece(GPT2& model, const std::string& name, int64_t rows, int64_t cols, int64_t layer,
                std::vector<float>& piece, bool to_model) {
  const GPT2Config& c = model.config();
  const int64_t C = c.n_embd;
  const std::string h = "h." + std::to_string(layer) + ".";
  auto transfer = [&](const std::string& path, int64_t row0, int64_t nrows, bool transpose) {
    // our [in, out] = llm.c [out, in] transposed, for rows [row0, row0 + nrows) of the piece.
    Tensor w = model.gather_weight(path);
    const int64_t n = w.numel();
    if (!transpose) {
      if (to_model)
        std::memcpy(w.f32(), piece.data() + row0 * cols, n * 4);
      else
        std::memcpy(piece.data() + row0 * cols, w.f32(), n * 4);
    } else {
      const int64_t in = n / nrows;  // our rows
      for (int64_t o = 0; o < nrows; ++o)
        for (int64_t i = 0; i < in; ++i) {
          float& a = piece[(row0 + o) * cols + i];
          float& b = w.f32()[i * nrows + o];
          if (to_model)
            b = a;
          else
            a = b;
        }
    }
    if (to_model) model.set_weight(path, w);
  };
  if (name == "wte") {
    Tensor w = model.gather_weight("wte.embeddings");
    if (to_model)
      std::memcpy(w.f32(), piece.data(), w.nbytes()), model.set_weight("wte.embeddings", w);
    else
      std::memcpy(piece.data(), w.f32(), w.nbytes());  // padded rows stay zero
  } else if (name == "wpe")
    transfer("wpe.embeddings", 0, rows, false);
  else if (name == "ln1w")
    transfer(h + "ln_1.gamma", 0, 1, false);
  else if (name == "ln1b")
    transfer(h + "ln_1.beta", 0, 1, false);
  else if (name == "ln2w")
    transfer(h + "ln_2.gamma", 0, 1, false);
  else if (name == "ln2b")
    transfer(h + "ln_2.beta", 0, 1, false);
  else if (name == "lnfw")
    transfer("ln_f.gamma", 0, 1, false);
  else if (name == "lnfb")
    transfer("ln_f.beta", 0, 1, false);
  else if (name == "qkvw") {
    transfer(h + "attn.query.kernel", 0, C, true);
    transfer(h + "attn.key.kernel", C, C, true);
    transfer(h + "attn.value.kernel", 2 * C, C, true);
  } else if (name == "qkvb") {
    // One row of 3C: query, key (dropped; zeros on export), value.
    Tensor q = model.gather_weight(h + "attn.query.bias"),
           v = model.gather_weight(h + "attn.value.bias");
    if (to_model) {
      std::memcpy(q.f32(), piece.data(), C * 4);
      std::memcpy(v.f32(), piece.data() + 2 * C, C * 4);
      model.set_weight(h + "attn.query.bias", q);
      model.set_weight(h + "attn.value.bias", v);
    } else {
      std::memcpy(piece.data(), q.f32(), C * 4);
      std::fill_n(piece.data() + C, C, 0.0f);
      std::memcpy(piece.data() + 2 * C, v.f32(), C * 4);
    }
  } else if (name == "attprojw")
    transfer(h + "attn.attention_output.kernel", 0, C, true);
  else if (name == "attprojb")
    transfer(h + "attn.attention_output.bias", 0, 1, false);
  else if (name == "fcw")
    transfer(h + "mlp.c_fc.kernel", 0, 4 * C, true);
  else if (name == "fcb")
    transfer(h + "mlp.c_fc.bias", 0, 1, false);
  else if (name == "fcprojw")
    transfer(h + "mlp.c_proj.kernel", 0, C, true);
  else if (name == "fcprojb")
    transfer(h + "mlp.c_proj.bias", 0, 1, false);
}

GPT2Config config_of_llmc(const LlmcHeader& h) {
  GPT2Config c;
  c.n_layer = h.layers, c.n_head = h.heads, c.n_embd = h.channels, c.vocab_size = h.vocab,
  c.n_positions = h.max_t;
  return c;
}

void load_llmc(GPT2& model, const std::string& path) {
  require_regular_file(path, "llm.c weight file");
  std::ifstream in(path, std::ios::binary);
  AS_CHECK(in.good(), "cannot open '", path, "'");
  const LlmcHeader h = read_llmc_header(in, path);
  const GPT2Config& c = model.config();
  AS_CHECK(h.layers == c.n_layer && h.heads == c.n_head && h.channels == c.n_embd &&
               h.vocab == c.vocab_size && h.max_t == c.n_positions,
           "'", path, "' holds a GPT-2 with L=", h.layers, " NH=", h.heads, " C=", h.channels,
           " V=", h.vocab, " maxT=", h.max_t, ", not the model's configuration");
  // Read everything first (one piece at a time is checked), then apply: a
  // truncated file leaves the model untouched.
  std::vector<std::pair<std::string, std::vector<float>>> pieces;
  std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> meta;
  for_each_llmc_piece(h, [&](const char* name, int64_t rows, int64_t cols, int64_t layer) {
    std::vector<float> piece(rows * cols);
    in.read(reinterpret_cast<char*>(piece.data()), static_cast<std::streamsize>(piece.size() * 4));
    AS_CHECK(in.gcount() == static_cast<std::streamsize>(piece.size() * 4), "'", path,
             "' is truncated in tensor ", name,
             layer >= 0 ? " of layer " + std::to_string(layer) : std::string());
    check_finite(piece.data(), static_cast<int64_t>(piece.size()),
                 layer >= 0 ? cat(name, " of layer ", layer) : std::string(name), path);
    pieces.emplace_back(name, std::move(piece));
    meta.emplace_back(name, rows, cols, layer);
  });
  for (size_t i = 0; i < pieces.size(); ++i)
    llmc_piece(model, pieces[i].first, std::get<1>(meta[i]), std::get<2>(meta[i]),
               std::get<3>(meta[i]), pieces[i].second, true);
}

}  // namespace

GPT2Config gpt2_config_of(const std::string& path) {
  if (path.ends_with(".bin")) {
    require_regular_file(path, "llm.c weight file");
    std::ifstream in(path, std::ios::binary);
    AS_CHECK(in.good(), "cannot open '", path, "'");
    return config_of_llmc(read_llmc_header(in, path));
  }
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  return GPT2Config::from_json_file(
      file_in_directory(dir.empty() ? "." : dir.string(), "config.json", "model config"));
}

void load_gpt2_weights(GPT2& model, const std::string& path) {
  if (path.ends_with(".bin")) return load_llmc(model, path);
  if (fs::is_directory(path)) {
    if (fs::exists(fs::path(path) / "state.json")) {
      load_checkpoint(model, path, /*with_optimizer=*/false);
      return;
    }
    std::error_code ec;
    AS_CHECK(fs::exists(fs::symlink_status(fs::path(path) / "model.safetensors", ec)), "'", path,
             "' has no model.safetensors");
    return load_hf(model, file_in_directory(path, "model.safetensors", "weight file"));
  }
  AS_CHECK(fs::exists(path), "weights '", path, "' do not exist");
  SafetensorsFile probe(path);
  if (probe.contains("wte.embeddings")) return model.load_weights(plain_sources(path));
  load_hf(model, path);
}

namespace {
void write_hf_gpt2(GPT2& model, const fs::path& dir);
}  // namespace

void save_hf_gpt2(GPT2& model, const std::string& dir, bool overwrite) {
  write_directory_atomically(dir, [&](const fs::path& out) { write_hf_gpt2(model, out); },
                             {.overwrite = overwrite, .read_names = hf_weight_files()});
}

namespace {
void write_hf_gpt2(GPT2& model, const fs::path& dir) {
  const GPT2Config& c = model.config();
  const int64_t C = c.n_embd;
  Model::Snapshot snap = model.snapshot(false);
  const std::map<std::string, TensorMapping> layout = hf_layout(c, "");
  std::vector<FileTensor> tensors = {{"wte.weight", {c.vocab_size, C}},
                                     {"wpe.weight", {c.n_positions, C}},
                                     {"ln_f.weight", {C}},
                                     {"ln_f.bias", {C}}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* n : {"ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias",
                          "attn.c_proj.bias", "mlp.c_proj.bias"})
      tensors.push_back({h + n, {C}});
    tensors.push_back({h + "attn.c_attn.weight", {C, 3 * C}});
    tensors.push_back({h + "attn.c_attn.bias", {3 * C}});
    tensors.push_back({h + "attn.c_proj.weight", {C, C}});
    tensors.push_back({h + "mlp.c_fc.weight", {C, 4 * C}});
    tensors.push_back({h + "mlp.c_fc.bias", {4 * C}});
    tensors.push_back({h + "mlp.c_proj.weight", {4 * C, C}});
  }
  write_mapped(snap, (dir / "model.safetensors").string(), tensors, layout, {{"format", "pt"}});
  nlohmann::json cfg = {{"architectures", {"GPT2LMHeadModel"}},
                        {"model_type", "gpt2"},
                        {"n_layer", c.n_layer},
                        {"n_head", c.n_head},
                        {"n_embd", c.n_embd},
                        {"vocab_size", c.vocab_size},
                        {"n_positions", c.n_positions},
                        {"n_ctx", c.n_positions},
                        {"layer_norm_epsilon", c.layer_norm_epsilon},
                        {"activation_function", "gelu_new"},
                        {"resid_pdrop", c.dropout},
                        {"embd_pdrop", c.dropout},
                        {"attn_pdrop", c.dropout}};
  write_text((dir / "config.json").string(), cfg.dump(2) + "\n");
}
}  // namespace

void save_llmc_gpt2(GPT2& model, const std::string& file) {
  const GPT2Config& c = model.config();
  LlmcHeader h{
      static_cast<int32_t>(c.n_positions), static_cast<int32_t>(c.vocab_size),
      static_cast<int32_t>(c.n_layer),     static_cast<int32_t>(c.n_head),
      static_cast<int32_t>(c.n_embd),      static_cast<int32_t>((c.vocab_size + 127) / 128 * 128)};
  int32_t header[256] = {kLlmcMagic, 3,       h.max_t,    h.vocab,
                         h.layers,   h.heads, h.channels, h.padded_vocab};
  // Written beside the target and renamed over it: a failure leaves nothing.
  const std::string tmp = file + ".tmp." + std::to_string(::getpid());
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    AS_CHECK(out.good(), "cannot write '", file, "': ", std::strerror(errno));
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for_each_llmc_piece(h, [&](const char* name, int64_t rows, int64_t cols, int64_t layer) {
      std::vector<float> piece(rows * cols, 0.0f);
      llmc_piece(model, name, rows, cols, layer, piece, false);
      out.write(reinterpret_cast<const char*>(piece.data()),
                static_cast<std::streamsize>(piece.size() * 4));
    });
    out.close();
    AS_CHECK(!out.fail(), "writing '", file, "' failed: ", std::strerror(errno));
    filesystem_step(cat("cannot move '", tmp, "' to '", file, "'"), [&] { fs::rename(tmp, file); });
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

}  // namespace autoshard
