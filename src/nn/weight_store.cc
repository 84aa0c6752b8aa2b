#include "autoshard/nn/weight_store.h"

#include <cstring>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/tensor/parallel.h"

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
Tensor WeightStore::make_block(const StateKey& key, Entry& e, const Sharding& layout,
                               int device) const {
  // The block in f32 (a source's, or drawn), then in the value's dtype: a
  // weight held in bf16 never has more than one f32 block at a time.
  return drawn_block(key, e, layout, device).converted(e.dtype);
}

Tensor WeightStore::drawn_block(const StateKey& key, Entry& e, const Sharding& layout,
                                int device) const {
  if (e.source) return e.source->read(e.shape, layout, mesh_, device);
  const Shape local = layout.local_shape(e.shape, mesh_, device);
  Tensor block(local);
  if (!e.init) return block;  // optimizer slots start at zero
  const std::vector<int64_t> off = layout.offsets(e.shape, mesh_, device);
  const std::vector<int64_t> gs = strides_of(e.shape), ls = strides_of(local);
  const std::string path = key.str();
  const Initializer& init = *e.init;
  float* out = block.f32();
  // Every element is drawn from its own counter (its index in the whole
  // weight), so the cores fill disjoint ranges and the bits do not depend on
  // how many there are (a 1B-parameter model was two minutes on one core).
  parallel_for(block.numel(), int64_t{1} << 14, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(local.size());
    for (size_t d = 0; d < local.size(); ++d) idx[d] = begin / ls[d] % local[d];
    for (int64_t i = begin; i < end; ++i) {
      int64_t g = 0;
      for (size_t d = 0; d < local.size(); ++d) g += (idx[d] + off[d]) * gs[d];
      out[i] = init.value(path, e.shape, seed_, g);
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
