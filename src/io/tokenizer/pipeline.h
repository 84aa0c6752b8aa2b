// The stages of a Hugging Face tokenizer, each built from its tokenizer.json
// object: normalize the text, split it into pieces, turn each piece into
// subword ids, wrap the ids in the model's template; and, backwards, turn
// token strings into text. Only what encoding and decoding need is kept (no
// offsets, no alignments).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "autoshard/json.h"

namespace autoshard {
class Tokenizer;
}

namespace autoshard::tokenizer {

using Json = nlohmann::json;

/// Text to text (Unicode normalisation, lowercasing, "▁" for spaces, ...).
using Normalizer = std::function<std::string(std::string)>;
/// Splits one piece of text into smaller pieces; `at_start` says whether the
/// piece begins the whole input (Metaspace's "first" prepend scheme).
using PreTokenizer = std::function<std::vector<std::string>(const std::string&, bool at_start)>;
/// Adds the model's special tokens around a sequence's ids.
using PostProcessor = std::function<std::vector<int32_t>(std::vector<int32_t>)>;
/// Token strings to (fewer) strings; the last stage's strings are joined.
using Decoder = std::function<std::vector<std::string>(std::vector<std::string>)>;

/// A vocabulary: token string <-> id.
struct Vocabulary {
  // Looked up by string_view without a copy (BPE's inner loop).
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids;
  std::vector<std::string> tokens;  // by id; "" where an id has no token

  /// Adds `token` as `id` (at most `id_limit` - 1, checked before any
  /// allocation); two tokens with one id are an error, as encoding and
  /// decoding would disagree. `where` names the entry in errors.
  void add(const std::string& token, int64_t id, int64_t id_limit, const std::string& where);
  std::optional<int32_t> find(std::string_view token) const;
};

/// Turns one pre-tokenized piece into ids (BPE, WordPiece, WordLevel).
class SubwordModel {
 public:
  virtual ~SubwordModel() = default;
  virtual void encode(const std::string& piece, std::vector<int32_t>& ids) const = 0;
  virtual const Vocabulary& vocabulary() const = 0;
};

// Each stage from its object in tokenizer.json; a null value gives the
// identity stage. Errors name the file and the JSON path.
Normalizer make_normalizer(const JsonField& j);
PreTokenizer make_pre_tokenizer(const JsonField& j);
/// `vocab_size`: the ids the template may use are below it.
PostProcessor make_post_processor(const JsonField& j, int64_t vocab_size);
Decoder make_decoder(const JsonField& j);
/// `id_limit`: ids must be below it (the vocabulary is dense-ish, so a huge
/// id in a small file is an error, not gigabytes of empty slots).
std::unique_ptr<SubwordModel> make_subword_model(const JsonField& j, int64_t id_limit);
/// The largest id a file defining `entries` tokens may use, plus one: ids are
/// dense from 0 in every real tokenizer; this leaves room for gaps.
int64_t id_limit_for(size_t entries);

/// Metaspace's options, read alike by its pre-tokenizer and its decoder: the
/// one character standing for a space, and "always", "first" or "never".
std::string metaspace_replacement(const JsonField& j);
std::string metaspace_scheme(const JsonField& j);

/// The BPE model from its parts (also GPT-2's vocab.json + merges.txt).
struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
};
std::unique_ptr<SubwordModel> make_bpe(
    Vocabulary vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    const BpeOptions& options, const std::string& where);
/// The WordPiece model (also BERT's vocab.txt).
std::unique_ptr<SubwordModel> make_wordpiece(Vocabulary vocab, const std::string& unk_token,
                                             const std::string& prefix, int64_t max_chars,
                                             const std::string& where);
/// The WordLevel model: one id per piece.
std::unique_ptr<SubwordModel> make_word_level(Vocabulary vocab, const std::string& unk_token,
                                              const std::string& where);

/// A tokenizer.json's parsed value; `file` names it in errors.
std::unique_ptr<Tokenizer> hf_tokenizer_of(const Json& j, const std::string& file);
/// GPT-2's vocab.json + merges.txt: byte-level BPE with GPT-2's expression.
std::unique_ptr<Tokenizer> gpt2_tokenizer(const std::string& vocab_json,
                                          const std::string& merges_txt);
/// Byte-level BPE from a vocab.json + merges.txt pair whose pieces are cut by
/// `split_pattern` first, as a tokenizer.json's Split pre-tokenizer before
/// ByteLevel without its own expression (Llama 3's and Qwen2's files), and by
/// GPT-2's expression when it is empty. `special`: vocabulary tokens cut out
/// of the text whole before splitting (each must be in the vocabulary).
std::unique_ptr<Tokenizer> byte_level_bpe_tokenizer(const std::string& vocab_json,
                                                    const std::string& merges_txt,
                                                    const std::string& split_pattern,
                                                    const std::vector<std::string>& special);
/// BERT's vocab.txt: BERT's normalizer and splitting, WordPiece, [CLS] ... [SEP].
std::unique_ptr<Tokenizer> bert_tokenizer(const std::string& vocab_txt, bool lowercase);

}  // namespace autoshard::tokenizer
