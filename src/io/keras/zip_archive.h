// A zip archive read safely (libzip): every entry's name, kind and sizes are
// checked when it opens, so a `.keras` file cannot write outside a
// directory, point through a symbolic link, lie about its sizes or inflate
// into far more than it holds. Members are read in place when stored and
// streamed (into an unnamed temporary file) when compressed, so a large
// member is never held in memory whole.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct zip;

namespace autoshard::keras {

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
  std::shared_ptr<zip> zip_;
  std::vector<std::string> names_;
  // libzip's archive is not thread-safe. Recursive: a member opened under the
  // lock may be closed (its deleter locks too) before the lock is let go.
  std::shared_ptr<std::recursive_mutex> mutex_;
};

// Writes a zip of stored (uncompressed) members: each (name, file on disk).
// `out` is created; an existing `out` is an error.
void write_stored_zip(const std::string& out,
                      const std::vector<std::pair<std::string, std::string>>& members);

}  // namespace autoshard::keras
