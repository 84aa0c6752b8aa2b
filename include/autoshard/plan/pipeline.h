// Pipeline parallelism in the cost model: the price of a pipeline shape
// (app/pipeline_pricing.h chooses among them; nn/pipeline.h executes the
// chosen one). A mesh axis named "pipe" of size P cuts the
// model's repeated blocks into P consecutive stages (the embeddings go with
// the first, the head and loss with the last); each stage is laid out over
// the other axes (the in-stage mesh, data x model) as a whole model is today.
//
// The step is priced from two traces of the model, with one block and with
// two, on the in-stage mesh at the micro-batch size: their difference is
// what one block costs, the rest is the embeddings, head and loss ("base").
// Each part's cost splits into what repeats per micro-batch (forward and
// backward compute, collectives over the in-stage model axes) and what
// happens once per step (the optimizer update; the gradient all-reduce over
// the batch axis). Then, for P stages, M micro-batches and v virtual stages
// (model chunks per device, interleaved schedule):
//
//   stage k's time per micro-batch  t_k = n_k x block + [k = P-1] base
//                                         + point-to-point sends
//   GPipe, 1F1B                     (M + P - 1) x max_k t_k
//   interleaved 1F1B                (M + (P - 1) / v) x max_k t_k
//   step                            the above + optimizer + gradient sync
//                                   (the slowest stage's, once)
//
// so the bubble is (P - 1) / (v M) of the ideal M x max_k t_k (Narayanan et
// al. 2021). A send moves one micro-batch's activation (or its gradient),
// b x seq x hidden elements, over the link the pipe axis crosses.
//
// Memory of stage k: its blocks' weights and optimizer state (the first and
// last stage also the base's: GPT-2's tied embedding has a copy on each, as
// in Megatron-LM), the activations stashed for the micro-batches in flight,
// and one micro-batch's working set
// (weight gradients and the working set held once):
//   GPipe          M in flight
//   1F1B           min(M, P - k)
//   interleaved    min(M v, 2 (P - k - 1) + (v - 1) P + 1) chunks of n_k / v
//                  blocks (Megatron-LM's warm-up count plus the one in the
//                  steady state; P + (P - 1) / v stage-loads on the first)
#pragma once

#include <string>
#include <vector>

#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/shard/partitioner.h"

namespace autoshard {

enum class PipelineSchedule { GPipe, OneFOneB, Interleaved };

// "gpipe", "1f1b", "interleaved"; anything else is an error naming --schedule.
PipelineSchedule parse_pipeline_schedule(const std::string& name);
const char* pipeline_schedule_name(PipelineSchedule s);

// What one device pays for a part of the step (a block, or the base).
struct PartCost {
  double microbatch_s = 0;  // forward, backward, in-stage model-axis collectives
  double optimizer_s = 0;   // the optimizer update, once per step
  double sync_s = 0;        // gradient all-reduce over the batch axis, once per step
  // Weights and optimizer state; activations: what one micro-batch leaves
  // stashed until its backward pass (a block's; 0 for the base).
  MemoryPrediction memory;
  // Planned buffers held once however many micro-batches are in flight:
  // weight gradients, and (the base) one micro-batch's working set.
  double held_bytes = 0;
};

// The cost of device 0's program of `p` (lowered, on the in-stage mesh),
// split as above. Collectives are priced on `full` (the mesh with its pipe
// axis), the in-stage axis of the same name: the links they really cross.
// Optimizer ops are those that read optimizer state (directly or through
// another such op); collectives over `batch_axis` are the gradient sync.
PartCost part_cost(const Partition& p, const Cluster& c, const DeviceMesh& full,
                   const std::string& batch_axis, bool bf16);

// The block's and the base's costs from parts measured with one and with two
// blocks (block = two - one, base = one - block), at the micro-batch and
// (`one_x2`, `two_x2`) at twice it: what grows with the micro-batch is the
// block's stash, the rest of its buffers (weight gradients) is held once.
void split_parts(const PartCost& one, const PartCost& two, const PartCost& one_x2,
                 const PartCost& two_x2, PartCost& block, PartCost& base);

struct PipelineShape {
  int stages = 1;            // P
  int64_t microbatches = 1;  // M
  int virtual_stages = 1;    // v (interleaved only)
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
};

// Errors (one line, naming the flag) for shapes that cannot be scheduled:
// fewer blocks than stages x virtual stages, interleaving without a
// micro-batch count that is a multiple of the stages, v > 1 without
// interleaving.
void check_pipeline_shape(const PipelineShape& s, int layers);

// Blocks per stage (each at least one, in order), minimising the slowest
// stage's time: n_k x block_s plus first_extra_s on the first stage and
// last_extra_s on the last. Equal times break toward the earlier stages
// holding more (12 blocks over 5 equal stages: 3 3 2 2 2).
std::vector<int> balance_stages(int layers, int stages, double block_s, double first_extra_s,
                                double last_extra_s);

// (P - 1) / (v M).
double bubble_fraction(const PipelineShape& s);

// Micro-batches' worth of stage `stage`'s activations stashed at once (see
// above; interleaved counts chunks / v).
double in_flight(const PipelineShape& s, int stage);

// Point-to-point sends per micro-batch of stage `stage`: activations
// forward and gradients backward, one per chunk boundary it owns.
int sends_per_microbatch(const PipelineShape& s, int stage);

struct StagePrediction {
  int first_layer = 0, layers = 0;
  double microbatch_s = 0;  // compute and in-stage collectives per micro-batch
  double p2p_s = 0;         // its point-to-point sends per micro-batch
  double optimizer_s = 0, sync_s = 0;
  double in_flight = 0;
  MemoryPrediction memory;
};

struct PipelinePrediction {
  std::vector<StagePrediction> stages;
  double bubble_fraction = 0;
  double pipeline_s = 0;  // the micro-batches through the pipeline, bubble included
  double optimizer_s = 0, sync_s = 0;
  double p2p_bytes = 0;  // one send
  double step_s = 0;
  double tokens_per_s = 0;
  double model_flops_per_device_per_s = 0;
  const StagePrediction& largest_memory() const;
};

// The whole step from the parts' costs. `p2p_s`: seconds of one send of
// `p2p_bytes`; `devices`: every device (for FLOP/s per device).
PipelinePrediction predict_pipeline(const PartCost& block, const PartCost& base, int layers,
                                    const PipelineShape& shape, double p2p_bytes, double p2p_s,
                                    double tokens, double model_flops, int devices);

// Seconds of one point-to-point send of `bytes` over the link `axis` of
// `mesh` crosses: the link's latency plus bytes at its effective bandwidth.
double p2p_seconds(const Cluster& c, const DeviceMesh& mesh, int axis, double bytes);

}  // namespace autoshard
