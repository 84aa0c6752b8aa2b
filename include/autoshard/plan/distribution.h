// The distribution API, with Keras's names and meanings: a DeviceMesh,
// TensorLayouts collected in a LayoutMap keyed by regular expressions over
// weight paths, and the strategies DataParallel, ModelParallel and AutoShard.
// A model compiled while a distribution is set (set_distribution or a
// DistributionScope) is trained and run sharded with no other change.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/solver/problem.h"
#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/sharding.h"

namespace autoshard {

struct Cluster;
struct StrategyProblem;

// In-process CPU devices "cpu:0" ... "cpu:N-1" (N = count, or the number of
// cores when count is 0). Any count is allowed, independent of the cores.
std::vector<std::string> list_devices(int count = 0);

// Per tensor dimension, the mesh axes it is split over: none (whole), one,
// or several (Keras's tuple `("data", "model")`, named in the mesh's order:
// the dimension is split over their product, see tuple_axis).
struct TensorLayout {
  using Axes = std::vector<std::string>;
  std::vector<Axes> axes;
  TensorLayout() = default;
  // One axis name, or none, per dimension: {std::nullopt, "model"}.
  TensorLayout(std::initializer_list<std::optional<std::string>> a)
      : TensorLayout(std::vector<std::optional<std::string>>(a)) {}
  explicit TensorLayout(const std::vector<std::optional<std::string>>& a);
  explicit TensorLayout(std::vector<Axes> a) : axes(std::move(a)) {}
  // Resolves axis names against a mesh; errors name the weight and the axis.
  Sharding to_sharding(const DeviceMesh& mesh, const std::string& path, const Shape& shape) const;
  // The layout of a sharding's splits (its partial sums have none).
  static TensorLayout of(const Sharding& s, const DeviceMesh& mesh);
};

// The axis id of the mesh axes `names` (-1 for none): one axis, or a tuple
// of axes named in the mesh's order. Errors start with `what`.
int layout_axis(const DeviceMesh& mesh, const TensorLayout::Axes& names, const std::string& what);

class LayoutMap {
 public:
  // layout_map["h\\..*\\.attn\\.query\\.kernel"] = TensorLayout({nullptr, "model", nullptr})
  TensorLayout& operator[](const std::string& key);
  // Keras's lookup: an exact key wins; else the one key whose regex search
  // matches; two matching keys is an error naming both; none: nullopt.
  std::optional<TensorLayout> lookup(const std::string& path) const;
  // {"regex": ["axis", null or ["axis", "axis"], ...], ...}
  static LayoutMap from_json_text(const std::string& text, const std::string& source);
  static LayoutMap from_json_file(const std::string& path);
  const std::vector<std::pair<std::string, TensorLayout>>& entries() const { return entries_; }
  // Keys that neither equal nor (as a regex) match any of `paths`.
  std::vector<std::string> unmatched(const std::vector<std::string>& paths) const;

 private:
  std::vector<std::pair<std::string, TensorLayout>> entries_;
  // Per entry: its key compiled once (a lookup compiled every key again, a
  // tenth of pricing the pipelines of GPT-3 on 1,024 devices).
  struct Compiled;
  std::vector<std::shared_ptr<const Compiled>> compiled_;
};

class Distribution {
 public:
  Distribution(DeviceMesh mesh, std::string batch_dim_name);
  virtual ~Distribution() = default;
  const DeviceMesh& mesh() const { return mesh_; }
  const std::string& batch_dim_name() const { return batch_dim_name_; }
  // The axis id the batch is split over: the batch_dim_name axis (-1 where
  // the mesh has none), or a tuple of axes (FSDP over every device).
  virtual int batch_axis() const;

  // Plans layouts for a traced training step (AutoShard does its work here);
  // called before any layout is asked for.
  virtual void prepare(const Graph& /*step*/) {}
  virtual Sharding weight_layout(const std::string& path, const Shape& shape) const = 0;
  // Inputs are split along their first (batch) dimension over the batch axis.
  Sharding input_layout(const Shape& shape) const;
  // Optimizer state: the weight's layout, or with ZeRO-1 one more split over
  // the batch axis, on the largest dimension the weight leaves whole.
  Sharding state_layout(const Sharding& weight, const Shape& shape) const;
  // The layout of a buffer (a generation's key-value cache, Trace::
  // causal_attention): split along the batch like the inputs, unless a
  // layout map or a plan says otherwise.
  virtual Sharding buffer_layout(const std::string& path, const Shape& shape) const;
  // The layout of optimizer state `slot` ("m", "v") of weight `path`;
  // state_layout unless a planner chose otherwise.
  virtual Sharding slot_layout(const std::string& path, const std::string& slot,
                               const Sharding& weight, const Shape& shape) const;
  // The strategies a distribution fixes for the ops of `step`, by node id
  // (the rest follow their sharding rules), given the layouts of its leaves
  // (weights, state, inputs, by node id). AutoShard's: empty unless `step`
  // is the graph it prepared; FSDP's: every op of the passes.
  virtual std::map<int, ShardDecision> decisions(const Graph& step,
                                                 const std::map<int, Sharding>& leaves) const;

  bool zero1 = false;  // shard optimizer state and the update over the batch axis
  // Megatron's sequence parallelism over this axis (empty: off): the ops the
  // layouts leave whole over it run split along the sequence
  // (PartitionRequest::sequence_parallel_axis).
  std::string sequence_parallel_axis;

 protected:
  // `layout` with the batch axis added on the largest dimension it leaves
  // whole (the first of equals), unless it splits over that axis already or
  // the mesh has no such axis: ZeRO's split of a weight or of its state.
  Sharding split_over_batch(const Sharding& layout, const Shape& shape) const;

 private:
  DeviceMesh mesh_;
  std::string batch_dim_name_;
};

// Replicates every weight; splits the batch over the mesh's batch axis.
class DataParallel : public Distribution {
 public:
  explicit DataParallel(DeviceMesh mesh, std::string batch_dim_name = "data");
  explicit DataParallel(int devices);
  Sharding weight_layout(const std::string& path, const Shape& shape) const override;
};

// Weights laid out by a LayoutMap (replicated when no key matches).
class ModelParallel : public Distribution {
 public:
  ModelParallel(DeviceMesh mesh, LayoutMap layout_map, std::string batch_dim_name = "data");
  Sharding weight_layout(const std::string& path, const Shape& shape) const override;
  Sharding buffer_layout(const std::string& path, const Shape& shape) const override;
  const LayoutMap& layout_map() const { return layout_map_; }

 private:
  LayoutMap layout_map_;
};

// Fully sharded data parallelism (FSDP, ZeRO-3): every weight, and with it
// its gradient and optimizer state, is also split over the batch axis, along
// its largest dimension the layout map leaves whole (uneven blocks allowed).
// The partitioner then gathers each weight where an op reads it (an
// all-gather before use, again in the backward pass), runs the op on the
// device's share of the batch as under DataParallel, and reduce-scatters the
// weight's gradient to its block: between uses a device holds 1/n of the
// weights, gradients and optimizer state. With an empty layout map it is
// PyTorch's FSDP; with Megatron's map on a mesh with a model axis, tensor
// parallelism with ZeRO-3 over the data axis.
class FullyShardedDataParallel : public ModelParallel {
 public:
  explicit FullyShardedDataParallel(DeviceMesh mesh, LayoutMap layout_map = {},
                                    std::string batch_dim_name = "data");
  Sharding weight_layout(const std::string& path, const Shape& shape) const override;
  // With an empty layout map on a mesh of several axes, the tuple of all of
  // them (of more than one device): the batch, the weights, gradients and
  // state split over every device; else the batch_dim_name axis.
  int batch_axis() const override;
  // Every op of the forward and backward passes as the layout map alone
  // would run it (on the device's share of the batch, reading whole weights
  // gathered for it): left to their rules, ops that read a split weight
  // would follow its split and move activations instead. Ops that run
  // without the batch axis there (the optimizer's update) keep their rules
  // and update each device's block.
  std::map<int, ShardDecision> decisions(const Graph& step,
                                         const std::map<int, Sharding>& leaves) const override;
};

struct AutoShardOptions {
  // The cluster strategies are priced on: a preset ("cpu": this machine,
  // as calibrated) or a cluster JSON file (docs/cost-model.md).
  std::string cluster = "cpu";
  // The machines the devices run on as MPI ranks (Cluster::for_this_run);
  // 0: as this run was started.
  int hosts = 0;
  bool bf16 = false;  // price mixed precision
  // Bytes each device may hold (0: the cluster's device memory).
  double memory_per_device = 0;
  // Seconds the solver may take (it stops sooner when it proves its plan
  // optimal); 0: by the size of the step, from 0.25 s to 10 s.
  double time_limit_s = 0;
  // Limits counted in work, not seconds (SolveOptions::deterministic): the
  // same plan on every run and machine, a resumed run's included.
  bool deterministic = false;
  uint64_t seed = 0;
  // Only layouts whose every split divides its dimension, for weights,
  // optimizer state and inputs (JAX's NamedSharding requires it; what a
  // Keras LayoutMap can hold): StrategyOptions::divisible.
  bool divisible = false;
};

// Chooses every layout itself by predicted cost (docs/planner.md): each
// value of the traced training step (weights, optimizer state, activations,
// gradients) gets the strategy that minimises predicted compute plus
// communication under the memory per device, solved as a ShardingProblem.
// Data parallelism, Megatron's splits, sequence parallel regions and ZeRO's
// sharded state are all among its choices, on any mesh, even or uneven.
class AutoShard : public Distribution {
 public:
  explicit AutoShard(DeviceMesh mesh, std::string batch_dim_name = "data",
                     AutoShardOptions options = {});
  void prepare(const Graph& step) override;
  Sharding weight_layout(const std::string& path, const Shape& shape) const override;
  Sharding buffer_layout(const std::string& path, const Shape& shape) const override;
  Sharding slot_layout(const std::string& path, const std::string& slot, const Sharding& weight,
                       const Shape& shape) const override;
  std::map<int, ShardDecision> decisions(const Graph& step,
                                         const std::map<int, Sharding>& leaves) const override;
  // The batch axis; where data parallelism over every device was kept on a
  // mesh of several axes (see reasons()), the tuple of all of them.
  int batch_axis() const override;

  // Whether a step was planned (prepare ran).
  bool prepared() const { return prepared_; }
  // The layouts chosen, by weight path (after prepare).
  const std::map<std::string, Sharding>& plan() const { return plan_; }
  // Why: the solver's outcome, then each weight's layout with what the
  // replicated alternative would cost (after prepare).
  const std::vector<std::string>& reasons() const { return reasons_; }
  // The problem solved (after prepare): `autoshard plan --export-problem`.
  const ShardingProblem& problem() const { return problem_; }
  // Its answer: one strategy per node of problem() (the plan, unless
  // data parallelism was kept instead: see reasons()).
  const std::vector<int>& solution() const { return solution_; }
  // The whole program's predicted step time of the plan on its cluster
  // (after prepare): the cost model's predict(), which also sees where the
  // collectives fall in the step.
  double predicted_step_s() const { return predicted_step_s_; }
  const AutoShardOptions& options() const { return options_; }

  // The best plan of `step` on `devices` devices, prepared, mesh included:
  // each factorisation into a batch axis and a "model" axis (data=d,
  // model=devices/d), and into three axes (data, model, seq), is screened
  // by one round of the solver; the two best are planned in full and the
  // one with the lowest predicted step time that fits wins (further shapes
  // only while none fits). `why` gets one line per shape.
  static std::shared_ptr<AutoShard> plan_for_devices(const Graph& step, int devices,
                                                     const std::string& batch_dim_name,
                                                     const AutoShardOptions& options,
                                                     std::vector<std::string>* why = nullptr);
  // plan_for_devices' mesh.
  static DeviceMesh choose_mesh(const Graph& step, int devices, const std::string& batch_dim_name,
                                const AutoShardOptions& options, std::vector<std::string>* why);
  // Lines that explain how the mesh was chosen, listed first in reasons().
  void explain_mesh(const std::vector<std::string>& lines) {
    for (const std::string& l : lines) reasons_.push_back("mesh " + l);
  }

 private:
  // The step as a problem on this mesh, priced on `cluster`.
  StrategyProblem pose(const Graph& step, const Cluster& cluster) const;
  // Data parallelism over every device (the batch over the tuple of all
  // axes on a mesh of several) instead of the solver's plan when the whole
  // program's prediction prefers it: where devices outnumber the cores, or
  // the batch axis is one of the mesh's.
  void consider_data_parallel(const Graph& step, const StrategyProblem& posed,
                              const Cluster& cluster);
  // prepare() with the step already posed.
  void prepare(const Graph& step, StrategyProblem posed);

  AutoShardOptions options_;
  std::map<std::string, Sharding> plan_;
  std::map<std::pair<std::string, std::string>, Sharding> slots_;
  std::map<int, ShardDecision> decisions_;
  std::vector<Op> planned_ops_;  // the prepared step's ops, to recognise it
  ShardingProblem problem_;
  std::vector<int> solution_;
  double predicted_step_s_ = 0;
  std::vector<std::string> reasons_;
  int batch_over_ = -1;  // the batch's axis when data parallelism over a tuple was kept
  bool prepared_ = false;
};

// The distribution models compile under (null: one device).
std::shared_ptr<Distribution> distribution();
void set_distribution(std::shared_ptr<Distribution> d);

// Sets a distribution for its lifetime (Keras's `with distribution.scope()`).
class DistributionScope {
 public:
  explicit DistributionScope(std::shared_ptr<Distribution> d) : previous_(distribution()) {
    set_distribution(std::move(d));
  }
  ~DistributionScope() { set_distribution(previous_); }
  DistributionScope(const DistributionScope&) = delete;
  DistributionScope& operator=(const DistributionScope&) = delete;

 private:
  std::shared_ptr<Distribution> previous_;
};

}  // namespace autoshard
