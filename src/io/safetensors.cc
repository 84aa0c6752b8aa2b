#include "autoshard/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "autoshard/error.h"
#include "autoshard/json.h"
#include "autoshard/input_file.h"

namespace autoshard {

size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

namespace {
constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;  // the reference implementation's limit
}  // namespace

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) mant <<= 1, --exp;
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1);  // round half to even
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: infinity
  if (abs < 0x38800000u) {                        // below 2^-14: subnormal or zero
    if (abs < 0x33000000u) return sign;           // under half the smallest subnormal
    const uint32_t exp = abs >> 23, mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // to units of 2^-24
    const uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    return sign | static_cast<uint16_t>(q + (rest > half || (rest == half && (q & 1))));
  }
  // Normal: rebias the exponent, round the 13 dropped bits half to even.
  const uint32_t r = abs - 0x38000000u;
  return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1)) >> 13);
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  require_regular_file(path, "weight file");  // a FIFO would block the open forever
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  AS_CHECK(fd_ >= 0, "cannot open '", path, "': ", std::strerror(errno));
  try {
    struct stat st {};
    AS_CHECK(::fstat(fd_, &st) == 0, "cannot stat '", path, "'");
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);
    AS_CHECK(file_size >= 8, "'", path,
             "' is not a safetensors file: shorter than its 8-byte header length");
    uint8_t len_bytes[8];
    AS_CHECK(::pread(fd_, len_bytes, 8, 0) == 8, "'", path, "': cannot read the header length");
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
    AS_CHECK(header_len <= kMaxSafetensorsHeader && header_len <= file_size - 8, "'", path,
             "': header length ", header_len, " is larger than the file allows (", file_size - 8,
             " bytes)");
    std::string header(header_len, '\0');
    AS_CHECK(::pread(fd_, header.data(), header_len, 8) == static_cast<ssize_t>(header_len), "'",
             path, "': truncated header");
    data_start_ = 8 + header_len;
    const uint64_t data_size = file_size - data_start_;

    nlohmann::json j;
    // JSON parsers keep the last of two equal keys; names must be unique, so
    // watch the top-level keys as they are parsed.
    std::set<std::string> names;
    std::string duplicate;
    auto watch = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
          !names.insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
      return true;
    };
    j = parse_json_text(header, "'" + path + "': the header", watch);
    AS_CHECK(duplicate.empty(), "'", path, "': tensor '", duplicate,
             "' appears twice in the header");
    AS_CHECK(j.is_object(), "'", path, "': the header must be a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& name = it.key();
      const auto& v = it.value();
      if (name == "__metadata__") {
        AS_CHECK(v.is_object(), "'", path, "': __metadata__ must be an object of strings");
        for (auto m = v.begin(); m != v.end(); ++m) {
          AS_CHECK(m.value().is_string(), "'", path, "': __metadata__ value '", m.key(),
                   "' is not a string");
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      auto bad = [&](const std::string& what) {
        fail("'", path, "': tensor '", name, "': ", what);
      };
      if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
          !v.contains("data_offsets"))
        bad("needs dtype, shape and data_offsets");
      SafetensorsEntry e;
      e.name = name;
      if (!v["dtype"].is_string()) bad("dtype must be a string");
      e.dtype = v["dtype"].get<std::string>();
      size_t elem = safetensors_dtype_size(e.dtype);
      if (elem == 0) bad("unknown dtype '" + e.dtype + "'");
      if (!v["shape"].is_array()) bad("shape must be an array");
      // Element and byte counts are bounded as they grow, so neither wraps:
      // at most kMaxElements elements and 2^62 bytes.
      uint64_t count = 1;
      for (const auto& d : v["shape"]) {
        if (!d.is_number_unsigned()) bad("shape entries must be non-negative integers");
        uint64_t dim = d.get<uint64_t>();
        if (dim > 0 && count > uint64_t(kMaxElements) / dim)
          bad("shape is too large (more than 2^60 elements)");
        count *= dim;
        e.shape.push_back(static_cast<int64_t>(dim));
      }
      if (count > (uint64_t(1) << 62) / elem) bad("shape and dtype need more than 2^62 bytes");
      const auto& off = v["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
          !off[1].is_number_unsigned())
        bad("data_offsets must be two non-negative integers");
      e.begin = off[0].get<uint64_t>();
      e.end = off[1].get<uint64_t>();
      if (e.begin > e.end || e.end > data_size)
        bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
            ") fall outside the data section of " + std::to_string(data_size) + " bytes");
      if (e.end - e.begin != count * elem)
        bad("holds " + std::to_string(e.end - e.begin) + " bytes but shape and dtype need " +
            std::to_string(count * elem));
      index_[name] = entries_.size();
      entries_.push_back(std::move(e));
    }
    // Tensors must not overlap (JSON objects already make names unique).
    std::vector<const SafetensorsEntry*> sorted;
    for (const auto& e : entries_) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < sorted.size(); ++i)
      AS_CHECK(sorted[i]->begin >= sorted[i - 1]->end || sorted[i]->begin == sorted[i]->end ||
                   sorted[i - 1]->begin == sorted[i - 1]->end,
               "'", path, "': tensors '", sorted[i - 1]->name, "' and '", sorted[i]->name,
               "' overlap");
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  AS_CHECK(it != index_.end(), "'", path_, "' has no tensor '", name, "'");
  return entries_[it->second];
}

void SafetensorsFile::read_bytes(const SafetensorsEntry& e, uint64_t offset, void* dst,
                                 uint64_t bytes) const {
  AS_CHECK(offset + bytes <= e.end - e.begin, "internal: read past tensor '", e.name, "'");
  auto* out = static_cast<char*>(dst);
  uint64_t pos = data_start_ + e.begin + offset;
  while (bytes > 0) {
    ssize_t got = ::pread(fd_, out, bytes, static_cast<off_t>(pos));
    if (got < 0 && errno == EINTR) continue;
    AS_CHECK(got > 0, "'", path_, "': tensor '", e.name, "' is truncated");
    out += got, pos += static_cast<uint64_t>(got), bytes -= static_cast<uint64_t>(got);
  }
}

Tensor SafetensorsFile::load(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  std::vector<char> raw(e.end - e.begin);
  read_bytes(e, 0, raw.data(), raw.size());
  const int64_t n = numel(e.shape);
  if (e.dtype == "F32" || e.dtype == "I32") {
    Tensor t(e.shape, e.dtype == "F32" ? DType::F32 : DType::I32);
    std::memcpy(t.raw(), raw.data(), raw.size());
    return t;
  }
  if (e.dtype == "F16" || e.dtype == "BF16" || e.dtype == "F64") {
    Tensor t(e.shape);
    for (int64_t i = 0; i < n; ++i) {
      if (e.dtype == "F64") {
        double d;
        std::memcpy(&d, raw.data() + 8 * i, 8);
        t.f32()[i] = static_cast<float>(d);
      } else {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        t.f32()[i] = e.dtype == "F16" ? half_to_float(h) : bf16_to_float(h);
      }
    }
    return t;
  }
  if (e.dtype == "I64") {
    Tensor t(e.shape, DType::I32);
    for (int64_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, raw.data() + 8 * i, 8);
      AS_CHECK(v >= INT32_MIN && v <= INT32_MAX, "'", path_, "': tensor '", name, "' value ", v,
               " does not fit in i32");
      t.i32()[i] = static_cast<int32_t>(v);
    }
    return t;
  }
  fail("'", path_, "': tensor '", name, "' has dtype ", e.dtype,
       ", which cannot be loaded as f32 or i32");
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    AS_CHECK(!header.contains(name), "save_safetensors: tensor name '", name, "' appears twice");
    header[name] = {{"dtype", t.dtype() == DType::F32 ? "F32" : "I32"},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  AS_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail("writing '", path, "' failed: ", std::strerror(err));
      }
      c += w, n -= static_cast<size_t>(w);
    }
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
  write_all(len, 8);
  write_all(text.data(), text.size());
  for (const auto& [name, t] : tensors) write_all(t.raw(), t.nbytes());
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("writing '", path, "' failed: ", std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot move '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

}  // namespace autoshard
