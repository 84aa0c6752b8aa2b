// The sharding problem's memory count against the partitioned program's,
// per mesh (bench/README.md, "Where --devices 1024 spends its CPU"):
//
//   bench_plan_memory --model gpt3-175b --batch 1536 --seq 2048 --recompute
//       --bf16 --cluster a100-80g --mesh data=1024 --mesh data=128,model=8
//
// For each mesh: the step posed as AutoShard poses it, solved as a finalist
// is (work-counted), the answer's peak as the problem counts it, then device
// 0's partitioned program as the cost model predicts it; for both, the
// values live at the peak, largest first, and the parts the prediction
// reports (weights, optimizer state, inputs, planned buffers).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/models/language_model.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/plan/strategy_problem.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/solver/screen.h"
#include "autoshard/solver/solver.h"

using namespace autoshard;

namespace {

double gb(double bytes) {
  return bytes / 1e9;
}

// The problem's values at its peak, largest first.
void problem_peak(const Graph& g, const StrategyProblem& sp, const std::vector<int>& strategy,
                  int top) {
  const ShardingProblem& p = sp.problem;
  std::map<int64_t, int64_t> change;
  for (size_t q = 0; q < p.nodes.size(); ++q) {
    const auto& n = p.nodes[q];
    if (n.lo >= n.hi) continue;
    change[n.lo] += n.usage[strategy[q]];
    change[n.hi] -= n.usage[strategy[q]];
  }
  int64_t live = 0, most = 0, at = 0;
  for (const auto& [t, d] : change)
    if ((live += d) > most) most = live, at = t;
  // A node without members (a tied class's further piece) is named by its class.
  std::vector<int> named(p.nodes.size(), -1);
  for (size_t q = 0; q < p.nodes.size(); ++q)
    if (!sp.members[q].empty()) named[q] = int(q);
  for (const auto& e : p.edges)
    if (sp.members[e.v].empty() && !sp.members[e.u].empty()) named[e.v] = e.u;
  std::map<std::string, int64_t> by;
  for (size_t q = 0; q < p.nodes.size(); ++q) {
    const auto& n = p.nodes[q];
    if (n.lo > at || n.hi <= at || n.usage[strategy[q]] == 0) continue;
    const int c = named[q];
    std::string what = "?";
    if (c >= 0) {
      const Node& node = g.node(sp.members[c].front());
      if (int(q) != c && n.hi - n.lo == 1)
        what = "copies read by ";
      else
        what.clear();
      what += node.is_leaf() ? (node.is_input()         ? "input"
                                : node.leaf().is_slot() ? "optimizer state"
                                                        : "weight")
                             : std::string(op_name(node.op)) + shape_str(node.shape) +
                                   (node.region >= 0 ? " fwd" : " bwd/other");
    }
    by[what] += n.usage[strategy[q]];
  }
  std::vector<std::pair<int64_t, std::string>> rows;
  for (const auto& [w, b] : by) rows.push_back({b, w});
  std::sort(rows.rbegin(), rows.rend());
  std::printf("  problem peak %.2f GB at t=%lld of %d\n", gb(double(most)), (long long)at,
              g.size());
  for (int k = 0; k < top && k < int(rows.size()); ++k)
    std::printf("    %9.3f GB  %s\n", gb(double(rows[k].first)), rows[k].second.c_str());
}

// Device 0's program: live bytes at its peak by what made each value.
void program_peak(const Partition& part, const StepPrediction& pred, bool bf16, int top) {
  const Graph& g = part.local[0];
  const BufferPlan plan = plan_buffers(g, part.outputs[0]);
  std::vector<int> global(g.size(), -1);
  for (size_t i = 0; i < part.local_of[0].size(); ++i)
    if (part.local_of[0][i] >= 0) global[part.local_of[0][i]] = int(i);
  std::vector<int> last(g.size(), -1);
  for (int i : plan.schedule) {
    last[plan.root[i]] = std::max(last[plan.root[i]], i);
    for (int in : g.node(i).inputs) last[plan.root[in]] = std::max(last[plan.root[in]], i);
  }
  for (int o : part.outputs[0]) last[plan.root[o]] = INT_MAX;
  std::map<int64_t, int64_t> change;
  std::vector<int> values;
  const double scale = bf16 ? 0.5 : 1;
  for (int i : plan.schedule) {
    const Node& n = g.node(i);
    if (n.is_leaf() || plan.root[i] != i || plan.fused_sum[i] >= 0) continue;
    const int64_t bytes = int64_t(double(numel(n.shape) * dtype_size(n.dtype)) * scale);
    change[i] += bytes;
    if (last[i] != INT_MAX) change[int64_t(std::max(last[i], i)) + 1] -= bytes;
    values.push_back(i);
  }
  int64_t live = 0, most = 0, at = 0;
  for (const auto& [t, d] : change)
    if ((live += d) > most) most = live, at = t;
  std::map<std::string, int64_t> by;
  for (int i : values) {
    if (i > at || (last[i] != INT_MAX && std::max(last[i], i) < at)) continue;
    const Node& n = g.node(i);
    const int64_t bytes = int64_t(double(numel(n.shape) * dtype_size(n.dtype)) * scale);
    std::string what;
    if (global[i] < 0) {
      // Inserted by the partitioner: name the value it converts.
      int src = n.inputs.empty() ? -1 : n.inputs[0];
      while (src >= 0 && global[src] < 0 && !g.node(src).inputs.empty())
        src = g.node(src).inputs[0];
      const Node* of = src >= 0 ? &g.node(src) : nullptr;
      what = "conversion " + std::string(op_name(n.op)) + shape_str(n.shape) + " of " +
             (!of             ? "?"
              : of->is_leaf() ? (of->is_input() ? "an input" : "a weight or slot")
                              : std::string(op_name(of->op)) + shape_str(of->shape));
    } else {
      what = std::string(op_name(n.op)) + shape_str(n.shape);
    }
    by[what] += bytes;
  }
  std::vector<std::pair<int64_t, std::string>> rows;
  for (const auto& [w, b] : by) rows.push_back({b, w});
  std::sort(rows.rbegin(), rows.rend());
  const MemoryPrediction& m = pred.memory;
  std::printf(
      "  predicted %.2f GB (weights %.2f, optimizer state %.2f, inputs %.2f, buffers %.2f of "
      "which live at the peak %.2f at t=%lld of %d)\n",
      gb(m.total() - m.process), gb(m.weights), gb(m.optimizer_state), gb(m.inputs),
      gb(m.activations), gb(double(most)), (long long)at, g.size());
  for (int k = 0; k < top && k < int(rows.size()); ++k)
    std::printf("    %9.3f GB  %s\n", gb(double(rows[k].first)), rows[k].second.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "gpt3-175b", cluster_name = "a100-80g";
  int64_t batch = 1536, seq = 2048;
  bool recompute = false, bf16 = false;
  double limit = 0, budget = 0;
  int top = 12, devices = 0;
  std::vector<std::string> meshes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--model")
      model_name = next();
    else if (a == "--batch")
      batch = std::stoll(next());
    else if (a == "--seq")
      seq = std::stoll(next());
    else if (a == "--recompute")
      recompute = true;
    else if (a == "--bf16")
      bf16 = true;
    else if (a == "--cluster")
      cluster_name = next();
    else if (a == "--mesh")
      meshes.push_back(next());
    else if (a == "--time")
      limit = std::stod(next());
    else if (a == "--budget")  // bytes per device (default: the cluster's)
      budget = std::stod(next());
    else if (a == "--devices")  // also: AutoShard's mesh search, one line per shape
      devices = std::stoi(next());
    else if (a == "--top")
      top = std::stoi(next());
    else {
      std::fprintf(stderr, "unknown argument %s (see bench/plan_memory.cc)\n", a.c_str());
      return 2;
    }
  }
  LanguageModelConfig cfg = LanguageModelConfig::of(model_name);
  cfg.bytes_per_parameter = 0;
  auto model = cfg.build(seq, 0);
  model->set_recompute(recompute);
  model->compile(AdamW({.clipnorm = 1.0}), losses::sparse_categorical_crossentropy);
  const Graph g = model->training_graph({batch, seq}, {batch, seq});
  const Cluster cluster = Cluster::named(cluster_name);
  for (const std::string& spec : meshes) {
    const DeviceMesh mesh = DeviceMesh::parse(spec);
    StrategyOptions so;
    so.bf16 = bf16;
    so.memory_per_device = budget;
    for (int id : g.inputs()) so.fixed[id] = DataParallel(mesh).input_layout(g.node(id).shape);
    const StrategyProblem sp = build_strategy_problem(g, mesh, cluster, so);
    const auto start = std::chrono::steady_clock::now();
    const Screening screened = screen_problem(sp.problem, 0, 0);  // one round, as MeshSearch
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: screened in %.2f s: %s\n", spec.c_str(), took,
                screened.verdict == Screening::Verdict::kFits       ? "fits"
                : screened.verdict == Screening::Verdict::kNoneFits ? "none fits (proven)"
                                                                    : "none found");
    SolveOptions o;
    o.deterministic = true;
    o.time_limit_s = limit > 0 ? limit : std::max(0.25, double(sp.problem.nodes.size()) / 2000);
    const SolveResult r = solve(sp.problem, o);
    std::printf("%s: %zu problem nodes, limit %.2f GB, %s\n", spec.c_str(), sp.problem.nodes.size(),
                gb(double(*sp.problem.usage_limit)), r.feasible ? "solved" : r.why.c_str());
    if (!r.feasible) continue;
    problem_peak(g, sp, r.strategy, top);
    const Partition part = partition(g, mesh, sp.request(r.strategy), {}, {0});
    const StepPrediction pred = predict(part, cluster, {bf16});
    program_peak(part, pred, bf16, top);
    std::fflush(stdout);
  }
  if (devices > 0) {
    std::vector<std::string> why;
    const auto planned = AutoShard::plan_for_devices(
        g, devices, "data",
        {.cluster = cluster_name, .bf16 = bf16, .memory_per_device = budget, .time_limit_s = limit},
        &why);
    for (const std::string& line : why) std::printf("%s\n", line.c_str());
    std::printf("chosen: %s, %.4f s\n", planned->mesh().to_string().c_str(),
                planned->predicted_step_s());
  }
  return 0;
}
