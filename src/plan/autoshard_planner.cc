// AutoShard: every layout of a training step chosen by predicted cost.
//
// prepare() poses the traced step as a StrategyProblem (each op's strategies
// from its own LoopNest, priced by the cost model on the chosen cluster,
// resharding priced by the partitioner's conversion plan, memory per device
// as the limit), solves it, and keeps the answer: layouts of weights and
// optimizer slots by path (they persist across steps), and the strategy of
// every op of that step (handed to the partitioner as decisions).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/plan/alternative.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/plan/strategy_problem.h"
#include "autoshard/solver/screen.h"
#include "autoshard/solver/solver.h"
#include "autoshard/tensor/parallel.h"

namespace autoshard {

namespace {

std::string milliseconds(int64_t ns) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3f ms", double(ns) / 1e6);
  return s;
}

std::string mebibytes(int64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(bytes) / 1048576.0);
  return s;
}

// The solver's time when none is given: by the size of the problem. Its
// first answers are usually within a percent of its last.
double default_time_limit(const ShardingProblem& problem) {
  return std::clamp(double(problem.nodes.size()) / 1000, 0.25, 10.0);
}

// The solver's answer, the same on every rank: under mpirun the leader
// solves (a time-limited search may end differently elsewhere) and sends
// its answer, or its error, to the others.
std::vector<int> agreed_answer(const ShardingProblem& problem, const AutoShardOptions& o,
                               const DeviceMesh& mesh, double seconds) {
  const World& world = World::process();
  std::string answer;
  if (world.leader()) {
    SolveOptions so;
    so.time_limit_s = seconds;
    so.deterministic = o.deterministic;
    so.seed = o.seed;
    const SolveResult r = solve(problem, so);
    if (r.feasible) {
      for (int s : r.strategy) answer += std::to_string(s) + " ";
    } else {
      answer = "!AutoShard: no plan of this step fits in " + mebibytes(*problem.usage_limit) +
               " per device on mesh " + mesh.to_string() + " (" + r.why +
               "); give more memory per device, more devices, a smaller batch, or --recompute";
    }
  }
  answer = world.broadcast(answer);
  if (!answer.empty() && answer[0] == '!') fail(answer.substr(1));
  std::vector<int> strategy;
  std::istringstream in(answer);
  for (int s; in >> s;) strategy.push_back(s);
  AS_CHECK(strategy.size() == problem.nodes.size(), "AutoShard: ranks disagree on the step graph");
  return strategy;
}

// The prediction of device 0's partitioned program under a plan.
StepPrediction predicted_program(const Graph& g, const PartitionRequest& request,
                                 const Cluster& cluster, const DeviceMesh& mesh, bool bf16) {
  return predict(partition(g, mesh, request, {}, {0}), cluster, {bf16});
}

// Device 0's memory as the executor will hold it (its buffer plan, with the
// copies that conversions make), less the process itself.
double planned_memory(const StepPrediction& predicted) {
  return predicted.memory.total() - predicted.memory.process;
}

// The solver's answer, checked against the executor's real memory. The
// problem's count is close (tied layers are counted from above, see
// strategy_problem.h) but conversions make copies it does not see (a
// gathered weight kept for the backward pass, say). When the real peak is
// over the budget, the problem's limit is lowered by the overshoot and the
// problem solved again, in what is left of the time limit (an attempt that
// starts past it gets 1% of it: the limit holds within 10% over the eight
// attempts). `predicted` gets the answer's whole program.
//
// An answer whose memory_floor (cost_model.h) is already over the budget is
// rejected without lowering its program, and the limit lowered by the
// floor's overshoot instead: the floor is never above the real peak, so no
// answer that fits is rejected, and on 1,024 devices the lowering is the
// costly part (GPT-3 175B: data=1024 three times at 2-2.6x the budget,
// data=128,model=4,seq=2 once at 17x; 0.2-0.5 s each).
std::vector<int> fitting_answer(const Graph& g, StrategyProblem& sp, const Cluster& cluster,
                                const AutoShardOptions& o, const DeviceMesh& mesh,
                                StepPrediction& predicted) {
  const int64_t budget = *sp.problem.usage_limit;
  const double limit = o.time_limit_s > 0 ? o.time_limit_s : default_time_limit(sp.problem);
  const auto start = std::chrono::steady_clock::now();
  double real = 0;
  bool floor_only = false;  // `real` is the last answer's floor
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::vector<int> strategy;
    // Deterministic: each re-solve gets a quarter of the limit (the clock
    // must not decide).
    const double used =
        o.deterministic
            ? 0.75 * limit
            : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    try {
      strategy = agreed_answer(sp.problem, o, mesh,
                               attempt == 0 ? limit : std::max(limit - used, limit / 100));
    } catch (const Error&) {
      if (attempt == 0) throw;
      break;  // nothing fits the lowered limit: report the user's budget
    }
    const PartitionRequest request = sp.request(strategy);
    real = memory_floor(g, mesh, request, o.bf16);
    floor_only = real > double(budget);
    if (!floor_only) {
      predicted = predicted_program(g, request, cluster, mesh, o.bf16);
      real = planned_memory(predicted);
      if (real <= double(budget)) {
        sp.problem.usage_limit = budget;
        return strategy;
      }
    }
    // The floor can sit far below the program's count (it leaves out what
    // plan_buffers may fold), so a limit lowered by it alone could let the
    // same answer back: lower it from below that answer's own peak too.
    double from = double(*sp.problem.usage_limit);
    if (floor_only) from = std::min(from, double(sp.problem.peak_usage(strategy)));
    sp.problem.usage_limit = static_cast<int64_t>(from * double(budget) / real * 0.95);
  }
  fail("AutoShard: no plan found fits in ", mebibytes(budget), " per device on mesh ",
       mesh.to_string(), " (the last needs ", floor_only ? "at least " : "",
       mebibytes(int64_t(real)),
       " with the copies its conversions make); give more memory per device, more devices, a "
       "smaller batch, or --recompute");
}

}  // namespace

AutoShard::AutoShard(DeviceMesh mesh, std::string batch_dim_name, AutoShardOptions options)
    : Distribution(std::move(mesh), std::move(batch_dim_name)), options_(std::move(options)) {}

StrategyProblem AutoShard::pose(const Graph& g, const Cluster& cluster) const {
  StrategyOptions so;
  so.bf16 = options_.bf16;
  so.memory_per_device = options_.memory_per_device;
  so.divisible = options_.divisible;
  for (int id : g.inputs()) {
    so.fixed[id] = input_layout(g.node(id).shape);
    AS_CHECK(!so.divisible || uneven_dims(so.fixed[id], g.node(id).shape, mesh()).empty(),
             "--divisible: the batch of ", g.node(id).shape.at(0),
             " does not divide over mesh axis '", batch_dim_name(), "' (", mesh().to_string(),
             "); give a batch that the axis divides, or another mesh");
  }
  return build_strategy_problem(g, mesh(), cluster, so);
}

// Devices that outnumber the cores take them in turns, and a collective
// after a stretch of work waits for the last turn, idle cores and all: a
// cost of where collectives fall in the step, which the problem's sum of
// per-op costs cannot see, and the prediction of the whole program can (see
// Cluster::oversubscribed_slice). It arbitrates between the solver's plan
// and data parallelism (every weight whole, the partitioner's own rules),
// whose collectives gather at the end of the step.
void AutoShard::consider_data_parallel(const Graph& g, const StrategyProblem& sp,
                                       const Cluster& cluster) {
  const bool turns = cluster.oversubscribed(mesh().size()) && cluster.oversubscribed_slice > 0;
  const int batch = mesh().axis_index(batch_dim_name());
  // Every device: the batch axis, or the tuple of every axis beside it
  // (-1 without a batch axis: the inputs stay as they are).
  std::vector<int> axes;
  for (int a = 0; a < mesh().rank(); ++a)
    if (mesh().axis_size(a) > 1) axes.push_back(a);
  const int every =
      batch >= 0 && axes.size() > 1 && axes.back() < kMaxTupleAxes ? tuple_axis(axes) : batch;
  const bool has_batch = mesh().size() > 1 && batch >= 0 && mesh().axis_size(batch) > 1 &&
                         mesh().axis_size(every) == mesh().size();
  PartitionRequest data_parallel = sp.request(solution_);
  data_parallel.decisions.clear();
  for (int id : g.parameters()) data_parallel.leaves.erase(id);  // missing: whole
  for (int id : g.inputs())
    if (Sharding& l = data_parallel.leaves[id]; !l.dims.empty() && l.dims[0] == batch)
      l.dims[0] = every;
  const auto predict_data_parallel = [&] {
    return predicted_program(g, data_parallel, cluster, mesh(), options_.bf16);
  };
  // A data parallelism whose memory floor is over the limit cannot be kept:
  // it is not lowered (GPT-3 175B on 1,024 devices: every weight whole is
  // terabytes a device).
  std::optional<StepPrediction> p;
  if ((turns || has_batch) &&
      memory_floor(g, mesh(), data_parallel, options_.bf16) <= double(*sp.problem.usage_limit))
    p = predict_data_parallel();
  const bool faster =
      p && planned_memory(*p) <= double(*sp.problem.usage_limit) && p->step_s < predicted_step_s_;
  // Ranks may be calibrated differently: all take the leader's choice (every
  // rank asks, whatever its own answer).
  if (World::process().broadcast(faster ? "1" : "0") != "1") return;
  if (!p) p = predict_data_parallel();
  const std::string why =
      turns ? std::to_string(mesh().size()) + " devices take " +
                  std::to_string(cluster.shared_cores) +
                  " cores in turns: a collective between stretches of work waits for the last turn"
            : "its gradient all-reduces run in buckets behind the backward pass, which the "
              "solver's sum of per-op costs does not see";
  reasons_.insert(reasons_.begin(),
                  "data parallelism kept: " + milliseconds(int64_t(p->step_s * 1e9)) +
                      " per step and " + mebibytes(int64_t(planned_memory(*p))) +
                      " per device predicted for its whole program" +
                      (every >= 0 ? ", the batch over " + mesh().axis_name(every) : "") +
                      ", against " + milliseconds(int64_t(predicted_step_s_ * 1e9)) +
                      " for the solver's plan (" + why + "); the solver's plan, not taken:");
  predicted_step_s_ = p->step_s;
  if (every != batch) batch_over_ = every;
  plan_.clear();
  slots_.clear();
  decisions_.clear();
}

void AutoShard::prepare(const Graph& g) {
  if (prepared_) return;
  prepare(g, pose(g, Cluster::for_this_run(options_.cluster, options_.hosts)));
}

void AutoShard::prepare(const Graph& g, StrategyProblem sp) {
  const Cluster cluster = Cluster::for_this_run(options_.cluster, options_.hosts);
  StepPrediction predicted;
  const std::vector<int> strategy = fitting_answer(g, sp, cluster, options_, mesh(), predicted);
  const __int128 cost = sp.problem.cost(strategy);
  const int64_t peak = sp.problem.peak_usage(strategy);

  const PartitionRequest request = sp.request(strategy);
  for (int id : g.parameters()) {
    const LeafAttrs& leaf = g.node(id).leaf();
    const Sharding& s = request.leaves.at(id);
    if (leaf.is_slot())
      slots_[{leaf.name, leaf.slot}] = s;
    else
      plan_[leaf.name] = s;
  }
  decisions_ = request.decisions;
  for (int i = 0; i < g.size(); ++i) planned_ops_.push_back(g.node(i).op);

  // Why: the outcome, then each weight against keeping it replicated.
  int64_t compute = 0;
  for (size_t i = 0; i < sp.problem.nodes.size(); ++i)
    compute += sp.problem.nodes[i].cost[strategy[i]];
  reasons_.insert(reasons_.begin(), "predicted " + milliseconds(int64_t(cost)) + " per step on " +
                                        cluster.name + " (compute " + milliseconds(compute) +
                                        ", resharding " + milliseconds(int64_t(cost) - compute) +
                                        "), peak " + mebibytes(peak) + " of " +
                                        mebibytes(*sp.problem.usage_limit) + " per device");
  const PlanAlternatives alternatives(sp, strategy);
  std::vector<std::string> lines(g.size());  // by weight node, in the model's order
  for (size_t i = 0; i < sp.problem.nodes.size(); ++i) {
    if (sp.members[i].empty() || !g.node(sp.members[i].front()).is_weight()) continue;
    // The best rejected layout: the cheapest other choice, the rest held
    // (for every layer that shares this decision together).
    int rejected = -1;
    Alternative delta;
    for (int s = 0; s < int(sp.choices[i].size()); ++s) {
      if (s == strategy[i]) continue;
      Alternative a = alternatives.of(int(i), s);
      if (a.cost_change < kForbiddenCost && (rejected < 0 || a.cost_change < delta.cost_change))
        rejected = s, delta = std::move(a);
    }
    std::string why;
    if (rejected >= 0)
      why = "; next best " + sp.choices[i][rejected].output.to_string(mesh()) + ": " +
            (delta.cost_change >= 0 ? "+" : "") + milliseconds(delta.cost_change) + ", " +
            (delta.memory_change >= 0 ? "+" : "") + mebibytes(delta.memory_change) + " per device";
    if (sp.members[i].size() > 1)
      why += " (decided once for " + std::to_string(sp.members[i].size()) + " layers)";
    for (int m : sp.members[i]) {
      const std::string& name = g.node(m).leaf().name;
      lines[m] = name + " " + plan_[name].to_string(mesh()) + why;
    }
  }
  for (const std::string& line : lines)
    if (!line.empty()) reasons_.push_back(line);
  solution_ = strategy;
  predicted_step_s_ = predicted.step_s;
  consider_data_parallel(g, sp, cluster);
  problem_ = std::move(sp.problem);
  prepared_ = true;
}

namespace {

// plan_for_devices' search over mesh shapes. Screening: each shape's problem
// gets one round of the solver (its first answer is usually within a percent
// of its last; one round does not depend on the clock, so the screen is
// deterministic), and a longer search limited in work when that finds
// nothing (screen.h), the shapes spread over the cores. A shape is dropped
// only on a proof that nothing fits; one whose search found nothing is still
// planned in full when no screened shape fits.
//
// It sees AutoShard through two calls that plan_for_devices hands it: posing
// the step on a mesh, and preparing a plan from a posed problem.
struct MeshSearch {
  struct Screened {
    std::optional<__int128> cost;
    std::string line;
    std::optional<StrategyProblem> problem;  // kept for planning in full
    bool proven_none = false;                // nothing fits: proven
  };
  // A shape planned in full: its plan, or the error that says why none.
  struct Finalist {
    std::shared_ptr<AutoShard> candidate;
    std::string error;
  };
  // The last shape screened on a chain of three-axis shapes.
  struct Chain {
    int data, model, seq;
    bool from_data;  // where the next seq devices come from
    __int128 cost;
  };

  // The step posed on `mesh` (errors: the shape is refused).
  std::function<StrategyProblem(const DeviceMesh& mesh)> pose;
  // A plan prepared on `mesh` with options `each` from the problem posed.
  std::function<std::shared_ptr<AutoShard>(const DeviceMesh& mesh, const AutoShardOptions& each,
                                           StrategyProblem posed)>
      prepare;
  const std::string& batch_dim_name;
  const AutoShardOptions& options;
  std::vector<DeviceMesh> shapes;
  std::vector<Screened> screened;  // per shape

  void screen(const std::vector<DeviceMesh>& more);
  std::vector<size_t> best_screened(size_t count) const;
  void screen_two_axes(int devices);
  void screen_third_axis();
  std::shared_ptr<AutoShard> plan_finalists(int devices);
  [[noreturn]] void fail_none_fits(int devices) const;
};

void MeshSearch::screen(const std::vector<DeviceMesh>& more) {
  const size_t first = shapes.size();
  shapes.insert(shapes.end(), more.begin(), more.end());
  screened.resize(shapes.size());
  parallel_for(int64_t(more.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = int64_t(first) + begin; k < int64_t(first) + end; ++k) {
      try {
        StrategyProblem sp = pose(shapes[k]);
        const Screening r = screen_problem(sp.problem, options.seed);
        if (r.verdict == Screening::Verdict::kFits) {
          screened[k].problem = std::move(sp);
          screened[k].cost = r.cost;
          screened[k].line = "screened at " + milliseconds(int64_t(r.cost)) + " per step";
        } else if (r.verdict == Screening::Verdict::kNoneFits) {
          screened[k].proven_none = true;
          screened[k].line = "nothing fits (proven: " + r.why + ")";
        } else {
          screened[k].problem = std::move(sp);  // a candidate still
          screened[k].line = "not screened: " + r.why;
        }
      } catch (const Error& e) {
        screened[k].line = e.what();
        screened[k].proven_none = true;  // the shape itself is refused
      }
    }
  });
}

std::vector<size_t> MeshSearch::best_screened(size_t count) const {
  std::vector<size_t> order;
  for (size_t k = 0; k < shapes.size(); ++k)
    if (screened[k].cost) order.push_back(k);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return *screened[a].cost < *screened[b].cost; });
  if (order.size() > count) order.resize(count);
  return order;
}

// First data x model, every factorisation. Axis names mean nothing to the
// solver but the batch axis of the inputs.
void MeshSearch::screen_two_axes(int devices) {
  std::vector<DeviceMesh> pairs;
  for (int d = 1; d <= devices; ++d)
    if (devices % d == 0) pairs.push_back(DeviceMesh({d, devices / d}, {batch_dim_name, "model"}));
  screen(pairs);
}

// Then a third axis (one any op may split on, e.g. the sequence of
// Megatron-SP) where it pays: from the best two-axis shape, its devices are
// taken from the data or the model axis, 2 then more, for as long as the
// screened cost falls. (Three-axis problems cost five times as much to pose
// and solve as two-axis ones; screening them all took most of the planning
// time.)
void MeshSearch::screen_third_axis() {
  std::vector<Chain> chains;
  for (size_t k : best_screened(1))
    for (bool from_data : {true, false})
      chains.push_back({int(shapes[k].axis_size(0)), int(shapes[k].axis_size(1)), 1, from_data,
                        *screened[k].cost});
  // The next shape of a chain: the smallest larger seq that divides the
  // source axis and leaves it at least 2.
  const auto next = [](const Chain& c) -> std::optional<Chain> {
    const int source = (c.from_data ? c.data : c.model) * c.seq;
    for (int s = c.seq + 1; s <= source / 2; ++s)
      if (source % s == 0) {
        Chain n = c;
        (c.from_data ? n.data : n.model) = source / s;
        n.seq = s;
        return n;
      }
    return std::nullopt;
  };
  std::set<std::string> seen;
  for (const DeviceMesh& m : shapes) seen.insert(m.to_string());
  while (!chains.empty()) {
    std::vector<DeviceMesh> round;
    std::vector<Chain> stepped;
    for (const Chain& c : chains) {
      const std::optional<Chain> n = next(c);
      if (!n || n->data < 2 || n->model < 2) continue;
      const DeviceMesh mesh({n->data, n->model, n->seq}, {batch_dim_name, "model", "seq"});
      if (!seen.insert(mesh.to_string()).second) continue;
      round.push_back(mesh);
      stepped.push_back(*n);
    }
    const size_t first = shapes.size();
    screen(round);
    chains.clear();
    for (size_t i = 0; i < stepped.size(); ++i) {
      const Screened& r = screened[first + i];
      if (r.cost && *r.cost < stepped[i].cost) {
        stepped[i].cost = *r.cost;
        chains.push_back(stepped[i]);
      }
    }
  }
}

// The two best screened shapes are planned in full (the memory check
// included), side by side when this is one process (under mpirun one after
// the other: each plan broadcasts the leader's answer to the ranks); further
// down the list only while none of them fits. The best of those, or null.
std::shared_ptr<AutoShard> MeshSearch::plan_finalists(int devices) {
  std::vector<size_t> order = best_screened(shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k)  // found nothing, proved nothing: last
    if (!screened[k].cost && screened[k].problem) order.push_back(k);
  std::vector<std::shared_ptr<AutoShard>> full(order.size());
  const auto plan = [&](size_t i, StrategyProblem posed, double share, bool counted) {
    Finalist f;
    try {
      // The finalists share the time one plan would have (by default, at
      // least a quarter second each: enough for CBC to settle small steps).
      AutoShardOptions each = options;
      each.time_limit_s = options.time_limit_s > 0
                              ? options.time_limit_s * share
                              : std::max(0.25, default_time_limit(posed.problem) * share);
      each.deterministic = each.deterministic || counted;
      f.candidate = prepare(shapes[order[i]], each, std::move(posed));
    } catch (const std::exception& e) {
      f.error = e.what();
    }
    return f;
  };
  const auto keep = [&](size_t i, Finalist f) {
    Screened& s = screened[order[i]];
    if (!f.candidate) {
      s.line = f.error;
      return;
    }
    s.line += "; " + f.candidate->reasons().front();
    full[i] = std::move(f.candidate);
  };
  const auto plan_in_full = [&](size_t i, double share = 0.5, bool counted = false) {
    // Posed by the screen.
    keep(i, plan(i, std::move(*screened[order[i]].problem), share, counted));
  };
  // All devices on the batch axis is planned in full too when it fits: its
  // plan may be data parallelism, whose gradient buckets overlap the backward
  // pass (predicted for the whole program, not in the screen's sum).
  // (Half a finalist's time: the two ran side by side, this one after them;
  // counted in work, so that its line reads the same on every run.)
  const auto batch_only = [&](size_t i) {
    return shapes[order[i]].axis_size(0) == devices && screened[order[i]].cost;
  };
  size_t planned = std::min<size_t>(2, order.size());
  std::map<size_t, Finalist> early;  // batch_only shapes planned beside the finalists
  if (planned == 2 && !World::process().distributed()) {
    // When the finalists' time is counted in work too, no answer depends on
    // the cores the plans share: the batch_only shapes are planned at once
    // beside the two (on a copy of the problem, in case the finalists fit
    // nowhere and the search below plans them otherwise), which fills the
    // core that the shorter finalist leaves idle.
    std::vector<std::thread> beside;
    for (size_t i = planned; i < order.size() && options.deterministic; ++i)
      if (batch_only(i)) early[i];
    for (auto& [i, f] : early)
      beside.emplace_back(
          [&, i = i, f = &f] { *f = plan(i, *screened[order[i]].problem, 0.25, true); });
    std::thread second([&] { plan_in_full(1); });
    plan_in_full(0);
    second.join();
    for (std::thread& t : beside) t.join();
  } else {
    for (size_t i = 0; i < planned; ++i) plan_in_full(i);
  }
  const auto fits = [&] {
    return std::any_of(full.begin(), full.end(), [](auto& c) { return c; });
  };
  while (!fits() && planned < order.size()) plan_in_full(planned++);
  for (size_t i = planned; i < order.size(); ++i) {
    if (!batch_only(i)) continue;
    if (auto e = early.find(i); e != early.end())
      keep(i, std::move(e->second));
    else
      plan_in_full(i, 0.25, true);
  }
  std::shared_ptr<AutoShard> best;
  for (const auto& candidate : full)
    if (candidate && (!best || candidate->predicted_step_s() < best->predicted_step_s()))
      best = candidate;
  return best;
}

void MeshSearch::fail_none_fits(int devices) const {
  const auto proven = std::count_if(screened.begin(), screened.end(),
                                    [](const Screened& s) { return s.proven_none; });
  if (size_t(proven) == shapes.size())
    fail("AutoShard: no mesh of ", devices,
         " devices fits this step (proven for every shape); give more memory per device, more "
         "devices, a smaller batch, or --recompute");
  fail("AutoShard: no plan found that fits on a mesh of ", devices, " devices (proven for ", proven,
       " of ", shapes.size(),
       " shapes; for the others none was found in the time given: more --plan-time may find "
       "one); or give more memory per device, more devices, a smaller batch, or --recompute");
}

}  // namespace

std::shared_ptr<AutoShard> AutoShard::plan_for_devices(const Graph& g, int devices,
                                                       const std::string& batch_dim_name,
                                                       const AutoShardOptions& options,
                                                       std::vector<std::string>* why) {
  AS_CHECK(devices >= 1, "AutoShard: need at least one device, got ", devices);
  const Cluster cluster = Cluster::for_this_run(options.cluster, options.hosts);
  const auto pose = [&](const DeviceMesh& mesh) {
    return AutoShard(mesh, batch_dim_name, options).pose(g, cluster);
  };
  const auto prepare = [&](const DeviceMesh& mesh, const AutoShardOptions& each,
                           StrategyProblem posed) {
    auto candidate = std::make_shared<AutoShard>(mesh, batch_dim_name, each);
    candidate->prepare(g, std::move(posed));
    return candidate;
  };
  MeshSearch search{pose, prepare, batch_dim_name, options, {}, {}};
  search.screen_two_axes(devices);
  search.screen_third_axis();
  std::shared_ptr<AutoShard> best = search.plan_finalists(devices);
  if (why)
    for (size_t k = 0; k < search.shapes.size(); ++k)
      why->push_back(search.shapes[k].to_string() + ": " + search.screened[k].line);
  if (!best) search.fail_none_fits(devices);
  best->options_ = options;
  return best;
}

DeviceMesh AutoShard::choose_mesh(const Graph& g, int devices, const std::string& batch_dim_name,
                                  const AutoShardOptions& options, std::vector<std::string>* why) {
  return plan_for_devices(g, devices, batch_dim_name, options, why)->mesh();
}

int AutoShard::batch_axis() const {
  return batch_over_ >= 0 ? batch_over_ : Distribution::batch_axis();
}

Sharding AutoShard::weight_layout(const std::string& path, const Shape& shape) const {
  auto it = plan_.find(path);
  return it == plan_.end() ? Sharding::replicated(shape.size()) : it->second;
}

Sharding AutoShard::buffer_layout(const std::string& path, const Shape& shape) const {
  return plan_.count(path) ? weight_layout(path, shape) : input_layout(shape);
}

Sharding AutoShard::slot_layout(const std::string& path, const std::string& slot,
                                const Sharding& weight, const Shape& shape) const {
  auto it = slots_.find({path, slot});
  return it == slots_.end() ? state_layout(weight, shape) : it->second;
}

std::map<int, ShardDecision> AutoShard::decisions(const Graph& step,
                                                  const std::map<int, Sharding>&) const {
  if (step.size() != static_cast<int>(planned_ops_.size())) return {};
  for (int i = 0; i < step.size(); ++i)
    if (step.node(i).op != planned_ops_[i]) return {};
  return decisions_;
}

}  // namespace autoshard
