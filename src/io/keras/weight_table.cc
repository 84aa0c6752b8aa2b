#include "io/keras/weight_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/json.h"
#include "autoshard/tensor/sharding.h"

namespace autoshard::keras {

namespace fs = std::filesystem;
using nlohmann::json;

StoredWeight h5_weight(std::shared_ptr<H5File> file, const std::string& path) {
  const H5Dataset d = file->dataset(path);
  AS_CHECK(d.floating || d.integer, file->what(), ": weight '", path,
           "' holds neither floats nor integers");
  StoredWeight w;
  w.shape = d.shape;
  w.where = file->what() + ": dataset '" + path + "'";
  w.read = [file, path](const std::vector<int64_t>& offset, const Shape& count, float* dst) {
    file->read_block(path, offset, count, dst);
  };
  return w;
}

namespace {

// The shards of one manifest group read as one byte sequence.
struct ShardGroup {
  struct Shard {
    int fd = -1;
    uint64_t begin = 0, size = 0;
    std::string path;
  };
  std::vector<Shard> shards;
  uint64_t size = 0;
  ~ShardGroup() {
    for (Shard& s : shards)
      if (s.fd >= 0) ::close(s.fd);
  }
  void read(uint64_t offset, uint64_t n, void* dst) const {
    char* out = static_cast<char*>(dst);
    for (const Shard& s : shards) {
      if (n == 0) break;
      if (offset >= s.begin + s.size) continue;
      const uint64_t at = offset - s.begin;
      const uint64_t take = std::min(n, s.size - at);
      uint64_t done = 0;
      while (done < take) {
        const ssize_t got = ::pread(s.fd, out + done, take - done, static_cast<off_t>(at + done));
        if (got < 0 && errno == EINTR) continue;
        AS_CHECK(got > 0, "TensorFlow.js weights '", s.path, "' cannot be read (truncated?)");
        done += static_cast<uint64_t>(got);
      }
      out += take, offset += take, n -= take;
    }
    AS_CHECK(n == 0, "internal: TensorFlow.js weights read past the shards");
  }
};

// Calls run(block_index, element_index, length) for each contiguous run of
// the block [offset, offset + count) of a row-major tensor of `shape`.
void for_each_run(const Shape& shape, const std::vector<int64_t>& offset, const Shape& count,
                  const std::function<void(int64_t, int64_t, int64_t)>& run) {
  const size_t r = shape.size();
  if (numel(count) == 0) return;
  if (r == 0) return run(0, 0, 1);
  const std::vector<int64_t> stride = strides_of(shape);
  const int64_t len = count[r - 1];
  std::vector<int64_t> idx(r, 0);
  for (int64_t done = 0; done < numel(count); done += len) {
    int64_t at = 0;
    for (size_t d = 0; d < r; ++d) at += (idx[d] + offset[d]) * stride[d];
    run(done, at, len);
    for (size_t d = r - 1; d-- > 0;) {
      if (++idx[d] < count[d]) break;
      idx[d] = 0;
    }
  }
}

double number(const json& j, const char* key, const std::string& where) {
  AS_CHECK(j.contains(key) && j.at(key).is_number(), where, ": '", key, "' must be a number");
  const double v = j.at(key).get<double>();
  AS_CHECK(std::isfinite(v), where, ": '", key, "' must be finite");
  return v;
}

}  // namespace

WeightTable tfjs_weights(const json& manifest, const std::string& dir,
                         const std::string& model_json, std::vector<std::string>* optimizer) {
  const std::string what = "TensorFlow.js model '" + model_json + "'";
  AS_CHECK(manifest.is_array(), what, ": 'weightsManifest' must be a list of groups");
  WeightTable table;
  for (size_t g = 0; g < manifest.size(); ++g) {
    const json& group = manifest[g];
    const std::string where = what + ": weightsManifest[" + std::to_string(g) + "]";
    AS_CHECK(group.is_object() && group.contains("paths") && group.at("paths").is_array() &&
                 group.contains("weights") && group.at("weights").is_array(),
             where, " must be an object with 'paths' and 'weights' lists");
    auto shards = std::make_shared<ShardGroup>();
    for (const json& p : group.at("paths")) {
      AS_CHECK(p.is_string(), where, ": a path is not a string");
      const std::string name = p.get<std::string>();
      AS_CHECK(!name.empty() && name.find_first_of(std::string("/\\\0", 3)) == std::string::npos &&
                   name != "." && name != "..",
               where, ": shard path '", name,
               "' must be a file name beside model.json (no '/', '..' or URL)");
      // Inside the directory after symbolic links, and a regular file.
      const std::string path = file_in_directory(dir, name, "TensorFlow.js weight shard");
      const uint64_t size = input_file_size(path, "TensorFlow.js weight shard");
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      AS_CHECK(fd >= 0, "TensorFlow.js weight shard '", path,
               "' cannot be opened: ", std::strerror(errno));
      shards->shards.push_back({fd, shards->size, size, path});
      shards->size += size;
    }
    // TF.js marks each optimizer weight ("group": "optimizer"); a whole
    // manifest group so marked is read the same way.
    const bool optimizer_group = group.value("group", json()) == json("optimizer");
    uint64_t offset = 0;
    for (const json& w : group.at("weights")) {
      AS_CHECK(w.is_object() && w.contains("name") && w.at("name").is_string(), where,
               ": a weight without a 'name'");
      const std::string name = w.at("name").get<std::string>();
      const std::string at = where + ": weight '" + name + "'";
      AS_CHECK(w.contains("shape") && w.at("shape").is_array(), at, ": 'shape' must be a list");
      Shape shape;
      int64_t count = 1;
      for (const json& d : w.at("shape")) {
        AS_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() < (1LL << 40),
                 at, ": shape entries must be whole numbers >= 0");
        shape.push_back(d.get<int64_t>());
        AS_CHECK(count <= (1LL << 40) / std::max<int64_t>(1, shape.back()), at, ": too large");
        count *= shape.back();
      }
      const std::string dtype = json_string_or(w, "dtype", "float32", at);
      std::string stored = dtype;  // how the bytes are encoded
      double scale = 1, minimum = 0;
      if (w.contains("quantization") && !w.at("quantization").is_null()) {
        const json& q = w.at("quantization");
        AS_CHECK(q.is_object() && q.contains("dtype") && q.at("dtype").is_string(), at,
                 ": 'quantization' must name its 'dtype'");
        stored = q.at("dtype").get<std::string>();
        AS_CHECK(stored == "uint8" || stored == "uint16" || stored == "float16", at,
                 ": quantization dtype '", stored, "' is not uint8, uint16 or float16");
        if (stored != "float16") {
          scale = number(q, "scale", at);
          minimum = number(q, "min", at);
        }
      }
      AS_CHECK(dtype == "float32" || dtype == "int32", at, ": dtype '", dtype,
               "' is not supported (float32 or int32)");
      const size_t bytes = stored == "uint8"                             ? 1
                           : (stored == "uint16" || stored == "float16") ? 2
                                                                         : 4;
      const uint64_t begin = offset;
      offset += static_cast<uint64_t>(count) * bytes;
      AS_CHECK(offset <= shards->size, at, " ends at byte ", offset, " but the shards hold ",
               shards->size, " bytes (a missing or truncated .bin)");
      StoredWeight sw;
      sw.shape = shape;
      sw.where = at;
      sw.read = [shards, shape, stored, bytes, begin, scale, minimum](
                    const std::vector<int64_t>& off, const Shape& cnt, float* dst) {
        std::vector<unsigned char> raw;
        for_each_run(shape, off, cnt, [&](int64_t to, int64_t from, int64_t len) {
          raw.resize(static_cast<size_t>(len) * bytes);
          shards->read(begin + static_cast<uint64_t>(from) * bytes, raw.size(), raw.data());
          float* out = dst + to;
          for (int64_t i = 0; i < len; ++i) {
            const unsigned char* p = raw.data() + i * static_cast<int64_t>(bytes);
            if (stored == "float32") {
              std::memcpy(out + i, p, 4);
            } else if (stored == "int32") {
              int32_t v;
              std::memcpy(&v, p, 4);
              out[i] = static_cast<float>(v);
            } else if (stored == "uint8") {
              out[i] = static_cast<float>(p[0] * scale + minimum);
            } else if (stored == "uint16") {
              uint16_t v;
              std::memcpy(&v, p, 2);
              out[i] = static_cast<float>(v * scale + minimum);
            } else {
              uint16_t v;
              std::memcpy(&v, p, 2);
              out[i] = half_to_float(v);
            }
          }
        });
      };
      const bool of_optimizer = optimizer_group || w.value("group", json()) == json("optimizer");
      const std::string key = of_optimizer ? "optimizer/" + name : name;
      AS_CHECK(!table.count(key), at, " appears twice in the manifest");
      if (of_optimizer && optimizer) optimizer->push_back(key);
      table.emplace(key, std::move(sw));
    }
    AS_CHECK(offset == shards->size, where, ": the shards hold ", shards->size,
             " bytes but the weights take ", offset, " (a shard of another model?)");
  }
  return table;
}

WeightSource stored_source(const StoredWeight& w, const std::string& keras_name) {
  WeightSource s;
  s.check = [w, keras_name](const std::string& weight, const Shape& shape) {
    AS_CHECK(w.shape == shape, w.where, " has shape ", shape_str(w.shape), " but weight '", weight,
             "' (", keras_name, ") needs ", shape_str(shape),
             " (weights that disagree with the architecture)");
  };
  s.read = [w, keras_name](const Shape& shape, const Sharding& layout, const DeviceMesh& mesh,
                           int device) {
    Tensor block(layout.local_shape(shape, mesh, device));
    w.read(layout.offsets(shape, mesh, device), block.shape(), block.f32());
    for (int64_t i = 0; i < block.numel(); ++i)
      if (!std::isfinite(block.f32()[i])) [[unlikely]]
        fail(w.where, " (", keras_name, ") holds ",
             std::isnan(block.f32()[i]) ? "NaN" : "an infinite value",
             ": the file is damaged or was saved from a run that diverged; use other weights");
    return block;
  };
  return s;
}

}  // namespace autoshard::keras
