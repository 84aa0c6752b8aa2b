#include "autoshard/token_data.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "autoshard/error.h"

namespace autoshard {

TokenData::TokenData(std::vector<int32_t> tokens, std::string source)
    : tokens_(std::move(tokens)), source_(std::move(source)) {}

TokenData TokenData::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open data file '", path, "'");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> tokens;
  if (path.ends_with(".bin")) {
    check(bytes.size() % 2 == 0, "data file '", path, "' has an odd number of bytes (", bytes.size(),
          "); a .bin file holds little-endian uint16 token ids");
    tokens.resize(bytes.size() / 2);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = bytes[2 * i] | (bytes[2 * i + 1] << 8);
  } else {
    tokens.assign(bytes.begin(), bytes.end());
  }
  return TokenData(std::move(tokens), path);
}

TokenData TokenData::builtin() {
  const std::string& text = builtin_corpus();
  return TokenData(std::vector<int32_t>(text.begin(), text.end()), "built-in corpus");
}

int32_t TokenData::max_token() const {
  return tokens_.empty() ? -1 : *std::max_element(tokens_.begin(), tokens_.end());
}

int64_t TokenData::batches(int64_t batch, int64_t seq) const {
  return (size() - 1) / (batch * seq);
}

void TokenData::validate(int64_t batch, int64_t seq, int64_t vocab_size) const {
  check(batch > 0 && seq > 0, "batch and sequence length must be positive");
  check(size() >= batch * seq + 1, "data '", source_, "' has ", size(), " tokens; one batch of ",
        batch, " x ", seq, " needs ", batch * seq + 1, " (use a smaller --batch or --seq)");
  int32_t top = max_token();
  check(top < vocab_size, "data '", source_, "' holds token id ", top,
        ", out of range for the model's vocabulary of ", vocab_size);
}

void TokenData::batch(int64_t index, int64_t b, int64_t t, Tensor& x, Tensor& y) const {
  const int64_t n = b * t;
  const int64_t start = (index % batches(b, t)) * n;
  if (x.shape() != Shape{b, t}) x = Tensor({b, t}, DType::I32);
  if (y.shape() != Shape{b, t}) y = Tensor({b, t}, DType::I32);
  std::copy_n(tokens_.begin() + start, n, x.i32());
  std::copy_n(tokens_.begin() + start + 1, n, y.i32());
}

}  // namespace autoshard
