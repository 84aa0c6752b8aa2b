// `autoshard plan`: how a model would be laid out over a mesh, explained:
// every weight's layout and bytes per device, the collectives of one training
// step, and the memory per device. Nothing is allocated for the weights.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/nn/losses.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/memory.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/output_file.h"

namespace autoshard::cli {
namespace {

struct PlanOptions : CommonOptions {
  bool json = false;
  std::string out;
  bool predict = false;
  std::string export_problem;
  std::string dtype = "f32";
  bool overwrite = false;  // --out and --export-problem may replace files
};

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  return buf;
}

nlohmann::json layout_json(const Sharding& s, const DeviceMesh& mesh) {
  nlohmann::json a = nlohmann::json::array();
  for (int d : s.dims)
    a.push_back(d < 0 ? nlohmann::json(nullptr) : nlohmann::json(mesh.axis_names()[d]));
  return a;
}

// Model FLOPs of a training step: 6 per parameter per token (forward and
// backward), plus attention's scores and weighted sums: 12 L B T^2 C.
double model_flops(const LanguageModelConfig& c, double params, double batch, double seq) {
  return 6 * params * batch * seq +
         12 * double(c.layers()) * batch * seq * seq * double(c.attention_width());
}

nlohmann::json prediction_json(const StepPrediction& p) {
  nlohmann::json collectives = nlohmann::json::object();
  for (const auto& [key, t] : p.collective_s) collectives[key.first + " over " + key.second] = t;
  return {{"step_s", p.step_s},
          {"compute_s", p.compute_s},
          {"communication_s", p.communication_s},
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

void print_prediction(const StepPrediction& p, const Cluster& c, bool bf16) {
  std::printf("\npredicted on cluster '%s' (%s; communication not overlapped):\n", c.name.c_str(),
              bf16 ? "bf16 mixed precision" : "f32");
  std::printf("  step             %.4g s\n  compute          %.4g s\n", p.step_s, p.compute_s);
  for (const auto& [key, t] : p.collective_s)
    std::printf("  %-16s %.4g s over %s\n", key.first.c_str(), t, key.second.c_str());
  std::printf("  tokens/s         %.4g\n  model FLOP/s     %.4g per device\n", p.tokens_per_s,
              p.model_flops_per_device_per_s);
  std::printf("  peak memory      %s per device (weights %s, optimizer state %s, activations %s)\n",
              mib(p.memory.total()).c_str(), mib(p.memory.weights).c_str(),
              mib(p.memory.optimizer_state).c_str(), mib(p.memory.activations).c_str());
}

// The remedies a plan that does not fit has not tried yet.
std::string what_else_might_fit(const PlanOptions& o) {
  std::string r = "use more devices, a smaller batch";
  if (o.plan != "auto") r += ", --plan auto (it can split weights and optimizer state over data)";
  if (!o.recompute) r += ", --recompute";
  if (o.dtype != "bf16") r += ", --dtype bf16";
  return r;
}

void run_plan(PlanOptions& o) {
  // Output paths are checked before planning (cli/output_file.h's rule).
  if (!o.out.empty()) check_output_path(o.out, "--out", o.overwrite);
  if (!o.export_problem.empty())
    check_output_path(o.export_problem, "--export-problem", o.overwrite);
  const LanguageModelConfig cfg = model_config(o);
  if (o.seq == 0) o.seq = std::min<int64_t>(128, cfg.max_positions());
  if (o.mesh.empty() && o.devices == 0) o.devices = 2;
  o.bf16 = o.dtype == "bf16";
  std::unique_ptr<Model> built = cfg.build(o.seq, o.seed);
  Model& model = *built;
  model.set_recompute(o.recompute);
  model.compile(AdamW({.clipnorm = 1.0}), losses::sparse_categorical_crossentropy);
  std::shared_ptr<Distribution> dist = make_distribution(o, model, cfg);
  model.set_distribution(dist);
  check_layout_map(o, dist.get(), model);
  const Partition p = model.plan_training({o.batch, o.seq}, {o.batch, o.seq});
  const DeviceMesh& mesh = p.mesh;
  const bool bf16 = o.dtype == "bf16";
  std::optional<StepPrediction> predicted;
  std::optional<Cluster> cluster;
  if (o.predict) {
    cluster = Cluster::named(o.cluster);
    const double tokens = double(o.batch) * double(o.seq);
    predicted =
        predict(p, *cluster,
                {bf16, tokens,
                 model_flops(cfg, double(model.count_params()), double(o.batch), double(o.seq))});
    // In-process devices share one process: its memory is every device's.
    if (mesh.size() <= 64) {
      const Partition all = model.plan_training({o.batch, o.seq}, {o.batch, o.seq}, DType::I32,
                                                World::process().local_devices(mesh));
      predicted->process_bytes = cluster->process_bytes;
      for (int d : all.devices)
        predicted->process_bytes +=
            predict(all, *cluster, {bf16}, d).memory.total() - cluster->process_bytes;
    }
    AS_CHECK(predicted->memory.total() <= cluster->memory_bytes,
             "the plan does not fit: ", mib(predicted->memory.total()), " per device (weights ",
             mib(predicted->memory.weights), ", optimizer state ",
             mib(predicted->memory.optimizer_state), ", activations ",
             mib(predicted->memory.activations), ") but cluster '", cluster->name, "' has ",
             mib(cluster->memory_bytes), "; ", what_else_might_fit(o));
  }

  // Per device: bytes of weights, optimizer state, and planned activation buffers.
  // Device 0 holds the largest block of every split (array_split gives the
  // first blocks the extra elements): it is the one planned and reported.
  // Figures are kept per lowered device (not per device of the mesh,
  // which can have millions): position k is device lowered[k].
  const std::vector<int>& lowered = p.devices;
  std::vector<int64_t> weights(lowered.size(), 0), state(lowered.size(), 0),
      activations(lowered.size(), 0);
  nlohmann::json params = nlohmann::json::object();
  std::vector<std::string> rows;
  for (size_t k = 0; k < lowered.size(); ++k)
    activations[k] = static_cast<int64_t>(
        plan_buffers(p.local[lowered[k]], p.outputs[lowered[k]]).total_bytes());
  for (size_t id = 0; id < p.leaf_name.size(); ++id) {
    const std::string& path = p.leaf_name[id];
    if (p.local_of[0][id] < 0 || p.local[0].node(p.local_of[0][id]).op != Op::Parameter) continue;
    const bool slot = path.rfind("optimizer.", 0) == 0;
    int64_t most = 0;
    for (size_t k = 0; k < lowered.size(); ++k) {
      const int d = lowered[k];
      const int64_t bytes = numel(p.local[d].node(p.local_of[d][id]).shape) * 4;
      (slot ? state : weights)[k] += bytes;
      most = std::max(most, bytes);
    }
    if (slot) continue;
    const Sharding& s = p.sharding[id];
    params[path] = {{"shape", p.global_shape[id]},
                    {"layout", layout_json(s, mesh)},
                    {"bytes_per_device", most}};
    rows.push_back(path + "|" + shape_str(p.global_shape[id]) + "|" + s.to_string(mesh) + "|" +
                   mib(double(most)));
  }
  nlohmann::json collectives = nlohmann::json::array();
  std::map<std::pair<std::string, std::string>, std::pair<int, int64_t>> totals;
  for (const CollectiveRecord& c : p.collectives) {
    collectives.push_back(
        {{"kind", c.kind}, {"axis", c.axis}, {"value", c.value}, {"bytes", c.bytes}});
    auto& t = totals[{c.kind, c.axis}];
    t.first += 1;
    t.second += c.bytes;
  }
  auto largest = [&](const std::vector<int64_t>& v) {
    return *std::max_element(v.begin(), v.end());
  };
  std::vector<int64_t> total(lowered.size());
  for (size_t k = 0; k < lowered.size(); ++k) total[k] = weights[k] + state[k] + activations[k];
  nlohmann::json mesh_json = nlohmann::json::object();
  for (int a = 0; a < mesh.rank(); ++a) mesh_json[mesh.axis_names()[a]] = mesh.axis_size(a);
  nlohmann::json j = {{"mesh", mesh_json},
                      {"parameters", params},
                      {"collectives", collectives},
                      {"bytes_per_device",
                       {{"weights", largest(weights)},
                        {"optimizer_state", largest(state)},
                        {"activations", largest(activations)},
                        {"total", largest(total)}}}};
  if (auto* a = dynamic_cast<AutoShard*>(dist.get())) {
    j["reasons"] = a->reasons();
    if (!o.export_problem.empty())
      write_output_file(o.export_problem, "--export-problem", a->problem().to_json() + "\n",
                        o.overwrite);
  } else {
    AS_CHECK(o.export_problem.empty(),
             "--export-problem needs --plan auto (only AutoShard poses a problem)");
  }
  if (predicted) j["predicted"] = prediction_json(*predicted);
  if (!o.out.empty()) write_output_file(o.out, "--out", j.dump(2) + "\n", o.overwrite);
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("plan %s for %s on mesh %s (%d devices), B=%lld T=%lld%s\n\n", o.plan.c_str(),
              o.model.c_str(), mesh.to_string().c_str(), mesh.size(),
              static_cast<long long>(o.batch), static_cast<long long>(o.seq),
              o.zero1 ? ", ZeRO-1" : "");
  std::printf("%-40s %-16s %-20s %s\n", "parameter", "shape", "layout", "bytes/device");
  for (const std::string& r : rows) {
    size_t a = r.find('|'), b = r.find('|', a + 1), c = r.find('|', b + 1);
    std::printf("%-40s %-16s %-20s %s\n", r.substr(0, a).c_str(),
                r.substr(a + 1, b - a - 1).c_str(), r.substr(b + 1, c - b - 1).c_str(),
                r.substr(c + 1).c_str());
  }
  if (j.contains("reasons")) {
    std::printf("\nwhy (AutoShard):\n");
    for (const auto& line : j["reasons"]) std::printf("  %s\n", line.get<std::string>().c_str());
  }
  std::printf("\ncollectives of one training step (device 0):\n  %-16s %-8s %6s %14s\n", "kind",
              "axis", "count", "bytes");
  for (const auto& [key, t] : totals)
    std::printf("  %-16s %-8s %6d %14s\n", key.first.c_str(), key.second.c_str(), t.first,
                mib(double(t.second)).c_str());
  std::printf(
      "\nmemory per device (largest device):\n  weights          %s\n  optimizer state  %s\n"
      "  activations      %s (planned buffers of the step)\n  total            %s\n",
      mib(double(largest(weights))).c_str(), mib(double(largest(state))).c_str(),
      mib(double(largest(activations))).c_str(), mib(double(largest(total))).c_str());
  if (predicted) print_prediction(*predicted, *cluster, bf16);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "show how a model is laid out over a mesh, and why");
  add_common(cmd, *o);
  cmd->add_flag("--json", o->json, "print the plan as JSON");
  cmd->add_option("--out", o->out, "also write the JSON plan to FILE");
  cmd->add_flag("--predict", o->predict, "predict step time and memory on --cluster");
  cmd->get_option("--cluster")->each([o](const std::string&) { o->predict = true; });
  cmd->add_option("--export-problem", o->export_problem,
                  "write the problem AutoShard solved (IOPDDL JSON, for autoshard solve)");
  add_overwrite(cmd, o->overwrite);
  cmd->add_option("--dtype", o->dtype, "f32, or bf16 mixed precision (prediction)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace autoshard::cli
