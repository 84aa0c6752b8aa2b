// Zip archives through libzip, in two levels. ZipReader and ZipWriter are
// the one wrapper of libzip's handles (opened, read, written and closed
// here, never elsewhere); they check nothing, so that each format above
// checks entries its own way: ZipArchive for `.keras` files, read_npz for
// NumPy's `.npz` (io/npy.cc).
//
// ZipArchive reads a model archive safely: every entry's name, kind and sizes
// are checked when it opens, so a `.keras` file cannot write outside a
// directory, point through a symbolic link, lie about its sizes or inflate
// into far more than it holds. Members are read in place when stored and
// streamed (into an unnamed temporary file) when compressed, so a large
// member is never held in memory whole.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct zip;
struct zip_file;
struct zip_source;

namespace autoshard {

// ---- libzip's handles ----

// One entry of an archive as its central directory declares it.
struct ZipEntry {
  std::string name;
  uint64_t size = 0;             // inflated
  uint64_t compressed_size = 0;  // as stored in the archive
  int method = 0;                // libzip's ZIP_CM_* (see stored(), deflated())
  // Which of the above the directory declares (an undeclared one reads 0).
  bool has_name = false, has_size = false, has_compressed_size = false, has_method = false;
  bool encrypted = false;
  bool symbolic_link = false;  // made on Unix with a link's mode
  bool stored() const;
  bool deflated() const;
};

// An entry opened for reading from its start.
class ZipStream {
 public:
  // Reads up to n bytes: how many (0 at the end), or -1 on an error (error()).
  int64_t read(void* dst, uint64_t n);
  // Moves to `offset` of a stored entry; false on an error.
  bool seek(uint64_t offset);
  // libzip's reason for the last failure.
  std::string error() const;

 private:
  friend class ZipReader;
  std::shared_ptr<zip_file> file_;
};

// An archive opened read-only, its consistency checked by libzip.
class ZipReader {
 public:
  // nullopt (with libzip's reason in `why`) when `path` is no readable zip.
  static std::optional<ZipReader> open(const std::string& path, std::string& why);

  int64_t entry_count() const;
  // Entry `i`'s declared fields; nullopt when libzip cannot read them
  // (error() says why) or the entry has no name.
  std::optional<ZipEntry> entry(int64_t i) const;
  // Entry `i` for reading; nullopt on an error (error()). The stream keeps
  // the archive open.
  std::optional<ZipStream> open_entry(int64_t i) const;
  // libzip's reason for the last failure.
  std::string error() const;

 private:
  std::shared_ptr<zip> zip_;
};

// A zip of stored (uncompressed) members, written to a file or to memory.
// Each step returns false on a failure, error() saying libzip's reason
// (callers say what failed, in their own words); what was not closed is
// discarded when the writer goes.
class ZipWriter {
 public:
  ZipWriter() = default;
  ~ZipWriter();
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  // A new file (an existing one is a failure).
  bool create(const std::string& path);
  // In memory: bytes() reads the archive back after close().
  bool create_in_memory();
  // A member holding the file `file` on disk.
  bool add_file(const std::string& name, const std::string& file);
  // A member holding `bytes` (kept until close).
  bool add_bytes(const std::string& name, std::string bytes);
  // Writes the archive.
  bool close();
  // The archive written in memory, or nullopt when it cannot be read back.
  std::optional<std::string> bytes();
  std::string error() const { return error_; }

 private:
  bool added(int64_t index, zip_source* source);
  zip* zip_ = nullptr;
  zip_source* memory_ = nullptr;  // the in-memory archive's buffer
  std::deque<std::string> kept_;  // members' bytes, alive until close
  std::string error_;
};

// ---- .keras archives ----

// Reads `n` bytes at `offset` of some byte sequence into `dst` (throws on a
// short read).
using ReadAt = std::function<void(uint64_t offset, uint64_t n, void* dst)>;

// A member opened for reading at any offset.
struct ZipMember {
  ReadAt read;
  uint64_t size = 0;
};

class ZipArchive {
 public:
  // Throws naming the file and the entry when the archive is malformed or an
  // entry is unsafe (absolute path, "..", a symbolic link, a stored entry
  // whose sizes disagree, sizes beyond kMaxRatio times the archive's).
  explicit ZipArchive(const std::string& path);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const;
  // The whole member (a small one: at most max_bytes).
  std::string read_text(const std::string& name, uint64_t max_bytes) const;
  // A member for reads at any offset; the archive must outlive it.
  ZipMember open_member(const std::string& name) const;

  // The most a member may declare, relative to the archive's own size
  // (deflate's best is about 1000:1; a model's weights compress far less).
  static constexpr uint64_t kMaxRatio = 1000;

 private:
  int64_t index_of(const std::string& name) const;
  std::string path_;
  uint64_t file_size_ = 0;
  // Shared with the members opened, which keep the archive open.
  std::optional<ZipReader> zip_;
  std::vector<std::string> names_;
  // libzip's archive is not thread-safe. Recursive: a member opened under the
  // lock may be closed (its deleter locks too) before the lock is let go.
  std::shared_ptr<std::recursive_mutex> mutex_;
};

// Writes a zip of stored (uncompressed) members: each (name, file on disk).
// `out` is created; an existing `out` is an error.
void write_stored_zip(const std::string& out,
                      const std::vector<std::pair<std::string, std::string>>& members);

}  // namespace autoshard
