#include "autoshard/runtime/compiled_step.h"

#include "autoshard/error.h"
#include "autoshard/runtime/timeline.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {
bool updates_weights(const Graph& g) {
  for (int i = 0; i < g.size(); ++i)
    if (op_def(g.node(i).op).writes_weight) return true;
  return false;
}
}  // namespace

CompiledStep::CompiledStep(Graph graph, std::vector<int> outputs)
    : graph_(std::move(graph)), outputs_(std::move(outputs)) {
  exec_ = std::make_unique<Executor>(graph_, outputs_);
  updates_ = updates_weights(graph_);
}

CompiledStep::CompiledStep(Graph graph, std::vector<int> outputs, const DeviceMesh& mesh,
                           const PartitionRequest& request, const MeshPlacement* placement)
    : graph_(std::move(graph)), outputs_(std::move(outputs)) {
  sharded_ = std::make_unique<ShardedExecutor>(graph_, mesh, request, outputs_, placement);
  devices_ = sharded_->devices();
  updates_ = updates_weights(graph_);
}

Sharding CompiledStep::layout(int leaf) const {
  return sharded_ ? sharded_->layout(leaf)
                  : Sharding::replicated(static_cast<int>(graph_.node(leaf).shape.size()));
}

void CompiledStep::bind(int device, int leaf, const Tensor& block) {
  if (sharded_)
    sharded_->bind(device, leaf, block);
  else
    exec_->bind(leaf, block);
}

void CompiledStep::bind_input(int leaf, const Tensor& whole) {
  if (!sharded_) {
    exec_->bind(leaf, whole);
    return;
  }
  for (int d : devices_)
    sharded_->bind(d, leaf, block_of(whole, sharded_->layout(leaf), sharded_->mesh(), d));
}

void CompiledStep::run(const StepContext& ctx) {
  TimelineRecorder* timeline = timeline_ ? timeline_ : active_timeline();
  if (timeline && !timeline->records(ctx.step)) timeline = nullptr;
  if (sharded_)
    sharded_->set_timeline(timeline);
  else
    exec_->set_timeline(timeline);
  const int64_t begin = timeline ? TimelineRecorder::now_ns() : 0;
  if (sharded_)
    sharded_->run(ctx);
  else
    exec_->run(ctx);
  if (timeline) timeline->add_run(ctx.step, updates_, begin, TimelineRecorder::now_ns());
}

const Tensor& CompiledStep::output(size_t i) const {
  AS_CHECK(i < outputs_.size(), "internal: the step has ", outputs_.size(), " outputs, not ",
           i + 1);
  return sharded_ ? sharded_->output(static_cast<int>(i)) : exec_->value(outputs_[i]);
}

void CompiledStep::set_profile(OpProfile* profile) {
  if (sharded_)
    sharded_->set_profile(profile);
  else
    exec_->set_profile(profile);
}

size_t CompiledStep::planned_bytes() const {
  return sharded_ ? sharded_->planned_bytes() : exec_->planned_bytes();
}

CompiledStep* StepCache::find(const std::string& key) const {
  auto it = steps_.find(key);
  return it == steps_.end() ? nullptr : it->second.get();
}

CompiledStep& StepCache::insert(const std::string& key, std::unique_ptr<CompiledStep> step) {
  auto& slot = steps_[key];
  slot = std::move(step);
  return *slot;
}

}  // namespace autoshard
