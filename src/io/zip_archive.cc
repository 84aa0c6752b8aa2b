#include "io/zip_archive.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "autoshard/error.h"
#include "autoshard/input_file.h"

namespace autoshard {

namespace {

// An entry name that would land outside the directory it is extracted into.
bool unsafe_name(const std::string& name) {
  if (name.empty() || name[0] == '/' || name[0] == '\\' || name.find('\0') != std::string::npos)
    return true;
  if (name.size() > 1 && name[1] == ':') return true;  // "C:..."
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find_first_of("/\\", start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return false;
}

std::string zip_error_text(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string text = zip_error_strerror(&e);
  zip_error_fini(&e);
  return text;
}

}  // namespace

// ---- libzip's handles ----

bool ZipEntry::stored() const {
  return method == ZIP_CM_STORE;
}

bool ZipEntry::deflated() const {
  return method == ZIP_CM_DEFLATE;
}

int64_t ZipStream::read(void* dst, uint64_t n) {
  return zip_fread(file_.get(), dst, n);
}

bool ZipStream::seek(uint64_t offset) {
  return zip_fseek(file_.get(), static_cast<zip_int64_t>(offset), SEEK_SET) == 0;
}

std::string ZipStream::error() const {
  return zip_file_strerror(file_.get());
}

std::optional<ZipReader> ZipReader::open(const std::string& path, std::string& why) {
  int code = 0;
  zip_t* opened = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (opened == nullptr) {
    why = zip_error_text(code);
    return std::nullopt;
  }
  ZipReader r;
  r.zip_ = std::shared_ptr<zip_t>(opened, [](zip_t* z) { zip_discard(z); });
  return r;
}

int64_t ZipReader::entry_count() const {
  return zip_get_num_entries(zip_.get(), 0);
}

std::optional<ZipEntry> ZipReader::entry(int64_t i) const {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(zip_.get(), static_cast<zip_uint64_t>(i), 0, &st) != 0) return std::nullopt;
  ZipEntry e;
  e.has_name = (st.valid & ZIP_STAT_NAME) && st.name;
  if (e.has_name) e.name = st.name;
  e.size = st.size;
  e.compressed_size = st.comp_size;
  e.has_size = st.valid & ZIP_STAT_SIZE;
  e.has_compressed_size = st.valid & ZIP_STAT_COMP_SIZE;
  e.has_method = st.valid & ZIP_STAT_COMP_METHOD;
  e.method = st.comp_method;
  e.encrypted = (st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE;
  zip_uint8_t opsys = 0;
  zip_uint32_t attributes = 0;
  e.symbolic_link = zip_file_get_external_attributes(zip_.get(), static_cast<zip_uint64_t>(i), 0,
                                                     &opsys, &attributes) == 0 &&
                    opsys == ZIP_OPSYS_UNIX && ((attributes >> 16) & S_IFMT) == S_IFLNK;
  return e;
}

std::optional<ZipStream> ZipReader::open_entry(int64_t i) const {
  zip_file_t* raw = zip_fopen_index(zip_.get(), static_cast<zip_uint64_t>(i), 0);
  if (raw == nullptr) return std::nullopt;
  ZipStream s;
  // The stream keeps the archive open.
  s.file_ = std::shared_ptr<zip_file_t>(raw, [archive = zip_](zip_file_t* f) { zip_fclose(f); });
  return s;
}

std::string ZipReader::error() const {
  return zip_strerror(zip_.get());
}

ZipWriter::~ZipWriter() {
  if (zip_) zip_discard(zip_);
  if (memory_) zip_source_free(memory_);
}

bool ZipWriter::create(const std::string& path) {
  int code = 0;
  zip_ = zip_open(path.c_str(), ZIP_CREATE | ZIP_EXCL, &code);
  if (zip_ == nullptr) error_ = zip_error_text(code);
  return zip_ != nullptr;
}

bool ZipWriter::create_in_memory() {
  zip_error_t e;
  zip_error_init(&e);
  memory_ = zip_source_buffer_create(nullptr, 0, 0, &e);
  if (memory_) zip_ = zip_open_from_source(memory_, ZIP_TRUNCATE, &e);
  if (zip_ == nullptr) {
    error_ = zip_error_strerror(&e);
    zip_error_fini(&e);
    return false;
  }
  zip_source_keep(memory_);  // read back after zip_close
  return true;
}

bool ZipWriter::added(int64_t index, zip_source_t* source) {
  if (index < 0) {
    if (source) zip_source_free(source);
    error_ = zip_strerror(zip_);
    return false;
  }
  zip_set_file_compression(zip_, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0);
  return true;
}

bool ZipWriter::add_file(const std::string& name, const std::string& file) {
  zip_source_t* source = zip_source_file(zip_, file.c_str(), 0, -1);
  return added(source ? zip_file_add(zip_, name.c_str(), source, ZIP_FL_ENC_UTF_8) : -1, source);
}

bool ZipWriter::add_bytes(const std::string& name, std::string bytes) {
  const std::string& kept = kept_.emplace_back(std::move(bytes));
  zip_source_t* source = zip_source_buffer(zip_, kept.data(), kept.size(), 0);
  return added(source ? zip_file_add(zip_, name.c_str(), source, ZIP_FL_ENC_UTF_8) : -1, source);
}

bool ZipWriter::close() {
  if (zip_close(zip_) != 0) {
    error_ = zip_strerror(zip_);
    return false;  // discarded by the destructor
  }
  zip_ = nullptr;
  kept_.clear();
  return true;
}

std::optional<std::string> ZipWriter::bytes() {
  std::string out;
  zip_stat_t st;
  zip_stat_init(&st);
  bool ok = zip_source_stat(memory_, &st) == 0 && zip_source_open(memory_) == 0;
  if (ok) {
    out.resize(st.size);
    ok = zip_source_read(memory_, out.data(), st.size) == zip_int64_t(st.size);
    zip_source_close(memory_);
  }
  if (!ok) return std::nullopt;
  return out;
}

// ---- .keras archives ----

ZipArchive::ZipArchive(const std::string& path) : path_(path) {
  file_size_ = input_file_size(path, "Keras file");
  mutex_ = std::make_shared<std::recursive_mutex>();
  std::string why;
  zip_ = ZipReader::open(path, why);
  AS_CHECK(zip_, "Keras file '", path, "' is not a readable zip archive (", why,
           "); a .keras file is the zip that Keras 3's model.save writes");
  const int64_t n = zip_->entry_count();
  uint64_t declared = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::optional<ZipEntry> e = zip_->entry(i);
    AS_CHECK(e, "Keras file '", path, "': entry ", i, " cannot be read: ", zip_->error());
    const std::string& name = e->name;
    AS_CHECK(!unsafe_name(name), "Keras file '", path, "': entry '", name,
             "' has an absolute path or '..'; refusing an archive that points outside itself");
    AS_CHECK(!e->symbolic_link, "Keras file '", path, "': entry '", name,
             "' is a symbolic link; refusing it");
    AS_CHECK(!e->encrypted, "Keras file '", path, "': entry '", name, "' is encrypted");
    AS_CHECK(!e->stored() || e->size == e->compressed_size, "Keras file '", path,
             "': stored entry '", name, "' declares ", e->size, " bytes but holds ",
             e->compressed_size);
    AS_CHECK(e->compressed_size <= file_size_, "Keras file '", path, "': entry '", name,
             "' declares ", e->compressed_size, " compressed bytes, more than the file's ",
             file_size_);
    declared += e->size;
    AS_CHECK(declared <= (file_size_ + 4096) * kMaxRatio, "Keras file '", path, "': entry '", name,
             "' would inflate past ", kMaxRatio,
             " times the archive's size; refusing a decompression bomb");
    names_.push_back(name);
  }
}

ZipArchive::~ZipArchive() = default;

int64_t ZipArchive::index_of(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int64_t>(i);
  return -1;
}

bool ZipArchive::contains(const std::string& name) const {
  return index_of(name) >= 0;
}

std::string ZipArchive::read_text(const std::string& name, uint64_t max_bytes) const {
  const ZipMember m = open_member(name);  // never empty
  AS_CHECK(m.size <= max_bytes, "Keras file '", path_, "': '", name, "' is ", m.size,
           " bytes, more than the ", max_bytes, " accepted");
  std::string text(m.size, '\0');
  m.read(0, m.size, text.data());
  return text;
}

ZipMember ZipArchive::open_member(const std::string& name) const {
  const int64_t index = index_of(name);
  AS_CHECK(index >= 0, "Keras file '", path_, "' has no '", name, "'");
  std::lock_guard<std::recursive_mutex> lock(*mutex_);
  const std::optional<ZipEntry> st = zip_->entry(index);
  AS_CHECK(st && st->has_size && st->has_method, "Keras file '", path_, "': '", name,
           "' cannot be read: ", zip_->error());
  // Every member read (config.json, metadata.json, model.weights.h5) holds
  // something; an empty one is damage, and libzip must not be asked to seek
  // in it (its zip_fseek crashes on a 0-byte stored member).
  AS_CHECK(st->size > 0, "Keras file '", path_, "': ", name,
           " is empty; the file is damaged (save the model again)");
  std::optional<ZipStream> opened = zip_->open_entry(index);
  AS_CHECK(opened, "Keras file '", path_, "': '", name, "' cannot be opened: ", zip_->error());
  // The member keeps the archive open (and is closed under its lock).
  std::shared_ptr<ZipStream> file(new ZipStream(std::move(*opened)), [mu = mutex_](ZipStream* f) {
    std::lock_guard<std::recursive_mutex> g(*mu);
    delete f;
  });
  const std::string where = "Keras file '" + path_ + "': '" + name + "'";
  ZipMember m;
  m.size = st->size;
  if (st->stored()) {
    // Read in place: seek within the stored bytes.
    m.read = [file, where, mu = mutex_, size = st->size](uint64_t offset, uint64_t n, void* dst) {
      AS_CHECK(offset <= size && n <= size - offset, where, ": a read of ", n, " bytes at ", offset,
               " passes its end (", size, " bytes); the file is damaged");
      if (n == 0) return;  // nothing to seek to
      std::lock_guard<std::recursive_mutex> lock(*mu);
      AS_CHECK(file->seek(offset), where, ": cannot seek: ", file->error());
      char* out = static_cast<char*>(dst);
      while (n > 0) {
        const int64_t got = file->read(out, n);
        AS_CHECK(got > 0, where, ": truncated or damaged (", file->error(), ")");
        out += got, n -= static_cast<uint64_t>(got);
      }
    };
    return m;
  }
  // Compressed: inflate once into an unnamed temporary file, counting bytes
  // against the declared size, then read that file at any offset.
  std::shared_ptr<FILE> tmp(std::tmpfile(), [](FILE* f) {
    if (f) std::fclose(f);
  });
  AS_CHECK(tmp != nullptr, where, ": cannot make a temporary file: ", std::strerror(errno));
  std::vector<char> buffer(1 << 20);
  uint64_t total = 0;
  for (;;) {
    const int64_t got = file->read(buffer.data(), buffer.size());
    AS_CHECK(got >= 0, where, ": cannot be inflated (", file->error(), "); the file is damaged");
    if (got == 0) break;
    total += static_cast<uint64_t>(got);
    AS_CHECK(total <= st->size, where, " inflates past its declared ", st->size, " bytes");
    AS_CHECK(std::fwrite(buffer.data(), 1, static_cast<size_t>(got), tmp.get()) ==
                 static_cast<size_t>(got),
             where, ": writing the temporary copy failed: ", std::strerror(errno));
  }
  AS_CHECK(total == st->size, where, " declares ", st->size, " bytes but holds ", total);
  AS_CHECK(std::fflush(tmp.get()) == 0, where,
           ": writing the temporary copy failed: ", std::strerror(errno));
  m.read = [tmp, where, size = st->size](uint64_t offset, uint64_t n, void* dst) {
    AS_CHECK(offset <= size && n <= size - offset, where, ": a read of ", n, " bytes at ", offset,
             " passes its end (", size, " bytes); the file is damaged");
    if (n == 0) return;
    char* out = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fileno(tmp.get()), out, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      AS_CHECK(got > 0, where, ": reading the temporary copy failed");
      out += got, offset += static_cast<uint64_t>(got), n -= static_cast<uint64_t>(got);
    }
  };
  return m;
}

void write_stored_zip(const std::string& out,
                      const std::vector<std::pair<std::string, std::string>>& members) {
  ZipWriter zip;
  AS_CHECK(zip.create(out), "cannot create '", out, "': ", zip.error());
  for (const auto& [name, file] : members)
    AS_CHECK(zip.add_file(name, file), "writing '", out, "': cannot add '", name,
             "': ", zip.error());
  AS_CHECK(zip.close(), "writing '", out, "' failed: ", zip.error());
}

}  // namespace autoshard
