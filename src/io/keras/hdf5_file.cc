#include "io/keras/hdf5_file.h"

#include <H5FDpublic.h>
#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <set>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/safetensors.h"

namespace autoshard::keras {

namespace {

// True in the pre-flight child (H5File::open): the parent's lock may be held
// there by the thread that forked, which the child does not have.
bool in_h5_check_child = false;

std::recursive_mutex& lock() {
  static std::recursive_mutex m;
  static std::recursive_mutex child;  // never held at fork: only the child takes it
  return in_h5_check_child ? child : m;
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

// ---- What a file may reference: nothing outside itself ----

// A prefix under which no file can exist (/dev/null is not a directory):
// libhdf5 puts it before relative names of external links, external
// storage and virtual datasets' source files. A second wall only (an
// absolute name ignores it): the checks below refuse those first.
constexpr const char* kH5Nowhere = "/dev/null/autoshard-reads-no-other-file/";

// libhdf5 calls this before following an external link; failing refuses it.
herr_t h5_refuse_external_link(const char*, const char*, const char*, const char*, unsigned*, hid_t,
                               void*) {
  return -1;
}

// An access property list of class `cls` (link, group or dataset access)
// that follows no external link, follows soft links at most 16 deep and
// points external and virtual storage nowhere. Made once, kept open.
hid_t h5_make_access(hid_t cls) {
  const hid_t p = H5Pcreate(cls);
  AS_CHECK(p >= 0, "internal: HDF5 property list");
  H5Pset_elink_cb(p, h5_refuse_external_link, nullptr);
  H5Pset_elink_prefix(p, kH5Nowhere);
  H5Pset_nlinks(p, 16);
  if (cls == H5P_DATASET_ACCESS) {
    H5Pset_efile_prefix(p, kH5Nowhere);
    H5Pset_virtual_prefix(p, kH5Nowhere);
  }
  return p;
}
hid_t link_access() {
  static const hid_t p = h5_make_access(H5P_LINK_ACCESS);
  return p;
}
hid_t group_access() {
  static const hid_t p = h5_make_access(H5P_GROUP_ACCESS);
  return p;
}
hid_t dataset_access() {
  static const hid_t p = h5_make_access(H5P_DATASET_ACCESS);
  return p;
}

// Refuses a link that leads out of the file: an external link, or a
// user-defined one (whose meaning libhdf5 leaves to a plugin).
void h5_check_link(H5L_type_t type, const std::string& link, const std::string& what) {
  AS_CHECK(type != H5L_TYPE_EXTERNAL, what, ": '", link,
           "' is a link to another file (an HDF5 external link), which autoshard never follows; "
           "save the model with its weights inside the file");
  AS_CHECK(type == H5L_TYPE_HARD || type == H5L_TYPE_SOFT, what, ": '", link,
           "' is a user-defined HDF5 link (type ", static_cast<int>(type),
           "), which autoshard does not follow; the file is damaged or not a Keras file");
}

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

// The strings of a string attribute (empty for another type). An attribute
// is stored in the file: one larger than the file (`file_bytes`) is damaged.
std::vector<std::string> read_strings(hid_t attr, uint64_t file_bytes, const std::string& where) {
  Id type(H5Aget_type(attr), H5Tclose);
  Id space(H5Aget_space(attr), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<std::string> out;
  if (n <= 0) return out;
  if (H5Tget_class(type) != H5T_STRING) return out;  // Keras 2 writes [] as float64
  const uint64_t width = std::max<uint64_t>(1, H5Tget_size(type));
  AS_CHECK(static_cast<uint64_t>(n) <= file_bytes / width, where, " holds ", n, " strings of ",
           width, " bytes, more than the file's ", file_bytes, " bytes; the file is damaged");
  if (H5Tis_variable_str(type) > 0) {
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    // A read that fails (a damaged heap, or memory libhdf5 could not get in
    // the pre-flight child) is damage, not an empty list.
    AS_CHECK(H5Aread(attr, mem, ptrs.data()) >= 0, where, " cannot be read; the file is damaged");
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, ptrs.data());
    return out;
  }
  const size_t size = H5Tget_size(type);
  Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem, size);
  H5Tset_strpad(mem, H5T_STR_NULLPAD);  // keep every character of a full-width string
  std::vector<char> buffer(size * static_cast<size_t>(n));
  AS_CHECK(H5Aread(attr, mem, buffer.data()) >= 0, where, " cannot be read; the file is damaged");
  for (hssize_t i = 0; i < n; ++i) {
    const char* p = buffer.data() + static_cast<size_t>(i) * size;
    out.emplace_back(p, strnlen(p, size));
  }
  return out;
}

}  // namespace

namespace {

// The object at `path` (its info in `info`), or false when some component
// of it does not exist. Every link on the way is checked before libhdf5
// follows it: an external or user-defined link is refused by name.
bool h5_object_info(hid_t file, const std::string& path, const std::string& what,
                    H5O_info_t* info) {
  size_t start = 0;
  while (!path.empty() && path != "/") {
    const size_t slash = path.find('/', start);
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty()) {
      // H5Lexists needs every parent to exist, hence one component at a time.
      if (H5Lexists(file, prefix.c_str(), link_access()) <= 0) return false;
      H5L_info_t link;
      if (H5Lget_info(file, prefix.c_str(), &link, link_access()) < 0) return false;
      h5_check_link(link.type, prefix, what);
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  const char* name = path.empty() ? "/" : path.c_str();
  return H5Oget_info_by_name(file, name, info, link_access()) >= 0;
}

// H5O_TYPE_* of the object at `path`, or -1 when it does not exist.
int object_type(hid_t file, const std::string& path, const std::string& what) {
  H5O_info_t info;
  return h5_object_info(file, path, what, &info) ? info.type : -1;
}

// Opens the dataset at `path` and refuses, before any of its data is read,
// storage that lies outside the file: external storage (raw data in other
// files) and virtual datasets (data mapped from other datasets or files;
// one whose source is itself sends libhdf5 into unbounded recursion).
hid_t h5_open_dataset(hid_t file, const std::string& path, const std::string& what) {
  AS_CHECK(object_type(file, path, what) == H5O_TYPE_DATASET, what, ": no dataset '", path, "'");
  const hid_t ds = H5Dopen2(file, path.c_str(), dataset_access());
  AS_CHECK(ds >= 0, what, ": dataset '", path, "' cannot be opened; the file is damaged");
  Id keep(ds, H5Dclose);  // closed if a check below throws
  Id dcpl(H5Dget_create_plist(ds), H5Pclose);
  AS_CHECK(dcpl >= 0, what, ": dataset '", path, "' cannot be opened; the file is damaged");
  AS_CHECK(H5Pget_external_count(dcpl) == 0, what, ": dataset '", path,
           "' stores its data in another file (HDF5 external storage), which autoshard never "
           "reads; save the weights inside the file");
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  AS_CHECK(layout != H5D_VIRTUAL, what, ": dataset '", path,
           "' is a virtual dataset (HDF5 VDS) whose data lie in other datasets or files, which "
           "autoshard never reads; save the weights inside the file");
  AS_CHECK(layout == H5D_CONTIGUOUS || layout == H5D_CHUNKED || layout == H5D_COMPACT, what,
           ": dataset '", path, "' has an unknown storage layout; the file is damaged");
  keep.id = -1;
  return ds;
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

// The most bytes a dataset may describe per byte of its file: its values
// must come from the file (chunks compress, but not without bound).
constexpr uint64_t kH5MaxExpansion = 1000;

}  // namespace

H5File::H5File(int64_t id, std::string what) : id_(id), what_(std::move(what)) {
  hsize_t bytes = 0;
  H5Fget_filesize(static_cast<hid_t>(id), &bytes);
  bytes_ = bytes;
}

H5File::~H5File() {
  std::lock_guard<std::recursive_mutex> g(lock());
  H5Fclose(static_cast<hid_t>(id_));
}

std::shared_ptr<H5File> H5File::open(const std::string& path, const std::string& what) {
  const uint64_t bytes = input_file_size(path, what);  // a regular file: a FIFO would block
  std::lock_guard<std::recursive_mutex> g(lock());
  quiet();
  AS_CHECK(H5Fis_hdf5(path.c_str()) > 0, what, " '", path, "' is not an HDF5 file");
  const std::string name = what + " '" + path + "'";
  const auto open = [&] { return H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT); };
  check_in_child(name, bytes, open);
  const hid_t id = open();
  AS_CHECK(id >= 0, name, " cannot be opened as HDF5; the file is damaged");
  return std::shared_ptr<H5File>(new H5File(id, name));
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
  const auto open = [&] { return H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl); };
  check_in_child(what, member.size, open);
  const hid_t id = open();
  AS_CHECK(id >= 0, what, " is not a readable HDF5 file; the file is damaged");
  auto file = std::shared_ptr<H5File>(new H5File(id, what));
  file->keep_ = keep;
  return file;
}

bool H5File::is_group(const std::string& path) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  return object_type(static_cast<hid_t>(id_), path, what_) == H5O_TYPE_GROUP;
}

bool H5File::is_dataset(const std::string& path) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  return object_type(static_cast<hid_t>(id_), path, what_) == H5O_TYPE_DATASET;
}

std::vector<std::string> H5File::children(const std::string& group) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  std::vector<std::string> names;
  if (object_type(static_cast<hid_t>(id_), group, what_) != H5O_TYPE_GROUP) return names;
  Id gid(H5Gopen2(static_cast<hid_t>(id_), group.empty() ? "/" : group.c_str(), group_access()),
         H5Gclose);
  if (gid < 0) return names;
  H5G_info_t info;
  if (H5Gget_info(gid, &info) < 0) return names;
  AS_CHECK(info.nlinks < 1000000, what_, ": group '", group, "' has ", info.nlinks,
           " members; the file is damaged");
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len =
        H5Lget_name_by_idx(gid, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, link_access());
    if (len < 0) continue;
    AS_CHECK(static_cast<uint64_t>(len) < 65536, what_, ": group '", group,
             "' has a member named by ", len, " bytes; the file is damaged");
    std::string name(static_cast<size_t>(len) + 1, '\0');
    H5Lget_name_by_idx(gid, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                       link_access());
    name.resize(static_cast<size_t>(len));
    names.push_back(name);
  }
  return names;
}

std::optional<std::string> H5File::string_attribute(const std::string& object,
                                                    const std::string& name) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  const char* obj = object.empty() ? "/" : object.c_str();
  if (object_type(static_cast<hid_t>(id_), object, what_) < 0) return std::nullopt;
  if (H5Aexists_by_name(static_cast<hid_t>(id_), obj, name.c_str(), link_access()) <= 0)
    return std::nullopt;
  Id attr(H5Aopen_by_name(static_cast<hid_t>(id_), obj, name.c_str(), H5P_DEFAULT, link_access()),
          H5Aclose);
  AS_CHECK(attr >= 0, what_, ": attribute '", name, "' of '", object, "' cannot be read");
  Id type(H5Aget_type(attr), H5Tclose);
  AS_CHECK(H5Tget_class(type) == H5T_STRING, what_, ": attribute '", name, "' of '", object,
           "' is not a string");
  const std::vector<std::string> s =
      read_strings(attr, bytes_, cat(what_, ": attribute '", name, "' of '", object, "'"));
  AS_CHECK(s.size() == 1, what_, ": attribute '", name, "' of '", object, "' is not one string");
  return s[0];
}

std::vector<std::string> H5File::strings_attribute(const std::string& object,
                                                   const std::string& name) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  const char* obj = object.empty() ? "/" : object.c_str();
  if (object_type(static_cast<hid_t>(id_), object, what_) < 0) return {};
  if (H5Aexists_by_name(static_cast<hid_t>(id_), obj, name.c_str(), link_access()) <= 0) return {};
  Id attr(H5Aopen_by_name(static_cast<hid_t>(id_), obj, name.c_str(), H5P_DEFAULT, link_access()),
          H5Aclose);
  AS_CHECK(attr >= 0, what_, ": attribute '", name, "' of '", object, "' cannot be read");
  return read_strings(attr, bytes_, cat(what_, ": attribute '", name, "' of '", object, "'"));
}

H5Dataset H5File::dataset(const std::string& path) const {
  std::lock_guard<std::recursive_mutex> g(lock());
  Id ds(h5_open_dataset(static_cast<hid_t>(id_), path, what_), H5Dclose);
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
  check_size(ds, path, d);
  return d;
}

void H5File::check_size(int64_t ds, const std::string& path, const H5Dataset& d) const {
  // The bytes the dataset describes, at most kH5MaxExpansion per file byte
  // (a flipped dimension otherwise has libhdf5 and the readers allocate
  // gigabytes for a small file).
  const uint64_t most = kH5MaxExpansion * std::max<uint64_t>(bytes_, 1 << 16);
  uint64_t described = std::max<uint64_t>(d.element_bytes, 1);
  for (int64_t v : d.shape) {
    const uint64_t n = static_cast<uint64_t>(v);
    described = n == 0 ? 0 : described > most / n ? most + 1 : described * n;
  }
  AS_CHECK(described <= most, what_, ": dataset '", path, "' of shape ", shape_str(d.shape),
           " and ", d.element_bytes, "-byte values describes more than its file of ", bytes_,
           " bytes can hold; the file is damaged");
  Id dcpl(H5Dget_create_plist(static_cast<hid_t>(ds)), H5Pclose);
  if (H5Pget_layout(dcpl) != H5D_CONTIGUOUS) return;
  // Contiguous data lie in the file whole (or are not written: fill values).
  const hsize_t stored = H5Dget_storage_size(static_cast<hid_t>(ds));
  const haddr_t at = H5Dget_offset(static_cast<hid_t>(ds));
  AS_CHECK(stored == 0 || stored == described, what_, ": dataset '", path, "' of shape ",
           shape_str(d.shape), " stores ", stored, " bytes instead of ", described,
           "; the file is damaged");
  AS_CHECK(stored == 0 || (at != HADDR_UNDEF && at <= bytes_ && stored <= bytes_ - at), what_,
           ": dataset '", path,
           "' lies past the end of the file; the file is truncated or damaged");
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
  Id ds(h5_open_dataset(static_cast<hid_t>(id_), path, what_), H5Dclose);
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
  Id ds(h5_open_dataset(static_cast<hid_t>(id_), path, what_), H5Dclose);
  Id space(H5Dget_space(ds), H5Sclose);
  AS_CHECK(H5Sget_simple_extent_npoints(space) == 1, what_, ": '", path, "' is not a scalar");
  int64_t v = 0;
  AS_CHECK(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0, what_, ": '",
           path, "' cannot be read");
  return v;
}

// ---- The pre-flight check: libhdf5 reads the whole file in a child ----
//
// libhdf5 crashes on some damaged files (a wild read in its global heap),
// loops without end on others, and allocates gigabytes for a flipped size
// field. Before a file is used, a forked child reads all of it with the
// calls the readers make, under memory and time limits; a crash, a
// runaway allocation or a hang there becomes one error line here, and
// the parent's own reads then follow the paths the child walked safely.

void (*H5File::check_hook_for_tests)() = nullptr;

namespace {

// The most groups deep, objects and attributes per object the check walks:
// far beyond any Keras file (a model of 10k layers has ~50k objects).
constexpr int kH5MaxDepth = 64;
constexpr int64_t kH5MaxObjects = int64_t(1) << 20;
constexpr int64_t kH5MaxAttributes = 1 << 16;
// Values read per block (16 MiB of f32).
constexpr int64_t kH5CheckBlock = int64_t(1) << 22;

// The child's exit codes: an autoshard::Error (its message in the pipe), an
// allocation that failed under the limit.
constexpr int kH5ExitRefused = 65;
constexpr int kH5ExitMemory = 66;

// /proc/<pid>/<name> into `text` (NUL-terminated), by plain open and read:
// the child must not take stdio's locks (below). False when unreadable.
template <size_t N>
bool h5_read_proc(pid_t pid, const char* name, char (&text)[N]) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, text, N - 1);
  ::close(fd);
  text[n > 0 ? n : 0] = '\0';
  return n > 0;
}

// Field `field` of /proc/PID/statm (0: size, 1: resident) in bytes.
uint64_t h5_statm_bytes(pid_t pid, int field) {
  char text[128];
  if (!h5_read_proc(pid, "statm", text)) return 0;
  char* end = text;
  uint64_t value = std::strtoull(text, &end, 10);
  if (field == 1) value = std::strtoull(end, nullptr, 10);
  return value * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Seconds of CPU process `pid` has used (/proc/<pid>/stat's utime and
// stime), read without stdio; 0 when unreadable.
double h5_cpu_seconds(pid_t pid) {
  char text[512];
  const char* p = h5_read_proc(pid, "stat", text) ? std::strrchr(text, ')')
                                                  : nullptr;  // after the command's name
  if (!p) return 0;
  // Fields 3 to 13, then utime and stime (proc(5)).
  for (int field = 3; field <= 13 && p; ++field) p = std::strchr(p + 1, ' ');
  if (!p) return 0;
  char* end = nullptr;
  const double ticks =
      double(std::strtoull(p + 1, &end, 10)) + double(std::strtoull(end, nullptr, 10));
  return ticks / double(sysconf(_SC_CLK_TCK));
}

// Forks the pre-flight child. glibc's _Fork runs no pthread_atfork
// handlers: fork() would run OpenBLAS's, which joins its worker threads and
// waits forever when another thread (a Python thread in NumPy, a device) is
// inside a BLAS call. The child then uses only its own malloc arena,
// libhdf5 and the pipe, so locks other threads held at the fork do not
// matter (a rare one that does ends at the deadline, as an error).
// ThreadSanitizer builds use fork(), which TSan intercepts to keep its
// view of the threads consistent in the child.
pid_t h5_fork() {
#if defined(__SANITIZE_THREAD__)
  return fork();
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return fork();
#else
  return _Fork();
#endif
#else
  return _Fork();
#endif
}

// Gives the child its own file description for every read-only regular file
// it inherited: reads through one (a stored zip member, read with seek and
// read) then cannot move the offset the parent's threads rely on.
void h5_own_file_offsets() {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (const dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(dir)) continue;
    const int flags = fcntl(fd, F_GETFL);
    struct stat st {};
    if (flags < 0 || (flags & O_ACCMODE) != O_RDONLY || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    const off_t at = lseek(fd, 0, SEEK_CUR);
    const int again = ::open(("/proc/self/fd/" + std::string(e->d_name)).c_str(), O_RDONLY);
    if (again < 0) continue;
    if (at >= 0) lseek(again, at, SEEK_SET);
    dup2(again, fd);
    ::close(again);
  }
  closedir(dir);
}

// Writes all of `text` to `fd` (the pipe to the parent).
void h5_write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

// Sanitizer builds: a report in the child must end the child, not have the
// fuzzer's death callback record the input as the parent's crash.
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

void H5File::check_all() const {
  std::set<haddr_t> seen;
  int64_t budget = kH5MaxObjects;
  check_object("", 0, seen, budget);
}

void H5File::check_object(const std::string& path, int depth, std::set<uint64_t>& seen,
                          int64_t& budget) const {
  const hid_t file = static_cast<hid_t>(id_);
  AS_CHECK(depth <= kH5MaxDepth, what_, ": '", path, "' lies more than ", kH5MaxDepth,
           " groups deep; the file is damaged");
  AS_CHECK(--budget >= 0, what_, " holds more than ", kH5MaxObjects,
           " objects; the file is damaged");
  H5O_info_t info;
  AS_CHECK(h5_object_info(file, path, what_, &info), what_, ": '", path,
           "' cannot be read; the file is damaged");
  if (!seen.insert(info.addr).second) return;  // reached before by another link
  AS_CHECK(info.num_attrs <= static_cast<hsize_t>(kH5MaxAttributes), what_, ": '", path, "' has ",
           info.num_attrs, " attributes; the file is damaged");
  const char* name = path.empty() ? "/" : path.c_str();
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    Id attr(H5Aopen_by_idx(file, name, H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, link_access()),
            H5Aclose);
    AS_CHECK(attr >= 0, what_, ": an attribute of '", name,
             "' cannot be read; the file is damaged");
    char attr_name[256] = "";
    H5Aget_name(attr, sizeof attr_name, attr_name);
    read_strings(attr, bytes_, cat(what_, ": attribute '", attr_name, "' of '", name, "'"));
  }
  if (info.type == H5O_TYPE_GROUP) {
    for (const std::string& child : children(path))
      check_object(path.empty() ? child : path + "/" + child, depth + 1, seen, budget);
  } else if (info.type == H5O_TYPE_DATASET) {
    check_values(path);
  }
}

void H5File::check_values(const std::string& path) const {
  const H5Dataset d = dataset(path);
  if (!d.floating && !d.integer) return;  // the readers refuse these without reading
  const Shape& s = d.shape;
  const int rank = static_cast<int>(s.size());
  if (numel(s) == 0) return;
  // Blocks [1, ..., 1, step, s[a+1], ...]: the first axis `a` whose inner
  // values fit a block, stepped through in `step`s, every axis before it one
  // index at a time.
  int a = 0;
  int64_t inner = numel(s) / std::max<int64_t>(s.empty() ? 1 : s[0], 1);
  while (a + 1 < rank && inner > kH5CheckBlock) inner /= s[++a];
  const int64_t step = rank == 0 ? 1 : std::max<int64_t>(1, kH5CheckBlock / inner);
  std::vector<float> buffer(static_cast<size_t>(rank == 0 ? 1 : std::min(s[a], step) * inner));
  std::vector<int64_t> at(static_cast<size_t>(rank), 0);
  for (;;) {
    Shape count = s;
    for (int i = 0; i < a; ++i) count[i] = 1;
    if (rank > 0) count[a] = std::min(step, s[a] - at[a]);
    read_block(path, at, count, buffer.data());
    if (rank == 0) return;
    // The next block: step along axis a, carrying into the axes before it.
    int i = a;
    at[i] += step;
    while (at[i] >= s[i]) {
      at[i] = 0;
      if (--i < 0) return;
      at[i] += 1;
    }
  }
}

namespace {

enum class H5Child { kDone, kTime, kMemory, kBlocked };

// The parent's side of the check: the child's answer (into `message`) until
// it ends, its `seconds` are up, it holds more than `rss_limit` bytes (which
// RLIMIT_AS misses under ASan, whose heap is reserved address space), or,
// when `may_retry`, it used no CPU in a second (blocked: at its start, or
// after a little work, on a lock held at the fork).
H5Child h5_await_child(pid_t pid, int fd, int seconds, uint64_t rss_limit, bool may_retry,
                       std::string& message) {
  const auto forked = std::chrono::steady_clock::now();
  const auto deadline = forked + std::chrono::seconds(seconds);
  auto looked = forked;
  double cpu_then = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) > 0) {
      char buffer[4096];
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n > 0 && message.size() < 4096) message.append(buffer, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return H5Child::kDone;
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) return H5Child::kTime;
    if (may_retry && message.empty() && now > looked + std::chrono::seconds(1)) {
      const double cpu = h5_cpu_seconds(pid);
      if (cpu - cpu_then < 0.005) return H5Child::kBlocked;
      cpu_then = cpu;
      looked = now;
    }
    if (h5_statm_bytes(pid, 1) > rss_limit) return H5Child::kMemory;
  }
}

}  // namespace

void H5File::check_in_child(const std::string& what, uint64_t file_bytes,
                            const std::function<int64_t()>& open) {
  // Memory: the child's own allocations up to 512 MiB plus the file's size
  // (its metadata and blocks need far less); time: 5 s plus 20 MiB/s.
  const uint64_t budget = (uint64_t(512) << 20) + file_bytes;
  const int seconds = 5 + static_cast<int>(std::min<uint64_t>(file_bytes / (20 << 20), 1 << 20));
  const uint64_t rss_at_fork = h5_statm_bytes(getpid(), 1);
  // A child can hang on a lock another of the parent's threads held at the
  // fork (ASan's allocator, which _Fork does not lock), at its start or
  // after a little work: one that has used no CPU in a second is blocked,
  // not reading, and the check runs again in a new child (twice; the last
  // runs to its deadline).
  for (int attempt = 1;; ++attempt) {
    int fds[2];
    AS_CHECK(pipe2(fds, O_CLOEXEC) == 0, what, ": cannot start the HDF5 check: ", strerror(errno));
    const pid_t parent = getpid();
    const pid_t pid = h5_fork();
    if (pid < 0) {
      const int e = errno;
      ::close(fds[0]), ::close(fds[1]);
      fail(what, ": cannot start the process that checks HDF5 files (", strerror(e),
           "); free some memory and try again");
    }
    if (pid == 0) {
      // The child: only the thread that forked is here; it holds the parent's
      // HDF5 lock, so no other thread was inside libhdf5.
      ::close(fds[0]);
      in_h5_check_child = true;
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(kH5ExitRefused);
      for (int s : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGXCPU, SIGTRAP, SIGSYS})
        signal(s, SIG_DFL);
      signal(SIGINT, SIG_IGN);  // Ctrl-C is the parent's to handle
      if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, STDERR_FILENO);
      h5_own_file_offsets();
      const rlimit mem{h5_statm_bytes(getpid(), 0) + budget, RLIM_INFINITY};
      setrlimit(RLIMIT_AS, &mem);
      const rlimit cpu{static_cast<rlim_t>(seconds), static_cast<rlim_t>(seconds) + 1};
      setrlimit(RLIMIT_CPU, &cpu);
      const rlimit no_core{0, 0};  // a crash here leaves no core file behind
      setrlimit(RLIMIT_CORE, &no_core);
      int code = 0;
      try {
        if (check_hook_for_tests) check_hook_for_tests();
        const hid_t id = static_cast<hid_t>(open());
        AS_CHECK(id >= 0, what, " cannot be opened as HDF5; the file is damaged");
        H5File file(id, what);
        file.check_all();
        h5_write_all(fds[1], "ok");
      } catch (const Error& e) {
        h5_write_all(fds[1], e.what());
        code = kH5ExitRefused;
      } catch (const std::bad_alloc&) {
        code = kH5ExitMemory;
      } catch (...) {
        code = kH5ExitRefused;
      }
      _exit(code);  // no atexit handlers, no leak check: the parent carries on
    }
    ::close(fds[1]);
    std::string message;
    const H5Child outcome =
        h5_await_child(pid, fds[0], seconds, rss_at_fork + budget, attempt < 3, message);
    ::close(fds[0]);
    if (outcome != H5Child::kDone) kill(pid, SIGKILL);
    int status = 0;
    pid_t waited;
    do waited = waitpid(pid, &status, 0);
    while (waited < 0 && errno == EINTR);
    if (outcome == H5Child::kBlocked) continue;
    const std::string damaged = what + ": the HDF5 file is damaged: libhdf5 ";
    const std::string mib = std::to_string(budget >> 20);
    AS_CHECK(outcome != H5Child::kTime, damaged, "did not finish reading it in ", seconds, " s");
    AS_CHECK(outcome != H5Child::kMemory, damaged, "needed more than ", mib, " MiB to read it");
    if (waited < 0) {  // reaped by someone else (SIGCHLD ignored): the answer says
      AS_CHECK(message == "ok", message.empty() ? damaged + "failed reading it" : message);
      return;
    }
    if (WIFSIGNALED(status)) {
      const int s = WTERMSIG(status);
      AS_CHECK(s != SIGXCPU, damaged, "did not finish reading it in ", seconds, " s");
      AS_CHECK(s != SIGKILL, damaged, "was killed reading it (signal 9: out of memory?)");
      fail(damaged, "crashed reading it (signal ", s, ")");
    }
    const int code = WEXITSTATUS(status);
    if (code == 0 && message == "ok") return;
    AS_CHECK(code != kH5ExitMemory, damaged, "needed more than ", mib, " MiB to read it");
    AS_CHECK(code != kH5ExitRefused || message.empty(), message);
    fail(damaged, "failed reading it (exit status ", code, ")");
  }
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
  if (object_type(static_cast<hid_t>(id_), path, path_) == H5O_TYPE_GROUP) return;
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
