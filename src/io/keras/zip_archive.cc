#include "io/keras/zip_archive.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "autoshard/error.h"
#include "autoshard/input_file.h"

namespace autoshard::keras {

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

ZipArchive::ZipArchive(const std::string& path) : path_(path) {
  file_size_ = input_file_size(path, "Keras file");
  int code = 0;
  mutex_ = std::make_shared<std::recursive_mutex>();
  zip_t* opened = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  AS_CHECK(opened != nullptr, "Keras file '", path, "' is not a readable zip archive (",
           zip_error_text(code), "); a .keras file is the zip that Keras 3's model.save writes");
  zip_ = std::shared_ptr<zip_t>(opened, [](zip_t* z) { zip_discard(z); });
  const zip_int64_t n = zip_get_num_entries(zip_.get(), 0);
  uint64_t declared = 0;
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    AS_CHECK(zip_stat_index(zip_.get(), static_cast<zip_uint64_t>(i), 0, &st) == 0, "Keras file '",
             path, "': entry ", i, " cannot be read: ", zip_strerror(zip_.get()));
    const std::string name = (st.valid & ZIP_STAT_NAME) && st.name ? st.name : "";
    AS_CHECK(!unsafe_name(name), "Keras file '", path, "': entry '", name,
             "' has an absolute path or '..'; refusing an archive that points outside itself");
    zip_uint8_t opsys = 0;
    zip_uint32_t attributes = 0;
    if (zip_file_get_external_attributes(zip_.get(), static_cast<zip_uint64_t>(i), 0, &opsys,
                                         &attributes) == 0 &&
        opsys == ZIP_OPSYS_UNIX)
      AS_CHECK(((attributes >> 16) & S_IFMT) != S_IFLNK, "Keras file '", path, "': entry '", name,
               "' is a symbolic link; refusing it");
    AS_CHECK(st.encryption_method == ZIP_EM_NONE, "Keras file '", path, "': entry '", name,
             "' is encrypted");
    AS_CHECK(st.comp_method != ZIP_CM_STORE || st.size == st.comp_size, "Keras file '", path,
             "': stored entry '", name, "' declares ", st.size, " bytes but holds ", st.comp_size);
    AS_CHECK(st.comp_size <= file_size_, "Keras file '", path, "': entry '", name, "' declares ",
             st.comp_size, " compressed bytes, more than the file's ", file_size_);
    declared += st.size;
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
  zip_stat_t st;
  zip_stat_init(&st);
  AS_CHECK(zip_stat_index(zip_.get(), static_cast<zip_uint64_t>(index), 0, &st) == 0 &&
               (st.valid & ZIP_STAT_SIZE) && (st.valid & ZIP_STAT_COMP_METHOD),
           "Keras file '", path_, "': '", name, "' cannot be read: ", zip_strerror(zip_.get()));
  // Every member read (config.json, metadata.json, model.weights.h5) holds
  // something; an empty one is damage, and libzip must not be asked to seek
  // in it (its zip_fseek crashes on a 0-byte stored member).
  AS_CHECK(st.size > 0, "Keras file '", path_, "': ", name,
           " is empty; the file is damaged (save the model again)");
  zip_file_t* raw = zip_fopen_index(zip_.get(), static_cast<zip_uint64_t>(index), 0);
  AS_CHECK(raw != nullptr, "Keras file '", path_, "': '", name,
           "' cannot be opened: ", zip_strerror(zip_.get()));
  // The member keeps the archive open (and is closed under its lock).
  std::shared_ptr<zip_file_t> file(raw, [archive = zip_, mu = mutex_](zip_file_t* f) {
    std::lock_guard<std::recursive_mutex> g(*mu);
    zip_fclose(f);
  });
  const std::string where = "Keras file '" + path_ + "': '" + name + "'";
  ZipMember m;
  m.size = st.size;
  if (st.comp_method == ZIP_CM_STORE) {
    // Read in place: seek within the stored bytes.
    m.read = [file, where, mu = mutex_, size = st.size](uint64_t offset, uint64_t n, void* dst) {
      AS_CHECK(offset <= size && n <= size - offset, where, ": a read of ", n, " bytes at ", offset,
               " passes its end (", size, " bytes); the file is damaged");
      if (n == 0) return;  // nothing to seek to
      std::lock_guard<std::recursive_mutex> lock(*mu);
      AS_CHECK(zip_fseek(file.get(), static_cast<zip_int64_t>(offset), SEEK_SET) == 0, where,
               ": cannot seek: ", zip_file_strerror(file.get()));
      char* out = static_cast<char*>(dst);
      while (n > 0) {
        const zip_int64_t got = zip_fread(file.get(), out, n);
        AS_CHECK(got > 0, where, ": truncated or damaged (", zip_file_strerror(file.get()), ")");
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
    const zip_int64_t got = zip_fread(file.get(), buffer.data(), buffer.size());
    AS_CHECK(got >= 0, where, ": cannot be inflated (", zip_file_strerror(file.get()),
             "); the file is damaged");
    if (got == 0) break;
    total += static_cast<uint64_t>(got);
    AS_CHECK(total <= st.size, where, " inflates past its declared ", st.size, " bytes");
    AS_CHECK(std::fwrite(buffer.data(), 1, static_cast<size_t>(got), tmp.get()) ==
                 static_cast<size_t>(got),
             where, ": writing the temporary copy failed: ", std::strerror(errno));
  }
  AS_CHECK(total == st.size, where, " declares ", st.size, " bytes but holds ", total);
  AS_CHECK(std::fflush(tmp.get()) == 0, where,
           ": writing the temporary copy failed: ", std::strerror(errno));
  m.read = [tmp, where, size = st.size](uint64_t offset, uint64_t n, void* dst) {
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
  int code = 0;
  zip_t* z = zip_open(out.c_str(), ZIP_CREATE | ZIP_EXCL, &code);
  AS_CHECK(z != nullptr, "cannot create '", out, "': ", zip_error_text(code));
  for (const auto& [name, file] : members) {
    zip_source_t* src = zip_source_file(z, file.c_str(), 0, -1);
    zip_int64_t at = src ? zip_file_add(z, name.c_str(), src, ZIP_FL_ENC_UTF_8) : -1;
    if (at < 0) {
      if (src) zip_source_free(src);
      const std::string why = zip_strerror(z);
      zip_discard(z);
      fail("writing '", out, "': cannot add '", name, "': ", why);
    }
    zip_set_file_compression(z, static_cast<zip_uint64_t>(at), ZIP_CM_STORE, 0);
  }
  if (zip_close(z) != 0) {
    const std::string why = zip_strerror(z);
    zip_discard(z);
    fail("writing '", out, "' failed: ", why);
  }
}

}  // namespace autoshard::keras
