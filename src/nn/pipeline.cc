#include "autoshard/nn/pipeline.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "autoshard/comm/mpi_communicator.h"
#include "autoshard/comm/thread_communicator.h"
#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/model.h"
#include "autoshard/nn/regularizers.h"
#include "autoshard/optim/composed_ops.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/compiled_step.h"
#include "autoshard/runtime/pipeline_stages.h"
#include "autoshard/runtime/sharded_executor.h"
#include "autoshard/tensor/array_split.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

// Blocks per (virtual) stage, balanced by the cost model's time of the
// forward pass on this machine (the backward pass follows it): the blocks
// cost alike, the nodes before the first block (embeddings) go with the
// first stage, those after the last (head, loss) with the last, as the cost
// model's balance_stages weighs them. GPT-2 124M's head costs about five
// blocks: 12 blocks over 2 stages are 8 + 4, not 6 + 6.
std::vector<int64_t> balanced_blocks(const Graph& g, int stages) {
  const Cluster here = Cluster::for_this_run("cpu");
  double blocks_s = 0, first_s = 0, last_s = 0;
  bool past_blocks = false;
  for (int id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.is_leaf()) continue;
    std::vector<Shape> inputs;
    for (int in : n.inputs) inputs.push_back(g.node(in).shape);
    const double t = op_seconds(here, n, inputs, n.shape, 1, false);
    if (n.region >= 0) {
      blocks_s += t;
      past_blocks = true;
    } else {
      (past_blocks ? last_s : first_s) += t;
    }
  }
  const std::vector<int> n =
      balance_stages(g.regions(), stages, blocks_s / g.regions(), first_s, last_s);
  return {n.begin(), n.end()};
}

// The cut every rank takes: the leader's (ranks may be calibrated
// differently), the even one if pricing fails there.
std::vector<int64_t> agreed_blocks(const Graph& g, int stages) {
  std::string cut;
  if (World::process().leader()) {
    std::vector<int64_t> n;
    try {
      n = balanced_blocks(g, stages);
    } catch (const Error&) {
      n = split_sizes(g.regions(), stages);
    }
    for (int64_t k : n) cut += std::to_string(k) + " ";
  }
  std::istringstream leaders(World::process().broadcast(cut));
  std::vector<int64_t> out;
  for (int64_t k; leaders >> k;) out.push_back(k);
  return out;
}

}  // namespace

// A micro-batch shape's stages and what the trainer needs of it.
struct PipelineTrainer::Programs : StagedPrograms {
  int64_t batch = 0, rows = 0;
  int64_t start = -1;  // -1 when no dropout (any micro-batch of `rows`)
  double weight = 0;   // the micro-batch's share of the batch loss
};

struct PipelineTrainer::Update {
  std::unique_ptr<CompiledStep> step;
  std::vector<int> zeros;  // the gradient inputs of weights no stage differentiates
};

// A rank's update (mpirun): the weights it holds, their gradients reduced
// into the weights' layouts, and the programs that reduce, measure and
// apply them.
struct PipelineTrainer::RankUpdate {
  std::vector<std::string> weights;                // held here, in the traced step's order
  std::set<std::string> written;                   // held here first (checkpoints, the norm)
  std::map<std::string, std::vector<int>> shared;  // weight -> the devices whose stages read it
  std::map<std::string, Tensor> reduced;           // this rank's block of each one's gradient
  Tensor sumsq = Tensor(Shape{});                  // the squared global norm (clipping)
  std::unique_ptr<CompiledStep> reduce, norm, update;
};

PipelineTrainer::PipelineTrainer(Model& model, PipelineShape shape) : model_(model), shape_(shape) {
  // The shape as the cost model prices it (the blocks are counted when traced).
  check_pipeline_shape(shape_, std::numeric_limits<int>::max());
  AS_CHECK(model_.optimizer_ && !model_.losses_.empty(), "Model ", model_.name(),
           ": call compile(optimizer, loss) before training it in a pipeline");
  // Each stage's programs are laid out over the model's mesh (the mesh
  // inside the stages) by the weights' and their state's layouts, by name;
  // AutoShard's come from the one step it planned (the whole model's, on
  // one micro-batch), which must be planned before the weights are placed.
  const auto* planner = dynamic_cast<const AutoShard*>(model_.dist_.get());
  AS_CHECK(!model_.sharded() || !planner || planner->prepared(),
           "pipeline: AutoShard lays out the stages from the whole model's step on one "
           "micro-batch: call model.plan_training(micro-batch shapes) before building the "
           "PipelineTrainer");
  const World& world = World::process();
  const int inside = model_.sharded() ? model_.dist_->mesh().size() : 1;
  AS_CHECK(!world.distributed() || world.size() == shape_.stages * inside,
           "pipeline: under mpirun each rank runs one device of one stage: ", shape_.stages,
           " stages of ", inside, " devices need ", shape_.stages * inside, " ranks (mpirun -np ",
           shape_.stages * inside, "); ", world.size(), " were started");
  for (int p = 0; p < shape_.stages; ++p) pipe_ranks_.push_back(p);
  if (world.distributed())
    place_on_ranks();
  else
    model_.place_state();
}

// Under mpirun the ranks are the pipe axis (outermost: stage device p is
// ranks p n .. p n + n - 1) by the mesh inside the stages (n devices), each
// rank one device of one stage: it compiles, holds and updates its stages'
// weights and state only, and writes only those into checkpoints.
void PipelineTrainer::place_on_ranks() {
  const DeviceMesh inside = model_.sharded() ? model_.dist_->mesh() : DeviceMesh();
  std::vector<int> shape{shape_.stages};
  std::vector<std::string> names{"pipe"};
  shape.insert(shape.end(), inside.shape().begin(), inside.shape().end());
  names.insert(names.end(), inside.axis_names().begin(), inside.axis_names().end());
  const DeviceMesh full(shape, names);
  const int rank = World::process().rank(), n = inside.size();
  device_ = rank / n;
  in_stage_ = rank % n;
  for (int p = 0; p < shape_.stages; ++p) pipe_ranks_[p] = p * n + in_stage_;
  // One communicator for every program (made by all ranks at once: MPI
  // splits it collectively): the pipe axis's groups carry sends and the
  // update's exchanges, the others the stage's own collectives.
  mpi_ = std::make_unique<MpiCommunicator>(full);
  pipe_group_ = mesh_groups(full, rank).front();
  if (!model_.sharded()) return model_.place_state();
  placement_ = std::make_unique<MeshPlacement>();
  placement_->comm = mpi_.get();
  placement_->device = in_stage_;
  // The stage's groups as the mesh inside names them (its axis a is the full
  // mesh's a + 1, its tuples the full mesh's shifted by one axis).
  const std::vector<CommGroup> groups = mesh_groups(full, rank);
  // Nothing in a stage uses the world's group, so the stage has none.
  for (CommGroup inner : mesh_groups(inside, in_stage_)) {
    if (inner.axis < 0) continue;
    std::vector<int> members = axis_members(inner.axis);
    for (int& a : members) ++a;
    const int outer = is_tuple_axis(inner.axis) ? tuple_axis(members) : members.front();
    const CommGroup* g = group_of_axis(groups, outer);
    AS_CHECK(g != nullptr, "internal: mesh ", full.to_string(), " has no group for ",
             full.axis_name(outer));
    inner.id = g->id;
    inner.ranks = g->ranks;
    placement_->groups.push_back(std::move(inner));
  }
  model_.store_.place_on(inside, {in_stage_});
}

// Whether this process runs stage s (in-process: every stage).
bool PipelineTrainer::runs(int s) const {
  return device_ < 0 || s % shape_.stages == device_;
}

PipelineTrainer::~PipelineTrainer() = default;

// A stage's program on the model's mesh (one device, or the mesh inside the
// stages), bound to the model's weights and state. `like`: inputs laid out
// as a parameter (gradients as their weights).
std::unique_ptr<CompiledStep> PipelineTrainer::compile(Graph graph, const std::vector<int>& outputs,
                                                       const std::map<int, int>& like,
                                                       const std::map<int, Sharding>& layouts) {
  std::unique_ptr<CompiledStep> step;
  if (model_.sharded()) {
    PartitionRequest request = model_.leaf_layouts(graph);
    for (const auto& [input, weight] : like) request.leaves[input] = request.leaves.at(weight);
    for (const auto& [input, layout] : layouts) request.leaves[input] = layout;
    step = std::make_unique<CompiledStep>(std::move(graph), outputs, model_.dist_->mesh(), request,
                                          placement_.get());
  } else {
    step = std::make_unique<CompiledStep>(std::move(graph), outputs);
  }
  // The model's weights and state; a backward program may not read a
  // weight whose gradient needs no value of it (a bias before a sent value).
  for (int id : step->graph().parameters()) {
    if (!reads_leaf(*step, id)) continue;
    const LeafAttrs& leaf = step->graph().node(id).leaf();
    for (int d : step->devices())
      step->bind(d, id, model_.store_.block({leaf.name, leaf.slot}, step->layout(id), d));
  }
  return step;
}

// Completes stage s's backward program (its forward pass again): the
// gradient of (its loss share) + sum_k <out_k, dy_k> with respect to its
// weights and received values, dy_k the gradients later stages send back
// for its output k: the chain rule across stages.
void PipelineTrainer::differentiate(StagePrograms& sp, const Graph& g, double weight, int s) {
  StageGraph& b = sp.backward;
  std::vector<Value> wrt;
  for (int id : b.graph.parameters()) {
    const std::string& name = b.graph.node(id).leaf().name;
    if (model_.non_trainable_.count(name)) continue;
    wrt.push_back(b.graph.value(id));
    sp.weights.push_back(name);
  }
  for (int in : b.ins) {
    const bool floating = g.node(in).dtype == DType::F32;
    sp.gradient_of_in.push_back(floating ? static_cast<int>(wrt.size()) : -1);
    if (floating) wrt.push_back(b.graph.value(b.local.at(in)));
  }
  Value objective;
  if (b.loss >= 0) objective = ops::scale(b.graph.value(b.loss), weight);
  for (int out : b.outs) {
    const Node& n = g.node(out);
    if (n.dtype != DType::F32) {
      sp.dy.push_back(-1);
      continue;
    }
    Value dy = b.graph.input(cat("pipe.grad.", out), n.shape);
    sp.dy.push_back(dy.id);
    std::vector<int64_t> axes(n.shape.size());
    for (size_t a = 0; a < axes.size(); ++a) axes[a] = static_cast<int64_t>(a);
    Value term = b.graph.value(b.local.at(out)) * dy;
    if (!axes.empty()) term = ops::reduce_sum(term, axes);  // a scalar (a penalty) is its own sum
    objective = objective.valid() ? objective + term : term;
  }
  AS_CHECK(objective.valid() || wrt.empty(), "pipeline: stage ", s,
           " sends no value a gradient can flow back through (only integers)");
  if (!objective.valid()) return;
  const std::vector<Value> grads = gradients(objective, wrt);
  for (size_t k = 0; k < grads.size(); ++k)
    (k < sp.weights.size() ? sp.weight_gradients : sp.gradients_out).push_back(grads[k].id);
  for (int& index : sp.gradient_of_in)
    if (index >= 0) index -= static_cast<int>(sp.weights.size());
}

// The layout of each of stage s's weight gradients as its backward program
// leaves them (device 0's partition shows every device's decisions).
std::vector<Sharding> PipelineTrainer::gradient_layouts(const StagePrograms& sp) {
  const Graph& g = sp.backward.graph;
  std::vector<Sharding> out;
  if (!model_.sharded()) {
    for (int id : sp.weight_gradients)
      out.push_back(Sharding::replicated(static_cast<int>(g.node(id).shape.size())));
    return out;
  }
  const Partition p =
      partition(g, model_.dist_->mesh(), model_.leaf_layouts(g), sp.weight_gradients, {0});
  for (int id : sp.weight_gradients) out.push_back(p.sharding[id]);
  return out;
}

// Adds each weight's gradient into its sum over the step's micro-batches, in
// place (an input laid out as the gradient is, partial sums over a data axis
// included), so that nothing is copied out or reduced per micro-batch. Every
// micro-batch shape's program of stage s adds into the same sums.
std::map<int, Sharding> PipelineTrainer::add_into_sums(StagePrograms& sp, int s) {
  const std::vector<Sharding> made = gradient_layouts(sp);
  Graph& g = sp.backward.graph;
  std::map<int, Sharding> layouts;
  for (size_t w = 0; w < sp.weights.size(); ++w) {
    const Value grad = g.value(sp.weight_gradients[w]);
    auto [it, fresh] = sums_[s].try_emplace(sp.weights[w]);
    if (fresh) it->second.layout = made[w];
    // A value is never made partial: the sum can be partial only where
    // every micro-batch's gradient is.
    const Sharding& want = it->second.layout;
    AS_CHECK(std::includes(made[w].partial.begin(), made[w].partial.end(), want.partial.begin(),
                           want.partial.end()),
             "pipeline: stage ", s, "'s gradient of '", sp.weights[w], "' is laid out ",
             made[w].to_string(model_.dist_->mesh()), " for one micro-batch and ",
             want.to_string(model_.dist_->mesh()), " for another; use micro-batches of one size");
    const Value sum = g.input(cat("pipe.sum.", sp.weights[w]), grad.shape());
    g.add(Op::Accumulate, {sum, grad});
    sp.sums.push_back(sum.id);
    layouts[sum.id] = want;
  }
  return layouts;
}

// Binds stage s's sums to a program (each device its blocks, made once).
void PipelineTrainer::bind_sums(CompiledStep& step, const std::vector<int>& ids,
                                const std::vector<std::string>& weights, int s) {
  for (size_t w = 0; w < ids.size(); ++w) {
    GradientSum& sum = sums_[s].at(weights[w]);
    const Shape& shape = step.graph().node(ids[w]).shape;
    for (int d : step.devices()) {
      auto [it, fresh] = sum.blocks.try_emplace(d);
      if (fresh)
        it->second = model_.sharded()
                         ? Tensor(sum.layout.local_shape(shape, model_.dist_->mesh(), d))
                         : Tensor(shape);
      step.bind(d, ids[w], it->second);
    }
  }
}

// One micro-batch of `rows` (of `batch`) traced for training; `penalty`
// becomes the sum of its regularizers' terms (Keras's model.losses), each
// the micro-batch's share of the batch's as the losses are weighted
// (rows / batch each, summing to one): a weight's penalty whole, an
// activity's times batch / rows, for Keras 3 adds activity_regularizer
// (output) over the whole batch, not divided by its size
// (keras/src/layers/layer.py, Layer.__call__), and an L1/L2 term of a batch
// is the sum of its micro-batches'. The terms are summed in the order traced
// (a stage's, then the next one's), so each stage sends one partial sum on.
std::vector<Value> PipelineTrainer::trace_microbatch(Graph& g, int64_t rows, int64_t batch,
                                                     Value& penalty) {
  std::map<std::string, Trace::Penalty> activities = model_.activity_penalties_;
  const double share = double(batch) / double(rows);
  for (auto& [layer, f] : activities) {
    AS_CHECK(rows == batch || regularizers::adds_over_examples(f), "pipeline: layer '", layer,
             "''s activity_regularizer couples the examples of a batch (OrthogonalRegularizer): "
             "micro-batches cannot compute it; use L1/L2 or one micro-batch");
    if (rows == batch) continue;
    const Trace::Penalty whole = f;
    f = [whole, share, rows, name = layer](Value v) {
      AS_CHECK(v.rank() >= 1 && v.dim(0) == rows, "pipeline: layer '", name, "''s output ",
               shape_str(v.shape()),
               " is not batch first; its activity_regularizer cannot be split into micro-batches");
      return ops::scale(whole(v), share);
    };
  }
  std::swap(activities, model_.activity_penalties_);
  std::vector<Value> outs, penalties;
  try {
    outs = model_.trace_outputs(g, rows, /*training=*/true, &penalties);
  } catch (...) {
    std::swap(activities, model_.activity_penalties_);
    throw;
  }
  std::swap(activities, model_.activity_penalties_);
  for (const Value& term : penalties) penalty = penalty.valid() ? penalty + term : term;
  return outs;
}

PipelineTrainer::Programs& PipelineTrainer::programs_for(int64_t rows, int64_t start,
                                                         const Tensor& x, const Tensor& y) {
  // A program holds the batch's size (the loss share, dropout's offsets).
  const int64_t batch = x.shape()[0];
  for (auto& p : cache_)
    if (p->batch == batch && p->rows == rows && (p->start < 0 || p->start == start)) return *p;
  auto p = std::make_unique<Programs>();
  p->batch = batch;
  p->rows = rows;
  p->weight = double(rows) / double(batch);
  Graph& g = p->global;
  Value penalty;
  const std::vector<Value> outs = trace_microbatch(g, rows, batch, penalty);
  AS_CHECK(outs.size() == 1, "pipeline: models with one output only (this one has ", outs.size(),
           ")");
  p->x = g.inputs().at(0);
  Shape y_shape = y.shape();
  y_shape[0] = rows;
  const Value target = g.input("y", y_shape, y.dtype());
  p->y = target.id;
  Value total = model_.total_loss(outs, {target});
  if (penalty.valid()) total = total + penalty;  // Keras's compute_loss adds model.losses
  const int loss = total.id;
  // State written in place would be written again by each backward pass's
  // recomputation.
  AS_CHECK(composed::assign_views(g).empty(),
           "pipeline: the model writes state in place (batch normalisation's moving statistics); "
           "it cannot be recomputed in stages");
  bool placed = false;  // values that depend on their rows' place in the batch
  for (int id = 0; id < g.size(); ++id)
    placed |= !g.node(id).is_leaf() && op_def(g.node(id).op).place_block != nullptr;
  p->start = placed ? start : -1;

  // Virtual stages: P, or P x v interleaved (device d holds d, d + P, ...).
  const int V = shape_.stages * shape_.virtual_stages;
  check_pipeline_shape(shape_, g.regions());
  AS_CHECK(V * kTagsPerStage <= kGradientTag, "pipeline: at most ", kGradientTag / kTagsPerStage,
           " stages, got ", V);
  // Cut once, at the first step's first micro-batch: every micro-batch's
  // programs (uneven ones too) take the same stages.
  if (stage_blocks_.empty()) stage_blocks_ = agreed_blocks(g, V);
  sums_.resize(V);
  p->stage = assign_stages(g, stage_blocks_);
  const StageRows batch_rows{x.shape()[0], start, rows};
  p->stages.resize(V);
  for (int s = 0; s < V; ++s) {
    StagePrograms& sp = p->stages[s];
    sp.forward = copy_stage(g, p->stage, s, loss, batch_rows);
    AS_CHECK(sp.forward.outs.size() < size_t{kTagsPerStage}, "pipeline: stage ", s, " sends ",
             sp.forward.outs.size(), " values; at most ", kTagsPerStage - 1);
    // Another rank's stage: its graph says what it sends and reads.
    if (!runs(s)) continue;
    sp.backward = copy_stage(g, p->stage, s, loss, batch_rows);
    differentiate(sp, g, p->weight, s);
    std::vector<int> forward_out = sp.forward.outs;
    for (int& id : forward_out) id = sp.forward.local.at(id);
    if (sp.forward.loss >= 0) forward_out.push_back(sp.forward.loss);
    sp.run_forward = compile(std::move(sp.forward.graph), forward_out);
    const std::map<int, Sharding> sums = add_into_sums(sp, s);
    sp.run_backward = compile(std::move(sp.backward.graph), sp.gradients_out, {}, sums);
    bind_sums(*sp.run_backward, sp.sums, sp.weights, s);
  }
  // Messages between two devices keep their order per tag: a value read by
  // two stages of one device would arrive in the sender's order, not theirs.
  for (int id = 0; id < g.size(); ++id) {
    if (p->stage[id] < 0) continue;
    std::vector<int> devices;
    for (int c : p->readers(id)) devices.push_back(c % shape_.stages);
    std::sort(devices.begin(), devices.end());
    AS_CHECK(std::adjacent_find(devices.begin(), devices.end()) == devices.end(),
             "pipeline: a value of stage ", p->stage[id],
             " is read by two stages of one device; use fewer virtual stages");
  }
  cache_.push_back(std::move(p));
  return *cache_.back();
}

double PipelineTrainer::train_on_batch(const Tensor& x, const Tensor& y) {
  AS_CHECK(!x.shape().empty() && !y.shape().empty() && x.shape()[0] == y.shape()[0],
           "pipeline: inputs of ", shape_str(x.shape()), " and targets of ", shape_str(y.shape()),
           " differ in examples");
  const int64_t batch = x.shape()[0];
  const int P = shape_.stages;
  const int64_t M = shape_.microbatches;
  AS_CHECK(M <= batch, "pipeline: ", M, " micro-batches need at least ", M,
           " examples in a batch, got ", batch);
  // Micro-batches as array_split cuts the batch (uneven is fine).
  const std::vector<int64_t> sizes = split_sizes(batch, M);
  std::vector<int64_t> starts(M, 0);
  for (int64_t m = 1; m < M; ++m) starts[m] = starts[m - 1] + sizes[m - 1];
  if (model_.cache_.clears() != traced_as_) {
    // Traced again with the model's new settings (the stages' cut kept).
    // Under mpirun a rank may see a clear another does not (a weight held
    // anew in another dtype clears only where it has blocks): building the
    // programs exchanges nothing, so ranks may rebuild at different steps.
    cache_.clear();
    sums_.clear();
    update_.reset();
    rank_update_.reset();
  }
  std::vector<Programs*> programs;
  std::vector<Tensor> xs, ys;
  for (int64_t m = 0; m < M; ++m) {
    programs.push_back(&programs_for(sizes[m], starts[m], x, y));
    xs.push_back(slice_axis(x, 0, starts[m], sizes[m]));
    ys.push_back(slice_axis(y, 0, starts[m], sizes[m]));
  }
  traced_as_ = model_.cache_.clears();
  PipelineStep step{
      .programs = {programs.begin(), programs.end()},
      .xs = std::move(xs),
      .ys = std::move(ys),
      .ctx = {model_.iterations_ + 1, model_.optimizer_->learning_rate_at(model_.iterations_ + 1)},
      .backward_passes = std::vector<int64_t>(P * shape_.virtual_stages, 0),
      .losses = std::vector<double>(M, 0)};
  peak_in_flight_.assign(P, 0);
  // Each device runs its passes in its schedule's order (its own stage, or
  // under the interleaved schedule its stages d, d + P, ...).
  const StageRunner runner(pipe_ranks_);
  auto run_device = [&](int d, Communicator& comm) {
    peak_in_flight_[d] = runner.run_device(pipe_schedule(shape_, d), comm, step);
  };
  if (mpi_) {
    // Under mpirun each rank is one device of one stage.
    run_device(device_, *mpi_);
  } else {
    // The stages share the cores: each its share for its kernels and the
    // devices inside it (a ShardedExecutor divides its caller's).
    if (!world_) world_ = std::make_unique<ThreadWorld>(DeviceMesh({P}, {"pipe"}));
    const int share = std::max(1, machine_cores() / P);
    world_->run([&](int s, Communicator& comm) {
      IntraOpThreadsScope cores_of_this_stage(share);
      run_device(s, comm);
    });
  }
  if (mpi_) {
    share_losses(step);
    update_on_ranks(*programs.front(), step.ctx);
  } else {
    apply_update(programs.front()->global, step.ctx);
  }
  ++model_.iterations_;
  double loss = 0;
  for (int64_t m = 0; m < M; ++m) loss += programs[m]->weight * step.losses[m];
  return loss;
}

std::vector<CollectiveRecord> PipelineTrainer::backward_collectives(int stage) const {
  AS_CHECK(!cache_.empty() && stage >= 0 && stage < int(cache_.front()->stages.size()),
           "pipeline: no stage ", stage, " (train a step first)");
  const Partition* p = cache_.front()->stages[stage].run_backward->partition();
  return p ? p->collectives : std::vector<CollectiveRecord>{};
}

// The batch's losses on every rank: the last stage's (its first device's:
// every device of a stage holds them).
void PipelineTrainer::share_losses(PipelineStep& step) {
  std::vector<float> losses(step.losses.begin(), step.losses.end());
  if (in_stage_ != 0) std::fill(losses.begin(), losses.end(), 0.0f);
  World::process().sum(losses.data(), static_cast<int64_t>(losses.size()));
  step.losses.assign(losses.begin(), losses.end());
}

// A weight's gradient in `g`: its stages' sums (inputs laid out as the
// stages leave them, each bound later from `reads`) added in stage order;
// invalid when no stage of this process reads the weight.
Value PipelineTrainer::summed_over_stages(Graph& g, const std::string& name,
                                          std::map<int, Sharding>& layouts, SumReads& reads) {
  Value grad;
  for (size_t s = 0; s < sums_.size(); ++s) {
    auto it = sums_[s].find(name);
    if (it == sums_[s].end()) continue;
    const Value part = g.input(cat("pipe.sum.", s, ".", name), model_.store_.shape({name, ""}));
    layouts[part.id] = it->second.layout;
    reads.emplace_back(part.id, name, static_cast<int>(s));
    grad = grad.valid() ? grad + part : part;
  }
  return grad;
}

// Binds the stages' sums `reads` names to `step`.
void PipelineTrainer::bind_reads(CompiledStep& step, const SumReads& reads) {
  for (const auto& [input, name, s] : reads) bind_sums(step, {input}, {name}, s);
}

// The layout a weight (and its reduced gradient) has inside the stages.
Sharding PipelineTrainer::weight_layout(const std::string& name) const {
  const Shape& shape = model_.store_.shape({name, ""});
  if (!model_.sharded()) return Sharding::replicated(static_cast<int>(shape.size()));
  return model_.dist_->weight_layout(name, shape);
}

// Binds this rank's block of weight `name`'s reduced gradient (made once).
void PipelineTrainer::bind_reduced(CompiledStep& step, int id, const std::string& name) {
  auto [it, fresh] = rank_update_->reduced.try_emplace(name);
  if (fresh) {
    const Shape& shape = model_.store_.shape({name, ""});
    const int d = step.devices().front();
    it->second = model_.sharded()
                     ? Tensor(weight_layout(name).local_shape(shape, model_.dist_->mesh(), d))
                     : Tensor(shape);
  }
  for (int d : step.devices()) step.bind(d, id, it->second);
}

// Which trained weights this rank holds: those its stages read (and, on
// stage device 0, those no stage reads, which step on zero gradients); a
// weight read on several devices (GPT-2's tied embedding and head) is
// written, and counted in the norm, by the first.
void PipelineTrainer::choose_rank_weights(const Programs& prog) {
  RankUpdate& u = *rank_update_;
  const Graph& traced = prog.global;
  for (int id : traced.parameters()) {
    const std::string& name = traced.node(id).leaf().name;
    if (model_.non_trainable_.count(name)) continue;
    std::vector<int> devices;
    for (size_t s = 0; s < prog.stages.size(); ++s)
      if (prog.stages[s].forward.local.count(id)) devices.push_back(int(s) % shape_.stages);
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    if (devices.empty()) devices.push_back(0);
    if (devices.front() == device_) u.written.insert(name);
    if (!std::count(devices.begin(), devices.end(), device_)) continue;
    u.weights.push_back(name);
    if (devices.size() > 1) u.shared[name] = devices;
  }
  model_.store_.write_only(u.written);
}

// The program adding each held weight's gradient over this rank's stages
// (in stage order) into its block in the weight's layout: the partial sums
// over a data axis reduced once.
void PipelineTrainer::build_reduce() {
  RankUpdate& u = *rank_update_;
  Graph g;
  std::map<int, Sharding> layouts;
  SumReads reads;
  std::vector<std::pair<int, std::string>> targets;
  for (const std::string& name : u.weights) {
    const Shape& shape = model_.store_.shape({name, ""});
    const Value grad = summed_over_stages(g, name, layouts, reads);
    if (!grad.valid()) continue;  // no stage reads it: its gradient stays zero
    const Value target = g.input("pipe.reduced." + name, shape);
    layouts[target.id] = weight_layout(name);
    g.add(Op::Accumulate, {target, grad});
    targets.emplace_back(target.id, name);
  }
  u.reduce = compile(std::move(g), {}, {}, layouts);
  bind_reads(*u.reduce, reads);
  for (const auto& [input, name] : targets) bind_reduced(*u.reduce, input, name);
}

// The sum of the squares of the gradients this rank counts (the weights it
// writes), for the global norm.
void PipelineTrainer::build_norm() {
  RankUpdate& u = *rank_update_;
  Graph g;
  std::map<int, Sharding> layouts;
  std::vector<Value> grads;
  std::vector<std::string> names;
  for (const std::string& name : u.weights) {
    if (!u.written.count(name)) continue;
    grads.push_back(g.input("pipe.reduced." + name, model_.store_.shape({name, ""})));
    layouts[grads.back().id] = weight_layout(name);
    names.push_back(name);
  }
  if (grads.empty()) return;
  const Value sumsq = Optimizer::sum_of_squares(g, grads, grads);
  u.norm = compile(std::move(g), {sumsq.id}, {}, layouts);
  for (size_t k = 0; k < grads.size(); ++k) bind_reduced(*u.norm, grads[k].id, names[k]);
}

// The optimizer's step on this rank's weights, clipping by the squared norm
// every stage's ranks summed. Every weight's state is declared (none made)
// so that a checkpoint names them all.
void PipelineTrainer::build_rank_step() {
  RankUpdate& u = *rank_update_;
  const bool clips = model_.optimizer_->clipnorm > 0;
  {
    Graph all;
    std::vector<Value> weights, grads;
    for (const std::string& name : model_.store_.weight_paths()) {
      if (model_.non_trainable_.count(name)) continue;
      weights.push_back(all.parameter(name, model_.store_.shape({name, ""})));
      grads.push_back(all.input("grad." + name, weights.back().shape()));
    }
    model_.optimizer_->append_update(all, weights, grads);
    model_.declare_state(all, {});
  }
  Graph g;
  std::vector<Value> weights, grads;
  std::map<int, int> like;
  for (const std::string& name : u.weights) {
    weights.push_back(g.parameter(name, model_.store_.shape({name, ""})));
    grads.push_back(g.input("pipe.reduced." + name, weights.back().shape()));
    like[grads.back().id] = weights.back().id;
  }
  const Value sumsq = g.input("pipe.sumsq", {});
  if (clips)
    model_.optimizer_->append_update(g, weights, grads, sumsq);
  else
    model_.optimizer_->append_update(g, weights, grads);
  constrain(weights);
  model_.declare_state(g, {});
  u.update = compile(std::move(g), {}, like, {{sumsq.id, Sharding::replicated(0)}});
  for (size_t k = 0; k < grads.size(); ++k) bind_reduced(*u.update, grads[k].id, u.weights[k]);
  // A replicated scalar: every device reads the one written each step.
  if (reads_leaf(*u.update, sumsq.id))
    for (int d : u.update->devices()) u.update->bind(d, sumsq.id, u.sumsq);
}

// Sums the reduced gradients of weights read on several devices between
// their ranks (each sends its block to the others and adds theirs in device
// order, so every one holds the same bits).
void PipelineTrainer::exchange_shared() {
  RankUpdate& u = *rank_update_;
  int tag = kExchangeTag;
  for (const auto& [name, devices] : u.shared) {
    Tensor& mine = u.reduced.at(name);
    for (int d : devices)
      if (d != device_) send_tensor(*mpi_, mine, pipe_ranks_[d], tag);
    Tensor sum(mine.shape());
    for (int d : devices)
      add_into(sum, d == device_
                        ? mine
                        : recv_tensor(*mpi_, mine.shape(), DType::F32, pipe_ranks_[d], tag));
    std::copy_n(sum.f32(), sum.numel(), mine.f32());
    ++tag;
  }
}

// The update under mpirun: each rank reduces its stages' gradients, sums
// those of shared weights with the other readers', adds its share of the
// squared norm to every stage's (over the pipe axis) and updates its own
// weights.
void PipelineTrainer::update_on_ranks(const Programs& prog, const StepContext& ctx) {
  if (!rank_update_) {
    rank_update_ = std::make_unique<RankUpdate>();
    choose_rank_weights(prog);
    build_reduce();
    if (model_.optimizer_->clipnorm > 0) build_norm();
    build_rank_step();
  }
  RankUpdate& u = *rank_update_;
  StepContext first = ctx;
  first.microbatch = 0;  // the reduced gradients are written afresh
  u.reduce->run(first);
  exchange_shared();
  if (model_.optimizer_->clipnorm > 0) {
    float sumsq = 0;
    if (u.norm) {
      u.norm->run(ctx);
      sumsq = u.norm->output(0).item();
    }
    mpi_->all_reduce(&sumsq, 1, ReduceOp::Sum, pipe_group_);
    u.sumsq.f32()[0] = sumsq;
  }
  u.update->run(ctx);
}

// Keras's optimizer.apply, as the model's own step does (nn/model.cc): each
// constrained weight becomes constraint(weight) after its update (traced
// after it, so it reads the updated value).
void PipelineTrainer::constrain(const std::vector<Value>& weights) const {
  for (const Value& w : weights)
    if (auto c = model_.constraints_.find(w.node().leaf().name); c != model_.constraints_.end())
      composed::assign(w, c->second(w));
}

// The optimizer's step on the summed gradients: one program over every
// trained weight in the traced step's order (the clip norm sums them as one
// device's step does; a weight no stage differentiates steps on a zero
// gradient, as there), on the model's own weights and state. It reads each
// stage's sums where the backward programs left them, adds a weight's over
// the stages that read it (in stage order) and reduces partial sums once.
void PipelineTrainer::apply_update(const Graph& traced, const StepContext& ctx) {
  if (!update_) {
    update_ = std::make_unique<Update>();
    Graph g;
    std::vector<Value> weights, grads;
    std::map<int, int> like;          // a zero gradient laid out as its weight
    std::map<int, Sharding> layouts;  // a stage's sum as the stage leaves it
    SumReads reads;
    for (int id : traced.parameters()) {
      const Node& n = traced.node(id);
      const std::string& name = n.leaf().name;
      if (model_.non_trainable_.count(name)) continue;
      weights.push_back(g.parameter(name, n.shape));
      Value grad = summed_over_stages(g, name, layouts, reads);
      if (!grad.valid()) {
        grad = g.input("grad." + name, n.shape);
        like[grad.id] = weights.back().id;
        update_->zeros.push_back(grad.id);
      }
      grads.push_back(grad);
    }
    model_.optimizer_->append_update(g, weights, grads);
    constrain(weights);
    model_.declare_state(g, {});
    update_->step = compile(std::move(g), {}, like, layouts);
    for (const auto& [input, name, s] : reads) bind_sums(*update_->step, {input}, {name}, s);
    for (int id : update_->zeros)
      bind_if_read(*update_->step, id, Tensor::zeros(update_->step->graph().node(id).shape));
  }
  update_->step->run(ctx);
}

}  // namespace autoshard
