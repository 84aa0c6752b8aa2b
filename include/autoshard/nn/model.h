// Model: Keras's Model for C++. Build one functionally (Input -> layers ->
// output), as a Sequential stack, or by subclassing and overriding call().
// compile() picks an optimizer and a loss; fit/evaluate/predict run.
//
// Each distinct batch shape is traced once into a Graph (the training step
// holds forward, loss, gradients and the optimizer update), compiled into a
// CompiledStep and then run repeatedly. Weights and optimizer slots live in
// a WeightStore, keyed by path.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autoshard/nn/callbacks.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/metrics.h"
#include "autoshard/nn/weight_source.h"
#include "autoshard/nn/weight_store.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/compiled_step.h"
#include "autoshard/tensor/weights_dtype.h"

namespace autoshard {

struct InputSpec {
  Shape shape;  // per example, without the batch dimension
  DType dtype = DType::F32;
  std::string name = "";  // how ModelInputs names it (Input()'s name, "input_N" by default)
};

// The inputs of a batch: one tensor, or, for a model of several inputs,
// tensors by the names given to Input() (Keras's dict of inputs):
//   model.fit({{"token_ids", ids}, {"padding_mask", mask}}, labels);
// The targets of a model of several outputs are named likewise, by the name
// of the layer that makes each output (Keras's dict of targets):
//   model.fit(x, {{"class_head", labels}, {"box_head", boxes}});
class ModelInputs {
 public:
  ModelInputs(const Tensor& x) : tensors_{{"", x}} {}  // NOLINT: a tensor is one input
  ModelInputs(std::map<std::string, Tensor> named) : tensors_(std::move(named)) {}  // NOLINT
  ModelInputs(std::initializer_list<std::pair<const std::string, Tensor>> named)
      : tensors_(named) {}
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }

 private:
  std::map<std::string, Tensor> tensors_;  // "" for the one unnamed tensor
};

using ModelTargets = ModelInputs;

struct FitOptions {
  int64_t batch_size = 32;
  int epochs = 1;
  bool verbose = true;  // show a ProgressBar
  std::vector<std::shared_ptr<Callback>> callbacks = {};
};

struct History {
  std::vector<double> loss;  // mean training loss of each epoch
  // Each metric's mean over each epoch's examples, by name (on the training
  // batches' forward pass, before each update, as Keras reports it).
  std::map<std::string, std::vector<double>> metrics;
};

class Model {
 public:
  // Functional model from symbolic inputs to one symbolic output, or to
  // several (Keras's list of outputs; a layer called twice shares its
  // weights, as in Keras).
  Model(std::vector<SymbolicTensor> inputs, SymbolicTensor output, std::string name = "model");
  Model(std::vector<SymbolicTensor> inputs, std::vector<SymbolicTensor> outputs,
        std::string name = "model");
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Compiles for the distribution set now (set_distribution or a
  // DistributionScope), if any: then every step runs sharded over its mesh.
  // `metrics` are reported by fit and evaluate_with_metrics next to the loss;
  // each step then also returns its predictions (gathered whole).
  void compile(std::shared_ptr<Optimizer> optimizer, Loss loss, std::vector<Metric> metrics = {});
  // A model of several outputs: one loss per output (or one for all), the
  // total loss sum_k loss_weights[k] * loss_k (weights default to 1).
  // Metrics are measured on every output, named "<output>_<metric>" when
  // there are several.
  void compile(std::shared_ptr<Optimizer> optimizer, std::vector<Loss> losses,
               std::vector<double> loss_weights, std::vector<Metric> metrics = {});
  // The names of the outputs (the layers that make them), in order.
  std::vector<std::string> output_names() const;
  void set_distribution(std::shared_ptr<Distribution> d);
  const std::shared_ptr<Distribution>& distribution_strategy() const { return dist_; }
  // The whole (unpartitioned) training step for these batch shapes, as a
  // planner sees it (AutoShard::choose_mesh). Needs compile().
  Graph training_graph(const Shape& x_shape, const Shape& y_shape, DType y_dtype = DType::I32);
  // The partitioned training step for these batch shapes, without touching
  // any weight (for `autoshard plan`), lowered for `devices` only (default:
  // device 0, which holds the largest blocks). Needs a distribution.
  Partition plan_training(const Shape& x_shape, const Shape& y_shape, DType y_dtype = DType::I32,
                          const std::vector<int>& devices = {0});

  // One optimizer step on one batch; returns the batch's loss (before the step).
  double train_on_batch(const ModelInputs& x, const ModelTargets& y);
  double test_on_batch(const ModelInputs& x, const ModelTargets& y);
  Tensor predict_on_batch(const ModelInputs& x);

  // One step of generation for a decoder whose attention comes from
  // Trace::causal_attention: runs `tokens` [batch, T] (i32) at positions
  // start .. start + T - 1 of sequences whose earlier keys and values this
  // model kept from the previous calls, and returns the logits [batch, T,
  // vocab]. The key-value caches hold `cache_length` positions; they are
  // made on first use and laid out by the distribution
  // (Distribution::buffer_layout: with Megatron's layout or AutoShard's
  // plan, split like the attention heads). A new sequence starts at 0.
  Tensor predict_cached(const Tensor& tokens, int64_t start, int64_t cache_length);
  // Traces and compiles that step for tokens [batch, T] without running it
  // (to time generation without the compilation).
  void prepare_generation(int64_t batch, int64_t T, int64_t cache_length);
  // That step as a Graph with global shapes, for planners (AutoShard's mesh
  // choice for generation).
  Graph generation_graph(int64_t batch, int64_t T, int64_t cache_length);
  // Paths of the buffers a generation step keeps ("h.0.attn.key_cache", ...).
  std::vector<std::string> buffer_paths();
  // The weights held in bf16 or int8 for decoding, by path, as
  // quantize_weights (nn/generation.h) sets them: generation steps are
  // traced with them (Graph::hold_weights), so their products are
  // QuantizedEinsum ops, and traced anew when the set changes. Shared with
  // the QuantizedWeights that holds them, which may outlive the model.
  class HeldWeights {
   public:
    void hold(const std::string& path, WeightsDType format);
    void release(const std::string& path, WeightsDType format);  // if held in `format`
    const std::map<std::string, WeightsDType>& formats() const { return formats_; }
    // Tells one set from another in the steps' keys ("" when none).
    const std::string& signature() const { return signature_; }

   private:
    void update();
    std::map<std::string, WeightsDType> formats_;
    std::string signature_;
  };
  const std::shared_ptr<HeldWeights>& held_weights() const { return held_; }

  History fit(const ModelInputs& x, const ModelTargets& y, FitOptions options = {});
  // Mean loss over batches of batch_size (a last partial batch included).
  double evaluate(const ModelInputs& x, const ModelTargets& y, int64_t batch_size = 32);
  // The mean loss ("loss") and each compiled metric, by name, over every example.
  Logs evaluate_with_metrics(const ModelInputs& x, const ModelTargets& y, int64_t batch_size = 32);

  // Each metric's running sums over the batches of an epoch or evaluation,
  // and how it reads them.
  struct MetricSums {
    Metric::Sums sums;
    std::function<double(const Metric::Sums&)> result;
  };
  using MetricTotals = std::map<std::string, MetricSums>;
  // An evaluation run in parts, for a caller that stops or reports between
  // them (Python's Ctrl-C and progress bars): each part adds its batches to
  // `sums`; evaluation_logs reads the whole set's loss and metrics (a
  // ratio such as Precision from all the counts, not a mean of the parts').
  struct EvaluationSums {
    double loss = 0;  // summed over examples
    int64_t examples = 0;
    MetricTotals metrics;
  };
  void evaluate_part(const ModelInputs& x, const ModelTargets& y, int64_t batch_size,
                     EvaluationSums& sums);
  static Logs evaluation_logs(const EvaluationSums& sums);
  // The (first) output's predictions.
  Tensor predict(const ModelInputs& x, int64_t batch_size = 32);
  // Every output's predictions, in the order of output_names().
  std::vector<Tensor> predict_outputs(const ModelInputs& x, int64_t batch_size = 32);

  // Model weights by path (created on first use; optimizer slots excluded),
  // the non-trainable ones (moving statistics) included.
  std::vector<std::string> weight_paths();
  // The weights that take no gradient (BatchNormalization's moving_mean and
  // moving_variance): updated by the training step itself, saved and loaded
  // with the others.
  std::vector<std::string> non_trainable_weight_paths();
  // Keras's trainable = False on layers (by name) or nested models (by
  // scope): their weights take no gradient, no optimizer slot and no
  // collective, and a frozen BatchNormalization runs in inference mode
  // (Trace::freeze). Replaces the set before; the next step is traced anew.
  void set_frozen(std::set<std::string> scopes);
  const std::set<std::string>& frozen() const { return frozen_; }
  // Holds the frozen weights in bf16 from the next step on (on: half their
  // bytes, as KerasHub's LoRA fine-tuning after from_preset(dtype=
  // "bfloat16") holds its base weights): every non-trainable weight that only
  // products (einsum: Dense, EinsumDense, attention projections, a head) and
  // embedding gathers read, which widen it to f32 as they read it. Its values are
  // rounded to bf16 once (to nearest even), as its blocks are made (read
  // from a file or drawn) or when it is first held so; the rest (trainable
  // weights, optimizer state, norms' scales, biases, activations) stays f32
  // and so does the arithmetic. Off: they are widened back to f32 (keeping
  // the rounded values). gather_weight gives their f32 values.
  void hold_frozen_weights_in_bf16(bool on = true);
  bool frozen_weights_in_bf16() const { return bf16_frozen_; }
  // The dtype a weight is held in (bf16 for a frozen weight held so).
  DType weight_dtype(const std::string& path);
  // Bytes this process holds for the model's weights (every local device's
  // blocks made so far, at their dtypes; optimizer state not counted).
  int64_t weight_bytes();
  // Keras's regularizers: penalties on weights by path and on layers'
  // outputs by layer scope, added to the training and evaluation loss
  // (Trace::penalize).
  void set_regularizers(std::map<std::string, Trace::Penalty> weights,
                        std::map<std::string, Trace::Penalty> activities);
  // Keras's kernel_constraint and bias_constraint, by weight path: after
  // each optimizer update the weight becomes constraint(weight).
  void set_constraints(std::map<std::string, Trace::Penalty> weights);

  // The whole value of a weight ("h.0.mlp.c_fc.kernel") or optimizer slot
  // ("optimizer.m.h.0.mlp.c_fc.kernel"). On one device it shares the live
  // storage; on a mesh it is assembled from the devices' blocks (a copy).
  // Under mpirun this is a collective: every rank must call it, in the same
  // order, for the same keys.
  Tensor gather_weight(const std::string& key);
  // Copies `value` into a weight or slot (shapes must match); on a mesh each
  // device receives its block.
  void set_weight(const std::string& key, const Tensor& value);
  // Keys of the optimizer slots created so far ("optimizer.<slot>.<path>").
  std::vector<std::string> slot_paths();

  // Takes weights (and optimizer slots) from sources, keyed like
  // gather_weight. Every source is checked first; an error leaves the model
  // as it was. Weights not yet materialised are read later, straight into
  // each device's block; others are read now.
  void load_weights(const std::map<std::string, WeightSource>& sources);

  // A consistent copy of every weight (and, if asked, optimizer slot) as
  // per-device blocks, for saving while training goes on.
  using Snapshot = WeightStore::Snapshot;
  Snapshot snapshot(bool include_slots);
  int64_t iterations() const { return iterations_; }
  void set_iterations(int64_t steps) { iterations_ = steps; }
  int64_t count_params();
  // A table of weights with shapes and sizes.
  std::string summary();

  // The forward pass as a Graph with global shapes for a batch size (used by
  // planners and tools). Training adds dropout.
  Value trace_forward(Graph& graph, int64_t batch_size, bool training);

  const std::string& name() const { return name_; }
  // Recompute each region's forward pass (a transformer block) during the
  // backward pass instead of keeping its activations: less memory, the same
  // numbers. Set before the first step.
  void set_recompute(bool on);
  bool recompute() const { return recompute_; }

  // The seed of the weights' initial draws (and of dropout masks).
  void set_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  // When set, every executor of this model times its kernels into it.
  OpProfile* profile = nullptr;

 protected:
  Model(std::vector<InputSpec> inputs, std::string name);
  virtual Value call(Trace& trace, const std::vector<Value>& inputs);

 private:
  // Runs the model's traced step cut into stages, on its own weights and state.
  friend class PipelineTrainer;
  enum class Mode { Train, Test, Predict };
  struct Traced {
    Graph graph;
    int result = -1;  // the loss, or the forward's (first) output when predicting
    // Every output of the forward pass, read for metrics (or for
    // predict_outputs); empty when nothing reads them.
    std::vector<int> predictions;
  };
  using Batch = std::vector<Tensor>;  // the inputs (or targets) in the model's order
  Batch ordered(const ModelInputs& x) const;
  Batch ordered_targets(const ModelTargets& y) const;
  int64_t examples(const Batch& x, const Batch* y, const char* what) const;
  CompiledStep& compiled(Mode mode, const Batch& x, const Batch* y);
  CompiledStep& compile(const std::string& key, Traced traced);
  Traced trace_generation(int64_t batch, int64_t T, int64_t cache_length);
  CompiledStep& generation_step(int64_t batch, int64_t T, int64_t cache_length);
  static std::string buffer_key(const LeafAttrs& leaf);
  Tensor& buffer_block(const LeafAttrs& leaf, const Sharding& layout, int device);
  Traced trace_step(Mode mode, const std::vector<Shape>& x_shapes,
                    const std::vector<DType>& x_dtypes, const std::vector<Shape>& y_shapes,
                    const std::vector<DType>& y_dtypes);
  // The forward pass's outputs; `penalties`, when given, receives the
  // regularizers' loss terms, `masks` each output's mask (Trace::mask;
  // invalid where it has none).
  std::vector<Value> trace_outputs(Graph& graph, int64_t batch_size, bool training,
                                   std::vector<Value>* penalties = nullptr,
                                   std::vector<Value>* masks = nullptr);
  std::vector<Value> replay(Trace& trace, const std::vector<Value>& inputs);
  // Keras's masked outputs weigh their loss by the mask (losses::masked).
  Value total_loss(const std::vector<Value>& outputs, const std::vector<Value>& targets,
                   const std::vector<Value>& masks = {});
  PartitionRequest leaf_layouts(const Graph& g);
  void bind_state(CompiledStep& step);
  void check_memory(const CompiledStep& step) const;
  void place_state();
  // Runs the step for these inputs (and targets), adding to `totals`; the
  // step holds its result.
  CompiledStep& run(Mode mode, const Batch& x, const Batch* y, const StepContext& ctx,
                    MetricTotals* totals = nullptr);
  std::vector<Tensor> predict_batch(const Batch& x);
  double train_batch(const Batch& x, const Batch& y, MetricTotals* totals);
  static Logs means(double loss, const MetricTotals& totals);
  void declare_state(const Graph& graph, const std::map<std::string, Initializer>& inits);
  // After a model's call was traced: holds its frozen weights in bf16 when
  // asked (hold_frozen_weights_in_bf16).
  void hold_frozen(Graph& graph, const Trace& trace) const;
  bool sharded() const;
  void ensure_built();

  std::string name_;
  std::vector<InputSpec> input_specs_;
  std::vector<SymbolicTensor> symbolic_inputs_;
  std::vector<SymbolicTensor> symbolic_outputs_;  // empty: call() defines the model
  std::shared_ptr<Optimizer> optimizer_;
  std::vector<Loss> losses_;  // one per output, or one for every output
  std::vector<double> loss_weights_;
  // Weights traced as non-trainable (Trace::weight's trainable = false).
  std::set<std::string> non_trainable_;
  std::set<std::string> frozen_;  // set_frozen
  bool bf16_frozen_ = false;      // hold_frozen_weights_in_bf16
  std::map<std::string, Trace::Penalty> weight_penalties_, activity_penalties_, constraints_;
  std::vector<Metric> metrics_;
  // Per output, which step output holds its mask for the metrics (-1: it
  // has none); the same for every trace of the model.
  std::vector<int> metric_masks_;
  std::shared_ptr<Distribution> dist_;
  uint64_t seed_ = 0;
  bool recompute_ = false;
  WeightStore store_;
  // Buffers (key-value caches) by key and shape: this process's devices'
  // blocks, zeros when made.
  std::map<std::string, std::map<int, Tensor>> buffers_;
  int64_t iterations_ = 0;
  std::shared_ptr<HeldWeights> held_ = std::make_shared<HeldWeights>();
  StepCache cache_;
};

// A linear stack of layers on one input.
class Sequential : public Model {
 public:
  Sequential(SymbolicTensor input, std::vector<Layer> layers, std::string name = "sequential");
  void add(Layer layer) { layers_.push_back(std::move(layer)); }

 protected:
  Value call(Trace& trace, const std::vector<Value>& inputs) override;

 private:
  std::vector<Layer> layers_;
};

}  // namespace autoshard
