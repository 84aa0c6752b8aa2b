// Pipeline parallelism, executed: a model's training step cut between its
// blocks into stages, each stage in-process devices of its own (its programs
// partitioned over the model's mesh, the mesh inside the stages); a batch
// split into micro-batches whose activations pass forward from stage to
// stage and whose gradients pass back, point to point, in the order a
// schedule (GPipe, 1F1B or interleaved 1F1B, nn/pipe_schedule.h) gives;
// one optimizer step after the last micro-batch. The numbers are one
// device's full-batch step (to float rounding), for models whose layers do
// not mix the examples of a batch (batch normalisation does).
//
//   PipelineTrainer pipe(model, {.stages = 3, .microbatches = 4});  // plan/pipeline.h
//   double loss = pipe.train_on_batch(tokens, targets);  // [B, T] i32 each
//
// Stages hold consecutive blocks, balanced by the cost model's time of
// their forward pass on this machine (as plan --predict balances them; 12
// equal blocks over 5 stages without a head: 3, 3, 2, 2, 2); what comes
// before the first block (embeddings) runs on the first stage, what comes
// after the last (final norm, head, loss) on the last. A weight two stages
// read (GPT-2's tied embedding and head) keeps one value: the stages'
// gradients are summed before the update. Each stage
// keeps only the inputs of the micro-batches between their forward and
// backward pass and recomputes its forward pass in the backward one (at
// most the stage count of micro-batches on the first stage under 1F1B).
// The model's weights and optimizer state stay the model's own: checkpoints
// saved from a pipelined run are ordinary ones.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "autoshard/comm/communicator.h"
#include "autoshard/nn/pipe_schedule.h"
#include "autoshard/tensor/sharding.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {

class Communicator;
struct CollectiveRecord;
class CompiledStep;
class Graph;
struct Value;
class Model;
class ThreadWorld;
struct MeshPlacement;
struct PipelineStep;
struct StagePrograms;
struct StepContext;

class PipelineTrainer {
 public:
  // `model` must be compiled (optimizer and loss); its distribution (if
  // any) lays out each stage's programs over the mesh inside the stages.
  // AutoShard must have planned first: model.plan_training(one
  // micro-batch's shapes) gives the stages its weights' and state's layouts.
  PipelineTrainer(Model& model, PipelineShape shape);
  ~PipelineTrainer();
  PipelineTrainer(const PipelineTrainer&) = delete;
  PipelineTrainer& operator=(const PipelineTrainer&) = delete;

  // One optimizer step on a batch (the model's inputs and targets, batch
  // first); returns the batch's loss. Advances the model's iterations.
  double train_on_batch(const Tensor& x, const Tensor& y);

  // Blocks each (virtual) stage holds (known after the first step).
  const std::vector<int64_t>& stage_blocks() const { return stage_blocks_; }
  // Per device, the most passes it held between forward and backward at
  // once in the last step (at most in_flight(shape, device) x v).
  const std::vector<int64_t>& peak_in_flight() const { return peak_in_flight_; }
  // The collectives of (virtual) stage `stage`'s backward program for the
  // first step's first micro-batch, as its device 0 runs them (none on one
  // device): gradients are summed in place, so a data axis reduces nothing
  // there (the update reduces once per step).
  std::vector<CollectiveRecord> backward_collectives(int stage) const;

 private:
  struct Programs;
  // A stage's gradients of one weight summed over a step's micro-batches,
  // in the layout its backward program leaves them (partial sums over a
  // data axis included: the update reduces them once), a block per device.
  struct GradientSum {
    Sharding layout;
    std::map<int, Tensor> blocks;  // by in-stage device
  };
  void place_on_ranks();
  bool runs(int stage) const;
  void share_losses(PipelineStep& step);
  struct RankUpdate;
  Sharding weight_layout(const std::string& name) const;
  void bind_reduced(CompiledStep& step, int id, const std::string& name);
  void choose_rank_weights(const Programs& prog);
  void build_reduce();
  void build_norm();
  void build_rank_step();
  void exchange_shared();
  void update_on_ranks(const Programs& prog, const StepContext& ctx);
  Programs& programs_for(int64_t rows, int64_t start, const Tensor& x, const Tensor& y);
  std::vector<Value> trace_microbatch(Graph& g, int64_t rows, int64_t batch, Value& penalty);
  void constrain(const std::vector<Value>& weights) const;
  void differentiate(StagePrograms& sp, const Graph& traced, double weight, int stage);
  std::vector<Sharding> gradient_layouts(const StagePrograms& sp);
  std::map<int, Sharding> add_into_sums(StagePrograms& sp, int stage);
  void bind_sums(CompiledStep& step, const std::vector<int>& ids,
                 const std::vector<std::string>& weights, int stage);
  using SumReads = std::vector<std::tuple<int, std::string, int>>;  // (input, weight, stage)
  Value summed_over_stages(Graph& g, const std::string& name, std::map<int, Sharding>& layouts,
                           SumReads& reads);
  void bind_reads(CompiledStep& step, const SumReads& reads);
  void apply_update(const Graph& traced, const StepContext& ctx);
  // A program on the model's mesh: inputs laid out as the weights in `like`
  // (input -> weight) or as `layouts` say, the model's weights bound.
  std::unique_ptr<CompiledStep> compile(Graph graph, const std::vector<int>& outputs,
                                        const std::map<int, int>& like = {},
                                        const std::map<int, Sharding>& layouts = {});

  Model& model_;
  PipelineShape shape_;
  std::vector<int64_t> stage_blocks_, peak_in_flight_;
  std::vector<std::unique_ptr<Programs>> cache_;
  // The model's step cache's clears() when cache_ was built: a change to
  // what the model traces (regularizers, constraints, frozen weights, a
  // new compile) makes it stale, as it makes the model's own steps.
  uint64_t traced_as_ = 0;
  // Per (virtual) stage: each weight's gradients summed over a step's
  // micro-batches (the backward programs add into them, the update reads).
  std::vector<std::map<std::string, GradientSum>> sums_;
  struct Update;
  std::unique_ptr<Update> update_;
  std::unique_ptr<ThreadWorld> world_;  // in-process: one rank per stage
  // Under mpirun: the ranks (pipe x the mesh inside the stages), this rank's
  // stage device and device inside the stages, its programs' placement,
  // its update. In-process: device_ -1 (every one), pipe_ranks_ 0 .. P - 1.
  std::unique_ptr<Communicator> mpi_;
  std::vector<int> pipe_ranks_;  // per stage device: the rank with this one's device inside
  int device_ = -1, in_stage_ = 0;
  CommGroup pipe_group_;
  std::unique_ptr<MeshPlacement> placement_;
  std::unique_ptr<RankUpdate> rank_update_;
};

}  // namespace autoshard
