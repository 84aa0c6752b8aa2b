#include "autoshard/nn/weight_store.h"

#include <algorithm>
#include <cstring>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/tensor/parallel.h"
#include "tensor/quantize.h"

namespace autoshard {

StateKey StateKey::parse(const std::string& name) {
  const std::string prefix = "optimizer.";
  if (name.rfind(prefix, 0) != 0) return {name, ""};
  const size_t dot = name.find('.', prefix.size());
  AS_CHECK(dot != std::string::npos && dot + 1 < name.size(), "'", name,
           "' is not a weight path or optimizer.<slot>.<weight path>");
  return {name.substr(dot + 1), name.substr(prefix.size(), dot - prefix.size())};
}

bool WeightStore::declare(const StateKey& key, const Shape& shape, std::optional<Initializer> init,
                          DType dtype) {
  AS_CHECK(dtype == DType::F32 || (dtype == DType::BF16 && !key.is_slot()), "internal: '",
           key.str(), "' cannot be held in ", dtype_name(dtype));
  auto [it, fresh] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (!fresh) {
    AS_CHECK(e.shape == shape, "'", key.str(), "' declared with shapes ", shape_str(e.shape),
             " and ", shape_str(shape));
    if (e.dtype == dtype) return false;
    // Held anew (frozen or unfrozen): the blocks made keep their values,
    // rounded to bf16 or widened back.
    e.dtype = dtype;
    for (auto& [d, b] : e.blocks) b = b.converted(dtype);
    return !e.blocks.empty();
  }
  e.shape = shape;
  e.dtype = dtype;
  e.init = init;
  if (!key.is_slot()) weight_order_.push_back(key.weight);
  return false;
}

DType WeightStore::dtype(const StateKey& key) const {
  return entry(key).dtype;
}

int64_t WeightStore::bytes_held(const StateKey& key) const {
  int64_t bytes = 0;
  for (const auto& [d, b] : entry(key).blocks) bytes += int64_t(b.nbytes());
  return bytes;
}

WeightStore::Entry& WeightStore::entry(const StateKey& key) {
  return const_cast<Entry&>(static_cast<const WeightStore*>(this)->entry(key));
}

const WeightStore::Entry& WeightStore::entry(const StateKey& key) const {
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  if (key.is_slot() && entries_.count({key.weight, ""}))
    fail("weight '", key.weight, "' has no optimizer slot '", key.slot,
         "' (slots exist once the model is compiled and has trained a step)");
  fail("the model has no weight '", key.str(), "'");
}

const Shape& WeightStore::shape(const StateKey& key) const {
  return entry(key).shape;
}

std::vector<StateKey> WeightStore::slots() const {
  std::vector<StateKey> out;
  for (const auto& [key, e] : entries_)
    if (key.is_slot()) out.push_back(key);
  return out;
}

void WeightStore::place_on(const DeviceMesh& mesh, std::vector<int> local_devices) {
  if (mesh.to_string() == mesh_.to_string()) return;
  for (const auto& [key, e] : entries_)
    AS_CHECK(e.blocks.empty() || mesh_.size() == 1, "the model's weights are already sharded over ",
             mesh_.to_string(),
             "; build a new model (or save and load its weights) to change the mesh");
  // Whole values made on one device become the source of the mesh's blocks.
  std::map<StateKey, Tensor> wholes;
  for (auto& [key, e] : entries_)
    if (!e.blocks.empty()) wholes[key] = e.blocks.at(0);
  mesh_ = mesh;
  local_devices_ = std::move(local_devices);
  for (auto& [key, e] : entries_) {
    e.blocks.clear();
    e.layout.reset();
    if (auto it = wholes.find(key); it != wholes.end()) {
      const Tensor whole = it->second;
      WeightSource from_memory;
      from_memory.check = [](const std::string&, const Shape&) {};
      from_memory.read = [whole](const Shape&, const Sharding& layout, const DeviceMesh& m,
                                 int device) { return block_of(whole, layout, m, device); };
      e.source = from_memory;
    }
  }
}

// One device's block, drawn straight from the initializer (no whole tensor):
// counter-based draws make it equal to the same block of a whole draw.
namespace {

// f32 bytes a source hands over at a time for a weight held in bf16.
constexpr int64_t kBandBytes = int64_t{16} << 20;

// The block of a weight held in bf16, read from `source` in bands of its
// rows, each rounded as it arrives, so no f32 copy of more than kBandBytes
// is ever made (Gemma 2B's embedding table would be 2 GiB in f32): the
// bands are the blocks of a mesh with one more axis, as long as there are
// bands, that splits dimension 0 inside the layout's own split of it (a
// tuple splits nested: array_split's rule within the block).
Tensor read_in_bands(const WeightSource& source, const Shape& shape, const Sharding& layout,
                     const DeviceMesh& mesh, int device) {
  const Shape local = layout.local_shape(shape, mesh, device);
  const int64_t f32_bytes = numel(local) * 4;
  const int64_t bands =
      local.empty() ? 1 : std::min(local[0], (f32_bytes + kBandBytes - 1) / kBandBytes);
  if (bands <= 1 || mesh.rank() >= kMaxTupleAxes || mesh.size() * bands > kMaxMeshDevices)
    return source.read(shape, layout, mesh, device).converted(DType::BF16);
  std::vector<int> sizes = mesh.shape();
  std::vector<std::string> names = mesh.axis_names();
  sizes.push_back(int(bands));
  std::string name = "bands";
  while (std::find(names.begin(), names.end(), name) != names.end()) name += "_";
  names.push_back(name);
  const DeviceMesh banded(sizes, names);
  Sharding by_band = layout;
  std::vector<int> members = axis_members(layout.dims[0]);
  members.push_back(mesh.rank());
  by_band.dims[0] = tuple_axis(members);
  Tensor block(local, DType::BF16);
  const int64_t row_bytes = numel(local) / std::max<int64_t>(local[0], 1) * 2;
  int64_t row = 0;
  for (int64_t j = 0; j < bands; ++j) {
    const Tensor part =
        source.read(shape, by_band, banded, int(device * bands + j)).converted(DType::BF16);
    AS_CHECK(part.rank() == int(local.size()) && row + part.dim(0) <= local[0],
             "internal: a band of rows of ", shape_str(local), " read as ",
             shape_str(part.shape()));
    if (part.nbytes())
      std::memcpy(static_cast<std::byte*>(block.raw()) + row * row_bytes, part.raw(),
                  part.nbytes());
    row += part.dim(0);
  }
  AS_CHECK(row == local[0], "internal: bands of ", row, " rows for a block of ", local[0]);
  return block;
}

}  // namespace

Tensor WeightStore::make_block(const StateKey& key, Entry& e, const Sharding& layout,
                               int device) const {
  // A weight held in bf16 is never whole in f32: read in bands, or drawn
  // in bf16.
  if (e.source && e.dtype == DType::BF16)
    return read_in_bands(*e.source, e.shape, layout, mesh_, device);
  return drawn_block(key, e, layout, device);
}

// The block from its source, or drawn by its initializer, in the value's dtype.
Tensor WeightStore::drawn_block(const StateKey& key, Entry& e, const Sharding& layout,
                                int device) const {
  if (e.source) return e.source->read(e.shape, layout, mesh_, device).converted(e.dtype);
  const Shape local = layout.local_shape(e.shape, mesh_, device);
  Tensor block(local, e.dtype);
  if (!e.init) return block;  // optimizer slots start at zero
  const std::vector<int64_t> off = layout.offsets(e.shape, mesh_, device);
  const std::vector<int64_t> gs = strides_of(e.shape), ls = strides_of(local);
  const std::string path = key.str();
  const Initializer& init = *e.init;
  float* out = e.dtype == DType::F32 ? block.f32() : nullptr;
  uint16_t* half = out ? nullptr : block.data<uint16_t>();
  // Every element is drawn from its own counter (its index in the whole
  // weight), so the cores fill disjoint ranges and the bits do not depend on
  // how many there are (a 1B-parameter model was two minutes on one core).
  parallel_for(block.numel(), int64_t{1} << 14, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(local.size());
    for (size_t d = 0; d < local.size(); ++d) idx[d] = begin / ls[d] % local[d];
    for (int64_t i = begin; i < end; ++i) {
      int64_t g = 0;
      for (size_t d = 0; d < local.size(); ++d) g += (idx[d] + off[d]) * gs[d];
      const float v = init.value(path, e.shape, seed_, g);
      if (out)
        out[i] = v;
      else
        half[i] = bf16_round(v);
      for (size_t d = local.size(); d-- > 0;) {
        if (++idx[d] < local[d]) break;
        idx[d] = 0;
      }
    }
  });
  return block;
}

Tensor& WeightStore::block(const StateKey& key, const Sharding& layout, int device) {
  Entry& e = entry(key);
  if (e.layout)
    AS_CHECK(*e.layout == layout, "internal: '", key.str(), "' laid out two ways (",
             e.layout->to_string(mesh_), " and ", layout.to_string(mesh_), ")");
  e.layout = layout;
  auto it = e.blocks.find(device);
  if (it == e.blocks.end()) {
    it = e.blocks.emplace(device, make_block(key, e, layout, device)).first;
    // Once every local device has its block, the source is no longer needed.
    if (e.blocks.size() == local_devices_.size()) e.source.reset();
  }
  return it->second;
}

int64_t WeightStore::bytes_to_make(const StateKey& key, const Sharding& layout,
                                   const std::vector<int>& devices) const {
  const Entry& e = entry(key);
  int64_t bytes = 0;
  for (int d : devices)
    if (!e.blocks.count(d))
      bytes += numel(layout.local_shape(e.shape, mesh_, d)) * int64_t(dtype_size(e.dtype));
  return bytes;
}

Tensor& WeightStore::whole(const StateKey& key) {
  AS_CHECK(!on_mesh(), "internal: whole() of '", key.str(), "' on a mesh");
  return block(key, Sharding::replicated(static_cast<int>(entry(key).shape.size())), 0);
}

Tensor WeightStore::gather(const StateKey& key) {
  Entry& e = entry(key);
  if (!on_mesh()) return whole(key).converted(DType::F32);
  if (e.blocks.empty()) {
    // Not placed yet: read or draw it whole (rounded as its blocks will be).
    const Sharding whole_layout = Sharding::replicated(static_cast<int>(e.shape.size()));
    return make_block(key, e, whole_layout, 0).converted(DType::F32);
  }
  Tensor t(e.shape);
  if (!World::process().distributed()) {
    for (const auto& [d, b] : e.blocks)
      write_block(t, b.converted(DType::F32), *e.layout, mesh_, d);
    return t;
  }
  // Each rank holds one block: the writer of each block adds it, and a sum
  // over the ranks assembles the whole.
  for (const auto& [d, b] : e.blocks)
    if (writes_block(*e.layout, d)) write_block(t, b.converted(DType::F32), *e.layout, mesh_, d);
  World::process().sum(t.f32(), t.numel());
  return t;
}

void WeightStore::set(const StateKey& key, const Tensor& value) {
  Entry& e = entry(key);
  AS_CHECK(e.shape == value.shape() && value.dtype() == DType::F32, "'", key.str(), "' is ",
           shape_str(e.shape), ", cannot set it from ", dtype_name(value.dtype()),
           shape_str(value.shape()));
  if (e.blocks.empty()) {
    // Not made yet: the value becomes its source.
    const Tensor copy = value.clone();
    WeightSource from_memory;
    from_memory.check = [](const std::string&, const Shape&) {};
    from_memory.read = [copy](const Shape&, const Sharding& layout, const DeviceMesh& m,
                              int device) { return block_of(copy, layout, m, device); };
    e.source = from_memory;
    return;
  }
  for (auto& [d, b] : e.blocks) {
    Tensor part = block_of(value, *e.layout, mesh_, d).converted(e.dtype);
    std::memcpy(b.raw(), part.raw(), part.nbytes());
  }
}

void WeightStore::load(const std::map<StateKey, WeightSource>& sources) {
  for (const auto& [key, src] : sources) {
    // Slots of known weights have their weight's shape even before the
    // optimizer declared them.
    if (!contains(key) && key.is_slot() && contains({key.weight, ""}))
      declare(key, shape({key.weight, ""}), std::nullopt);
    AS_CHECK(contains(key), "the model has no weight '", key.str(), "' (the checkpoint has it)");
    src.check(key.str(), shape(key));
  }
  // Read what is already made now (into staging), then commit all.
  std::map<StateKey, Tensor> staged;
  for (const auto& [key, src] : sources) {
    const Entry& e = entry(key);
    if (!e.blocks.empty())
      staged[key] = src.read(e.shape, Sharding::replicated(static_cast<int>(e.shape.size())),
                             DeviceMesh(), 0);
  }
  for (const auto& [key, src] : sources)
    if (!staged.count(key)) entry(key).source = src;
  for (const auto& [key, t] : staged) set(key, t);
}

bool WeightStore::writes_block(const Sharding& layout, int device) const {
  const std::vector<int> c = mesh_.coordinates(device);
  for (int a = 0; a < mesh_.rank(); ++a)
    if (layout.dim_of(a) < 0 && c[a] != 0) return false;
  return true;
}

WeightStore::Snapshot WeightStore::snapshot(bool include_slots) {
  Snapshot snap;
  snap.mesh = on_mesh() ? mesh_ : DeviceMesh();
  for (auto& [key, e] : entries_) {
    if (key.is_slot() && !include_slots) continue;
    Snapshot::Entry s;
    s.shape = e.shape;
    s.blocks.resize(snap.mesh.size());
    if (written_ && !written_->count(key.weight)) {
      s.layout = Sharding::replicated(static_cast<int>(e.shape.size()));  // another rank's
    } else if (on_mesh() && !e.blocks.empty()) {
      s.layout = *e.layout;
      for (const auto& [d, b] : e.blocks)
        if (writes_block(s.layout, d))
          s.blocks[d] = b.dtype() == DType::F32 ? b.clone() : b.converted(DType::F32);
    } else {
      // One device, or not placed yet (read or drawn whole): device 0 writes it.
      s.layout = Sharding::replicated(static_cast<int>(e.shape.size()));
      if (!on_mesh() || World::process().leader() || !World::process().distributed())
        s.blocks[0] = gather(key).clone();
    }
    snap.entries[key.str()] = std::move(s);
  }
  return snap;
}

}  // namespace autoshard
