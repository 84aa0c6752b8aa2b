// `autoshard tokenize`: the ids a model directory's tokenizer gives a text,
// or the text of ids (--decode).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/io/tokenizer.h"
#include "cli/arguments.h"
#include "cli/commands.h"

namespace autoshard::cli {
namespace {

struct TokenizeOptions {
  std::string weights;  // the model directory
  std::string text;
  std::string decode;  // "1,2,3"
  bool no_special = false;
  bool json = false;
};

std::string joined(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

void run_tokenize(const TokenizeOptions& o) {
  AS_CHECK(o.text.empty() != o.decode.empty(),
           "give --text TEXT to encode or --decode 1,2,3 to decode (one of them)");
  const std::unique_ptr<Tokenizer> t = keras_hub::is_preset(o.weights)
                                           ? keras_hub::load_preset_tokenizer(o.weights)
                                           : load_tokenizer(o.weights);
  const auto dump = [](const nlohmann::json& j) {
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  };
  if (!o.decode.empty()) {
    const std::string text =
        t->decode(parse_ids("--decode", o.decode, t->vocab_size()), o.no_special);
    if (o.json)
      dump({{"text", text}});
    else
      std::printf("%s\n", text.c_str());
    return;
  }
  const std::vector<int32_t> ids = t->encode(o.text, !o.no_special);
  if (!o.json) {
    std::printf("%s\n", joined(ids).c_str());
    return;
  }
  std::vector<std::string> tokens;
  for (int32_t id : ids) tokens.push_back(t->id_to_token(id));
  dump({{"ids", ids}, {"tokens", tokens}});
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "the token ids of a text under a model directory's tokenizer, or --decode ids");
  cmd->add_option("--weights", o->weights,
                  "model directory with tokenizer.json, tokenizer.model, vocab.json + merges.txt "
                  "or vocab.txt")
      ->required();
  cmd->add_option("--text", o->text, "text to encode");
  cmd->add_option("--decode", o->decode, "token ids to decode, e.g. 1,2,3");
  cmd->add_flag("--no-special-tokens", o->no_special,
                "encode without the model's template (BOS, [CLS] ... [SEP]); decode leaving "
                "special tokens out");
  cmd->add_flag("--json", o->json, "print {\"ids\", \"tokens\"} (or {\"text\"} with --decode)");
  cmd->callback([o] { run_tokenize(*o); });
}

}  // namespace autoshard::cli
