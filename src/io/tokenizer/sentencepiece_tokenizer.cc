// A SentencePiece model file (tokenizer.model), through Debian's SentencePiece
// library: the model file itself says how to normalise, split and encode.
#include <sentencepiece_processor.h>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/tokenizer.h"

namespace autoshard {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, bool add_bos) : path_(path), add_bos_(add_bos) {
    // Read here, bounded and from a regular file only (a FIFO would block
    // the library's own read forever).
    const std::string bytes = read_input_file(path, "tokenizer.model", uint64_t{256} << 20);
    const auto status = processor_.LoadFromSerializedProto(bytes);
    AS_CHECK(status.ok(), path, " is not a SentencePiece model: ", status.ToString());
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int> pieces;
    const auto status = processor_.Encode(text, &pieces);
    AS_CHECK(status.ok(), "SentencePiece model '", path_,
             "' could not encode the text: ", status.ToString());
    std::vector<int32_t> ids(pieces.begin(), pieces.end());
    return add_special_tokens ? with_special_tokens(std::move(ids)) : ids;
  }

  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override {
    if (add_bos_ && processor_.bos_id() >= 0) ids.insert(ids.begin(), processor_.bos_id());
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    std::vector<int> kept;
    for (int32_t id : ids) {
      check_id(id);
      if (!(skip_special_tokens && processor_.IsControl(id))) kept.push_back(id);
    }
    std::string text;
    const auto status = processor_.Decode(kept, &text);
    AS_CHECK(status.ok(), "SentencePiece model '", path_,
             "' could not decode the ids: ", status.ToString());
    return text;
  }

  int64_t vocab_size() const override { return processor_.GetPieceSize(); }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const int id = processor_.PieceToId(token);
    return processor_.IdToPiece(id) == token ? std::optional<int32_t>(id) : std::nullopt;
  }

  std::string id_to_token(int32_t id) const override {
    check_id(id);
    return processor_.IdToPiece(id);
  }

 private:
  void check_id(int32_t id) const {
    AS_CHECK(id >= 0 && id < processor_.GetPieceSize(), "token id ", id,
             " is not in the tokenizer's vocabulary of ", processor_.GetPieceSize(), " ('", path_,
             "')");
  }

  sentencepiece::SentencePieceProcessor processor_;
  std::string path_;  // for messages
  bool add_bos_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_file,
                                                        bool add_bos) {
  return std::make_unique<SentencePieceTokenizer>(model_file, add_bos);
}

}  // namespace autoshard
