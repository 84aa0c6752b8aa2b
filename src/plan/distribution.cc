#include "autoshard/plan/distribution.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "autoshard/error.h"
#include "autoshard/json.h"
#include "autoshard/shard/partitioner.h"

namespace autoshard {

std::vector<std::string> list_devices(int count) {
  if (count <= 0) count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  AS_CHECK(count <= kMaxInProcessDevices, "at most ", kMaxInProcessDevices,
           " in-process devices, asked for ", count);
  std::vector<std::string> devices;
  for (int i = 0; i < count; ++i) devices.push_back("cpu:" + std::to_string(i));
  return devices;
}

TensorLayout::TensorLayout(const std::vector<std::optional<std::string>>& a) {
  for (const std::optional<std::string>& name : a) axes.push_back(name ? Axes{*name} : Axes{});
}

int layout_axis(const DeviceMesh& mesh, const TensorLayout::Axes& names, const std::string& what) {
  std::vector<int> members;
  std::string tuple;  // ('model', 'data'), for the error
  for (const std::string& name : names) tuple += (tuple.empty() ? "('" : ", '") + name + "'";
  for (const std::string& name : names) {
    const int a = mesh.axis_index(name);
    AS_CHECK(a >= 0, what, " names mesh axis '", name, "', which mesh ", mesh.to_string(),
             " does not have");
    AS_CHECK(members.empty() || a > members.back(), what, " splits a dimension over ", tuple,
             "): name each axis once, in the mesh's order (", mesh.to_string(), ")");
    members.push_back(a);
  }
  return members.empty() ? -1 : tuple_axis(members);
}

TensorLayout TensorLayout::of(const Sharding& s, const DeviceMesh& mesh) {
  TensorLayout l;
  for (int id : s.dims) {
    l.axes.emplace_back();
    for (int a : axis_members(id)) l.axes.back().push_back(mesh.axis_names()[size_t(a)]);
  }
  return l;
}

Sharding TensorLayout::to_sharding(const DeviceMesh& mesh, const std::string& path,
                                   const Shape& shape) const {
  AS_CHECK(axes.size() == shape.size(), "layout for '", path, "' has ", axes.size(),
           " axes but the weight ", shape_str(shape), " has ", shape.size(), " dimensions");
  Sharding s = Sharding::replicated(shape.size());
  for (size_t d = 0; d < axes.size(); ++d)
    s.dims[d] = layout_axis(mesh, axes[d], "layout for '" + path + "'");
  s.validate(mesh, static_cast<int>(shape.size()), "layout for '" + path + "'");
  return s;
}

struct LayoutMap::Compiled {
  std::regex re;
};

TensorLayout& LayoutMap::operator[](const std::string& key) {
  for (auto& [k, v] : entries_)
    if (k == key) return v;
  try {
    compiled_.push_back(std::make_shared<const Compiled>(Compiled{std::regex(key)}));
  } catch (const std::regex_error& e) {
    fail("layout map key '", key, "' is not a valid regular expression: ", e.what());
  }
  entries_.emplace_back(key, TensorLayout{});
  return entries_.back().second;
}

namespace {
// A weight path as Keras 3's Variable.path spells it: "/" between the layer
// and its weight ("d1.kernel" is "d1/kernel"). Keys match either spelling,
// so the distribution guide's layout_map["d1/kernel"] and autoshard's
// "d1.kernel" both reach the weight (a "." in a key matches any character).
std::string keras_spelling(std::string path) {
  std::replace(path.begin(), path.end(), '.', '/');
  return path;
}

bool key_matches(const std::string& key, const std::regex& re, const std::string& path) {
  const std::string keras = keras_spelling(path);
  return key == path || key == keras || std::regex_search(path, re) || std::regex_search(keras, re);
}
}  // namespace

std::optional<TensorLayout> LayoutMap::lookup(const std::string& path) const {
  for (const auto& [k, v] : entries_)
    if (k == path || k == keras_spelling(path)) return v;
  const std::string* found = nullptr;
  std::optional<TensorLayout> result;
  for (size_t e = 0; e < entries_.size(); ++e) {
    const auto& [k, v] = entries_[e];
    if (!key_matches(k, compiled_[e]->re, path)) continue;
    if (found)
      fail("weight '", path, "' matches two layout map keys, '", *found, "' and '", k,
           "'; make the keys more specific");
    found = &k;
    result = v;
  }
  return result;
}

std::vector<std::string> LayoutMap::unmatched(const std::vector<std::string>& paths) const {
  std::vector<std::string> out;
  for (size_t e = 0; e < entries_.size(); ++e) {
    const std::string& key = entries_[e].first;
    bool used = false;
    for (const std::string& p : paths) used = used || key_matches(key, compiled_[e]->re, p);
    if (!used) out.push_back(key);
  }
  return out;
}

LayoutMap LayoutMap::from_json_text(const std::string& text, const std::string& source) {
  const nlohmann::json j = parse_json_text(text, "layout map '" + source + "'");
  AS_CHECK(j.is_object(), "layout map '", source,
           "' must be an object of regex -> [axis or null, ...]");
  LayoutMap m;
  for (auto it = j.begin(); it != j.end(); ++it) {
    AS_CHECK(it.value().is_array(), "layout map '", source, "': the layout of '", it.key(),
             "' must be a list of axis names or null");
    TensorLayout layout;
    for (const auto& a : it.value()) {
      const bool tuple =
          a.is_array() && !a.empty() &&
          std::all_of(a.begin(), a.end(), [](const auto& x) { return x.is_string(); });
      AS_CHECK(a.is_null() || a.is_string() || tuple, "layout map '", source, "': entries of '",
               it.key(), "' must be axis names, lists of axis names or null");
      if (a.is_null())
        layout.axes.emplace_back();
      else if (a.is_string())
        layout.axes.push_back({a.get<std::string>()});
      else
        layout.axes.push_back(a.get<std::vector<std::string>>());
    }
    m[it.key()] = layout;
  }
  return m;
}

LayoutMap LayoutMap::from_json_file(const std::string& path) {
  std::ifstream in(path);
  AS_CHECK(in.good(), "cannot open layout map '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json_text(ss.str(), path);
}

Distribution::Distribution(DeviceMesh mesh, std::string batch_dim_name)
    : mesh_(std::move(mesh)), batch_dim_name_(std::move(batch_dim_name)) {}

int Distribution::batch_axis() const {
  return mesh_.axis_index(batch_dim_name_);
}

Sharding Distribution::input_layout(const Shape& shape) const {
  Sharding s = Sharding::replicated(shape.size());
  const int a = batch_axis();
  if (a >= 0 && !shape.empty()) s.dims[0] = a;
  return s;
}

Sharding Distribution::buffer_layout(const std::string&, const Shape& shape) const {
  return input_layout(shape);
}

Sharding Distribution::split_over_batch(const Sharding& layout, const Shape& shape) const {
  const int a = batch_axis();
  if (a < 0 || mesh_.axis_size(a) == 1 || layout.uses(a)) return layout;
  int best = -1;
  for (int d = 0; d < layout.rank(); ++d)
    if (layout.dims[d] < 0 && (best < 0 || shape[d] > shape[best])) best = d;
  Sharding s = layout;
  if (best >= 0) s.dims[best] = a;
  return s;
}

Sharding Distribution::state_layout(const Sharding& weight, const Shape& shape) const {
  return zero1 ? split_over_batch(weight, shape) : weight;
}

Sharding Distribution::slot_layout(const std::string&, const std::string&, const Sharding& weight,
                                   const Shape& shape) const {
  return state_layout(weight, shape);
}

std::map<int, ShardDecision> Distribution::decisions(const Graph&,
                                                     const std::map<int, Sharding>&) const {
  return {};
}

DataParallel::DataParallel(DeviceMesh mesh, std::string batch_dim_name)
    : Distribution(std::move(mesh), std::move(batch_dim_name)) {}
DataParallel::DataParallel(int devices) : DataParallel(DeviceMesh({devices}, {"data"})) {}

Sharding DataParallel::weight_layout(const std::string&, const Shape& shape) const {
  return Sharding::replicated(shape.size());
}

ModelParallel::ModelParallel(DeviceMesh mesh, LayoutMap layout_map, std::string batch_dim_name)
    : Distribution(std::move(mesh), std::move(batch_dim_name)), layout_map_(std::move(layout_map)) {
  for (const auto& [key, layout] : layout_map_.entries())
    for (const TensorLayout::Axes& axes : layout.axes)
      layout_axis(this->mesh(), axes, "layout map key '" + key + "'");
}

Sharding ModelParallel::weight_layout(const std::string& path, const Shape& shape) const {
  std::optional<TensorLayout> layout = layout_map_.lookup(path);
  return layout ? layout->to_sharding(mesh(), path, shape) : Sharding::replicated(shape.size());
}

Sharding ModelParallel::buffer_layout(const std::string& path, const Shape& shape) const {
  // The map's layout itself, not a subclass's weight layout (FSDP's split
  // over the batch axis is for weights, not key-value caches).
  return layout_map_.lookup(path) ? ModelParallel::weight_layout(path, shape) : input_layout(shape);
}

FullyShardedDataParallel::FullyShardedDataParallel(DeviceMesh mesh, LayoutMap layout_map,
                                                   std::string batch_dim_name)
    : ModelParallel(std::move(mesh), std::move(layout_map), std::move(batch_dim_name)) {}

Sharding FullyShardedDataParallel::weight_layout(const std::string& path,
                                                 const Shape& shape) const {
  return split_over_batch(ModelParallel::weight_layout(path, shape), shape);
}

int FullyShardedDataParallel::batch_axis() const {
  if (!layout_map().entries().empty()) return Distribution::batch_axis();
  std::vector<int> axes;
  for (int a = 0; a < mesh().rank(); ++a)
    if (mesh().axis_size(a) > 1) axes.push_back(a);
  return axes.size() > 1 && axes.back() < kMaxTupleAxes ? tuple_axis(axes)
                                                        : Distribution::batch_axis();
}

std::map<int, ShardDecision> FullyShardedDataParallel::decisions(
    const Graph& step, const std::map<int, Sharding>& leaves) const {
  const int a = batch_axis();
  if (a < 0 || mesh().axis_size(a) == 1) return {};
  auto uses_batch_axis = [a](const Sharding& s) { return s.uses(a); };
  // The weights and their state as they are gathered for use.
  std::map<int, Sharding> gathered = leaves;
  for (int id : step.parameters())
    if (!step.node(id).leaf().buffer && gathered.count(id))
      for (int& axis : gathered[id].dims)
        if (axis == a) axis = -1;
  // Every value nothing reads is an output, so the ops of any step (a
  // training step's, an evaluation's, a prediction's) are decided.
  std::vector<bool> read(size_t(step.size()), false);
  for (int i = 0; i < step.size(); ++i)
    for (int in : step.node(i).inputs) read[size_t(in)] = true;
  std::vector<int> sinks;
  for (int i = 0; i < step.size(); ++i)
    if (!read[size_t(i)] && !step.node(i).is_leaf()) sinks.push_back(i);
  const Partition whole = partition(step, mesh(), PartitionRequest{gathered, {}}, sinks, {0});
  std::map<int, ShardDecision> fixed;
  for (int i = 0; i < step.size(); ++i) {
    if (step.node(i).is_leaf()) continue;
    const ShardDecision& d = whole.decision[i];
    if (uses_batch_axis(d.output) || std::any_of(d.inputs.begin(), d.inputs.end(), uses_batch_axis))
      fixed[i] = d;
  }
  return fixed;
}

namespace {
std::mutex current_mu;
std::shared_ptr<Distribution> current;
}  // namespace

std::shared_ptr<Distribution> distribution() {
  std::lock_guard<std::mutex> lock(current_mu);
  return current;
}

void set_distribution(std::shared_ptr<Distribution> d) {
  std::lock_guard<std::mutex> lock(current_mu);
  current = std::move(d);
}

}  // namespace autoshard
