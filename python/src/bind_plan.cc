// autoshard.plan's native part: how a model would be laid out over a mesh by
// AutoShard, its predicted step time and memory per device, and why. The
// report is `autoshard plan --json --predict`'s (autoshard/pages/plan_report.h
// builds both from the same Partition; the Python tests compare the two on
// the same model). A language model on a device count also considers
// pipelines, as the command does, and reports the one that wins as the
// command does (app/pipeline_pricing.h's pipeline_report). Nothing is
// allocated for the weights.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "autoshard/app/pipeline_choice.h"
#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/models/language_model.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/pages/plan_report.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/memory.h"
#include "pages/plan_figures.h"
#include "pages/plan_html.h"
#include "py_model.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::python {
namespace {

// What to plan for: a mesh, or a device count whose mesh AutoShard chooses
// (as `autoshard plan --devices N`), and how to price it.
struct PlanRequest {
  std::optional<DeviceMesh> mesh;
  int devices = 0;
  std::string batch_dim_name;  // empty: "data" (or the mesh's first axis)
  AutoShardOptions options;
  PredictOptions predict;  // tokens and model FLOPs per step, for the rates
  // A language model on a device count: the fastest pipeline that fits (if
  // any) and a line per pipeline priced.
  std::optional<PricedPipeline> pipeline;
  std::vector<std::string> pipeline_why;
};

// The training step of one batch, as the planner sees it.
struct Step {
  Shape x, y;
  DType y_dtype = DType::I32;
};

// Plans on `model` and puts back the distribution it had, also on errors.
class DistributionRestorer {
 public:
  explicit DistributionRestorer(Model& m) : model_(m), previous_(m.distribution_strategy()) {}
  ~DistributionRestorer() { model_.set_distribution(previous_); }
  DistributionRestorer(const DistributionRestorer&) = delete;
  DistributionRestorer& operator=(const DistributionRestorer&) = delete;

 private:
  Model& model_;
  std::shared_ptr<Distribution> previous_;
};

std::shared_ptr<AutoShard> make_autoshard(Model& model, const PlanRequest& r, const Step& s) {
  AS_CHECK(r.mesh || r.devices > 0, "plan: give a DeviceMesh or a number of devices");
  if (r.mesh) {
    const std::string batch =
        r.batch_dim_name.empty() ? r.mesh->axis_names().at(0) : r.batch_dim_name;
    AS_CHECK(r.mesh->axis_index(batch) >= 0, "plan: the mesh ", r.mesh->to_string(),
             " has no axis '", batch, "' to split batches over; name one of its axes");
    return std::make_shared<AutoShard>(*r.mesh, batch, r.options);
  }
  if (r.devices > 1) {
    std::vector<std::string> why;
    auto chosen = AutoShard::plan_for_devices(model.training_graph(s.x, s.y, s.y_dtype), r.devices,
                                              "data", r.options, &why);
    chosen->explain_mesh(why);
    return chosen;
  }
  return std::make_shared<AutoShard>(DeviceMesh({1, 1}, {"data", "model"}), "data", r.options);
}

// The cost model's prediction on the cluster.
StepPrediction predict_step(Model& model, const Partition& p, const PlanRequest& r, const Step& s) {
  const Cluster cluster = Cluster::named(r.options.cluster);
  PredictOptions o = r.predict;
  o.bf16 = r.options.bf16;
  StepPrediction pr = predict(p, cluster, o);
  // In-process devices share one process: its memory is every device's.
  if (p.mesh.size() <= 64)
    pr.process_bytes = in_process_bytes(
        model.plan_training(s.x, s.y, s.y_dtype, World::process().local_devices(p.mesh)), cluster,
        o.bf16);
  return pr;
}

double memory_limit(const PlanRequest& r) {
  return r.options.memory_per_device > 0 ? r.options.memory_per_device
                                         : Cluster::named(r.options.cluster).memory_bytes;
}

// The plan must fit the memory per device.
void check_fits(const StepPrediction& pr, const PlanRequest& r) {
  const double limit = memory_limit(r);
  AS_CHECK(pr.memory.total() <= limit,
           "plan: the plan does not fit: ", format_in_mib(pr.memory.total()),
           " per device (weights ", format_in_mib(pr.memory.weights), ", optimizer state ",
           format_in_mib(pr.memory.optimizer_state), ", activations ",
           format_in_mib(pr.memory.activations), ") but ",
           r.options.memory_per_device > 0
               ? std::string("memory_per_device is ")
               : "cluster '" + Cluster::named(r.options.cluster).name + "' has ",
           format_in_mib(limit), "; use more devices or a smaller batch");
}

// A pipeline's report, `autoshard plan --json --predict`'s when it wins:
// the shapes priced and the plan without a pipe axis are its reasons.
std::pair<std::string, std::shared_ptr<Distribution>> pipelined(const PlanRequest& r,
                                                                const std::string& unpiped) {
  std::vector<std::string> why = r.pipeline_why;
  why.push_back(unpiped);
  return {pipeline_report(*r.pipeline, why).dump(), nullptr};
}

// Plans `model` (compiled) and reports as `autoshard plan --json --predict`
// does; the model keeps the distribution it had. Also returns AutoShard,
// planned, for models that are to train under it (autoshard.TensorParallel).
// Where `r` holds a pipeline that is faster (or the only plan that fits),
// its report instead, and no distribution.
std::pair<std::string, std::shared_ptr<Distribution>> plan_model(Model& model, const PlanRequest& r,
                                                                 const Step& s) {
  DistributionRestorer restore(model);
  std::shared_ptr<AutoShard> dist;
  try {
    dist = make_autoshard(model, r, s);
  } catch (const Error& e) {
    // Only AutoShard's "nothing fits" gives way to a pipeline that does.
    if (!r.pipeline || !std::string(e.what()).starts_with("AutoShard: no ")) throw;
    return pipelined(r, cat("without a pipe axis: ", e.what()));
  }
  model.set_distribution(dist);
  const Partition p = model.plan_training(s.x, s.y, s.y_dtype);
  const StepPrediction pr = predict_step(model, p, r, s);
  const UnpipedStep unpiped{p.mesh.to_string(), pr.step_s, pr.memory.total(),
                            pr.memory.total() <= memory_limit(r)};
  if (r.pipeline && pipeline_is_faster(*r.pipeline, unpiped))
    return pipelined(r, unpiped_line(unpiped));
  check_fits(pr, r);
  nlohmann::json j = plan_report(p);
  j["reasons"] = dist->reasons();
  for (const std::string& l : r.pipeline_why) j["reasons"].push_back(l);
  j["predicted"] = prediction_report(pr);
  // The picture's figures (pages/plan_figures.h): Plan keeps them apart from
  // the report, which stays `autoshard plan --json`'s.
  j["figures"] = plan_figures(p, Cluster::named(r.options.cluster), r.options.bf16);
  return {j.dump(), dist};
}

// --devices N for a language model: the pipelines `autoshard plan --devices
// N --predict` prices beside AutoShard's plan without a pipe axis
// (app/pipeline_choice.h), on the same cluster and limits.
void price_pipelines(PlanRequest& r, const LanguageModelConfig& cfg, int64_t batch, int64_t seq,
                     uint64_t seed) {
  if (r.mesh || r.devices <= 1) return;
  PipelineRun run;
  run.batch = batch;
  run.seq = seq;
  run.seed = seed;
  run.bf16 = r.options.bf16;
  run.autoshard = r.options;
  run.cluster = Cluster::named(r.options.cluster);
  run.memory_per_device = r.options.memory_per_device;
  r.pipeline = choose_pipeline(run, cfg, r.devices, r.pipeline_why);
}

PlanRequest request(const std::optional<DeviceMesh>& mesh, int devices,
                    const std::string& batch_dim_name, const std::string& cluster, bool bf16,
                    double memory_per_device, double plan_time, bool deterministic) {
  AS_CHECK(mesh || (devices >= 1 && devices <= kMaxMeshDevices),
           "plan: devices must be between 1 and ", kMaxMeshDevices, ", not ", devices);
  AS_CHECK(memory_per_device >= 0, "plan: memory_per_device must be positive (bytes)");
  AS_CHECK(plan_time >= 0, "plan: plan_time must be >= 0 seconds");
  PlanRequest r;
  r.mesh = mesh;
  r.devices = devices;
  r.batch_dim_name = batch_dim_name;
  r.options = {.cluster = cluster,
               .bf16 = bf16,
               .memory_per_device = memory_per_device,
               .time_limit_s = plan_time,
               .deterministic = deterministic};
  return r;
}

// A Keras model's step: x [batch, ...input], y the output's shape, or
// without its class axis for sparse targets (class ids, i32).
Step keras_step(Model& model, int64_t batch, bool sparse_targets) {
  AS_CHECK(batch >= 1, "plan: batch must be >= 1, not ", batch);
  Graph g;
  const Value out = model.trace_forward(g, batch, false);
  Step s;
  s.x = g.node(g.find_input("x")).shape;
  s.y = out.shape();
  s.y_dtype = DType::F32;
  if (sparse_targets) {
    AS_CHECK(!s.y.empty(), "plan: sparse targets need an output with a class axis");
    s.y.pop_back();
    s.y_dtype = DType::I32;
  }
  return s;
}

// Model FLOPs of a language model's training step: 6 per parameter per
// token, plus attention's scores and weighted sums (as `autoshard plan`).
double lm_flops(const LanguageModelConfig& c, double params, double batch, double seq) {
  return 6 * params * batch * seq +
         12 * double(c.layers()) * batch * seq * seq * double(c.attention_width());
}

}  // namespace

void bind_plan(py::module_& m) {
  m.def(
      "plan_html",
      [](const std::string& report, const std::string& title) {
        return plan_html_fragment(nlohmann::json::parse(report), title);
      },
      "report"_a, "title"_a, "The picture of a plan (pages/plan_html.h) as an HTML fragment");
  m.def(
      "plan_keras",
      [](PyModel& p, const std::optional<DeviceMesh>& mesh, int devices,
         const std::string& batch_dim_name, int64_t batch, bool sparse_targets,
         const std::string& cluster, bool bf16, double memory_per_device, double plan_time,
         bool deterministic) {
        AS_CHECK(p.input_names.size() == 1 && p.model->output_names().size() == 1,
                 "plan: models of one input and one output only (this one has ",
                 p.input_names.size(), " and ", p.model->output_names().size(), ")");
        PlanRequest r = request(mesh, devices, batch_dim_name, cluster, bf16, memory_per_device,
                                plan_time, deterministic);
        py::gil_scoped_release release;
        const Step s = keras_step(*p.model, batch, sparse_targets);
        r.predict.tokens = double(batch);
        return plan_model(*p.model, r, s);
      },
      "model"_a, "mesh"_a, "devices"_a, "batch_dim_name"_a, "batch"_a, "sparse_targets"_a,
      "cluster"_a, "bf16"_a, "memory_per_device"_a, "plan_time"_a, "deterministic"_a);
  m.def(
      "plan_language_model",
      [](const std::string& name, const std::optional<DeviceMesh>& mesh, int devices, int64_t batch,
         int64_t seq, uint64_t seed, const std::string& cluster, bool bf16,
         double memory_per_device, double plan_time, bool deterministic) {
        PlanRequest r = request(mesh, devices, "data", cluster, bf16, memory_per_device, plan_time,
                                deterministic);
        py::gil_scoped_release release;
        LanguageModelConfig cfg = LanguageModelConfig::of(name);
        cfg.bytes_per_parameter = 0;  // nothing is allocated
        if (seq == 0) seq = std::min<int64_t>(128, cfg.max_positions());
        AS_CHECK(batch >= 1, "plan: batch must be >= 1, not ", batch);
        AS_CHECK(seq >= 1 && seq <= cfg.max_positions(), "plan: seq ", seq,
                 " must be between 1 and the model's ", cfg.max_positions_field(), " (",
                 cfg.max_positions(), ")");
        std::unique_ptr<Model> model = cfg.build(seq, seed);
        model->compile(AdamW({.clipnorm = 1.0}), losses::sparse_categorical_crossentropy);
        const Step s{{batch, seq}, {batch, seq}, DType::I32};
        r.predict.tokens = double(batch) * double(seq);
        r.predict.model_flops =
            lm_flops(cfg, double(model->count_params()), double(batch), double(seq));
        price_pipelines(r, cfg, batch, seq, seed);
        return plan_model(*model, r, s).first;
      },
      "model"_a, "mesh"_a, "devices"_a, "batch"_a, "seq"_a, "seed"_a, "cluster"_a, "bf16"_a,
      "memory_per_device"_a, "plan_time"_a, "deterministic"_a);
}

}  // namespace autoshard::python
