// NumPy's .npy format (numpy/lib/format.py documents it): the magic
// "\x93NUMPY", a version, a header length, a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } and the raw
// elements. An .npz is a zip of such files, read and written here through
// the one zip wrapper (io/zip_archive.h).
#include "autoshard/io/npy.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "autoshard/environment.h"
#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/safetensors.h"  // half_to_float
#include "autoshard/memory_size.h"
#include "io/zip_archive.h"

namespace autoshard {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr uint32_t kMaxNpyHeader = 1 << 20;        // numpy's own are a few hundred bytes
constexpr size_t kChunk = size_t{1} << 20;         // bytes converted at a time
constexpr uint64_t kMaxDeflateRatio = 1100;        // deflate cannot do better than ~1032:1
constexpr int64_t kMaxMembers = int64_t{1} << 16;  // arrays in one .npz

// Reads up to n bytes into `to`, returning how many (0 at the end).
using ByteReader = std::function<size_t(char* to, size_t n)>;

struct Descr {
  NpyType type;
  int size;           // bytes per element
  bool swap = false;  // big-endian on this little-endian machine
};

// ---- the header's Python literal ----

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  // {'descr': ..., 'fortran_order': ..., 'shape': (...), } with each key once.
  void parse(std::string& descr, bool& fortran, Shape& shape) {
    bool seen[3] = {false, false, false};
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = quoted();
      expect(':');
      const int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      AS_CHECK(k >= 0, where_, ": the header has key '", key,
               "'; an .npy header holds descr, fortran_order and shape only");
      AS_CHECK(!seen[k], where_, ": the header has key '", key, "' twice");
      seen[k] = true;
      if (k == 0) descr = quoted_descr();
      if (k == 1) fortran = boolean();
      if (k == 2) shape = tuple();
      skip_space();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_space();
      AS_CHECK(peek() == '}', where_, ": the header's dict is malformed at byte ", i_);
    }
    ++i_;
    skip_space();
    AS_CHECK(i_ == s_.size(), where_, ": the header has bytes after its dict");
    AS_CHECK(seen[0] && seen[1] && seen[2], where_,
             ": the header lacks one of descr, fortran_order, shape");
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  void expect(char c) {
    skip_space();
    AS_CHECK(peek() == c, where_, ": the header is not NumPy's dict literal (expected '", c,
             "' at byte ", i_, ")");
    ++i_;
  }
  std::string quoted() {
    skip_space();
    const char q = peek();
    AS_CHECK(q == '\'' || q == '"', where_, ": the header's dict is malformed at byte ", i_,
             " (expected a quoted key)");
    const size_t end = s_.find(q, i_ + 1);
    AS_CHECK(end != std::string_view::npos, where_, ": the header has an unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  std::string quoted_descr() {
    skip_space();
    AS_CHECK(peek() == '\'' || peek() == '"', where_,
             ": the array's descr is not a plain type string (structured arrays are not read); "
             "save a plain numeric array");
    return quoted();
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}})
      if (s_.substr(i_).starts_with(word)) {
        i_ += std::strlen(word);
        return value;
      }
    fail(where_, ": fortran_order is neither True nor False");
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    while (true) {
      skip_space();
      if (peek() == ')') break;
      AS_CHECK(peek() >= '0' && peek() <= '9', where_,
               ": the shape is not a tuple of whole numbers (at byte ", i_, ")");
      int64_t d = 0;
      while (peek() >= '0' && peek() <= '9') {
        AS_CHECK(d <= kMaxElements / 10, where_, ": a dimension of the shape is too large");
        d = d * 10 + (s_[i_++] - '0');
      }
      AS_CHECK(shape.size() < 64, where_, ": the shape has more than 64 dimensions");
      shape.push_back(d);
      skip_space();
      if (peek() == ',')
        ++i_;
      else
        AS_CHECK(peek() == ')', where_, ": the shape tuple is malformed at byte ", i_);
    }
    ++i_;
    return shape;
  }

  std::string_view s_;
  const std::string& where_;
  size_t i_ = 0;
};

Descr parse_descr(const std::string& d, const std::string& where) {
  const std::string supported =
      "float16/32/64, int8/16/32/64, uint8/16/32/64 or bool (convert with x.astype(np.float32))";
  AS_CHECK(d.size() >= 2, where, ": dtype '", d, "' is not supported; save ", supported);
  const char order = d[0];
  AS_CHECK(order == '<' || order == '>' || order == '|' || order == '=', where, ": dtype '", d,
           "' is not supported; save ", supported);
  const std::string code = d.substr(1);
  static const std::pair<const char*, Descr> known[] = {
      {"b1", {NpyType::Bool, 1}},    {"i1", {NpyType::Int8, 1}},    {"u1", {NpyType::UInt8, 1}},
      {"i2", {NpyType::Int16, 2}},   {"i4", {NpyType::Int32, 4}},   {"i8", {NpyType::Int64, 8}},
      {"u2", {NpyType::UInt16, 2}},  {"u4", {NpyType::UInt32, 4}},  {"u8", {NpyType::UInt64, 8}},
      {"f2", {NpyType::Float16, 2}}, {"f4", {NpyType::Float32, 4}}, {"f8", {NpyType::Float64, 8}}};
  for (const auto& [name, descr] : known)
    if (code == name) {
      Descr out = descr;
      out.swap = order == '>' && descr.size > 1;
      return out;
    }
  AS_CHECK(code != "O", where,
           ": an object array (pickled Python objects) is never read; save a numeric array");
  fail(where, ": dtype '", d, "' is not supported; save ", supported);
}

// ---- memory ----

// The memory the arrays of one file may take, checked from each array's
// header before its data is read (or inflated: a small .npz can declare
// gigabytes). Half of what this run may use: predict, fit and evaluate need
// about as much again for outputs and batches.
class ArrayBudget {
 public:
  ArrayBudget() {
    if (const std::optional<int64_t> env_limit = env::memory_limit()) {
      set(*env_limit, "AUTOSHARD_MEMORY_LIMIT");
    } else if (const std::optional<int64_t> available = available_memory_bytes()) {
      set(*available, "available memory");
    }
    // An address-space cap (ulimit -v) is a limit too, less what is mapped.
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      const int64_t cap = static_cast<int64_t>(std::min<rlim_t>(rl.rlim_cur, INT64_MAX));
      const int64_t left = std::max<int64_t>(0, cap - mapped_bytes());
      if (!limit_ || left < *limit_) set(left, "the address space left under ulimit -v");
    }
  }

  // Counts `bytes` of an array of `shape` against the budget, or fails
  // naming the file, the array, its size and the limit.
  void take(const Shape& shape, NpyType type, uint64_t bytes, const std::string& where) {
    used_ += bytes;
    if (!limit_ || used_ <= static_cast<uint64_t>(*limit_ / 2)) return;
    fail(where, ": the array of shape ", shape_str(shape), " (", npy_type_name(type), ") needs ",
         format_bytes(static_cast<double>(bytes)), " (", bytes, " bytes) in memory",
         used_ > bytes ? cat(" beside the file's other arrays (", used_, " bytes in all)") : "",
         ", more than half of the ", format_bytes(static_cast<double>(*limit_)), " (", source_,
         ") a run may use; give a smaller array (fewer rows), or more memory");
  }

 private:
  void set(int64_t bytes, const char* source) {
    limit_ = bytes;
    source_ = source;
  }
  // The process's mapped address space (VmSize), 0 where unknown.
  static int64_t mapped_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmSize:", 0) == 0) return std::atoll(line.c_str() + 7) * 1024;
    return 0;
  }
  std::optional<int64_t> limit_;
  const char* source_ = "";
  uint64_t used_ = 0;
};

// ---- elements ----

template <typename T>
T load(const char* p, bool swap) {
  std::array<char, sizeof(T)> b;
  std::memcpy(b.data(), p, sizeof(T));
  if (swap) std::reverse(b.begin(), b.end());
  return std::bit_cast<T>(b);
}

// "[3, 1]": element `flat` of `shape` as an index, for messages.
std::string index_of(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t a = shape.size(); a-- > 0;) {
    idx[a] = shape[a] ? flat % shape[a] : 0;
    if (shape[a]) flat /= shape[a];
  }
  std::string out = "[";
  for (size_t a = 0; a < idx.size(); ++a) out += (a ? ", " : "") + std::to_string(idx[a]);
  return out + "]";
}

// Converts `count` elements at `p` into the tensor from element `first` on.
void convert(const char* p, int64_t count, int64_t first, const Descr& d, Tensor& out,
             const std::string& where) {
  auto bad = [&](int64_t i, const std::string& why) {
    fail(where, ": element ", index_of(first + i, out.shape()), " ", why);
  };
  if (npy_is_floating(d.type)) {
    float* o = out.data<float>() + first;
    for (int64_t i = 0; i < count; ++i, p += d.size) {
      double v = d.type == NpyType::Float16   ? half_to_float(load<uint16_t>(p, d.swap))
                 : d.type == NpyType::Float32 ? load<float>(p, d.swap)
                                              : load<double>(p, d.swap);
      if (!std::isfinite(v))
        bad(i, cat("is ", std::isnan(v) ? "NaN" : "infinite", "; the data must be finite"));
      if (std::abs(v) > std::numeric_limits<float>::max())
        bad(i, cat("is ", v, ", beyond float32's range"));
      o[i] = static_cast<float>(v);
    }
    return;
  }
  int32_t* o = out.data<int32_t>() + first;
  for (int64_t i = 0; i < count; ++i, p += d.size) {
    int64_t v = 0;
    switch (d.type) {
      case NpyType::Bool:
        v = static_cast<uint8_t>(*p);
        if (v > 1) bad(i, cat("is byte ", v, " in a bool array (only 0 and 1 are booleans)"));
        break;
      case NpyType::UInt8:
        v = static_cast<uint8_t>(*p);
        break;
      case NpyType::Int8:
        v = static_cast<int8_t>(*p);
        break;
      case NpyType::Int16:
        v = load<int16_t>(p, d.swap);
        break;
      case NpyType::Int32:
        v = load<int32_t>(p, d.swap);
        break;
      case NpyType::UInt16:
        v = load<uint16_t>(p, d.swap);
        break;
      case NpyType::UInt32:
        v = load<uint32_t>(p, d.swap);
        break;
      case NpyType::UInt64: {
        const uint64_t u = load<uint64_t>(p, d.swap);
        v = u > uint64_t{INT64_MAX} ? INT64_MAX : static_cast<int64_t>(u);
        break;
      }
      default:
        v = load<int64_t>(p, d.swap);
        break;
    }
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      bad(i, cat("is ", v, ", beyond int32's range (autoshard holds integers as int32)"));
    o[i] = static_cast<int32_t>(v);
  }
}

// Reads exactly n bytes, or says the data ended early.
void read_exactly(const ByteReader& read, char* to, size_t n, const std::string& where) {
  while (n > 0) {
    const size_t got = read(to, n);
    AS_CHECK(got > 0, where, ": the data ends early (a truncated file?)");
    to += got, n -= got;
  }
}

// One .npy of `total` bytes, read from `read`; its elements are counted
// against `budget` before they are read.
NpyArray read_array(const ByteReader& read, uint64_t total, const std::string& where,
                    ArrayBudget& budget) {
  char prefix[12];
  AS_CHECK(total >= 10, where, ": too short for an .npy file (", total, " bytes)");
  read_exactly(read, prefix, 8, where);
  AS_CHECK(std::memcmp(prefix, kMagic, kMagicSize) == 0, where,
           ": not an .npy file (no \\x93NUMPY magic); save arrays with np.save or np.savez");
  const int major = static_cast<uint8_t>(prefix[6]);
  AS_CHECK(major >= 1 && major <= 3, where, ": .npy format version ", major,
           " is not known (versions 1 to 3 are)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  AS_CHECK(total >= 8 + len_bytes, where, ": too short for an .npy file");
  read_exactly(read, prefix + 8, len_bytes, where);
  uint32_t header_len = static_cast<uint8_t>(prefix[8]) | (static_cast<uint8_t>(prefix[9]) << 8);
  if (major > 1)
    header_len |= (uint32_t(static_cast<uint8_t>(prefix[10])) << 16) |
                  (uint32_t(static_cast<uint8_t>(prefix[11])) << 24);
  const uint64_t offset = 8 + len_bytes + uint64_t{header_len};
  AS_CHECK(header_len <= kMaxNpyHeader && offset <= total, where, ": the header length ",
           header_len, " does not fit the file (", total, " bytes)");
  std::string header(header_len, '\0');
  read_exactly(read, header.data(), header_len, where);
  std::string descr_text;
  bool fortran = false;
  Shape shape;
  HeaderParser(header, where).parse(descr_text, fortran, shape);
  const Descr descr = parse_descr(descr_text, where);
  const int64_t n = numel(shape);
  AS_CHECK(!fortran || shape.size() <= 1 || n <= 1, where,
           ": the array is in Fortran order; save np.ascontiguousarray(x) (C order)");
  const uint64_t payload = uint64_t(n) * uint64_t(descr.size);
  AS_CHECK(payload == total - offset, where, ": shape ", shape_str(shape), " of ",
           npy_type_name(descr.type), " needs ", payload, " bytes of data but the file holds ",
           total - offset);
  budget.take(shape, descr.type, uint64_t(n) * 4, where);  // held as float32 or int32
  NpyArray out{Tensor(shape, npy_is_floating(descr.type) ? DType::F32 : DType::I32), descr.type};
  std::vector<char> chunk(std::min<uint64_t>(kChunk, std::max<uint64_t>(payload, 1)));
  for (uint64_t done = 0; done < payload;) {
    const uint64_t bytes = std::min<uint64_t>(chunk.size(), payload - done);
    read_exactly(read, chunk.data(), bytes, where);
    convert(chunk.data(), int64_t(bytes) / descr.size, int64_t(done) / descr.size, descr,
            out.tensor, where);
    done += bytes;
  }
  char extra;
  AS_CHECK(read(&extra, 1) == 0, where, ": the data is longer than its header says");
  return out;
}

std::string file_where(const std::string& path, const std::string& what) {
  return cat(what, " '", path, "'");
}

// ---- .npz through the zip wrapper (io/zip_archive.h) ----

// Entry `e`'s array (entry `index` of `zip`), after its sizes were checked.
NpyArray read_member(const ZipReader& zip, int64_t index, const ZipEntry& e,
                     const std::string& where, ArrayBudget& budget) {
  AS_CHECK(e.has_size && e.has_compressed_size && e.has_method, where,
           ": the zip entry lacks its sizes");
  AS_CHECK(!e.encrypted, where, ": the zip entry is encrypted");
  AS_CHECK(e.stored() || e.deflated(), where, ": the zip entry's compression method ", e.method,
           " is not stored or deflate (np.savez and np.savez_compressed write those)");
  if (e.stored())
    AS_CHECK(e.size == e.compressed_size, where, ": a stored zip entry declares ", e.size,
             " bytes but holds ", e.compressed_size);
  else
    AS_CHECK(e.size <= e.compressed_size * kMaxDeflateRatio + 4096, where,
             ": the zip entry claims ", e.size, " bytes from ", e.compressed_size,
             " compressed, more than deflate can give (a zip bomb?)");
  std::optional<ZipStream> file = zip.open_entry(index);
  AS_CHECK(file, where, ": the zip entry cannot be opened: ", zip.error());
  const ByteReader read = [&](char* to, size_t n) -> size_t {
    const int64_t got = file->read(to, n);
    AS_CHECK(got >= 0, where, ": reading the zip entry failed: ", file->error());
    return static_cast<size_t>(got);
  };
  return read_array(read, e.size, where, budget);
}

}  // namespace

const char* npy_type_name(NpyType type) {
  switch (type) {
    case NpyType::Bool:
      return "bool";
    case NpyType::Int8:
      return "int8";
    case NpyType::Int16:
      return "int16";
    case NpyType::Int32:
      return "int32";
    case NpyType::Int64:
      return "int64";
    case NpyType::UInt8:
      return "uint8";
    case NpyType::UInt16:
      return "uint16";
    case NpyType::UInt32:
      return "uint32";
    case NpyType::UInt64:
      return "uint64";
    case NpyType::Float16:
      return "float16";
    case NpyType::Float32:
      return "float32";
    case NpyType::Float64:
      return "float64";
  }
  return "?";
}

bool npy_is_floating(NpyType type) {
  return type == NpyType::Float16 || type == NpyType::Float32 || type == NpyType::Float64;
}

NpyArray parse_npy(std::string_view bytes, const std::string& what) {
  size_t at = 0;
  const ByteReader read = [&](char* to, size_t n) {
    const size_t got = std::min(n, bytes.size() - at);
    std::memcpy(to, bytes.data() + at, got);
    at += got;
    return got;
  };
  ArrayBudget budget;
  return read_array(read, bytes.size(), what, budget);
}

NpyArray read_npy(const std::string& path, const std::string& what) {
  const std::string where = file_where(path, what);
  const uint64_t size = input_file_size(path, what);
  std::ifstream in(path, std::ios::binary);
  AS_CHECK(in, where, " cannot be opened");
  const ByteReader read = [&](char* to, size_t n) {
    in.read(to, static_cast<std::streamsize>(n));
    return static_cast<size_t>(in.gcount());
  };
  ArrayBudget budget;
  return read_array(read, size, where, budget);
}

std::map<std::string, NpyArray> read_npz(const std::string& path, const std::string& what) {
  const std::string where = file_where(path, what);
  input_file_size(path, what);  // a regular file
  std::string why;
  const std::optional<ZipReader> zip = ZipReader::open(path, why);
  AS_CHECK(zip, where, ": not a readable .npz (zip) file: ", why);
  const int64_t count = zip->entry_count();
  AS_CHECK(count >= 0 && count <= kMaxMembers, where, ": the zip holds ", count,
           " entries, more than the ", kMaxMembers, " arrays accepted");
  std::map<std::string, NpyArray> out;
  ArrayBudget budget;  // the file's arrays together
  for (int64_t i = 0; i < count; ++i) {
    const std::optional<ZipEntry> e = zip->entry(i);
    AS_CHECK(e && e->has_name, where, ": zip entry ", i, " cannot be read: ", zip->error());
    const std::string& name = e->name;
    AS_CHECK(name.size() > 4 && name.ends_with(".npy"), where, ": zip entry '", name,
             "' is not an .npy array (an .npz holds NAME.npy entries, as np.savez writes)");
    const std::string key = name.substr(0, name.size() - 4);
    AS_CHECK(!out.contains(key), where, ": array '", key, "' appears twice");
    out.emplace(key, read_member(*zip, i, *e, cat(where, " array '", key, "'"), budget));
  }
  AS_CHECK(!out.empty(), where, ": the .npz holds no arrays");
  return out;
}

std::map<std::string, NpyArray> read_arrays(const std::string& path, const std::string& what) {
  const std::string where = file_where(path, what);
  const uint64_t size = input_file_size(path, what);
  char head[4] = {0, 0, 0, 0};
  std::ifstream in(path, std::ios::binary);
  AS_CHECK(in, where, " cannot be opened");
  in.read(head, std::min<uint64_t>(size, 4));
  if (std::memcmp(head, "PK", 2) == 0) return read_npz(path, what);
  AS_CHECK(size >= 4 && std::memcmp(head, kMagic, 4) == 0, where,
           " is neither an .npy nor an .npz file; save arrays with np.save or np.savez");
  std::map<std::string, NpyArray> out;
  out.emplace("", read_npy(path, what));
  return out;
}

Tensor npy_as(const NpyArray& array, DType dtype, const std::string& what) {
  const Tensor& t = array.tensor;
  if (t.dtype() == dtype) return t;
  Tensor out(t.shape(), dtype);
  if (dtype == DType::F32) {
    const int32_t* in = t.data<int32_t>();
    float* o = out.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) o[i] = static_cast<float>(in[i]);
    return out;
  }
  const float* in = t.data<float>();
  int32_t* o = out.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    AS_CHECK(in[i] == std::trunc(in[i]) && std::abs(in[i]) <= 2147483520.0f, what, ": element ",
             index_of(i, t.shape()), " is ", in[i], " where whole numbers (int32) are expected ",
             "(class ids, token ids); save the array as integers");
    o[i] = static_cast<int32_t>(in[i]);
  }
  return out;
}

std::string npy_bytes(const Tensor& tensor) {
  std::string shape = "(";
  for (size_t a = 0; a < tensor.shape().size(); ++a)
    shape += std::to_string(tensor.shape()[a]) + (a + 1 < tensor.shape().size() ? ", " : "");
  if (tensor.shape().size() == 1) shape += ",";
  shape += ")";
  std::string dict = cat("{'descr': '", tensor.dtype() == DType::F32 ? "<f4" : "<i4",
                         "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Padded with spaces and a newline so the data starts 64-byte aligned.
  const size_t unpadded = 10 + dict.size() + 1;
  dict += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
  AS_CHECK(dict.size() <= 65535, "npy: the shape ", shape_str(tensor.shape()),
           " is too long for a version 1.0 header");
  std::string out(kMagic, kMagicSize);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out.append(reinterpret_cast<const char*>(tensor.raw()), tensor.nbytes());
  return out;
}

std::string npz_bytes(const std::vector<std::pair<std::string, Tensor>>& arrays) {
  ZipWriter zip;
  AS_CHECK(zip.create_in_memory(), "npz: cannot make a zip in memory: ", zip.error());
  for (const auto& [name, tensor] : arrays)
    AS_CHECK(zip.add_bytes(name + ".npy", npy_bytes(tensor)), "npz: cannot add array '", name,
             "': ", zip.error());
  AS_CHECK(zip.close(), "npz: writing the zip failed: ", zip.error());
  std::optional<std::string> out = zip.bytes();
  AS_CHECK(out, "npz: reading the zip back from memory failed");
  return std::move(*out);
}

}  // namespace autoshard
