#include "pages/plan_figures.h"

#include <algorithm>

#include "autoshard/plan/cost_model.h"
#include "autoshard/runtime/executor.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

// Seconds per op kind of device 0's compute, before scaling.
std::map<std::string, double> compute_by_op(const Partition& p, const Cluster& c, bool bf16) {
  const Graph& g = p.local[p.devices.at(0)];
  std::map<std::string, double> out;
  std::vector<Shape> inputs;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.is_leaf() || op_def(n.op).comm) continue;
    inputs.clear();
    for (int in : n.inputs) inputs.push_back(g.node(in).shape);
    out[op_name(n.op)] += op_seconds(c, n, inputs, n.shape, p.mesh.size(), bf16);
  }
  return out;
}

// Bytes held at each position of device d's schedule.
std::vector<double> live_bytes(const Graph& g, const std::vector<int>& outputs,
                               const BufferPlan& plan, bool bf16) {
  const size_t n = plan.schedule.size();
  std::vector<int> position(g.size(), -1), root(g.size(), -1), last(g.size(), -1);
  double resident = 0;  // weights, optimizer state and inputs: the whole step
  for (size_t k = 0; k < n; ++k) {
    const int i = plan.schedule[k];
    const Node& node = g.node(i);
    position[i] = int(k);
    if (node.is_leaf()) {
      resident += double(numel(node.shape)) * 4;
      continue;
    }
    // A view (no buffer of its own) keeps its source alive while it is read.
    root[i] = plan.slot_of[i] >= 0 || node.inputs.empty() ? i : root[node.inputs[0]];
    for (int in : node.inputs)
      if (root[in] >= 0) last[root[in]] = std::max(last[root[in]], int(k));
  }
  for (int o : outputs)
    if (o >= 0 && o < g.size() && root[o] >= 0) last[root[o]] = int(n) - 1;
  std::vector<double> delta(n + 1, 0);
  const double scale = bf16 ? 0.5 : 1.0;  // as the cost model counts activations
  for (int i = 0; i < g.size(); ++i) {
    if (root[i] != i || position[i] < 0 || plan.slot_of[i] < 0) continue;
    const double bytes = double(numel(g.node(i).shape)) * 4 * scale;
    delta[position[i]] += bytes;
    delta[std::max(last[i], position[i]) + 1] -= bytes;
  }
  std::vector<double> out(n);
  double now = resident;
  for (size_t k = 0; k < n; ++k) out[k] = now += delta[k];
  return out;
}

nlohmann::json memory_of(const Partition& p, bool bf16) {
  nlohmann::json devices = nlohmann::json::array();
  size_t positions = 0;
  double planned = 0;
  for (size_t k = 0; k < p.devices.size() && k < size_t(kMemoryDevices); ++k) {
    const int d = p.devices[k];
    const BufferPlan plan = plan_buffers(p.local[d], p.outputs[d]);
    const std::vector<double> live = live_bytes(p.local[d], p.outputs[d], plan, bf16);
    if (k == 0) {
      positions = live.size();
      planned = double(plan.total_bytes()) * (bf16 ? 0.5 : 1.0);
      for (int i : plan.schedule)
        if (p.local[d].node(i).is_leaf()) planned += double(numel(p.local[d].node(i).shape)) * 4;
    }
    // Each kept point is the largest of its stretch, so peaks survive.
    const size_t stride = (live.size() + kMemoryPoints - 1) / kMemoryPoints;
    nlohmann::json at = nlohmann::json::array(), bytes = nlohmann::json::array();
    for (size_t begin = 0; begin < live.size(); begin += std::max<size_t>(1, stride)) {
      const size_t end = std::min(live.size(), begin + std::max<size_t>(1, stride));
      const auto top = std::max_element(live.begin() + long(begin), live.begin() + long(end));
      at.push_back(top - live.begin());
      bytes.push_back(*top);
    }
    devices.push_back({{"device", d}, {"at", at}, {"bytes", bytes}});
  }
  return {{"positions", positions}, {"planned_bytes", planned}, {"devices", devices}};
}

}  // namespace

nlohmann::json plan_figures(const Partition& p, const Cluster& c, bool bf16) {
  const StepPrediction predicted = predict(p, c, {bf16}, p.devices.at(0));
  std::map<std::string, double> by_op = compute_by_op(p, c, bf16);
  double sum = 0;
  for (const auto& [kind, s] : by_op) sum += s;
  nlohmann::json ops = nlohmann::json::object(), axes = nlohmann::json::object();
  for (const auto& [kind, s] : by_op) ops[kind] = sum > 0 ? s * predicted.compute_s / sum : 0.0;
  for (const auto& [key, s] : predicted.collective_s) {
    ops[key.first + " over " + key.second] = s;
    axes[key.second] = axes.value(key.second, 0.0) + s;
  }
  nlohmann::json mesh_axes = nlohmann::json::array();
  for (int a = 0; a < p.mesh.rank(); ++a)
    mesh_axes.push_back({p.mesh.axis_names()[a], p.mesh.axis_size(a)});
  nlohmann::json weights = nlohmann::json::array();
  const Graph& g = p.local[p.devices.at(0)];
  for (size_t id = 0; id < p.leaf_name.size(); ++id) {
    const int local = p.local_of[p.devices.at(0)][id];
    if (local >= 0 && g.node(local).is_weight()) weights.push_back(p.leaf_name[id]);
  }
  return {{"mesh_axes", mesh_axes},
          {"weights", weights},
          {"cluster", c.name},
          {"step_s", predicted.step_s},
          {"compute_s", predicted.compute_s},
          {"communication_s", predicted.communication_s},
          {"by_op", ops},
          {"by_axis", axes},
          {"memory", memory_of(p, bf16)}};
}

}  // namespace autoshard
