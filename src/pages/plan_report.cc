// The plan report shared by `autoshard plan --json` and autoshard.plan.
#include "autoshard/pages/plan_report.h"

#include <algorithm>

#include "autoshard/runtime/executor.h"

namespace autoshard {
namespace {

nlohmann::json layout_json(const Sharding& s, const DeviceMesh& mesh) {
  nlohmann::json a = nlohmann::json::array();
  for (int d : s.dims) {
    if (!is_tuple_axis(d)) {
      a.push_back(d < 0 ? nlohmann::json(nullptr) : nlohmann::json(mesh.axis_names()[d]));
      continue;
    }
    nlohmann::json tuple = nlohmann::json::array();  // Keras's ("data", "model")
    for (int m : axis_members(d)) tuple.push_back(mesh.axis_names()[m]);
    a.push_back(tuple);
  }
  return a;
}

nlohmann::json collectives_json(const Partition& p) {
  nlohmann::json c = nlohmann::json::array();
  for (const CollectiveRecord& r : p.collectives)
    c.push_back({{"kind", r.kind}, {"axis", r.axis}, {"value", r.value}, {"bytes", r.bytes}});
  return c;
}

int64_t largest(const std::vector<int64_t>& v) {
  return *std::max_element(v.begin(), v.end());
}

}  // namespace

nlohmann::json plan_report(const Partition& p) {
  // Figures are kept per lowered device (not per device of the mesh, which
  // can have millions): position k is device lowered[k]. Device 0 holds the
  // largest block of every split (array_split gives the first blocks the
  // extra elements).
  const std::vector<int>& lowered = p.devices;
  std::vector<int64_t> weights(lowered.size(), 0), state(lowered.size(), 0),
      activations(lowered.size(), 0), total(lowered.size(), 0);
  for (size_t k = 0; k < lowered.size(); ++k)
    activations[k] = static_cast<int64_t>(
        plan_buffers(p.local[lowered[k]], p.outputs[lowered[k]]).total_bytes());
  nlohmann::json params = nlohmann::json::object();
  for (size_t id = 0; id < p.leaf_name.size(); ++id) {
    const std::string& path = p.leaf_name[id];
    if (p.local_of[0][id] < 0 || !p.local[0].node(p.local_of[0][id]).is_parameter()) continue;
    const bool slot = path.rfind("optimizer.", 0) == 0;
    int64_t most = 0;
    for (size_t k = 0; k < lowered.size(); ++k) {
      const int d = lowered[k];
      const int64_t bytes = numel(p.local[d].node(p.local_of[d][id]).shape) * 4;
      (slot ? state : weights)[k] += bytes;
      most = std::max(most, bytes);
    }
    if (slot) continue;
    params[path] = {{"shape", p.global_shape[id]},
                    {"layout", layout_json(p.sharding[id], p.mesh)},
                    {"bytes_per_device", most}};
  }
  for (size_t k = 0; k < lowered.size(); ++k) total[k] = weights[k] + state[k] + activations[k];
  nlohmann::json mesh = nlohmann::json::object();
  for (int a = 0; a < p.mesh.rank(); ++a) mesh[p.mesh.axis_names()[a]] = p.mesh.axis_size(a);
  return {{"mesh", mesh},
          {"parameters", params},
          {"collectives", collectives_json(p)},
          {"bytes_per_device",
           {{"weights", largest(weights)},
            {"optimizer_state", largest(state)},
            {"activations", largest(activations)},
            {"total", largest(total)}}}};
}

nlohmann::json prediction_report(const StepPrediction& p) {
  nlohmann::json collectives = nlohmann::json::object();
  for (const auto& [key, t] : p.collective_s) collectives[key.first + " over " + key.second] = t;
  return {{"step_s", p.step_s},
          {"compute_s", p.compute_s},
          {"communication_s", p.communication_s},
          {"hidden_communication_s", p.hidden_communication_s},
          {"collectives_s", collectives},
          {"peak_bytes_per_device", p.memory.total()},
          {"memory_bytes",
           {{"weights", p.memory.weights},
            {"optimizer_state", p.memory.optimizer_state},
            {"inputs", p.memory.inputs},
            {"activations", p.memory.activations}}},
          {"tokens_per_s", p.tokens_per_s},
          {"process_bytes", p.process_bytes},
          {"model_flops_per_device_per_s", p.model_flops_per_device_per_s}};
}

double in_process_bytes(const Partition& all, const Cluster& c, bool bf16) {
  // Each device's prediction counts the process once: count it once in all.
  double bytes = c.process_bytes;
  for (int d : all.devices) bytes += predict(all, c, {bf16}, d).memory.total() - c.process_bytes;
  return bytes;
}

}  // namespace autoshard
