// A plan handed to Keras users as a Keras 3 LayoutMap (`autoshard plan
// --export-layout-map`): for every Keras variable one anchored regular
// expression over its `variable.path`, valued with a tuple of mesh-axis
// names and None, plus the mesh, the batch_dim_name and the plan's predicted
// step time and memory. Written as JSON or as a Python function
// `get_layout_map(device_mesh)` returning `keras.distribution.LayoutMap`.
//
// Keras's lookup (keras/src/distribution/distribution_lib.py, LayoutMap.
// __getitem__): an exact key wins, else every key is tried with re.search
// and two matching keys are a ValueError. So the export checks that every
// variable (under each spelling its path may have) is matched by exactly
// one key, its own, before anything is written; it fails naming the
// variable otherwise. Layouts come from autoshard's Shardings through the
// dimension correspondence of each variable (KerasHub's 3-D EinsumDense
// kernels flatten two Keras dimensions into one of autoshard's).
//
// Keras (JAX's NamedSharding) needs every split to divide its dimension;
// autoshard splits unevenly where one does not (array_split). Uneven
// splits are listed (uneven_splits) so the CLI can warn; `plan
// --divisible` plans without them (StrategyOptions::divisible).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/plan/distribution.h"
#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/sharding.h"

namespace autoshard {

// One Keras variable and the autoshard weight it is.
struct KerasVariable {
  // Keras 3's variable.path as a Keras user's model has it
  // ("sequential/dense/kernel", "decoder_block_0/attention/query/kernel").
  std::string path;
  // Further spellings of the same path (a model built another way drops or
  // adds a model-name scope); `key` must match them too, and nothing else.
  std::vector<std::string> other_paths;
  // The anchored regular expression (Python's re and ECMAScript alike) that
  // matches `path` and `other_paths`; empty: `path` escaped, ^...$.
  std::string key;
  Shape shape;         // Keras's shape
  std::string weight;  // autoshard's weight path
  Shape weight_shape;  // autoshard's shape
  // Per autoshard dimension, the Keras dimensions it flattens, outermost
  // first (a query kernel's (hidden, heads * head_dim) is Keras's (hidden,
  // heads, head_dim): {{0}, {1, 2}}). Empty: the same dimensions in order.
  std::vector<std::vector<int>> dims_of;
  // Per autoshard dimension, its rank among the autoshard dimensions that
  // lie in the same Keras dimension (smaller: outer; a query's kv heads
  // before their group). Empty: dimension order.
  std::vector<int> factor_order;
};

// `s` (over autoshard's dimensions of `v`) as Keras's layout: a split of a
// flattened dimension goes onto the outermost Keras dimension the axis
// divides whose outer dimensions are all 1 (then the blocks are the same
// elements), else onto the outermost one it divides, else the outermost
// of more than one element (an uneven split).
TensorLayout keras_layout(const KerasVariable& v, const Sharding& s, const DeviceMesh& mesh);
// A Keras layout of `v` back as autoshard's Sharding: a split Keras
// dimension splits the autoshard dimension that holds it (the outermost of
// more than one element, when several lie in it). A variable without an
// autoshard weight (`weight` empty) has none: replicated of rank 0.
Sharding autoshard_sharding(const KerasVariable& v, const TensorLayout& layout,
                            const DeviceMesh& mesh);

struct LayoutMapExport {
  std::string model;  // what was planned (a path or preset), for the header
  // The mesh as Keras gets it: the plan's, with a batch axis of size 1 first
  // when the plan's has none (Keras's ModelParallel splits inputs over
  // batch_dim_name, which must be an axis of its mesh).
  DeviceMesh mesh;
  std::string batch_dim_name = "data";
  struct Entry {
    KerasVariable variable;
    TensorLayout layout;      // over Keras's dimensions
    std::vector<int> uneven;  // Keras dimensions split unevenly
  };
  std::vector<Entry> entries;
  // The plan's prediction (0 when not predicted).
  double step_s = 0;
  double bytes_per_device = 0;
  std::string cluster;
  bool divisible = false;  // planned with --divisible
  // --divisible's report: which dimension lost its split, and what it costs.
  std::vector<std::string> lost_splits;
};

// The export of a plan: each variable's layout (`plan(v.weight)`, the
// plan's Sharding of the weight over `mesh`), with its key made. Checks
// coverage (check_layout_map_export) before returning.
LayoutMapExport make_layout_map_export(
    std::vector<KerasVariable> variables, const DeviceMesh& mesh,
    const std::function<Sharding(const std::string& weight)>& plan);

// Every path of every variable matched, as Keras matches (an exact key, else
// exactly one re.search match), by its own entry's key; throws naming the
// variable and the keys otherwise (none, or two keys).
void check_layout_map_export(const LayoutMapExport& e);

// The map as autoshard's LayoutMap (keys and layouts as exported).
LayoutMap to_layout_map(const LayoutMapExport& e);

// Lines naming each uneven split ("dense/kernel: dimension 1 (10) over
// model (4)"); empty when every split divides.
std::vector<std::string> uneven_splits(const LayoutMapExport& e);

// {"format", "mesh": {"shape", "axis_names"}, "batch_dim_name",
//  "layout_map": {key: [axis or null, ...]}, "variables": {path: {...}},
//  "predicted": {...}, "uneven_splits": [...], "divisible", "lost_splits"}
std::string layout_map_json(const LayoutMapExport& e);
// A Python module defining get_layout_map(device_mesh) (and MESH_SHAPE,
// MESH_AXIS_NAMES, BATCH_DIM_NAME, the prediction) for a Keras user.
std::string layout_map_python(const LayoutMapExport& e);

// `text` with the characters regular expressions treat specially escaped.
std::string regex_escape(const std::string& text);

}  // namespace autoshard
