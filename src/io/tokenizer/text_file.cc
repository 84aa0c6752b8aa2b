// Text data through a tokenizer, a piece at a time: encoding a whole file at
// once holds the text and every intermediate form of it (code points,
// pre-tokenized pieces) together, tens of times the file's size.
#include <algorithm>
#include <fstream>
#include <optional>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/tokenizer.h"
#include "autoshard/runtime/memory.h"

namespace autoshard {
namespace {

// Bytes read per piece: large enough that the pieces' edges are rare (one
// token in tens of thousands), small enough that a piece's regular
// expressions stay within seconds even on a hostile pattern.
constexpr size_t kPieceBytes = size_t{256} << 10;

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Where `buffer` (not the file's end) is cut: after a line end between two
// characters that are not blank, where the splitting expressions of GPT-2's
// and Llama 3's kinds cut anyway (a run of blanks cut in two would change
// their pieces); else after the last line end or space; else before the last
// character, whole or not.
size_t cut_point(const std::string& buffer) {
  for (size_t i = buffer.size() - 1; i-- > 1;)
    if (buffer[i] == '\n' && !is_blank(buffer[i - 1]) && !is_blank(buffer[i + 1])) return i + 1;
  if (const size_t nl = buffer.rfind('\n'); nl != std::string::npos) return nl + 1;
  if (const size_t sp = buffer.rfind(' '); sp != std::string::npos) return sp + 1;
  size_t at = buffer.size();
  // Back over continuation bytes to the lead byte of the last character.
  while (at > 0 && buffer.size() - at < 4 && (static_cast<uint8_t>(buffer[at - 1]) & 0xC0) == 0x80)
    --at;
  if (at > 0 && static_cast<uint8_t>(buffer[at - 1]) >= 0xC0) return at - 1;
  return buffer.size();
}

// Makes room for `more` ids, failing before an allocation the machine
// cannot give (a vector grows by doubling, holding both blocks meanwhile).
void reserve_for(std::vector<int32_t>& ids, size_t more, const std::string& what,
                 const std::string& path, uint64_t read, uint64_t size) {
  if (ids.size() + more <= ids.capacity()) return;
  const size_t grown = std::max({ids.capacity() * 2, ids.size() + more, size_t{1} << 16});
  const auto bytes = static_cast<int64_t>((grown + ids.capacity()) * sizeof(int32_t));
  const std::optional<int64_t> available = available_memory_bytes();
  AS_CHECK(!available || bytes <= *available, what, " '", path, "': its token ids need ",
           format_bytes(static_cast<double>(bytes)), " after ", read, " of its ", size,
           " bytes, more than the ", format_bytes(static_cast<double>(*available)),
           " of memory available; give a smaller file, or its ids as a .bin file");
  ids.reserve(grown);
}

}  // namespace

std::vector<int32_t> encode_text_file(const Tokenizer& tokenizer, const std::string& path,
                                      const std::string& what) {
  const uint64_t size = input_file_size(path, what);
  std::ifstream in(path, std::ios::binary);
  AS_CHECK(in, what, " '", path, "' cannot be opened");
  std::vector<int32_t> ids;
  std::string buffer;  // the piece being read, after what the last one left
  uint64_t read = 0;
  for (bool end = false; !end;) {
    const size_t kept = buffer.size();
    buffer.resize(kept + kPieceBytes);
    in.read(buffer.data() + kept, static_cast<std::streamsize>(kPieceBytes));
    const auto got = static_cast<size_t>(in.gcount());
    buffer.resize(kept + got);
    read += got;
    end = got < kPieceBytes;
    AS_CHECK(!in.bad(), what, " '", path, "' could not be read after ", read, " bytes");
    const size_t cut = end ? buffer.size() : cut_point(buffer);
    const std::vector<int32_t> piece =
        tokenizer.encode(std::string_view(buffer).substr(0, cut), /*add_special_tokens=*/false);
    reserve_for(ids, piece.size(), what, path, read, size);
    ids.insert(ids.end(), piece.begin(), piece.end());
    buffer.erase(0, cut);
  }
  return tokenizer.with_training_tokens(std::move(ids));
}

}  // namespace autoshard
