// autoshard._native's language models and tokenizers: what `autoshard
// generate`, `autoshard train` and `autoshard tokenize` do, as objects
// (python/autoshard/hf.py and tokenizer.py give them their Python names).
// Each method does what the command does, step for step, so that the same
// fixture gives the same ids and losses bit for bit: the model is built, laid
// out and loaded as the command builds it (src/cli/generate.cc, train.cc).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include "autoshard/app/language_model_training.h"
#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/keras_variables.h"
#include "autoshard/io/token_data.h"
#include "autoshard/io/tokenizer.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/models/keras_hub_model.h"
#include "autoshard/models/language_model.h"
#include "autoshard/nn/generation.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/sample_weights.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "convert.h"
#include "plan/layout_map_export.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::tokenizer {
// GPT-2's vocab.json + merges.txt and BERT's vocab.txt, read as files of
// their own (src/io/tokenizer/pipeline.h, which load_tokenizer calls on a
// directory).
std::unique_ptr<Tokenizer> gpt2_tokenizer(const std::string& vocab_json,
                                          const std::string& merges_txt);
std::unique_ptr<Tokenizer> bert_tokenizer(const std::string& vocab_txt, bool lowercase);
}  // namespace autoshard::tokenizer

namespace autoshard::python {
namespace {

namespace fs = std::filesystem;

// A step boundary of generate or fit: runs `hook` (a Python callback, with
// the GIL), then stops if Ctrl-C came (Python's handler raises
// KeyboardInterrupt, which leaves the engine's loop from here) or the hook
// raised. Under mpirun every rank stops at the same step when any rank
// stops, so none is left waiting in a collective: the others raise
// KeyboardInterrupt too, or a RuntimeError when that rank's hook raised.
template <typename Hook>
void step_boundary(Hook&& hook) {
  std::optional<py::error_already_set> error;
  try {
    hook();
  } catch (py::error_already_set& e) {
    error.emplace(std::move(e));
  }
  if (!error && PyErr_CheckSignals() != 0) error.emplace();  // takes the raised exception
  const int mine = !error ? 0 : error->matches(PyExc_KeyboardInterrupt) ? 1 : 2;
  const int64_t any = World::process().max(mine);
  if (error) throw std::move(*error);
  if (any == 0) return;
  if (any == 1)
    PyErr_SetNone(PyExc_KeyboardInterrupt);
  else
    PyErr_SetString(PyExc_RuntimeError, "stopped: another MPI rank raised an exception here");
  throw py::error_already_set();
}

// How a model is laid out over devices: the CLI's --mesh, --devices and --plan.
struct Placement {
  std::string mesh;  // "data=2,model=2"; empty: one device (or one per MPI rank)
  int devices = 0;   // > 0: AutoShard picks the mesh's shape for this many
  std::string plan = "auto";
  std::string cluster = "cpu";
  double memory_per_device = 0;
  // plan "layout_map": ModelParallel with these weight layouts (a Keras
  // LayoutMap translated by autoshard.keras_hub).
  LayoutMap layout_map = {};

  // The distribution is made per build: a bad mesh or plan fails at once.
  void check() const {
    AS_CHECK(mesh.empty() || devices == 0, "give either mesh or devices, not both");
    AS_CHECK(devices >= 0, "devices must be 0 (one, or one per MPI rank) or more, not ", devices);
    if (!mesh.empty()) DeviceMesh::parse(mesh);
    AS_CHECK(plan != "layout_map" || !mesh.empty(), "a layout map needs a mesh");
    AS_CHECK(plan == "auto" || plan == "layout_map" || plan == "data" || plan == "fsdp" ||
                 plan == "megatron" || plan == "megatron-sp" || fs::is_regular_file(plan),
             "plan '", plan,
             "' is none of auto, data, fsdp, megatron, megatron-sp, and no layout map file of that "
             "name exists");
  }
};

// The distribution `p` asks for (src/cli/options.cc's make_distribution):
// null for one device. `step` is the step AutoShard plans when it picks the
// mesh itself.
std::shared_ptr<Distribution> distribution_of(const Placement& p, const LayoutMap& megatron,
                                              const std::function<Graph()>& step) {
  AS_CHECK(p.mesh.empty() || p.devices == 0, "give either mesh or devices, not both");
  const AutoShardOptions options{.cluster = p.cluster, .memory_per_device = p.memory_per_device};
  // Under mpirun with neither: one device per rank, as the CLI does.
  const int devices = p.mesh.empty() && p.devices == 0 && World::process().distributed()
                          ? World::process().size()
                          : p.devices;
  if (p.mesh.empty() && devices > 1 && p.plan == "auto") {
    std::vector<std::string> why;
    auto chosen = AutoShard::plan_for_devices(step(), devices, "data", options, &why);
    chosen->explain_mesh(why);
    return chosen;
  }
  DeviceMesh mesh;
  if (!p.mesh.empty())
    mesh = DeviceMesh::parse(p.mesh);
  else if (devices > 1 && p.plan == "fsdp")
    mesh = DeviceMesh({devices}, {"data"});  // FSDP shards over the data axis
  else if (devices > 1)
    mesh = DeviceMesh({1, devices}, {"data", "model"});
  else
    return nullptr;
  if (p.plan == "auto") return std::make_shared<AutoShard>(mesh, "data", options);
  if (p.plan == "data") return std::make_shared<DataParallel>(mesh);
  if (p.plan == "fsdp") {
    const int data = mesh.axis_index("data"), model = mesh.axis_index("model");
    AS_CHECK(data >= 0 && mesh.axis_size(data) > 1, "plan 'fsdp' splits every weight over the ",
             "data axis, and mesh ", mesh.to_string(), " has none of more than one device");
    return std::make_shared<FullyShardedDataParallel>(
        mesh, model >= 0 && mesh.axis_size(model) > 1 ? megatron : LayoutMap{});
  }
  if (p.plan == "layout_map") return std::make_shared<ModelParallel>(mesh, p.layout_map);
  if (p.plan == "megatron" || p.plan == "megatron-sp") {
    auto d = std::make_shared<ModelParallel>(mesh, megatron);
    if (p.plan == "megatron-sp") d->sequence_parallel_axis = "model";
    return d;
  }
  AS_CHECK(fs::is_regular_file(p.plan), "plan '", p.plan,
           "' is none of auto, data, fsdp, megatron, megatron-sp, and no layout map file of that "
           "name exists");
  return std::make_shared<ModelParallel>(mesh, LayoutMap::from_json_file(p.plan));
}

// A weight layout map from (key, axes) pairs, as Python passes it.
using LayoutEntries = std::vector<std::pair<std::string, std::vector<TensorLayout::Axes>>>;
LayoutMap layout_map_of(const LayoutEntries& entries) {
  LayoutMap map;
  for (const auto& [key, axes] : entries) map[key] = TensorLayout(axes);
  return map;
}

// How `model` (of a registered family) is laid out now, for
// autoshard.keras_hub's `plan`: the mesh, the distribution, each Keras
// variable's layout (over Keras's dims: LayoutMap tuples) with the autoshard
// weight it is and that weight's sharding, and AutoShard's reasons.
py::dict plan_report(Model& model) {
  py::dict out;
  const std::shared_ptr<Distribution>& d = model.distribution_strategy();
  out["mesh"] = d ? d->mesh().to_string() : "";
  out["distribution"] = !d                                      ? "one device"
                        : dynamic_cast<AutoShard*>(d.get())     ? "AutoShard"
                        : dynamic_cast<ModelParallel*>(d.get()) ? "ModelParallel"
                        : dynamic_cast<DataParallel*>(d.get())  ? "DataParallel"
                                                                : "other";
  const keras_hub::Variables table = config_of_model(model)->keras_hub_variables();
  std::map<std::string, Shape> shapes;
  for (const keras_hub::Variable& v : table.variables)
    if (!v.weight.empty()) shapes[v.weight] = v.weight_shape();
  py::list variables;
  for (const KerasVariable& v : keras_hub_variables(table, shapes)) {
    const Sharding s = !d || v.weight.empty() ? Sharding::replicated(v.weight_shape.size())
                                              : d->weight_layout(v.weight, v.weight_shape);
    const DeviceMesh mesh = d ? d->mesh() : DeviceMesh({1}, {"data"});
    std::vector<py::object> keras;
    for (const TensorLayout::Axes& a : keras_layout(v, s, mesh).axes) {
      if (a.empty())
        keras.push_back(py::none());
      else if (a.size() == 1)
        keras.push_back(py::str(a[0]));
      else
        keras.push_back(py::tuple(py::cast(a)));
    }
    variables.append(py::dict("path"_a = v.path, "shape"_a = v.shape, "weight"_a = v.weight,
                              "sharding"_a = s.to_string(mesh),
                              "layout"_a = py::tuple(py::cast(keras))));
  }
  out["variables"] = variables;
  const auto* autoshard = dynamic_cast<const AutoShard*>(d.get());
  out["reasons"] = autoshard ? autoshard->reasons() : std::vector<std::string>{};
  out["predicted_step_s"] = autoshard ? autoshard->predicted_step_s() : 0.0;
  return out;
}

// Whether the model's distribution is an AutoShard that has not yet planned
// (it plans at the first step).
bool unplanned(const Model& model) {
  const auto* autoshard = dynamic_cast<const AutoShard*>(model.distribution_strategy().get());
  return autoshard && !autoshard->prepared();
}

// What fit() takes: `autoshard train`'s options.
struct FitSettings {
  int64_t batch = 8, seq = 0, steps = 0;
  std::optional<double> lr;
  std::string schedule = "cosine";
  int64_t warmup = -1;
  double weight_decay = 0.1, clip = 1.0;
  std::string sampling = "random";
  uint64_t seed = 0;
};

// A decoder (GPT-2, Llama, Mistral, Qwen2, Gemma, OPT) from a Hugging Face
// directory, a config or a preset. The engine's model is built when first
// needed, for the sequence length a call needs; a call with another length
// builds it again and carries the weights over (the optimizer's state goes).
class LanguageModel {
 public:
  LanguageModel(const std::string& path, bool load_weights, uint64_t seed, Placement placement)
      : cfg_(LanguageModelConfig::of(path)),
        weights_(load_weights ? path : ""),
        seed_(seed),
        placement_(std::move(placement)) {
    if (!weights_.empty()) {
      const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
      AS_CHECK(fs::is_regular_file(path) || holds_language_model_weights(dir.string()), "'", path,
               "' has no weights (model.safetensors or model.safetensors.index.json; a KerasHub "
               "preset's model.weights.h5 or model.weights.json); use "
               "autoshard.LanguageModel.from_config for a model with initial weights");
    }
    placement_.check();
  }

  const LanguageModelConfig& config() const { return cfg_; }

  // `autoshard generate --prompt-ids ...`: the new tokens. `on_token` (with
  // the GIL) sees each as it is chosen.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, GenerationOptions o,
                                const py::object& on_token) {
    AS_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
    for (int32_t id : prompt)
      AS_CHECK(id >= 0 && id < cfg_.vocab_size(), "generate: prompt id ", id,
               " is outside the model's vocabulary of ", cfg_.vocab_size());
    const int64_t P = static_cast<int64_t>(prompt.size());
    const int64_t cache = P + std::max<int64_t>(o.max_new_tokens - 1, 0);
    AS_CHECK(cache <= cfg_.max_positions(), "generate: the prompt's ", P, " tokens and ",
             o.max_new_tokens, " new ones exceed the model's ", cfg_.max_positions_field(), " (",
             cfg_.max_positions(), "); ask for fewer with max_new_tokens");
    o.cache_length = cache;
    py::gil_scoped_release release;
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, P, cache); });
    return autoshard::generate(*model_, prompt, o,
                               [&](int32_t token) {
                                 py::gil_scoped_acquire gil;
                                 step_boundary([&] {
                                   if (!on_token.is_none()) on_token(token);
                                 });
                               })
        .output_ids;
  }

  // The logits [B, T, vocab] of ids [B, T] (a forward pass, no cache).
  py::array logits(const py::handle& ids) {
    Tensor x = to_tensor(ids, DType::I32, "ids");
    AS_CHECK(x.rank() == 2, "logits: ids must be [batch, tokens], not of rank ", x.rank());
    check_ids(x, "logits: ids");
    Tensor out;
    {
      py::gil_scoped_release release;
      // (AutoShard choosing the mesh plans this forward pass: the model
      // is not compiled to train.)
      if (!model_ || built_seq_ != x.dim(1))
        build(x.dim(1), nullptr, [&] {
          Graph g;
          model_->trace_forward(g, x.dim(0), false);
          return g;
        });
      out = model_->predict_on_batch(x);
    }
    return to_numpy(out);
  }

  // `autoshard train --data tokens.bin`: one loss per step. Each call is a
  // new run from the current weights (a new optimizer and schedule), so the
  // model is built again for it.
  std::vector<double> fit(std::vector<int32_t> tokens, FitSettings s, const py::object& on_step) {
    if (s.seq == 0) s.seq = std::min<int64_t>(128, cfg_.max_positions());
    AS_CHECK(s.seq > 0 && s.seq <= cfg_.max_positions(), "fit: seq_len ", s.seq,
             " must be between 1 and the model's ", cfg_.max_positions_field(), " (",
             cfg_.max_positions(), ")");
    // TokenData::validate's checks, in fit's own words.
    const int64_t n = static_cast<int64_t>(tokens.size());
    AS_CHECK(s.seq < n, "fit: ", n, " tokens; a sequence of seq_len ", s.seq, " needs ", s.seq + 1,
             " (give more tokens or a smaller seq_len)");
    AS_CHECK(s.sampling == "random" || s.batch <= (n - 1) / s.seq, "fit: ", n,
             " tokens; one sequential batch of batch_size ", s.batch, " x seq_len ", s.seq,
             " needs more (give more tokens, or a smaller batch_size or seq_len)");
    TokenData data(std::move(tokens), "tokens");
    data.set_sampling(
        s.sampling == "random" ? TokenData::Sampling::Random : TokenData::Sampling::Sequential,
        s.seed);
    data.validate(s.batch, s.seq, cfg_.vocab_size());
    std::vector<double> losses;
    py::gil_scoped_release release;
    weighted_ = false;
    build(s.seq, optimizer(s), {}, s.batch);
    const LanguageModelSteps steps{
        .end = s.steps,
        .batch = s.batch,
        .seq = s.seq,
        .error_prefix = "fit: ",
        .divergence_advice = "lower learning_rate, clip harder with clipnorm, or check the tokens"};
    train_language_model_steps(
        data, steps, [&](const Tensor& x, const Tensor& y) { return model_->train_on_batch(x, y); },
        [&](const LanguageModelStep& step) {
          losses.push_back(step.loss);
          py::gil_scoped_acquire gil;
          step_boundary([&] {
            if (!on_step.is_none()) on_step(step.index, step.loss);
          });
          return true;
        });
    return losses;
  }

  void save(const std::string& dir, const std::string& dtype, uint64_t max_shard_bytes,
            bool overwrite) {
    AS_CHECK(lora_rank() == 0, "save: a model with LoRA adapters is not saved yet (the adapters ",
             "would be lost)");
    py::gil_scoped_release release;
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
    save_language_model_hf(
        *model_, dir, {.dtype = dtype, .max_shard_bytes = max_shard_bytes, .overwrite = overwrite});
  }

  // KerasHub's CausalLM.compile(optimizer=...): the optimizer of
  // train_on_batch (python/autoshard/keras_hub). The model it compiles is
  // kept while batches keep their length, and with it the optimizer's state.
  void compile(std::shared_ptr<Optimizer> optimizer) {
    AS_CHECK(optimizer, "compile: give an optimizer");
    optimizer_ = std::move(optimizer);
  }

  // One optimizer step on token ids x [B, T] against the next tokens y
  // [B, T] (a preprocessed CausalLM batch), each position's loss weighted by
  // `weights` [B, T] when given (KerasHub's sample_weight=padding_mask:
  // Keras's sum_over_batch_size, the weighted sum over B * T); the batch's
  // loss before it.
  double train_on_batch(const py::handle& x, const py::handle& y, const py::handle& weights) {
    AS_CHECK(optimizer_, "fit: compile() the model first");
    Tensor xs = to_tensor(x, DType::I32, "x"), ys = to_tensor(y, DType::I32, "y");
    AS_CHECK(xs.rank() == 2 && xs.shape() == ys.shape(), "fit: token_ids ", shape_str(xs.shape()),
             " and y ", shape_str(ys.shape()), " must be [batch, tokens] of one shape");
    AS_CHECK(xs.dim(1) <= cfg_.max_positions(), "fit: sequences of ", xs.dim(1),
             " tokens exceed the model's ", cfg_.max_positions_field(), " (", cfg_.max_positions(),
             ")");
    check_ids(xs, "fit: token_ids");
    check_ids(ys, "fit: y");
    const bool weighted = !weights.is_none();
    if (weighted) ys = packed_targets(ys, to_tensor(weights, DType::F32, "sample_weight"));
    py::gil_scoped_release release;
    if (!model_ || built_seq_ != xs.dim(1) || trained_with_ != optimizer_.get() ||
        weighted_ != weighted) {
      weighted_ = weighted;
      build(xs.dim(1), optimizer_, {}, xs.dim(0));
    }
    const double loss = model_->train_on_batch(xs, ys);
    AS_CHECK(std::isfinite(loss), "fit: training diverged: the loss is ",
             std::isnan(loss) ? "nan" : "infinite",
             " (lower the learning rate, or check the token ids)");
    return loss;
  }

  // KerasHub's Backbone.enable_lora(rank): the query and value projections
  // get LoRA adapters (autoshard/nn/lora.h), every other weight frozen; the
  // model is built again with its weights.
  void enable_lora(int64_t rank, double alpha) {
    AS_CHECK(lora_rank() == 0, "enable_lora: LoRA is already enabled (rank ", lora_rank(), ")");
    AS_CHECK(rank > 0, "enable_lora: rank must be positive, not ", rank);
    AS_CHECK(alpha > 0 && std::isfinite(alpha), "enable_lora: lora_alpha must be positive");
    std::shared_ptr<const DecoderConfig> with_lora = cfg_.config->with_lora({rank, alpha});
    py::gil_scoped_release release;
    if (!model_ && (weights_.empty() || keras_hub::is_preset(weights_))) {
      // Not built yet: the model is built with its adapters at first use and
      // reads the preset (which has none: they keep their start) straight
      // into its shards, with no model of the base weights beside it (the
      // copy below holds both: twice the weights at its peak).
      cfg_.config = with_lora;
      return;
    }
    // The weights come from the model built now (Hugging Face's reader
    // knows no adapters).
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
    cfg_.config = with_lora;
    build(built_seq_, nullptr, [&] {
      Graph g;
      model_->trace_forward(g, 1, false);
      return g;
    });
  }

  // KerasHub's from_preset(dtype="bfloat16"): the frozen weights (LoRA's
  // base, once enable_lora) held in bf16 (Model::hold_frozen_weights_in_bf16).
  void hold_frozen_in_bf16(bool on) {
    bf16_frozen_ = on;
    py::gil_scoped_release release;
    if (model_) model_->hold_frozen_weights_in_bf16(on);
  }

  // Bytes of the weights this process holds, and the dtype a weight is held in.
  int64_t weight_bytes() {
    py::gil_scoped_release release;
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
    return model_->weight_bytes();
  }
  std::string weight_dtype(const std::string& path) {
    py::gil_scoped_release release;
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
    return model_->weight_dtype(path) == DType::BF16 ? "bfloat16" : "float32";
  }

  int64_t lora_rank() const { return cfg_.config->lora_rank(); }

  // A weight's whole value ("layers.0.self_attn.q_proj.lora_kernel_b").
  py::array weight(const std::string& path) {
    Tensor w;
    {
      py::gil_scoped_release release;
      if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
      w = model_->gather_weight(path);
    }
    return to_numpy(w);
  }

  void set_weight(const std::string& path, const py::handle& value) {
    Tensor w = to_tensor(value, DType::F32, path);
    py::gil_scoped_release release;
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
    model_->set_weight(path, w);
  }

  std::vector<std::string> weight_paths() {
    py::gil_scoped_release release;
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
    return model_->weight_paths();
  }

  // Writes a KerasHub preset (autoshard/models/keras_hub_model.h), with the
  // tokenizer files of the preset it was loaded from; a backbone of more than
  // `max_shard_gb` GB (> 0) in shards.
  void save_preset(const std::string& dir, bool overwrite, double max_shard_gb) {
    AS_CHECK(lora_rank() == 0, "save_to_preset: a model with LoRA adapters is not saved yet ",
             "(the adapters would be lost)");
    py::gil_scoped_release release;
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
    const std::string tokenizer_from = keras_hub::is_preset(weights_) ? weights_ : "";
    keras_hub::save_preset(*model_, *cfg_.config, dir, tokenizer_from, overwrite, max_shard_gb);
  }

  int64_t count_params() {
    py::gil_scoped_release release;
    if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
    return model_->count_params();
  }

  // Lays the model out anew (autoshard.TensorParallel over a KerasHub
  // model): the weights are kept, the optimizer's state is not.
  void set_placement(Placement p) {
    p.check();
    placement_ = std::move(p);
    if (!model_) return;
    py::gil_scoped_release release;
    build(built_seq_, nullptr, [&] {
      Graph g;
      model_->trace_forward(g, 1, false);
      return g;
    });
  }

  // The layouts the model runs with: those of its first step since it was
  // built (fit's, generate's), or, before any, of generation's.
  py::dict plan() {
    {
      py::gil_scoped_release release;
      if (!model_) build(1, nullptr, [&] { return model_->generation_graph(1, 1, 1); });
      if (unplanned(*model_)) model_->prepare_generation(1, 1, 1);
    }
    return plan_report(*model_);
  }

  std::string mesh() const {
    if (!model_ || !model_->distribution_strategy()) return "";
    return model_->distribution_strategy()->mesh().to_string();
  }

 private:
  void check_ids(const Tensor& x, const std::string& what) const {
    for (int64_t i = 0; i < x.numel(); ++i)
      AS_CHECK(x.i32()[i] >= 0 && x.i32()[i] < cfg_.vocab_size(), what, " holds ", x.i32()[i],
               ", outside the model's vocabulary of ", cfg_.vocab_size());
  }

  // Next tokens y [B, T] with their weights w [B, T] as the sample-weighted
  // loss takes them (autoshard/nn/sample_weights.h): one-hot, then the weight.
  Tensor packed_targets(const Tensor& y, const Tensor& w) const {
    AS_CHECK(w.shape() == y.shape(), "fit: sample_weight ", shape_str(w.shape()),
             " must have y's shape ", shape_str(y.shape()));
    const int64_t V = cfg_.vocab_size(), n = y.numel();
    Tensor packed = Tensor::zeros({y.dim(0), y.dim(1), V + 1}, DType::F32);
    float* p = packed.f32();
    for (int64_t i = 0; i < n; ++i) {
      AS_CHECK(std::isfinite(w.f32()[i]) && w.f32()[i] >= 0,
               "fit: sample weights must be finite and 0 or more, not ", w.f32()[i]);
      p[i * (V + 1) + y.i32()[i]] = 1.0f;
      p[i * (V + 1) + V] = w.f32()[i];
    }
    return packed;
  }

  // The optimizer of `autoshard train` (AdamW, beta_2 0.95, cosine decay).
  std::shared_ptr<Optimizer> optimizer(const FitSettings& s) const {
    return language_model_optimizer({.learning_rate = s.lr,
                                     .schedule = s.schedule,
                                     .warmup = s.warmup,
                                     .weight_decay = s.weight_decay,
                                     .clipnorm = s.clip},
                                    s.steps, cfg_.vocab_size());
  }

  // Builds the model for sequences of `seq`, compiled with `optimizer` to
  // train (null: to run), laid out as placed, with the weights of the model
  // it replaces (else those of the directory, else its initial ones), in the
  // order `autoshard train` and `generate` do it. `step` is the step
  // AutoShard plans when it picks the mesh (default: training).
  void build(int64_t seq, std::shared_ptr<Optimizer> optimizer, std::function<Graph()> step,
             int64_t batch = 1) {
    cfg_.bytes_per_parameter = optimizer ? 16 : 4;
    const Optimizer* optimizer_ptr = optimizer.get();
    std::unique_ptr<Model> next = cfg_.build(seq, seed_);
    Model& m = *next;
    m.hold_frozen_weights_in_bf16(bf16_frozen_);  // before any trace
    const int64_t V = cfg_.vocab_size();
    if (optimizer && weighted_)
      m.compile(std::move(optimizer),
                losses::sample_weighted("sparse_categorical_crossentropy", {.from_logits = true}));
    else if (optimizer)
      m.compile(std::move(optimizer), losses::sparse_categorical_crossentropy);
    if (!step && weighted_)
      step = [&] { return m.training_graph({batch, seq}, {batch, seq, V + 1}, DType::F32); };
    if (!step) step = [&] { return m.training_graph({batch, seq}, {batch, seq}); };
    std::swap(model_, next);  // `step` may read model_
    try {
      model_->set_distribution(distribution_of(placement_, cfg_.megatron_layout(), step));
    } catch (...) {
      std::swap(model_, next);
      throw;
    }
    if (next) {
      for (const std::string& path : next->weight_paths())
        model_->set_weight(path, next->gather_weight(path));
    } else if (!weights_.empty()) {
      load_language_model_weights(*model_, weights_);
    }
    built_seq_ = seq;
    trained_with_ = optimizer_ptr;
  }

  LanguageModelConfig cfg_;
  std::string weights_;
  uint64_t seed_;
  Placement placement_;
  std::unique_ptr<Model> model_;
  int64_t built_seq_ = 0;
  std::shared_ptr<Optimizer> optimizer_;     // compile()'s
  const Optimizer* trained_with_ = nullptr;  // the optimizer model_ was compiled with
  bool weighted_ = false;                    // model_'s loss takes sample weights
  bool bf16_frozen_ = false;                 // hold_frozen_in_bf16
};

// An encoder with its head (sequence classification or masked LM: BERT,
// RoBERTa) from a Hugging Face directory or a KerasHub preset
// (autoshard/models/registry.h, EncoderConfig): logits, built for
// each sequence length asked (the weights carried over), and KerasHub's
// TextClassifier training steps.
class Encoder {
 public:
  // `num_labels` other than the preset's (0: the preset's) gives a
  // classifier a fresh head of that many classes (KerasHub's
  // TextClassifier.from_preset(num_classes=N)): the backbone's weights are
  // loaded, the head's are new.
  // `masked_lm` asks for KerasHub's BertMaskedLM head (true) or a
  // classifier (false) where the preset's task is the other: the backbone
  // is loaded and the head is new, as KerasHub's Task.from_preset builds a
  // task of another class around the preset's backbone.
  Encoder(const std::string& dir, uint64_t seed, Placement placement, int64_t num_labels = 0,
          std::optional<bool> masked_lm = std::nullopt)
      : cfg_(encoder_config(dir)),
        dir_(dir),
        preset_(keras_hub::is_preset(dir)),
        seed_(seed),
        placement_(std::move(placement)),
        preset_labels_(cfg_->num_labels()),
        preset_masked_lm_(cfg_->masked_lm()) {
    placement_.check();
    AS_CHECK(num_labels >= 0, "num_classes must be positive, not ", num_labels);
    if (masked_lm && *masked_lm != cfg_->masked_lm()) {
      AS_CHECK(preset_, "a new ", *masked_lm ? "masked-LM head" : "classification head",
               " is made for a KerasHub BertBackbone preset only");
      AS_CHECK(*masked_lm || num_labels > 0, "TextClassifier.from_preset: the preset's task is ",
               "BertMaskedLM; give num_classes for the classifier's new head");
      cfg_ = cfg_->with_head(*masked_lm, num_labels > 0 ? num_labels : cfg_->num_labels());
    }
    if (num_labels == 0 || num_labels == cfg_->num_labels()) return;
    AS_CHECK(preset_ && !cfg_->masked_lm(), "num_classes: a new head of ", num_labels,
             " classes is made for a KerasHub TextClassifier preset only");
    cfg_ = cfg_->with_head(false, num_labels);
  }
  const EncoderConfig& config() const { return *cfg_; }

  py::array logits(const py::handle& ids, const py::handle& segments, const py::handle& mask) {
    ModelInputs x = inputs(ids, segments, mask, "logits");
    const int64_t seq = x.tensors().at("token_ids").dim(1);
    Tensor out;
    {
      py::gil_scoped_release release;
      if (!model_ || seq_ != seq) build(seq, nullptr);
      out = model_->predict_on_batch(x);
    }
    return to_numpy(out);
  }

  // KerasHub's TextClassifier.compile(optimizer=...), for train_on_batch.
  void compile(std::shared_ptr<Optimizer> optimizer) {
    AS_CHECK(optimizer, "compile: give an optimizer");
    optimizer_ = std::move(optimizer);
  }

  // One optimizer step (sparse categorical cross-entropy of the logits)
  // against class ids `labels` [B]; the batch's loss before it.
  double train_on_batch(const py::handle& ids, const py::handle& segments, const py::handle& mask,
                        const py::handle& labels) {
    AS_CHECK(optimizer_, "fit: compile() the model first");
    AS_CHECK(!cfg_->masked_lm(), "fit: this is a masked LM; train it with train_masked_lm");
    ModelInputs x = inputs(ids, segments, mask, "fit");
    const Tensor& token_ids = x.tensors().at("token_ids");
    Tensor y = to_tensor(labels, DType::I32, "y");
    AS_CHECK(y.rank() == 1 && y.dim(0) == token_ids.dim(0), "fit: y must hold one class id per ",
             "sequence, shape [", token_ids.dim(0), "], not ", shape_str(y.shape()));
    for (int64_t i = 0; i < y.numel(); ++i)
      AS_CHECK(y.i32()[i] >= 0 && y.i32()[i] < cfg_->num_labels(), "fit: y holds ", y.i32()[i],
               ", not a class id of the head's ", cfg_->num_labels(), " classes (0 to ",
               cfg_->num_labels() - 1, ")");
    py::gil_scoped_release release;
    if (!model_ || seq_ != token_ids.dim(1) || trained_with_ != optimizer_.get())
      build(token_ids.dim(1), optimizer_);
    const double loss = model_->train_on_batch(x, y);
    AS_CHECK(std::isfinite(loss), "fit: training diverged: the loss is ",
             std::isnan(loss) ? "nan" : "infinite", " (lower the learning rate)");
    return loss;
  }

  // One optimizer step of a masked LM: the original token ids `labels`
  // [B, S] at the positions whose `weights` [B, S] are not 0, each
  // position's loss times its weight, summed and divided by B * S (Keras's
  // sum_over_batch_size with sample weights); the batch's loss before it.
  double train_masked_lm(const py::handle& ids, const py::handle& segments, const py::handle& mask,
                         const py::handle& labels, const py::handle& weights) {
    AS_CHECK(optimizer_, "fit: compile() the model first");
    AS_CHECK(cfg_->masked_lm(), "fit: this is a classifier, not a masked LM");
    ModelInputs x = inputs(ids, segments, mask, "fit");
    const Tensor& token_ids = x.tensors().at("token_ids");
    Tensor y = to_tensor(labels, DType::I32, "y"), w = to_tensor(weights, DType::F32, "weights");
    AS_CHECK(y.shape() == token_ids.shape() && w.shape() == y.shape(),
             "fit: labels and weights must have token_ids' shape ", shape_str(token_ids.shape()));
    const int64_t V = cfg_->vocab_size();
    Tensor packed = Tensor::zeros({y.dim(0), y.dim(1), V + 1}, DType::F32);
    for (int64_t i = 0; i < y.numel(); ++i) {
      AS_CHECK(y.i32()[i] >= 0 && y.i32()[i] < V, "fit: y holds ", y.i32()[i],
               ", outside the model's vocabulary of ", V);
      AS_CHECK(std::isfinite(w.f32()[i]) && w.f32()[i] >= 0,
               "fit: sample weights must be finite and 0 or more, not ", w.f32()[i]);
      packed.f32()[i * (V + 1) + y.i32()[i]] = 1.0f;  // one-hot, then the weight
      packed.f32()[i * (V + 1) + V] = w.f32()[i];
    }
    py::gil_scoped_release release;
    if (!model_ || seq_ != token_ids.dim(1) || trained_with_ != optimizer_.get())
      build(token_ids.dim(1), optimizer_);
    const double loss = model_->train_on_batch(x, packed);
    AS_CHECK(std::isfinite(loss), "fit: training diverged: the loss is ",
             std::isnan(loss) ? "nan" : "infinite", " (lower the learning rate)");
    return loss;
  }

  void save(const std::string& dir, const std::string& dtype, uint64_t max_shard_bytes,
            bool overwrite) {
    AS_CHECK(cfg_->lora_rank() == 0, "save: a model with LoRA adapters is not saved yet (the ",
             "adapters would be lost)");
    py::gil_scoped_release release;
    if (!model_) build(default_seq(), nullptr);
    cfg_->family().save_hf(
        *model_, dir, {.dtype = dtype, .max_shard_bytes = max_shard_bytes, .overwrite = overwrite});
  }

  // KerasHub's Backbone.enable_lora(rank) on the encoder: adapters on each
  // layer's query and value, the backbone frozen, the head left trainable.
  void enable_lora(int64_t rank, double alpha) {
    AS_CHECK(cfg_->lora_rank() == 0, "enable_lora: LoRA is already enabled (rank ",
             cfg_->lora_rank(), ")");
    AS_CHECK(rank > 0, "enable_lora: rank must be positive, not ", rank);
    AS_CHECK(alpha > 0 && std::isfinite(alpha), "enable_lora: lora_alpha must be positive");
    py::gil_scoped_release release;
    if (!model_) build(default_seq(), nullptr);
    cfg_ = cfg_->with_lora({rank, alpha});
    build(seq_, nullptr);  // the weights carried over, the adapters at their start
  }
  int64_t lora_rank() const { return cfg_->lora_rank(); }

  // As LanguageModel's: from_preset(dtype="bfloat16").
  void hold_frozen_in_bf16(bool on) {
    bf16_frozen_ = on;
    py::gil_scoped_release release;
    if (model_) model_->hold_frozen_weights_in_bf16(on);
  }
  int64_t weight_bytes() {
    py::gil_scoped_release release;
    if (!model_) build(default_seq(), nullptr);
    return model_->weight_bytes();
  }
  std::string weight_dtype(const std::string& path) {
    py::gil_scoped_release release;
    if (!model_) build(default_seq(), nullptr);
    return model_->weight_dtype(path) == DType::BF16 ? "bfloat16" : "float32";
  }

  // A weight's whole value, set, and every weight's path (as LanguageModel's).
  py::array weight(const std::string& path) {
    Tensor w;
    {
      py::gil_scoped_release release;
      if (!model_) build(default_seq(), nullptr);
      w = model_->gather_weight(path);
    }
    return to_numpy(w);
  }
  void set_weight(const std::string& path, const py::handle& value) {
    Tensor w = to_tensor(value, DType::F32, path);
    py::gil_scoped_release release;
    if (!model_) build(default_seq(), nullptr);
    model_->set_weight(path, w);
  }
  std::vector<std::string> weight_paths() {
    py::gil_scoped_release release;
    if (!model_) build(default_seq(), nullptr);
    return model_->weight_paths();
  }

  // Writes a KerasHub preset (the backbone, task.json and the head's
  // task.weights.h5), with the tokenizer files of the preset it came from.
  void save_preset(const std::string& dir, bool overwrite, double max_shard_gb) {
    AS_CHECK(cfg_->lora_rank() == 0, "save_to_preset: a model with LoRA adapters is not saved yet ",
             "(the adapters would be lost)");
    py::gil_scoped_release release;
    if (!model_) build(default_seq(), nullptr);
    keras_hub::save_preset(*model_, *config_of_model(*model_), dir, preset_ ? dir_ : "", overwrite,
                           max_shard_gb);
  }

  std::string mesh() const {
    if (!model_ || !model_->distribution_strategy()) return "";
    return model_->distribution_strategy()->mesh().to_string();
  }

  int64_t count_params() {
    py::gil_scoped_release release;
    if (!model_) build(default_seq(), nullptr);
    return model_->count_params();
  }

  // Lays the model out anew, keeping the weights (not the optimizer's state).
  void set_placement(Placement p) {
    p.check();
    placement_ = std::move(p);
    if (!model_) return;
    py::gil_scoped_release release;
    build(seq_, nullptr);
  }

  // The layouts the model runs with: those of its first step since it was
  // built, or, before any, of a forward pass over one sequence.
  py::dict plan() {
    {
      py::gil_scoped_release release;
      if (!model_) build(default_seq(), nullptr);
      if (unplanned(*model_)) {
        const Shape shape{1, seq_};
        model_->predict_on_batch(ModelInputs{{"token_ids", Tensor::zeros(shape, DType::I32)},
                                             {"segment_ids", Tensor::zeros(shape, DType::I32)},
                                             {"padding_mask", Tensor::full(shape, 1.0f)}});
      }
    }
    return plan_report(*model_);
  }

 private:
  int64_t default_seq() const { return std::min<int64_t>(8, cfg_->max_sequence()); }

  // KerasHub's input dict: token_ids [B, T], segment_ids (default 0) and
  // padding_mask (default 1) of the same shape.
  ModelInputs inputs(const py::handle& ids, const py::handle& segments, const py::handle& mask,
                     const std::string& what) const {
    Tensor x = to_tensor(ids, DType::I32, "token_ids");
    AS_CHECK(x.rank() == 2, what, ": token_ids must be [batch, tokens], not of rank ", x.rank());
    AS_CHECK(x.dim(1) <= cfg_->max_sequence(), what, ": sequences of ", x.dim(1),
             " tokens exceed the model's ", cfg_->max_sequence(), " positions");
    for (int64_t i = 0; i < x.numel(); ++i)
      AS_CHECK(x.i32()[i] >= 0 && x.i32()[i] < cfg_->vocab_size(), what, ": token_ids hold ",
               x.i32()[i], ", outside the model's vocabulary of ", cfg_->vocab_size());
    Tensor s = segments.is_none() ? Tensor::zeros(x.shape(), DType::I32)
                                  : to_tensor(segments, DType::I32, "segment_ids");
    Tensor m = mask.is_none() ? Tensor::full(x.shape(), 1.0f)
                              : to_tensor(mask, DType::F32, "padding_mask");
    AS_CHECK(s.shape() == x.shape() && m.shape() == x.shape(), what,
             ": segment_ids and padding_mask must have token_ids' shape ", shape_str(x.shape()));
    return ModelInputs{{"token_ids", x}, {"segment_ids", s}, {"padding_mask", m}};
  }

  // Builds the model for sequences of `seq`, compiled with `optimizer` to
  // train (null: to run), with the weights of the model it replaces (else
  // the directory's).
  void build(int64_t seq, std::shared_ptr<Optimizer> optimizer) {
    const Optimizer* optimizer_ptr = optimizer.get();
    std::unique_ptr<Model> next = cfg_->build(seq, seed_);
    next->hold_frozen_weights_in_bf16(bf16_frozen_);  // before any trace
    if (optimizer && cfg_->masked_lm())  // targets packed with their weights (train_masked_lm)
      next->compile(std::move(optimizer), losses::sample_weighted("sparse_categorical_crossentropy",
                                                                  {.from_logits = true}));
    else if (optimizer)
      next->compile(std::move(optimizer), losses::sparse_categorical_crossentropy);
    std::swap(model_, next);
    try {
      model_->set_distribution(distribution_of(placement_, cfg_->megatron_layout("model"), [&] {
        Graph g;
        model_->trace_forward(g, 1, false);
        return g;
      }));
    } catch (...) {
      std::swap(model_, next);
      throw;
    }
    if (next) {
      for (const std::string& path : next->weight_paths())
        model_->set_weight(path, next->gather_weight(path));
    } else if (preset_ &&
               (cfg_->num_labels() != preset_labels_ || cfg_->masked_lm() != preset_masked_lm_)) {
      load_backbone_only(seq);
    } else if (preset_) {
      keras_hub::load_preset_weights(*model_, dir_);
    } else {
      cfg_->family().load_weights(*model_, dir_);
    }
    seq_ = seq;
    trained_with_ = optimizer_ptr;
  }

  // The preset's backbone into model_, whose head (of other classes than the
  // preset's) keeps its initial weights: the preset is read into a model
  // with its own head (on one device), whose other weights are copied over.
  void load_backbone_only(int64_t seq) {
    const std::unique_ptr<Model> source = encoder_config(dir_)->build(seq, seed_);
    keras_hub::load_preset_weights(*source, dir_);
    std::set<std::string> head;
    for (const keras_hub::Variable& v : config_of_model(*source)->keras_hub_variables().variables)
      if (v.task) head.insert(v.weight);
    const std::vector<std::string> ours = model_->weight_paths();
    const std::set<std::string> wanted(ours.begin(), ours.end());
    for (const std::string& path : source->weight_paths())
      if (!head.count(path) && wanted.count(path))
        model_->set_weight(path, source->gather_weight(path));
  }

  std::shared_ptr<const EncoderConfig> cfg_;
  std::string dir_;
  bool preset_;
  uint64_t seed_;
  Placement placement_;
  int64_t preset_labels_;  // the preset's head's classes
  bool preset_masked_lm_;  // the preset's head is BertMaskedLM's
  std::unique_ptr<Model> model_;
  int64_t seq_ = 0;
  std::shared_ptr<Optimizer> optimizer_;
  const Optimizer* trained_with_ = nullptr;
  bool bf16_frozen_ = false;  // hold_frozen_in_bf16
};

void bind_encoder(py::module_& m) {
  py::class_<Encoder>(m, "Encoder")
      .def(py::init([](const std::string& dir, uint64_t seed, const std::string& mesh, int devices,
                       const std::string& plan, const std::string& cluster,
                       double memory_per_device, const LayoutEntries& layout_map,
                       int64_t num_labels, std::optional<bool> masked_lm) {
             return std::make_unique<Encoder>(
                 dir, seed,
                 Placement{mesh, devices, plan, cluster, memory_per_device,
                           layout_map_of(layout_map)},
                 num_labels, masked_lm);
           }),
           "directory"_a, "seed"_a, "mesh"_a, "devices"_a, "plan"_a, "cluster"_a,
           "memory_per_device"_a, "layout_map"_a = LayoutEntries{}, "num_labels"_a = 0,
           "masked_lm"_a = py::none())
      .def("plan", &Encoder::plan)
      .def(
          "set_placement",
          [](Encoder& e, const std::string& mesh, int devices, const std::string& plan,
             const LayoutEntries& layout_map) {
            e.set_placement({mesh, devices, plan, "cpu", 0, layout_map_of(layout_map)});
          },
          "mesh"_a, "devices"_a, "plan"_a, "layout_map"_a = LayoutEntries{})
      .def("logits", &Encoder::logits, "token_ids"_a, "segment_ids"_a, "padding_mask"_a)
      .def("save", &Encoder::save, "directory"_a, "dtype"_a, "max_shard_bytes"_a,
           "overwrite"_a = false)
      .def("compile", &Encoder::compile, "optimizer"_a)
      .def("train_on_batch", &Encoder::train_on_batch, "token_ids"_a, "segment_ids"_a,
           "padding_mask"_a, "labels"_a)
      .def("train_masked_lm", &Encoder::train_masked_lm, "token_ids"_a, "segment_ids"_a,
           "padding_mask"_a, "labels"_a, "weights"_a)
      .def("save_preset", &Encoder::save_preset, "directory"_a, "overwrite"_a,
           "max_shard_gb"_a = 0.0)
      .def("enable_lora", &Encoder::enable_lora, "rank"_a, "lora_alpha"_a)
      .def_property_readonly("lora_rank", &Encoder::lora_rank)
      .def("hold_frozen_in_bf16", &Encoder::hold_frozen_in_bf16, "on"_a)
      .def("weight_bytes", &Encoder::weight_bytes)
      .def("weight_dtype", &Encoder::weight_dtype, "path"_a)
      .def("weight", &Encoder::weight, "path"_a)
      .def("weight_paths", &Encoder::weight_paths)
      .def("set_weight", &Encoder::set_weight, "path"_a, "value"_a)
      .def_property_readonly("mesh", &Encoder::mesh)
      .def("count_params", &Encoder::count_params)
      .def_property_readonly("model_type", [](const Encoder& e) { return e.config().model_type(); })
      .def_property_readonly("vocab_size", [](const Encoder& e) { return e.config().vocab_size(); })
      .def_property_readonly("masked_lm", [](const Encoder& e) { return e.config().masked_lm(); })
      .def_property_readonly("num_labels", [](const Encoder& e) { return e.config().num_labels(); })
      .def_property_readonly("max_positions",
                             [](const Encoder& e) { return e.config().max_sequence(); });
}

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer")
      .def("encode", &Tokenizer::encode, "text"_a, "add_special_tokens"_a = true)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
            for (int32_t id : ids)
              AS_CHECK(id >= 0 && id < t.vocab_size(), "decode: id ", id,
                       " is outside the tokenizer's vocabulary of ", t.vocab_size());
            return t.decode(ids, skip);
          },
          "ids"_a, "skip_special_tokens"_a = true)
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def("token_to_id", &Tokenizer::token_to_id, "token"_a)
      .def(
          "id_to_token",
          [](const Tokenizer& t, int32_t id) {
            AS_CHECK(id >= 0 && id < t.vocab_size(), "id_to_token: id ", id,
                     " is outside the tokenizer's vocabulary of ", t.vocab_size());
            return t.id_to_token(id);
          },
          "id"_a);
  m.def("load_tokenizer", &load_tokenizer, "directory"_a);
  m.def("has_tokenizer", &has_tokenizer, "directory"_a);
  m.def("load_hf_tokenizer", &load_hf_tokenizer, "tokenizer_json"_a);
  m.def("load_gpt2_tokenizer", &tokenizer::gpt2_tokenizer, "vocab_json"_a, "merges_txt"_a);
  m.def("load_bert_tokenizer", &tokenizer::bert_tokenizer, "vocab_txt"_a, "lowercase"_a);
  m.def("load_sentencepiece_tokenizer", &load_sentencepiece_tokenizer, "model_file"_a,
        "add_bos"_a = true);
}

void bind_language_model(py::module_& m) {
  py::class_<LanguageModel>(m, "LanguageModel")
      .def(py::init([](const std::string& path, bool load_weights, uint64_t seed,
                       const std::string& mesh, int devices, const std::string& plan,
                       const std::string& cluster, double memory_per_device,
                       const LayoutEntries& layout_map) {
             return std::make_unique<LanguageModel>(
                 path, load_weights, seed,
                 Placement{mesh, devices, plan, cluster, memory_per_device,
                           layout_map_of(layout_map)});
           }),
           "path"_a, "load_weights"_a, "seed"_a, "mesh"_a, "devices"_a, "plan"_a, "cluster"_a,
           "memory_per_device"_a, "layout_map"_a = LayoutEntries{})
      .def("plan", &LanguageModel::plan)
      .def(
          "set_placement",
          [](LanguageModel& lm, const std::string& mesh, int devices, const std::string& plan,
             const LayoutEntries& layout_map) {
            lm.set_placement({mesh, devices, plan, "cpu", 0, layout_map_of(layout_map)});
          },
          "mesh"_a, "devices"_a, "plan"_a, "layout_map"_a = LayoutEntries{})
      .def(
          "generate",
          [](LanguageModel& lm, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
             double temperature, int64_t top_k, double top_p, uint64_t seed,
             std::vector<int32_t> stop_token_ids, const py::object& on_token) {
            AS_CHECK(max_new_tokens >= 0, "generate: max_new_tokens must be 0 or more, not ",
                     max_new_tokens);
            AS_CHECK(temperature >= 0 && std::isfinite(temperature),
                     "generate: temperature must be 0 (greedy) or more, not ", temperature);
            AS_CHECK(top_k >= 0, "generate: top_k must be 0 (all) or more, not ", top_k);
            AS_CHECK(top_p > 0 && top_p <= 1, "generate: top_p must be in (0, 1], not ", top_p);
            GenerationOptions o{.max_new_tokens = max_new_tokens,
                                .temperature = temperature,
                                .top_k = top_k,
                                .top_p = top_p,
                                .seed = seed,
                                .stop_token_ids = std::move(stop_token_ids)};
            return lm.generate(prompt, o, on_token);
          },
          "prompt"_a, "max_new_tokens"_a, "temperature"_a, "top_k"_a, "top_p"_a, "seed"_a,
          "stop_token_ids"_a, "on_token"_a)
      .def("logits", &LanguageModel::logits, "ids"_a)
      .def(
          "fit",
          [](LanguageModel& lm, const py::array_t<int32_t, py::array::c_style>& ids, int64_t batch,
             int64_t seq, int64_t steps, std::optional<double> lr, const std::string& schedule,
             int64_t warmup, double weight_decay, double clip, const std::string& sampling,
             uint64_t seed, const py::object& on_step) {
            AS_CHECK(batch > 0, "fit: batch_size must be positive, not ", batch);
            AS_CHECK(steps >= 0, "fit: steps must be 0 or more, not ", steps);
            AS_CHECK(!lr || (*lr > 0 && std::isfinite(*lr)),
                     "fit: learning_rate must be positive, not ", lr.value_or(0));
            AS_CHECK(schedule == "cosine" || schedule == "constant", "fit: lr_schedule '", schedule,
                     "' must be 'cosine' or 'constant'");
            AS_CHECK(sampling == "random" || sampling == "sequential", "fit: sampling '", sampling,
                     "' must be 'random' or 'sequential'");
            AS_CHECK(weight_decay >= 0 && clip >= 0,
                     "fit: weight_decay and clipnorm must be 0 or more");
            AS_CHECK(ids.ndim() == 1, "fit: tokens must be a 1-D array of token ids");
            std::vector<int32_t> tokens(ids.data(), ids.data() + ids.size());
            return lm.fit(
                std::move(tokens),
                {batch, seq, steps, lr, schedule, warmup, weight_decay, clip, sampling, seed},
                on_step);
          },
          "tokens"_a, "batch_size"_a, "seq_len"_a, "steps"_a, "learning_rate"_a, "lr_schedule"_a,
          "warmup"_a, "weight_decay"_a, "clipnorm"_a, "sampling"_a, "seed"_a, "on_step"_a)
      .def("save", &LanguageModel::save, "directory"_a, "dtype"_a, "max_shard_bytes"_a,
           "overwrite"_a = false)
      .def("count_params", &LanguageModel::count_params)
      .def("compile", &LanguageModel::compile, "optimizer"_a)
      .def("train_on_batch", &LanguageModel::train_on_batch, "x"_a, "y"_a,
           "sample_weight"_a = py::none())
      .def("save_preset", &LanguageModel::save_preset, "directory"_a, "overwrite"_a,
           "max_shard_gb"_a = 0.0)
      .def("enable_lora", &LanguageModel::enable_lora, "rank"_a, "lora_alpha"_a)
      .def_property_readonly("lora_rank", &LanguageModel::lora_rank)
      .def("hold_frozen_in_bf16", &LanguageModel::hold_frozen_in_bf16, "on"_a)
      .def("weight_bytes", &LanguageModel::weight_bytes)
      .def("weight_dtype", &LanguageModel::weight_dtype, "path"_a)
      .def("weight", &LanguageModel::weight, "path"_a)
      .def("weight_paths", &LanguageModel::weight_paths)
      .def("set_weight", &LanguageModel::set_weight, "path"_a, "value"_a)
      .def_property_readonly("mesh", &LanguageModel::mesh)
      .def_property_readonly("vocab_size",
                             [](const LanguageModel& lm) { return lm.config().vocab_size(); })
      .def_property_readonly("max_positions",
                             [](const LanguageModel& lm) { return lm.config().max_positions(); })
      .def_property_readonly("model_type",
                             [](const LanguageModel& lm) { return lm.config().model_type(); });

  // The KerasHub backbone classes of the registered families and whether each
  // is an encoder (python/autoshard/keras_hub names its classes after them).
  m.def("keras_hub_backbones", [] {
    std::vector<std::pair<std::string, bool>> classes;
    for (const ModelFamily* f : model_families())
      for (const std::string& c : f->keras_hub_backbones()) classes.emplace_back(c, f->encoder());
    return classes;
  });

  // The process's MPI world (mpirun starts one process per rank).
  m.def("world_rank", [] { return World::process().rank(); });
  m.def("world_size", [] { return World::process().size(); });
  m.def("world_finalize", [] { World::process().finalize(); });
  m.def("world_abort", [](const std::string& message) { World::process().abort_all(message); });
}

}  // namespace

void bind_hf(py::module_& m) {
  bind_tokenizer(m);
  bind_language_model(m);
  bind_encoder(m);
}

}  // namespace autoshard::python
