// WordPiece (BERT): each word is cut greedily into the longest vocabulary
// entries from the left, pieces after the first carrying the "##" prefix; a
// word with any part not in the vocabulary becomes the unknown token.
#include <algorithm>

#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"
#include "io/tokenizer/unicode.h"

namespace autoshard::tokenizer {
namespace {

class WordPiece final : public SubwordModel {
 public:
  WordPiece(Vocabulary vocab, const std::string& unk_token, std::string prefix, int64_t max_chars,
            const std::string& where)
      : vocab_(std::move(vocab)), prefix_(std::move(prefix)), max_chars_(max_chars) {
    const auto unk = vocab_.find(unk_token);
    AS_CHECK(unk, where, ": unk_token '", unk_token, "' is not in the vocabulary");
    unk_ = *unk;
    for (const std::string& t : vocab_.tokens) longest_ = std::max(longest_, t.size());
  }

  void encode(const std::string& word, std::vector<int32_t>& ids) const override {
    const std::vector<std::string_view> chars = code_points(word);
    if (static_cast<int64_t>(chars.size()) > max_chars_) return ids.push_back(unk_);
    const auto offset = [&](size_t i) {
      return i < chars.size() ? static_cast<size_t>(chars[i].data() - word.data()) : word.size();
    };
    std::vector<int32_t> pieces;
    for (size_t start = 0; start < chars.size();) {
      // Candidates longer than the longest entry cannot match, so a long
      // word costs its length times the longest entry's, not its square.
      size_t end = start;
      while (end < chars.size() && offset(end + 1) - offset(start) <= longest_) ++end;
      std::optional<int32_t> found;
      for (; end > start; --end) {
        const std::string candidate =
            (start > 0 ? prefix_ : "") + word.substr(offset(start), offset(end) - offset(start));
        if ((found = vocab_.find(candidate))) break;
      }
      if (!found) return ids.push_back(unk_);
      pieces.push_back(*found);
      start = end;
    }
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  const Vocabulary& vocabulary() const override { return vocab_; }

 private:
  Vocabulary vocab_;
  std::string prefix_;
  int64_t max_chars_;
  int32_t unk_ = 0;
  size_t longest_ = 0;  // bytes of the longest entry
};

// WordLevel: each piece is one vocabulary entry, else the unknown token.
class WordLevel final : public SubwordModel {
 public:
  WordLevel(Vocabulary vocab, const std::string& unk_token, const std::string& where)
      : vocab_(std::move(vocab)), unk_(vocab_.find(unk_token)), where_(where) {}

  void encode(const std::string& piece, std::vector<int32_t>& ids) const override {
    const auto id = vocab_.find(piece);
    AS_CHECK(id || unk_, where_, ": '", piece,
             "' is not in the vocabulary and the model has no unk_token");
    ids.push_back(id ? *id : *unk_);
  }

  const Vocabulary& vocabulary() const override { return vocab_; }

 private:
  Vocabulary vocab_;
  std::optional<int32_t> unk_;
  std::string where_;
};

}  // namespace

std::unique_ptr<SubwordModel> make_wordpiece(Vocabulary vocab, const std::string& unk_token,
                                             const std::string& prefix, int64_t max_chars,
                                             const std::string& where) {
  return std::make_unique<WordPiece>(std::move(vocab), unk_token, prefix, max_chars, where);
}

std::unique_ptr<SubwordModel> make_word_level(Vocabulary vocab, const std::string& unk_token,
                                              const std::string& where) {
  return std::make_unique<WordLevel>(std::move(vocab), unk_token, where);
}

}  // namespace autoshard::tokenizer
