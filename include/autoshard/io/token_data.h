// TokenData: a stream of token ids cut into (B, T) batches, targets being
// the inputs shifted by one token. Two ways to cut:
//  - sequential (llm.c's): batch k holds tokens [k*B*T, (k+1)*B*T), starting
//    over after the last full batch;
//  - random (nanoGPT's, the training default): row r of batch k starts at an
//    offset drawn from (seed, k, r) alone, so a model sees every position of
//    the text in every role, and a resumed run (or an MPI rank reading only
//    its rows) draws exactly the same windows.
//
// Files are not loaded: each batch reads just the bytes it needs (pread), and
// a caller can ask for some rows only (an MPI rank reads only its share).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

class TokenData {
 public:
  enum class Sampling { Sequential, Random };

  // A ".bin" file is little-endian uint16 ids (nanoGPT's format); anything
  // else is read as bytes (vocabulary 256).
  static TokenData from_file(const std::string& path);
  // The built-in corpus (bytes of a short English text, no download).
  static TokenData builtin();
  explicit TokenData(std::vector<int32_t> tokens, std::string source = "memory");

  int64_t size() const { return size_; }
  const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

  // Throws a clear error unless at least one (B, T) batch fits; ids are
  // checked against vocab_size as batches are read.
  void validate(int64_t batch, int64_t seq, int64_t vocab_size);
  int64_t batches(int64_t batch, int64_t seq) const;
  // How batches are cut (default: sequential).
  void set_sampling(Sampling sampling, uint64_t seed);
  // Batch `index` (wrapping around): inputs and targets, i32 [B, T]. Only
  // rows [row_begin, row_end) are read (the rest are zero); default all.
  void batch(int64_t index, int64_t batch, int64_t seq, Tensor& x, Tensor& y, int64_t row_begin = 0,
             int64_t row_end = -1) const;

 private:
  void read(int64_t first, int64_t count, int32_t* out) const;

  std::vector<int32_t> tokens_;  // in memory (built-in corpus)
  std::shared_ptr<int> fd_;      // or a file
  int bytes_per_token_ = 1;
  int64_t size_ = 0;
  int64_t vocab_ = INT32_MAX;
  Sampling sampling_ = Sampling::Sequential;
  uint64_t seed_ = 0;
  std::string source_;
};

// The built-in corpus text.
const std::string& builtin_corpus();

}  // namespace autoshard
