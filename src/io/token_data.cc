#include "autoshard/io/token_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "tensor/rng.h"

namespace autoshard {

TokenData::TokenData(std::vector<int32_t> tokens, std::string source)
    : tokens_(std::move(tokens)),
      size_(static_cast<int64_t>(tokens_.size())),
      source_(std::move(source)) {}

TokenData TokenData::from_file(const std::string& path) {
  require_regular_file(path, "data file");  // a FIFO would block the open forever
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  AS_CHECK(fd >= 0, "cannot open data file '", path, "': ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  TokenData d({}, path);
  d.fd_ = std::shared_ptr<int>(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  d.bytes_per_token_ = path.ends_with(".bin") ? 2 : 1;
  AS_CHECK(st.st_size % d.bytes_per_token_ == 0, "data file '", path, "' has an odd number of bytes (",
        st.st_size, "); a .bin file holds little-endian uint16 token ids");
  d.size_ = st.st_size / d.bytes_per_token_;
  return d;
}

TokenData TokenData::builtin() {
  const std::string& text = builtin_corpus();
  std::vector<int32_t> tokens;
  for (unsigned char c : text) tokens.push_back(c);
  return TokenData(std::move(tokens), "built-in corpus");
}

int64_t TokenData::batches(int64_t batch, int64_t seq) const {
  return (size() - 1) / (batch * seq);
}

void TokenData::validate(int64_t batch, int64_t seq, int64_t vocab_size) {
  AS_CHECK(batch > 0 && seq > 0, "batch and sequence length must be positive");
  // Random windows need one window of seq + 1 tokens; sequential batches a
  // whole batch of batch x seq + 1. Compared without multiplying (no wrap).
  AS_CHECK(seq < size(), "data '", source_, "' has ", size(), " tokens; a sequence of ", seq,
           " needs ", seq + 1, " (use a smaller --seq)");
  if (sampling_ == Sampling::Sequential)
    AS_CHECK(batch <= (size() - 1) / seq, "data '", source_, "' has ", size(),
             " tokens; one batch of ", batch, " x ", seq, " needs ",
             batch <= INT64_MAX / seq - 1 ? std::to_string(batch * seq + 1) : "more than 2^63",
             " (use a smaller --batch or --seq)");
  vocab_ = vocab_size;
}

void TokenData::read(int64_t first, int64_t count, int32_t* out) const {
  if (!fd_) {
    std::copy_n(tokens_.begin() + first, count, out);
  } else {
    std::vector<uint8_t> raw(static_cast<size_t>(count) * bytes_per_token_);
    size_t done = 0;
    while (done < raw.size()) {
      ssize_t got = ::pread(*fd_, raw.data() + done, raw.size() - done,
                            static_cast<off_t>(first * bytes_per_token_ + done));
      if (got < 0 && errno == EINTR) continue;
      AS_CHECK(got > 0, "reading data file '", source_, "' failed");
      done += static_cast<size_t>(got);
    }
    for (int64_t i = 0; i < count; ++i)
      out[i] = bytes_per_token_ == 2 ? raw[2 * i] | (raw[2 * i + 1] << 8) : raw[i];
  }
  for (int64_t i = 0; i < count; ++i)
    AS_CHECK(out[i] < vocab_, "data '", source_, "' holds token id ", out[i],
          ", out of range for the model's vocabulary of ", vocab_);
}

void TokenData::set_sampling(Sampling sampling, uint64_t seed) {
  sampling_ = sampling;
  seed_ = seed;
}

void TokenData::batch(int64_t index, int64_t b, int64_t t, Tensor& x, Tensor& y, int64_t row_begin,
                      int64_t row_end) const {
  if (row_end < 0) row_end = b;
  if (x.shape() != Shape{b, t}) x = Tensor({b, t}, DType::I32);
  if (y.shape() != Shape{b, t}) y = Tensor({b, t}, DType::I32);
  const int64_t n = (row_end - row_begin) * t;
  if (n <= 0) return;
  std::vector<int32_t> window(n + 1);
  if (sampling_ == Sampling::Sequential) {
    const int64_t start = (index % batches(b, t)) * b * t;
    read(start + row_begin * t, n + 1, window.data());
    std::copy_n(window.begin(), n, x.i32() + row_begin * t);
    std::copy_n(window.begin() + 1, n, y.i32() + row_begin * t);
    return;
  }
  const CounterRng rng(seed_ ^ 0xDA7A5A3B1E5EEDull, 1);
  const uint64_t starts = static_cast<uint64_t>(size() - t);  // every window of t + 1 tokens
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t start =
        static_cast<int64_t>(rng.bits64(static_cast<uint64_t>(index * b + r)) % starts);
    read(start, t + 1, window.data());
    std::copy_n(window.begin(), t, x.i32() + r * t);
    std::copy_n(window.begin() + 1, t, y.i32() + r * t);
  }
}

}  // namespace autoshard
