#include "io/keras/hdf5_file.h"

#include <H5FDpublic.h>
#include <hdf5.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/safetensors.h"

namespace autoshard::keras {

namespace {

std::recursive_mutex& lock() {
  static std::recursive_mutex m;
  return m;
}

// libhdf5 prints its error stack to stderr by default; errors here are ours.
void quiet() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// Closes an HDF5 id when it goes out of scope.
struct Id {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  Id(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~Id() {
    if (id >= 0 && close) close(id);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  operator hid_t() const { return id; }  // NOLINT
};

// ---- A read-only virtual file driver over a ZipMember ----

struct MemberFile {
  H5FD_t pub;  // first: HDF5 casts between the two
  ZipMember member;
  haddr_t eoa = 0;
  int64_t key = 0;
};

std::map<int64_t, ZipMember>& registry() {
  static std::map<int64_t, ZipMember> r;
  return r;
}

H5FD_t* member_open(const char* name, unsigned flags, hid_t, haddr_t) {
  if (flags & H5F_ACC_RDWR) return nullptr;
  const char* prefix = "keras-zip-member:";
  if (std::strncmp(name, prefix, std::strlen(prefix)) != 0) return nullptr;
  const int64_t key = std::atoll(name + std::strlen(prefix));
  auto it = registry().find(key);
  if (it == registry().end()) return nullptr;
  auto* f = new MemberFile();
  f->member = it->second;
  f->key = key;
  return &f->pub;
}
herr_t member_close(H5FD_t* f) {
  delete reinterpret_cast<MemberFile*>(f);
  return 0;
}
int member_cmp(const H5FD_t* a, const H5FD_t* b) {
  const int64_t x = reinterpret_cast<const MemberFile*>(a)->key;
  const int64_t y = reinterpret_cast<const MemberFile*>(b)->key;
  return x < y ? -1 : x > y ? 1 : 0;
}
herr_t member_query(const H5FD_t*, unsigned long* flags) {
  if (flags) *flags = 0;
  return 0;
}
haddr_t member_get_eoa(const H5FD_t* f, H5FD_mem_t) {
  return reinterpret_cast<const MemberFile*>(f)->eoa;
}
herr_t member_set_eoa(H5FD_t* f, H5FD_mem_t, haddr_t addr) {
  reinterpret_cast<MemberFile*>(f)->eoa = addr;
  return 0;
}
haddr_t member_get_eof(const H5FD_t* f, H5FD_mem_t) {
  return reinterpret_cast<const MemberFile*>(f)->member.size;
}
herr_t member_read(H5FD_t* f, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  const MemberFile* m = reinterpret_cast<const MemberFile*>(f);
  // HDF5 may read past the end of the file (its last page): zeros there.
  uint64_t n = size;
  if (addr >= m->member.size) {
    std::memset(buf, 0, size);
    return 0;
  }
  if (addr + n > m->member.size) {
    const uint64_t inside = m->member.size - addr;
    std::memset(static_cast<char*>(buf) + inside, 0, n - inside);
    n = inside;
  }
  try {
    m->member.read(addr, n, buf);
  } catch (const std::exception&) {
    return -1;
  }
  return 0;
}
herr_t member_write(H5FD_t*, H5FD_mem_t, hid_t, haddr_t, size_t, const void*) {
  return -1;
}

hid_t member_driver() {
  static const hid_t id = [] {
    static H5FD_class_t cls;
    std::memset(&cls, 0, sizeof cls);
    cls.name = "autoshard_zip_member";
    cls.maxaddr = HADDR_MAX;
    cls.fc_degree = H5F_CLOSE_WEAK;
    cls.open = member_open;
    cls.close = member_close;
    cls.cmp = member_cmp;
    cls.query = member_query;
    cls.get_eoa = member_get_eoa;
    cls.set_eoa = member_set_eoa;
    cls.get_eof = member_get_eof;
    cls.read = member_read;
    cls.write = member_write;
    for (auto& t : cls.fl_map) t = H5FD_MEM_DEFAULT;
    return H5FDregister(&cls);
  }();
  AS_CHECK(id >= 0, "internal: cannot register the HDF5 driver for zip members");
  return id;
}

std::vector<std::string> read_strings(hid_t attr) {
  Id type(H5Aget_type(attr), H5Tclose);
  Id space(H5Aget_space(attr), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<std::string> out;
  if (n <= 0) return out;
  if (H5Tget_class(type) != H5T_STRING) return out;  // Keras 2 writes [] as float64
  if (H5Tis_variable_str(type) > 0) {
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    if (H5Aread(attr, mem, ptrs.data()) < 0) return out;
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, ptrs.data());
    return out;
  }
  const size_t size = H5Tget_size(type);
  Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem, size);
  H5Tset_strpad(mem, H5T_STR_NULLPAD);  // keep every character of a full-width string
  std::vector<char> buffer(size * static_cast<size_t>(n));
  if (H5Aread(attr, mem, buffer.data()) < 0) return out;
  for (hssize_t i = 0; i < n; ++i) {
    const char* p = buffer.data() + static_cast<size_t>(i) * size;
    out.emplace_back(p, strnlen(p, size));
  }
  return out;
}

}  // namespace

H5File::H5File(int64_t id, std::string what) : id_(id), what_(std::move(what)) {}

H5File::~H5File() {
  std::lock_guard<std::recursive_mutex> g(lock());
  H5Fclose(static_cast<hid_t>(id_));
}

std::shared_ptr<H5File> H5File::open(const std::string& path, const std::string& what) {
  require_regular_file(path, what);
  std::lock_guard<std::recursive_mutex> g(lock());
  quiet();
  AS_CHECK(H5Fis_hdf5(path.c_str()) > 0, what, " '", path, "' is not an HDF5 file");
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  AS_CHECK(id >= 0, what, " '", path, "' cannot be opened as HDF5; the file is damaged");
  return std::shared_ptr<H5File>(new H5File(id, what + " '" + path + "'"));
}

std::shared_ptr<H5File> H5File::open(ZipMember member, const std::string& what) {
  std::lock_guard<std::recursive_mutex> g(lock());
  quiet();
  static std::atomic<int64_t> next{1};
  const int64_t key = next++;
  registry()[key] = member;
  std::shared_ptr<void> keep(nullptr, [key](void*) {
    std::lock_guard<std::recursive_mutex> g2(lock());
    registry().erase(key);
  });
  Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  AS_CHECK(H5Pset_driver(fapl, member_driver(), nullptr) >= 0, "internal: HDF5 driver");
  const std::string name = "keras-zip-member:" + std::to_string(key);
  const hid_t id = H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl);
  AS_CHECK(id >= 0, what, " is not a readable HDF5 file; the file is damaged");
  auto file = std::shared_ptr<H5File>(new H5File(id, what));
  file->keep_ = keep;
  return file;
}

namespace {
// H5Oget_info_by_name's object type of `path`, or -1 when some component
// of it does not exist (H5Lexists needs every parent to exist).
int object_type(hid_t file, const std::string& path) {
  if (path.empty() || path == "/") return H5O_TYPE_GROUP;
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return -1;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  H5O_info_t info;
  if (H5Oget_info_by_name(file, path.c_str(), &info, H5P_DEFAULT) < 0) return -1;
  return info.type;
}

// Widens n bfloat16 values (little-endian, as NumPy on x86 and ARM writes
// them) at `raw` to f32 at `dst`. `raw` may be the upper half of `dst`:
// value i is read before float i is written, and float i ends before value
// i + 1 begins.
void widen_bfloat16(const char* raw, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const auto* b = reinterpret_cast<const unsigned char*>(raw + 2 * i);
    dst[i] = bf16_to_float(static_cast<uint16_t>(b[0] | (b[1] << 8)));
  }
}
}  // namespace

bool H5File::is_group(const std::string& path) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  return object_type(static_cast<hid_t>(id_), path) == H5O_TYPE_GROUP;
}

bool H5File::is_dataset(const std::string& path) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  return object_type(static_cast<hid_t>(id_), path) == H5O_TYPE_DATASET;
}

std::vector<std::string> H5File::children(const std::string& group) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  std::vector<std::string> names;
  if (object_type(static_cast<hid_t>(id_), group) != H5O_TYPE_GROUP) return names;
  Id gid(H5Gopen2(static_cast<hid_t>(id_), group.empty() ? "/" : group.c_str(), H5P_DEFAULT),
         H5Gclose);
  if (gid < 0) return names;
  H5G_info_t info;
  if (H5Gget_info(gid, &info) < 0) return names;
  AS_CHECK(info.nlinks < 1000000, what_, ": group '", group, "' has ", info.nlinks,
           " members; the file is damaged");
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len =
        H5Lget_name_by_idx(gid, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) continue;
    std::string name(static_cast<size_t>(len) + 1, '\0');
    H5Lget_name_by_idx(gid, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                       H5P_DEFAULT);
    name.resize(static_cast<size_t>(len));
    names.push_back(name);
  }
  return names;
}

std::optional<std::string> H5File::string_attribute(const std::string& object,
                                                    const std::string& name) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  const char* obj = object.empty() ? "/" : object.c_str();
  if (object_type(static_cast<hid_t>(id_), object) < 0) return std::nullopt;
  if (H5Aexists_by_name(static_cast<hid_t>(id_), obj, name.c_str(), H5P_DEFAULT) <= 0)
    return std::nullopt;
  Id attr(H5Aopen_by_name(static_cast<hid_t>(id_), obj, name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
          H5Aclose);
  AS_CHECK(attr >= 0, what_, ": attribute '", name, "' of '", object, "' cannot be read");
  Id type(H5Aget_type(attr), H5Tclose);
  AS_CHECK(H5Tget_class(type) == H5T_STRING, what_, ": attribute '", name, "' of '", object,
           "' is not a string");
  const std::vector<std::string> s = read_strings(attr);
  AS_CHECK(s.size() == 1, what_, ": attribute '", name, "' of '", object, "' is not one string");
  return s[0];
}

std::vector<std::string> H5File::strings_attribute(const std::string& object,
                                                   const std::string& name) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  const char* obj = object.empty() ? "/" : object.c_str();
  if (object_type(static_cast<hid_t>(id_), object) < 0) return {};
  if (H5Aexists_by_name(static_cast<hid_t>(id_), obj, name.c_str(), H5P_DEFAULT) <= 0) return {};
  Id attr(H5Aopen_by_name(static_cast<hid_t>(id_), obj, name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
          H5Aclose);
  AS_CHECK(attr >= 0, what_, ": attribute '", name, "' of '", object, "' cannot be read");
  return read_strings(attr);
}

H5Dataset H5File::dataset(const std::string& path) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  AS_CHECK(object_type(static_cast<hid_t>(id_), path) == H5O_TYPE_DATASET, what_, ": no dataset '",
           path, "'");
  Id ds(H5Dopen2(static_cast<hid_t>(id_), path.c_str(), H5P_DEFAULT), H5Dclose);
  AS_CHECK(ds >= 0, what_, ": dataset '", path, "' cannot be opened; the file is damaged");
  Id space(H5Dget_space(ds), H5Sclose);
  Id type(H5Dget_type(ds), H5Tclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  AS_CHECK(rank >= 0 && rank <= 8, what_, ": dataset '", path, "' has rank ", rank,
           "; the file is damaged");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  H5Dataset d;
  for (hsize_t v : dims) {
    AS_CHECK(v < (hsize_t(1) << 40), what_, ": dataset '", path, "' has a dimension of ", v);
    d.shape.push_back(static_cast<int64_t>(v));
  }
  const H5T_class_t cls = H5Tget_class(type);
  d.element_bytes = H5Tget_size(type);
  d.bfloat16 = is_bfloat16(path, cls, d.element_bytes);
  d.floating = cls == H5T_FLOAT || d.bfloat16;
  d.integer = cls == H5T_INTEGER;
  return d;
}

bool H5File::is_bfloat16(const std::string& path, int cls, size_t element_bytes) const {
  // Keras's H5IOStore stores a bfloat16 array as h5py writes NumPy's 2-byte
  // void type (opaque) and tags the dataset with attribute dtype="bfloat16".
  return cls == H5T_OPAQUE && element_bytes == 2 &&
         string_attribute(path, "dtype").value_or("") == "bfloat16";
}

void H5File::read_block(const std::string& path, const std::vector<int64_t>& offset,
                        const Shape& count, float* dst) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  Id ds(H5Dopen2(static_cast<hid_t>(id_), path.c_str(), H5P_DEFAULT), H5Dclose);
  AS_CHECK(ds >= 0, what_, ": dataset '", path, "' cannot be opened");
  Id type(H5Dget_type(ds), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type);
  const bool bf16 = is_bfloat16(path, cls, H5Tget_size(type));
  AS_CHECK(cls == H5T_FLOAT || cls == H5T_INTEGER || bf16, what_, ": dataset '", path,
           "' holds neither floats nor integers");
  const int64_t elements = numel(count);
  if (elements == 0) return;
  // HDF5 converts floats and integers to f32 itself; bfloat16 (opaque) is read
  // as raw 2-byte values into the block's upper half and widened in place.
  void* raw = bf16 ? static_cast<void*>(reinterpret_cast<char*>(dst) + 2 * elements) : dst;
  const hid_t mem_type = bf16 ? static_cast<hid_t>(type) : H5T_NATIVE_FLOAT;
  herr_t status;
  if (count.empty()) {
    status = H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw);
  } else {
    Id file_space(H5Dget_space(ds), H5Sclose);
    std::vector<hsize_t> start(offset.begin(), offset.end()), n(count.begin(), count.end());
    AS_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, n.data(),
                                 nullptr) >= 0,
             what_, ": dataset '", path, "': a block outside it");
    Id mem_space(H5Screate_simple(static_cast<int>(n.size()), n.data(), nullptr), H5Sclose);
    status = H5Dread(ds, mem_type, mem_space, file_space, H5P_DEFAULT, raw);
  }
  AS_CHECK(status >= 0, what_, ": dataset '", path, "' cannot be read (truncated or damaged file)");
  if (bf16) widen_bfloat16(static_cast<const char*>(raw), dst, elements);
}

int64_t H5File::read_int(const std::string& path) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  Id ds(H5Dopen2(static_cast<hid_t>(id_), path.c_str(), H5P_DEFAULT), H5Dclose);
  AS_CHECK(ds >= 0, what_, ": dataset '", path, "' cannot be opened");
  Id space(H5Dget_space(ds), H5Sclose);
  AS_CHECK(H5Sget_simple_extent_npoints(space) == 1, what_, ": '", path, "' is not a scalar");
  int64_t v = 0;
  AS_CHECK(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0, what_, ": '",
           path, "' cannot be read");
  return v;
}

// ---- Writing ----

H5Writer::H5Writer(const std::string& path) : path_(path) {
  std::lock_guard<std::recursive_mutex> g(lock());
  quiet();
  id_ = H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  AS_CHECK(id_ >= 0, "cannot create HDF5 file '", path, "' (does it exist?)");
}

H5Writer::~H5Writer() {
  if (id_ >= 0) close();
}

void H5Writer::close() {
  std::lock_guard<std::recursive_mutex> g(lock());
  if (id_ < 0) return;
  const herr_t s = H5Fclose(static_cast<hid_t>(id_));
  id_ = -1;
  AS_CHECK(s >= 0, "writing HDF5 file '", path_, "' failed");
}

void H5Writer::group(const std::string& path) {
  std::lock_guard<std::recursive_mutex> g(lock());
  if (object_type(static_cast<hid_t>(id_), path) == H5O_TYPE_GROUP) return;
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  Id gid(H5Gcreate2(static_cast<hid_t>(id_), path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT),
         H5Gclose);
  AS_CHECK(gid >= 0, "HDF5 '", path_, "': cannot create group '", path, "'");
}

namespace {
void write_attribute(hid_t file, const std::string& object, const std::string& name,
                     const std::vector<std::string>& values, bool scalar,
                     const std::string& where) {
  const char* obj = object.empty() ? "/" : object.c_str();
  if (H5Aexists_by_name(file, obj, name.c_str(), H5P_DEFAULT) > 0)
    H5Adelete_by_name(file, obj, name.c_str(), H5P_DEFAULT);
  if (values.empty()) {
    // Keras writes an empty list as an empty float64 array.
    hsize_t zero = 0;
    Id space(H5Screate_simple(1, &zero, nullptr), H5Sclose);
    Id attr(H5Acreate_by_name(file, obj, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT,
                              H5P_DEFAULT, H5P_DEFAULT),
            H5Aclose);
    AS_CHECK(attr >= 0, where, ": cannot write attribute '", name, "'");
    return;
  }
  size_t width = 1;
  for (const std::string& v : values) width = std::max(width, v.size());
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, width);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  hsize_t n = values.size();
  Id space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  Id attr(H5Acreate_by_name(file, obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT),
          H5Aclose);
  AS_CHECK(attr >= 0, where, ": cannot write attribute '", name, "'");
  std::vector<char> buffer(width * values.size(), '\0');
  for (size_t i = 0; i < values.size(); ++i)
    std::memcpy(buffer.data() + i * width, values[i].data(), values[i].size());
  AS_CHECK(H5Awrite(attr, type, buffer.data()) >= 0, where, ": cannot write attribute '", name,
           "'");
}
}  // namespace

void H5Writer::string_attribute(const std::string& object, const std::string& name,
                                const std::string& value) {
  std::lock_guard<std::recursive_mutex> g(lock());
  write_attribute(static_cast<hid_t>(id_), object, name, {value}, true, "HDF5 '" + path_ + "'");
}

void H5Writer::strings_attribute(const std::string& object, const std::string& name,
                                 const std::vector<std::string>& values) {
  std::lock_guard<std::recursive_mutex> g(lock());
  write_attribute(static_cast<hid_t>(id_), object, name, values, false, "HDF5 '" + path_ + "'");
}

void H5Writer::dataset(const std::string& path, const Tensor& value) {
  std::lock_guard<std::recursive_mutex> g(lock());
  std::vector<hsize_t> dims(value.shape().begin(), value.shape().end());
  Id space(dims.empty() ? H5Screate(H5S_SCALAR)
                        : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
           H5Sclose);
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  const bool f32 = value.dtype() == DType::F32;
  Id ds(H5Dcreate2(static_cast<hid_t>(id_), path.c_str(), f32 ? H5T_IEEE_F32LE : H5T_STD_I32LE,
                   space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose);
  AS_CHECK(ds >= 0, "HDF5 '", path_, "': cannot create dataset '", path, "'");
  AS_CHECK(H5Dwrite(ds, f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                    value.raw()) >= 0,
           "HDF5 '", path_, "': cannot write dataset '", path, "'");
}

void H5Writer::int64_scalar(const std::string& path, int64_t value) {
  std::lock_guard<std::recursive_mutex> g(lock());
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  Id ds(H5Dcreate2(static_cast<hid_t>(id_), path.c_str(), H5T_STD_I64LE, space, lcpl, H5P_DEFAULT,
                   H5P_DEFAULT),
        H5Dclose);
  AS_CHECK(ds >= 0, "HDF5 '", path_, "': cannot create dataset '", path, "'");
  AS_CHECK(H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) >= 0, "HDF5 '",
           path_, "': cannot write dataset '", path, "'");
}

}  // namespace autoshard::keras
