// Tokenizer: text to token ids and back, as a model directory defines it.
//
//   auto tok = autoshard::load_tokenizer("path/to/llama");
//   std::vector<int32_t> ids = tok->encode("Hello world");  // BOS, then the text
//   std::string text = tok->decode(ids);                     // "Hello world"
//
// Supported (docs/models.md lists the details):
//  - Hugging Face `tokenizer.json`: BPE (byte-level as in GPT-2, Llama 3 and
//    Qwen2, with their pre-tokenising regular expressions; byte-fallback with
//    the "▁" space marker as in Llama 2, Mistral and Gemma) and WordPiece
//    (BERT), with the normalizers, pre-tokenizers, post-processors, decoders
//    and added/special tokens those files use;
//  - SentencePiece `tokenizer.model` (through the SentencePiece library);
//  - GPT-2's `vocab.json` + `merges.txt`, and BERT's `vocab.txt`.
// Anything else is refused with an error naming the file and the component.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace autoshard {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// The token ids of `text`. With `add_special_tokens`, the model's template
  /// is applied (Llama's BOS, BERT's [CLS] ... [SEP]).
  virtual std::vector<int32_t> encode(std::string_view text,
                                      bool add_special_tokens = true) const = 0;
  /// The text of `ids` (bytes that do not form UTF-8 become U+FFFD). With
  /// `skip_special_tokens`, special tokens (BOS, EOS, padding) are left out.
  virtual std::string decode(std::span<const int32_t> ids,
                             bool skip_special_tokens = true) const = 0;
  /// `ids` of encode(text, false) in the model's template, as encode(text,
  /// true) gives them (for text encoded in pieces).
  virtual std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const = 0;
  /// `ids` of a training text (encode(text, false)) as the model's training
  /// data packs them: with_special_tokens, and after the text the end token
  /// where the model's preprocessor adds one (a KerasHub preset's
  /// add_end_token: [start] text [end]).
  virtual std::vector<int32_t> with_training_tokens(std::vector<int32_t> ids) const {
    return with_special_tokens(std::move(ids));
  }
  /// One more than the largest id the tokenizer produces.
  virtual int64_t vocab_size() const = 0;
  /// The id of a token given by its vocabulary string ("<s>", "[CLS]"), if any.
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  /// The vocabulary string of an id ("Ġworld", "##s", "<0x0A>").
  virtual std::string id_to_token(int32_t id) const = 0;
};

/// The tokenizer of a model directory: tokenizer.json, else tokenizer.model,
/// else vocab.json + merges.txt, else vocab.txt; a KerasHub preset's from its
/// tokenizer.json and assets/ (keras_hub::load_preset_tokenizer). Throws when
/// none is there.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);
/// Whether `dir` holds any of the files load_tokenizer reads.
bool has_tokenizer(const std::string& dir);

/// A Hugging Face tokenizer.json file.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json);
/// A SentencePiece model file (tokenizer.model). BOS is added by `encode`
/// unless `add_bos` is false (tokenizer_config.json's add_bos_token).
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_file,
                                                        bool add_bos = true);

/// The ids of a text file (its text's ids with_training_tokens), read and
/// encoded in pieces of about 256 KiB cut at a line end, so memory holds the
/// ids and one piece, not the text and its intermediate forms. Each piece is
/// encoded as a text of its own: a tokenizer that marks a text's start
/// (Metaspace's "▁", add_prefix_space) gives one different token per piece;
/// the byte-level kinds of GPT-2 and Llama 3 give the whole file's ids. The
/// ids' growth is checked against the memory available; only a regular file
/// is read. `what` names it in errors ("--data").
std::vector<int32_t> encode_text_file(const Tokenizer& tokenizer, const std::string& path,
                                      const std::string& what);

/// Text of ids that arrive one at a time: each `push` returns the text the
/// new token completes (empty while a character's bytes are incomplete), so
/// printing every return value prints decode(all ids). Decodes in context,
/// so a token's leading space survives (Llama's "▁world" after "Hello").
class TextStream {
 public:
  /// `context`: ids already printed (the prompt), for the first tokens' spacing.
  TextStream(const Tokenizer& tokenizer, std::span<const int32_t> context = {});
  std::string push(int32_t id);

 private:
  const Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;  // ids_[prefix_, read_) were printed and give context
  size_t read_ = 0;    // ids_[read_, end) are not printed yet
};

}  // namespace autoshard
