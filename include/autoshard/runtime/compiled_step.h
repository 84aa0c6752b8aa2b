// CompiledStep: one traced step (a training step, an evaluation, a forward
// pass) made ready to run many times: on one device through an Executor, or
// partitioned over a mesh through a ShardedExecutor. StepCache keeps one per
// batch shape, as Keras keeps one traced function per input signature.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/sharded_executor.h"
#include "autoshard/shard/partitioner.h"

namespace autoshard {

class CompiledStep {
 public:
  // One device; `outputs` are the values read after each run (the first is
  // the result).
  CompiledStep(Graph graph, std::vector<int> outputs);
  // A mesh: the graph partitioned with `request`; this process runs its
  // own devices (all of them in-process, its rank under mpirun).
  CompiledStep(Graph graph, std::vector<int> outputs, const DeviceMesh& mesh,
               const PartitionRequest& request, const MeshPlacement* placement = nullptr);

  const Graph& graph() const { return graph_; }
  bool sharded() const { return sharded_ != nullptr; }
  // The devices this process runs ({0} on one device).
  const std::vector<int>& devices() const { return devices_; }
  // The layout of a leaf (replicated on one device).
  Sharding layout(int leaf) const;
  const Partition* partition() const { return sharded_ ? &sharded_->partition() : nullptr; }

  // Binds device `device`'s block of a leaf (the whole value on one device).
  void bind(int device, int leaf, const Tensor& block);
  // Binds each of this process's devices' block of an input given whole.
  void bind_input(int leaf, const Tensor& whole);
  void run(const StepContext& ctx);
  // The result (output 0), whole (every device holds the same).
  const Tensor& result() const { return output(0); }
  // Output `i`, whole.
  const Tensor& output(size_t i) const;
  void set_profile(OpProfile* profile);
  // Records the runs of the steps `timeline` asks for (runtime/timeline.h);
  // null: the innermost TimelineScope's timeline, if any.
  void set_timeline(TimelineRecorder* timeline) { timeline_ = timeline; }
  // Bytes of the intermediate buffers of this process's devices (made on the
  // first run).
  size_t planned_bytes() const;

 private:
  Graph graph_;
  std::vector<int> outputs_;
  std::vector<int> devices_{0};
  std::unique_ptr<Executor> exec_;
  std::unique_ptr<ShardedExecutor> sharded_;
  TimelineRecorder* timeline_ = nullptr;
  bool updates_ = false;  // a training step (it updates weights)
};

// Compiled steps by a key naming what they were traced for.
class StepCache {
 public:
  CompiledStep* find(const std::string& key) const;
  CompiledStep& insert(const std::string& key, std::unique_ptr<CompiledStep> step);
  void clear() {
    steps_.clear();
    ++clears_;
  }
  // How many times it was cleared: programs compiled elsewhere from the
  // same model (PipelineTrainer's) are stale once this changes.
  uint64_t clears() const { return clears_; }

 private:
  std::map<std::string, std::unique_ptr<CompiledStep>> steps_;
  uint64_t clears_ = 0;
};

}  // namespace autoshard
