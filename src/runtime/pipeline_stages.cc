#include "autoshard/runtime/pipeline_stages.h"

#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"

namespace autoshard {

std::vector<int> assign_stages(const Graph& g, const std::vector<int64_t>& blocks_per_stage) {
  std::vector<int> stage_of_block;
  for (size_t s = 0; s < blocks_per_stage.size(); ++s)
    stage_of_block.insert(stage_of_block.end(), blocks_per_stage[s], static_cast<int>(s));
  std::vector<int> stage(g.size(), kLeaf);
  for (int id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.is_leaf()) continue;
    if (n.inputs.empty()) {
      stage[id] = kConstant;
      continue;
    }
    int after = 0;
    for (int in : n.inputs) after = std::max(after, stage[in]);
    stage[id] = n.region >= 0 ? stage_of_block.at(n.region) : after;
    AS_CHECK(stage[id] >= after, "pipeline: block ", n.region, " reads a value of stage ", after,
             ", after its own stage ", stage[id], " (blocks must follow one another)");
  }
  return stage;
}

StageGraph copy_stage(const Graph& g, const std::vector<int>& stage, int s, int loss,
                      const StageRows& rows) {
  StageGraph sg;
  auto local_of = [&](int id) {
    if (auto it = sg.local.find(id); it != sg.local.end()) return it->second;
    const Node& n = g.node(id);
    Value v;
    if (n.is_parameter()) {
      v = sg.graph.parameter(n.leaf().name, n.shape, n.dtype);
    } else if (n.is_input()) {
      v = sg.graph.input(n.leaf().name, n.shape, n.dtype);
    } else if (stage[id] == kConstant) {
      v = sg.graph.add(n.op, {}, n.attrs);
    } else {
      v = sg.graph.input(cat("pipe.", id), n.shape, n.dtype);
      sg.ins.push_back(id);
    }
    return sg.local[id] = v.id;
  };
  for (int id = 0; id < g.size(); ++id) {
    if (stage[id] != s) continue;
    const Node& n = g.node(id);
    std::vector<Value> inputs;
    for (int in : n.inputs) inputs.push_back(sg.graph.value(local_of(in)));
    OpAttrs attrs = n.attrs;
    if (const auto place = op_def(n.op).place_block; place && rows.count < rows.batch) {
      AS_CHECK(!n.shape.empty() && n.shape[0] == rows.count, "pipeline: a ", op_def(n.op).name,
               " of shape ", shape_str(n.shape),
               " is not batch first; micro-batches cannot draw its values as one device does");
      ShardOrigin rows_block{n.shape, std::vector<int64_t>(n.shape.size(), 0)};
      rows_block.global_shape[0] = rows.batch;
      rows_block.offsets[0] = rows.start;
      place(attrs, rows_block);
    }
    sg.local[id] = sg.graph.add(n.op, std::move(inputs), std::move(attrs)).id;
  }
  std::sort(sg.ins.begin(), sg.ins.end());
  for (int id = 0; id < g.size(); ++id) {
    if (stage[id] < 0) continue;
    for (int in : g.node(id).inputs)
      if (stage[in] == s && stage[id] > s &&
          std::find(sg.outs.begin(), sg.outs.end(), in) == sg.outs.end())
        sg.outs.push_back(in);
  }
  std::sort(sg.outs.begin(), sg.outs.end());
  if (stage[loss] == s) sg.loss = sg.local.at(loss);
  return sg;
}

std::vector<int> StagedPrograms::readers(int id) const {
  std::vector<int> out;
  for (size_t c = stage[id] + 1; c < stages.size(); ++c)
    if (std::count(stages[c].forward.ins.begin(), stages[c].forward.ins.end(), id))
      out.push_back(static_cast<int>(c));
  return out;
}

size_t StagedPrograms::out_index(int id) const {
  const std::vector<int>& outs = stages[stage[id]].forward.outs;
  return static_cast<size_t>(std::find(outs.begin(), outs.end(), id) - outs.begin());
}

bool reads_leaf(const CompiledStep& step, int id) {
  return !step.partition() || step.partition()->local_of[step.devices().front()][id] >= 0;
}

void bind_if_read(CompiledStep& step, int id, const Tensor& whole) {
  if (reads_leaf(step, id)) step.bind_input(id, whole);
}

void add_into(Tensor& sum, const Tensor& t) {
  float* s = sum.f32();
  const float* v = t.f32();
  parallel_for(sum.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) s[i] += v[i];
  });
}

void send_tensor(Communicator& comm, const Tensor& t, int dst, int tag) {
  comm.send(static_cast<const float*>(t.raw()), t.numel(), dst, tag);
}

Tensor recv_tensor(Communicator& comm, const Shape& shape, DType dtype, int src, int tag) {
  Tensor t(shape, dtype);
  comm.recv(static_cast<float*>(t.raw()), t.numel(), src, tag);
  return t;
}

namespace {

// Binds a pass's inputs: the values it received, and its micro-batch's rows
// of the model's input `x` and target `y` (global ids).
void bind_pass_inputs(CompiledStep& exec, const StageGraph& graph,
                      const std::vector<Tensor>& received, int x, const Tensor& xs, int y,
                      const Tensor& ys) {
  for (size_t k = 0; k < graph.ins.size(); ++k)
    bind_if_read(exec, graph.local.at(graph.ins[k]), received[k]);
  if (auto it = graph.local.find(x); it != graph.local.end()) bind_if_read(exec, it->second, xs);
  if (auto it = graph.local.find(y); it != graph.local.end()) bind_if_read(exec, it->second, ys);
}

}  // namespace

int64_t StageRunner::run_device(const PipeWork& work, Communicator& comm,
                                PipelineStep& step) const {
  Held held;
  int64_t peak = 0;
  for (const PipeUnit& u : work) {
    if (u.kind == 'F') {
      forward_pass(u.stage, u.microbatch, comm, step, held);
      peak = std::max<int64_t>(peak, held.size());
    } else {
      backward_pass(u.stage, u.microbatch, comm, step, held);
    }
  }
  return peak;
}

// Stage s's forward pass of micro-batch m: receives the values earlier
// stages send it, runs, sends its outputs to the later stages that read
// them; keeps what it received for the backward pass.
void StageRunner::forward_pass(int s, int64_t m, Communicator& comm, PipelineStep& step,
                               Held& held) const {
  StagedPrograms& prog = *step.programs[m];
  StagePrograms& sp = prog.stages[s];
  const StageGraph& graph = sp.forward;
  std::vector<Tensor> received;
  for (int id : graph.ins) {
    const int from = prog.stage[id];
    const Node& n = prog.global.node(id);
    received.push_back(
        recv_tensor(comm, n.shape, n.dtype, peer(from), value_tag(from, prog.out_index(id))));
  }
  bind_pass_inputs(*sp.run_forward, graph, received, prog.x, step.xs[m], prog.y, step.ys[m]);
  sp.run_forward->run(step.ctx);
  for (size_t k = 0; k < graph.outs.size(); ++k)
    for (int c : prog.readers(graph.outs[k]))
      send_tensor(comm, sp.run_forward->output(k), peer(c), value_tag(s, k));
  if (graph.loss >= 0) step.losses[m] = sp.run_forward->output(graph.outs.size()).item();
  held[{s, m}] = std::move(received);
}

// Stage s's backward pass of micro-batch m: its forward pass again from what
// it kept, then the gradients of its weights (accumulated) and of the values
// it received (sent back), given the gradients of its outputs that the
// stages reading them sent.
void StageRunner::backward_pass(int s, int64_t m, Communicator& comm, PipelineStep& step,
                                Held& held) const {
  StagedPrograms& prog = *step.programs[m];
  StagePrograms& sp = prog.stages[s];
  const StageGraph& graph = sp.backward;
  CompiledStep& exec = *sp.run_backward;
  bind_pass_inputs(exec, graph, held.at({s, m}), prog.x, step.xs[m], prog.y, step.ys[m]);
  std::vector<Tensor> dys;  // kept alive through the run
  for (size_t k = 0; k < graph.outs.size(); ++k) {
    if (sp.dy[k] < 0) continue;
    const Node& n = prog.global.node(graph.outs[k]);
    Tensor dy = Tensor::zeros(n.shape);
    for (int c : prog.readers(graph.outs[k]))  // in stage order
      add_into(dy, recv_tensor(comm, n.shape, DType::F32, peer(c), kGradientTag + value_tag(s, k)));
    bind_if_read(exec, sp.dy[k], dy);
    dys.push_back(std::move(dy));
  }
  // The stage's first backward pass of the step starts its gradient sums.
  StepContext ctx = step.ctx;
  ctx.microbatch = step.backward_passes[s]++;
  exec.run(ctx);
  for (size_t k = 0; k < graph.ins.size(); ++k) {
    if (sp.gradient_of_in[k] < 0) continue;
    const int id = graph.ins[k], from = prog.stage[id];
    send_tensor(comm, exec.output(sp.gradient_of_in[k]), peer(from),
                kGradientTag + value_tag(from, prog.out_index(id)));
  }
  held.erase({s, m});
}

}  // namespace autoshard
