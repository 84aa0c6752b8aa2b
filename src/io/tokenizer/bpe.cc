// Byte-pair encoding: a piece starts as its characters (or their bytes, with
// byte fallback) and the adjacent pair of lowest merge rank is merged until
// no pair has a merge; the leftmost pair goes first among equal ranks.
#include <array>
#include <cstdio>
#include <functional>
#include <queue>
#include <tuple>

#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"
#include "io/tokenizer/unicode.h"

namespace autoshard::tokenizer {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

class Bpe final : public SubwordModel {
 public:
  Bpe(Vocabulary vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      BpeOptions options, const std::string& where)
      : vocab_(std::move(vocab)), options_(std::move(options)), where_(where) {
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [left, right] = merges[rank];
      const auto l = vocab_.find(left), r = vocab_.find(right), merged = vocab_.find(left + right);
      AS_CHECK(l && r && merged, where, ": merge ", rank, " ('", left, "' '", right,
               "') uses a token that is not in the vocabulary");
      // A repeated merge keeps its first (lowest) rank.
      merges_.try_emplace(pair_key(*l, *r), Merge{static_cast<int32_t>(rank), *merged});
    }
    if (options_.unk_token) {
      unk_ = vocab_.find(*options_.unk_token);
      AS_CHECK(unk_, where, ": unk_token '", *options_.unk_token, "' is not in the vocabulary");
    }
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_ids_[b] = vocab_.find(name).value_or(-1);
    }
  }

  void encode(const std::string& piece, std::vector<int32_t>& ids) const override {
    if (options_.ignore_merges)
      if (auto id = vocab_.find(piece)) return ids.push_back(*id);
    std::vector<Symbol> symbols = initial_symbols(piece);
    merge(symbols);
    for (const Symbol& s : symbols)
      if (s.id >= 0) ids.push_back(s.id);
  }

  const Vocabulary& vocabulary() const override { return vocab_; }

 private:
  struct Merge {
    int32_t rank, id;
  };
  struct Symbol {
    int32_t id;  // -1 once merged into its left neighbour
    int prev, next;
  };

  std::vector<Symbol> initial_symbols(const std::string& piece) const {
    std::vector<int32_t> start;
    const std::vector<std::string_view> chars = code_points(piece);
    bool last_unknown = false;
    for (size_t i = 0; i < chars.size(); ++i) {
      const std::string name = (i > 0 ? options_.continuing_subword_prefix : "") +
                               std::string(chars[i]) +
                               (i + 1 == chars.size() ? options_.end_of_word_suffix : "");
      if (auto id = vocab_.find(name)) {
        start.push_back(*id);
        last_unknown = false;
      } else if (options_.byte_fallback && has_bytes(chars[i])) {
        for (char b : chars[i]) start.push_back(byte_ids_[static_cast<uint8_t>(b)]);
        last_unknown = false;
      } else {
        AS_CHECK(unk_, where_, ": '", chars[i],
                 "' is not in the vocabulary and the model has no unk_token");
        if (!(options_.fuse_unk && last_unknown)) start.push_back(*unk_);
        last_unknown = true;
      }
    }
    std::vector<Symbol> symbols(start.size());
    for (size_t i = 0; i < start.size(); ++i)
      symbols[i] = {start[i], static_cast<int>(i) - 1,
                    i + 1 < start.size() ? static_cast<int>(i + 1) : -1};
    return symbols;
  }

  bool has_bytes(std::string_view c) const {
    for (char b : c)
      if (byte_ids_[static_cast<uint8_t>(b)] < 0) return false;
    return true;
  }

  const Merge* merge_of(int32_t left, int32_t right) const {
    auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  void merge(std::vector<Symbol>& symbols) const {
    // (rank, position of the left symbol, merged id), smallest first.
    using Candidate = std::tuple<int32_t, int, int32_t>;
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    const auto offer = [&](int left) {
      const int right = symbols[left].next;
      if (right < 0) return;
      if (const Merge* m = merge_of(symbols[left].id, symbols[right].id))
        queue.emplace(m->rank, left, m->id);
    };
    for (size_t i = 0; i < symbols.size(); ++i) offer(static_cast<int>(i));
    while (!queue.empty()) {
      const auto [rank, left, id] = queue.top();
      queue.pop();
      Symbol& l = symbols[left];
      if (l.id < 0 || l.next < 0) continue;  // stale: merged away since
      const Merge* m = merge_of(l.id, symbols[l.next].id);
      if (!m || m->rank != rank || m->id != id) continue;  // stale: a neighbour changed
      Symbol& r = symbols[l.next];
      l.id = id;
      r.id = -1;
      l.next = r.next;
      if (l.next >= 0) symbols[l.next].prev = left;
      if (l.prev >= 0) offer(l.prev);
      offer(left);
    }
  }

  Vocabulary vocab_;
  BpeOptions options_;
  std::string where_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

std::unique_ptr<SubwordModel> make_bpe(
    Vocabulary vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    const BpeOptions& options, const std::string& where) {
  return std::make_unique<Bpe>(std::move(vocab), merges, options, where);
}

}  // namespace autoshard::tokenizer
