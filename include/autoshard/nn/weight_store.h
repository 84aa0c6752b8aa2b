// WeightStore: owns a model's state, its weights and the optimizer's slots,
// under typed keys. On one device each value is one whole tensor; on a mesh
// each device holds only its block, drawn straight from the initializer or
// read straight from a file (no whole tensor is ever made for it).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autoshard/nn/initializer.h"
#include "autoshard/nn/weight_source.h"
#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/sharding.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {

// A piece of model state: a weight ("h.3.attn.query.kernel") or the slot of
// the optimizer's state for it ("m" of that weight).
struct StateKey {
  std::string weight;
  std::string slot;  // "" for the weight itself

  // "path" or "optimizer.<slot>.<path>": the names state files use.
  static StateKey parse(const std::string& name);
  std::string str() const { return slot.empty() ? weight : "optimizer." + slot + "." + weight; }
  bool is_slot() const { return !slot.empty(); }
  auto operator<=>(const StateKey&) const = default;
};

class WeightStore {
 public:
  explicit WeightStore(uint64_t seed = 0) : seed_(seed) {}
  void set_seed(uint64_t seed) { seed_ = seed; }

  // Declares a weight (drawn by `init` on first use) or a slot (zeros),
  // held in `dtype`: f32, or bf16 for a frozen weight (its values rounded
  // to bf16 as each block is made: Model::hold_frozen_weights_in_bf16).
  // Declaring again checks the shape; another dtype converts the blocks
  // already made (true then: a step bound to them must be bound again).
  bool declare(const StateKey& key, const Shape& shape, std::optional<Initializer> init,
               DType dtype = DType::F32);
  // The dtype a value is held in.
  DType dtype(const StateKey& key) const;
  // Bytes of the blocks this process holds of a value (0 before any is made).
  int64_t bytes_held(const StateKey& key) const;
  bool contains(const StateKey& key) const { return entries_.count(key) > 0; }
  // Throws autoshard::Error naming the weight or slot when it is unknown.
  const Shape& shape(const StateKey& key) const;
  // Weights in declaration order; slots by key.
  const std::vector<std::string>& weight_paths() const { return weight_order_; }
  std::vector<StateKey> slots() const;

  // Values live on `mesh` from now on (one device: a 1-device mesh). Each
  // device's block is made when first asked for; a store placed on a mesh
  // cannot move to another (save and load instead).
  void place_on(const DeviceMesh& mesh, std::vector<int> local_devices);
  bool on_mesh() const { return mesh_.size() > 1; }
  const DeviceMesh& mesh() const { return mesh_; }
  // The whole value, on one device (live storage: optimizer updates write it;
  // bf16 for a weight held so).
  Tensor& whole(const StateKey& key);
  // Device `device`'s block under `layout` (live storage, in the value's
  // dtype); a value keeps one layout once placed.
  Tensor& block(const StateKey& key, const Sharding& layout, int device);

  // Bytes `devices` would newly allocate for their blocks under `layout`
  // (blocks already made count nothing).
  int64_t bytes_to_make(const StateKey& key, const Sharding& layout,
                        const std::vector<int>& devices) const;

  // The whole value as a copy (the live storage on one device), in f32 (a
  // copy widened from a value held in bf16). Under mpirun this is a
  // collective: every rank calls it for the same keys in order.
  Tensor gather(const StateKey& key);
  // Writes a whole f32 value into every block this process holds (rounded
  // to bf16 for a value held so).
  void set(const StateKey& key, const Tensor& value);
  // Takes values from sources. Every source is checked first; an error
  // leaves the store as it was. Values not yet made are read later, each
  // device its own block; values already made are read and set now.
  void load(const std::map<StateKey, WeightSource>& sources);

  // A consistent copy of every weight (and, if asked, slot) as per-device
  // blocks, in f32 (widened from bf16), for saving while training goes on. Replicated values keep
  // one block (the writer's); blocks of other devices are empty.
  struct Snapshot {
    DeviceMesh mesh;
    struct Entry {
      Shape shape;
      Sharding layout;
      std::vector<Tensor> blocks;  // per device of the mesh
    };
    std::map<std::string, Entry> entries;  // by StateKey::str()
  };
  Snapshot snapshot(bool include_slots);
  // Pipeline stages on ranks: this process's snapshots hold blocks only of
  // `weights` (and their slots), the others being held and written by the
  // ranks of another stage (none is made here for a snapshot); every value
  // is still named, with its shape.
  void write_only(std::set<std::string> weights) { written_ = std::move(weights); }
  // Of the devices holding the same block of a value, the one at coordinate
  // 0 of every axis that does not split it writes it (saves, assembly).
  bool writes_block(const Sharding& layout, int device) const;

 private:
  struct Entry {
    Shape shape;
    DType dtype = DType::F32;
    std::optional<Initializer> init;
    std::optional<WeightSource> source;  // to read on first use (f32 blocks)
    std::optional<Sharding> layout;      // once placed on a mesh
    std::map<int, Tensor> blocks;        // per local device (device 0 alone on one device)
  };
  Entry& entry(const StateKey& key);
  const Entry& entry(const StateKey& key) const;
  Tensor make_block(const StateKey& key, Entry& e, const Sharding& layout, int device) const;
  Tensor drawn_block(const StateKey& key, Entry& e, const Sharding& layout, int device) const;

  uint64_t seed_;
  DeviceMesh mesh_;
  std::vector<int> local_devices_{0};
  std::map<StateKey, Entry> entries_;
  std::vector<std::string> weight_order_;
  std::optional<std::set<std::string>> written_;  // write_only's, if set
};

}  // namespace autoshard
