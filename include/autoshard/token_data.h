// TokenData: a training stream of token ids, read in order as llm.c does:
// batch k holds tokens [k*B*T, (k+1)*B*T) as a (B, T) input and the same
// range shifted by one as targets; after the last full batch it starts over.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autoshard/tensor.h"

namespace autoshard {

class TokenData {
 public:
  // A ".bin" file is little-endian uint16 ids (nanoGPT's format); anything
  // else is read as bytes (vocabulary 256).
  static TokenData from_file(const std::string& path);
  // The built-in corpus (bytes of a short English text, no download).
  static TokenData builtin();
  explicit TokenData(std::vector<int32_t> tokens, std::string source = "memory");

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::string& source() const { return source_; }
  int32_t max_token() const;

  // Throws a clear error unless at least one (B, T) batch fits and every id
  // is below vocab_size.
  void validate(int64_t batch, int64_t seq, int64_t vocab_size) const;
  int64_t batches(int64_t batch, int64_t seq) const;
  // Batch `index` (wrapping around): inputs and targets, i32 [B, T].
  void batch(int64_t index, int64_t batch, int64_t seq, Tensor& x, Tensor& y) const;

 private:
  std::vector<int32_t> tokens_;
  std::string source_;
};

// The built-in corpus text.
const std::string& builtin_corpus();

}  // namespace autoshard
