// Pipeline stages, run: a training step's forward-and-loss graph cut into
// stages (consecutive blocks), each stage's programs for one micro-batch,
// and the devices running their passes in a schedule's order, values sent
// forward and their gradients back, point to point (tags below). What is
// model-specific (tracing the step, differentiating a stage, its weights
// and gradient sums, the optimizer's update) is nn/pipeline.h's
// PipelineTrainer, which builds these programs and asks this room to run
// them; the order of the passes comes from nn/pipe_schedule.h.
//
//   PipelineStep step{...};                       // the micro-batches' programs
//   StageRunner runner(stages, pipe_ranks);       // stage -> the rank running it
//   runner.run_device(d, schedule, comm, step);   // on each device
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autoshard/comm/communicator.h"
#include "autoshard/ir/graph.h"
#include "autoshard/runtime/compiled_step.h"

namespace autoshard {

// One pass: 'F' or 'B', of (virtual) stage `stage`, for one micro-batch.
struct PipeUnit {
  char kind;
  int stage;
  int64_t microbatch;
  bool operator==(const PipeUnit&) const = default;
};
using PipeWork = std::vector<PipeUnit>;

// A value travels under tag (its stage x kTagsPerStage + its index among the
// stage's outputs); its gradient back under that plus kGradientTag. The
// update's exchanges of shared weights' gradients (mpirun) take one tag each
// from kExchangeTag, below 2^15 (the tags every MPI allows).
constexpr int kTagsPerStage = 64, kGradientTag = 8192, kExchangeTag = 2 * kGradientTag;
inline int value_tag(int stage, size_t index) {
  return stage * kTagsPerStage + static_cast<int>(index);
}

// What assign_stages says of a node made by no stage in particular:
// parameters and inputs (kLeaf), nodes without inputs (kConstant).
constexpr int kLeaf = -1, kConstant = -2;

// The stage that computes each node of a forward-and-loss graph: a block's
// nodes their block's stage (blocks_per_stage[s] consecutive blocks each),
// other nodes the latest stage of their inputs (embeddings the first, the
// head and loss the last). Leaves and constants are made by every stage that
// reads them.
std::vector<int> assign_stages(const Graph& g, const std::vector<int64_t>& blocks_per_stage);

// One stage's nodes for one micro-batch, copied from the forward-and-loss
// graph: values of earlier stages become inputs ("pipe.<id>"), values later
// stages read are its outputs.
struct StageGraph {
  Graph graph;
  std::vector<int> ins, outs;  // global ids received and sent on, in id order
  std::map<int, int> local;    // global id -> id in `graph`
  int loss = -1;               // in `graph` (the last stage)
};

// Where a micro-batch's rows sit in the batch, for ops whose values depend
// on it (dropout's masks, keyed by the element's index in the whole batch,
// as on one device: OpDef::place_block).
struct StageRows {
  int64_t batch = 0, start = 0, count = 0;
};

// Stage `s`'s graph (`stage` as assign_stages gives it; `loss` the global
// graph's loss node).
StageGraph copy_stage(const Graph& g, const std::vector<int>& stage, int s, int loss,
                      const StageRows& rows);

// One stage's forward and backward programs for one micro-batch shape (the
// graphs move into the steps; their ids stay).
struct StagePrograms {
  StageGraph forward, backward;
  std::unique_ptr<CompiledStep> run_forward, run_backward;
  std::vector<std::string> weights;   // trained weights the stage reads
  std::vector<int> weight_gradients;  // per weight: its gradient (backward)
  std::vector<int> sums;              // per weight: the input its gradients add into (backward)
  std::vector<int> gradient_of_in;    // per received value: its output index, or -1 (no gradient)
  std::vector<int> dy;                // per sent value: its gradient's input (backward), or -1
  std::vector<int> gradients_out;     // the backward program's outputs: received values' gradients
};

// Every stage's programs for one micro-batch shape, over the global graph
// they were cut from.
struct StagedPrograms {
  // The stages after its own that read value `id`, in order.
  std::vector<int> readers(int id) const;
  // Value `id`'s index among its stage's outputs.
  size_t out_index(int id) const;

  std::vector<int> stage;  // per node of the forward-and-loss graph
  Graph global;
  int x = -1, y = -1;  // the global graph's input and target
  std::vector<StagePrograms> stages;
};

// What one step's stages share: the micro-batches and their programs, and
// what each stage gives back.
struct PipelineStep {
  std::vector<StagedPrograms*> programs;  // per micro-batch
  std::vector<Tensor> xs, ys;             // per micro-batch: its rows of the batch
  StepContext ctx;
  std::vector<int64_t> backward_passes;  // per (virtual) stage: run so far this step
  std::vector<double> losses;            // per micro-batch (the last stage's)
};

// Runs devices' passes of a step: each device (a thread of a ThreadWorld
// in-process, or this rank under mpirun) its own schedule.
class StageRunner {
 public:
  // `pipe_ranks`: per stage device, the rank (in-process: the thread) that
  // runs it; virtual stage s runs on device s % pipe_ranks.size().
  explicit StageRunner(std::vector<int> pipe_ranks) : pipe_ranks_(std::move(pipe_ranks)) {}

  // Device d's passes in `work`'s order; returns the most passes it held
  // between forward and backward at once.
  int64_t run_device(const PipeWork& work, Communicator& comm, PipelineStep& step) const;

 private:
  // Values a stage received for a micro-batch, kept from its forward pass
  // to its backward pass: by (stage, micro-batch).
  using Held = std::map<std::pair<int, int64_t>, std::vector<Tensor>>;
  void forward_pass(int stage, int64_t m, Communicator& comm, PipelineStep& step, Held& held) const;
  void backward_pass(int stage, int64_t m, Communicator& comm, PipelineStep& step,
                     Held& held) const;
  int peer(int stage) const { return pipe_ranks_[size_t(stage) % pipe_ranks_.size()]; }

  std::vector<int> pipe_ranks_;
};

// Whether a step's program reads leaf `id` (a partitioned program drops the
// leaves nothing it computes needs).
bool reads_leaf(const CompiledStep& step, int id);
// Binds a whole input where the step reads it.
void bind_if_read(CompiledStep& step, int id, const Tensor& whole);
// sum += t, over the calling thread's cores.
void add_into(Tensor& sum, const Tensor& t);
// Values travel as 4-byte words (i32 positions as their bit patterns).
void send_tensor(Communicator& comm, const Tensor& t, int dst, int tag);
Tensor recv_tensor(Communicator& comm, const Shape& shape, DType dtype, int src, int tag);

}  // namespace autoshard
