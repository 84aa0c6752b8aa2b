// `autoshard generate`: continues a prompt with a decoder (GPT-2, Llama,
// Mistral, Qwen2) on one device, a mesh of in-process devices or MPI ranks:
// a prefill pass, then one token at a time over the sharded key-value cache.
#include <climits>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/json.h"
#include "autoshard/input_file.h"
#include "autoshard/nn/generation.h"
#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/options.h"

namespace autoshard::cli {
namespace {

struct GenerateOptions : CommonOptions {
  std::string prompt;      // text
  std::string prompt_ids;  // "1,2,3"
  GenerationOptions gen;
  bool json = false;
  bool ignore_eos = false;
  std::string weights_dtype = "f32";  // f32, bf16, int8
};

// The config's eos_token_id (a token id, a list of them, or null), when the
// model comes from a Hugging Face directory or config.json. Each must be a
// whole number that is a token id (2^32 + 59 is not 59); one outside the
// vocabulary is never produced, so it stops nothing.
std::vector<int32_t> eos_tokens(const std::string& model) {
  std::filesystem::path path = model;
  if (std::filesystem::is_directory(path)) path /= "config.json";
  if (path.extension() != ".json" || !std::filesystem::is_regular_file(path)) return {};
  // LanguageModelConfig::of has read this file already: it is a JSON object.
  const nlohmann::json j = parse_json_text(read_input_file(path, "model config", 16 << 20),
                                           "model config '" + path.string() + "'");
  std::vector<int32_t> ids;
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return ids;
  const nlohmann::json& e = j["eos_token_id"];
  for (const nlohmann::json& id : e.is_array() ? e : nlohmann::json::array({e})) {
    AS_CHECK(id.is_number_unsigned() && id.get<uint64_t>() <= INT32_MAX, "model config '",
             path.string(), "': \"eos_token_id\" ", e.dump(),
             " must be a token id (a whole number from 0 to 2147483647) or a list of them");
    ids.push_back(static_cast<int32_t>(id.get<uint64_t>()));
  }
  return ids;
}

// How text becomes ids and back: the model directory's tokenizer, else bytes
// for a byte-level model (a vocabulary of 256: the presets trained on text).
struct TextCodec {
  std::unique_ptr<Tokenizer> tokenizer;
  bool bytes = false;

  bool reads_text() const { return tokenizer || bytes; }
  std::vector<int32_t> encode(const std::string& text) const {
    if (tokenizer) return tokenizer->encode(text);
    // Bytes as ids 0-255: a plain char is signed, and 'é' would be -61.
    return {reinterpret_cast<const uint8_t*>(text.data()),
            reinterpret_cast<const uint8_t*>(text.data()) + text.size()};
  }
  std::string decode(const std::vector<int32_t>& ids) const {
    if (tokenizer) return tokenizer->decode(ids);
    return {ids.begin(), ids.end()};
  }
};

std::vector<int32_t> prompt_tokens(const GenerateOptions& o, const LanguageModelConfig& cfg,
                                   const TextCodec& codec) {
  AS_CHECK(o.prompt.empty() != o.prompt_ids.empty(),
           "give the prompt as --prompt TEXT or as --prompt-ids 1,2,3 (one of them)");
  if (!o.prompt_ids.empty()) return parse_ids("--prompt-ids", o.prompt_ids, cfg.vocab_size());
  AS_CHECK(codec.reads_text(), "--prompt: this model's vocabulary of ", cfg.vocab_size(),
           " tokens needs a tokenizer (tokenizer.json, tokenizer.model, vocab.json + merges.txt "
           "or vocab.txt) in its directory; add one, or give the token ids with --prompt-ids");
  std::vector<int32_t> ids = codec.encode(o.prompt);
  AS_CHECK(!ids.empty(), "--prompt: the text gives no tokens");
  for (int32_t id : ids)
    AS_CHECK(id >= 0 && id < cfg.vocab_size(), "--prompt: the tokenizer gives id ", id,
             ", outside the model's vocabulary of ", cfg.vocab_size(),
             " (a tokenizer of another model?)");
  return ids;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

void run_generate(GenerateOptions& o) {
  const WeightsDType weights_dtype = parse_weights_dtype(o.weights_dtype, "--weights-dtype");
  const LanguageModelConfig cfg = model_config(o);
  TextCodec codec{model_tokenizer(o), false};
  codec.bytes = !codec.tokenizer && cfg.vocab_size() == 256;
  const std::vector<int32_t> prompt = prompt_tokens(o, cfg, codec);
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t cache = P + std::max<int64_t>(o.gen.max_new_tokens - 1, 0);
  AS_CHECK(cache <= cfg.max_positions(), "the prompt's ", P, " tokens and ", o.gen.max_new_tokens,
           " new ones exceed the model's ", cfg.max_positions_field(), " (", cfg.max_positions(),
           "); ask for fewer with --max-new-tokens");
  o.gen.seed = o.seed;
  if (!o.ignore_eos) o.gen.stop_token_ids = eos_tokens(o.model);
  o.gen.cache_length = cache;
  std::unique_ptr<Model> built = cfg.build(1, o.seed);
  Model& model = *built;
  o.batch = 1;
  model.set_distribution(
      make_distribution(o, model, cfg, [&] { return model.generation_graph(1, P, cache); }));
  check_layout_map(o, model.distribution_strategy().get(), model);
  // A directory given to --model is read with its weights when it holds
  // some: tokens drawn from random weights are never what generate asks for.
  if (o.weights.empty() && holds_language_model_weights(o.model)) o.weights = o.model;
  if (!o.weights.empty()) load_language_model_weights(model, o.weights);
  // Held while generating: decode's products read the bf16/int8 copies.
  const QuantizedWeights quantized = quantize_weights(model, weights_dtype);

  const bool printer = World::process().leader();
  // Text streams as tokens complete characters; without a codec, ids print.
  std::optional<TextStream> text_stream;
  if (codec.tokenizer) text_stream.emplace(*codec.tokenizer, prompt);
  auto stream = [&](int32_t token) {  // as each token is chosen
    if (!printer || o.json) return;
    if (text_stream)
      std::fputs(text_stream->push(token).c_str(), stdout);
    else if (codec.bytes)
      std::fputc(static_cast<unsigned char>(token), stdout);
    else
      std::printf(" %d", token);
    std::fflush(stdout);
  };
  if (printer && !o.json) {
    std::fputs(codec.reads_text() ? codec.decode(prompt).c_str() : join(prompt).c_str(), stdout);
    std::fflush(stdout);
  }
  const Generation g = generate(model, prompt, o.gen, stream);
  if (!printer) return;
  if (!o.json) {
    std::printf("\n");
    std::fflush(stdout);  // before the rate on stderr
    std::fprintf(stderr, "prefill %.1f tokens/s, decode %.1f tokens/s\n", g.prefill_tokens_per_s(),
                 g.decode_tokens_per_s());
    return;
  }
  nlohmann::json out{{"prompt_ids", prompt},
                     {"output_ids", g.output_ids},
                     {"text", nullptr},
                     {"prefill_tokens_per_s", g.prefill_tokens_per_s()},
                     {"decode_tokens_per_s", g.decode_tokens_per_s()}};
  if (codec.reads_text()) {  // the prompt and its continuation
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), g.output_ids.begin(), g.output_ids.end());
    out["text"] = codec.decode(all);
  }
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "continue a prompt with a decoder, token by token over a key-value cache");
  add_common(cmd, *o);
  cmd->add_option("--prompt", o->prompt,
                  "prompt text (through the model directory's tokenizer; bytes for byte-level "
                  "models)");
  cmd->add_option("--prompt-ids", o->prompt_ids, "prompt as token ids, e.g. 1,2,3");
  add_int(cmd, "--max-new-tokens", o->gen.max_new_tokens, 0, int64_t{1} << 30, "tokens to generate")
      ->capture_default_str();
  add_real(cmd, "--temperature", o->gen.temperature, 0, 1e6, false,
           "sampling temperature; 0: greedy")
      ->capture_default_str();
  add_int(cmd, "--top-k", o->gen.top_k, 0, int64_t{1} << 31,
          "sample from the k most likely (0: all)")
      ->capture_default_str();
  add_real(cmd, "--top-p", o->gen.top_p, 0, 1, true,
           "sample from the most likely tokens reaching this probability mass (1: all)")
      ->capture_default_str();
  cmd->add_option("--weights-dtype", o->weights_dtype,
                  "hold the weights for decoding in f32 (as trained), bf16 or int8 (per-channel "
                  "scales, dequantized inside the matrix-vector kernels)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "go on past the config's eos_token_id (default: stop after producing it)");
  cmd->add_flag("--json", o->json,
                "print one JSON object: prompt_ids, output_ids, text, prefill_tokens_per_s, "
                "decode_tokens_per_s");
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace autoshard::cli
