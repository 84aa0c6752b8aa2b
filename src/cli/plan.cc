// `autoshard plan`: how a model would be laid out over a mesh, explained:
// every weight's layout and bytes per device, the collectives of one training
// step, and the memory per device. Nothing is allocated for the weights.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <regex>
#include <set>

#include "autoshard/app/pipeline_choice.h"
#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/keras_variables.h"
#include "autoshard/nn/losses.h"
#include "autoshard/pages/plan_report.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/predicted_timeline.h"
#include "autoshard/plan/strategy_problem.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/memory.h"
#include "cli/commands.h"
#include "cli/keras_command.h"
#include "cli/keras_data.h"
#include "cli/options.h"
#include "cli/output_file.h"
#include "cli/plan_pipeline.h"
#include "pages/plan_figures.h"
#include "pages/plan_html.h"
#include "plan/layout_map_export.h"

namespace autoshard::cli {
namespace {

struct PlanOptions : CommonOptions {
  bool json = false;
  std::string out;
  bool predict = false;
  std::string export_problem;
  std::string dtype = "f32";
  bool overwrite = false;         // --out and --export-problem may replace files
  std::string export_layout_map;  // FILE.json or FILE.py: the plan as a Keras LayoutMap
  std::string html;               // FILE.html: the plan as a picture (pages/plan_html.h)
  std::string trace;  // FILE.json: the predicted step as a timeline (plan/predicted_timeline.h)
  PipelineFlags pipeline;  // a mesh with a pipe axis (cli/plan_pipeline.h)
};

// What is planned: a language model (a preset, config or model directory)
// or a saved Keras model, and the batch its training step takes.
struct Subject {
  std::unique_ptr<Model> owned;
  std::optional<KerasModel> keras;
  std::optional<LanguageModelConfig> config;  // language models only
  Model* model = nullptr;
  Shape x, y;  // the batch's inputs and targets
  DType y_dtype = DType::I32;
};

// A saved Keras model of one input and one output, without its weights
// (planning reads none), compiled with its file's loss (mean squared error
// when it has none).
Subject keras_subject(PlanOptions& o) {
  Subject s;
  KerasLoadOptions load{.weights = false, .seed = o.seed};
  try {
    s.keras = load_keras_for(o, load);
  } catch (const Error& e) {
    // A sequence of any length (None): --seq gives it a size.
    if (std::string(e.what()).find("of any size") == std::string::npos) throw;
    AS_CHECK(o.seq > 0, e.what(), "; for plan, --seq N gives a None dimension the size N");
    load.input_shapes[""] = {o.seq};
    s.keras = load_keras_for(o, load);
  }
  KerasModel& k = *s.keras;
  AS_CHECK(k.inputs.size() == 1 && k.outputs.size() == 1, "plan: --model '", o.model, "' has ",
           k.inputs.size(), " inputs and ", k.outputs.size(),
           " outputs; plan takes Keras models of one input and one output");
  KerasOverrides over;
  if (!k.compile.present || k.compile.losses.empty()) over.loss = "mean_squared_error";
  const std::string loss = compile_keras(k, over, false).losses.at(0);
  infer_output_shapes(k);
  s.model = k.model.get();
  s.x = k.inputs[0].shape;
  s.x.insert(s.x.begin(), o.batch);
  const bool sparse = loss.find("sparse") != std::string::npos;
  s.y = k.outputs[0].shape;
  if (sparse && !s.y.empty()) s.y.pop_back();  // class ids: the output without its classes
  s.y.insert(s.y.begin(), o.batch);
  s.y_dtype = sparse ? DType::I32 : DType::F32;
  return s;
}

Subject language_subject(PlanOptions& o) {
  Subject s;
  s.config = model_config(o);
  if (o.seq == 0) o.seq = std::min<int64_t>(128, s.config->max_positions());
  s.owned = s.config->build(o.seq, o.seed);
  s.model = s.owned.get();
  s.model->set_recompute(o.recompute);
  s.model->compile(AdamW({.clipnorm = 1.0}), losses::sparse_categorical_crossentropy);
  s.x = s.y = {o.batch, o.seq};
  return s;
}

std::shared_ptr<Distribution> distribution_of(const PlanOptions& o, Subject& s) {
  if (s.keras)
    return keras_distribution(o, *s.model,
                              [&s] { return s.model->training_graph(s.x, s.y, s.y_dtype); });
  return make_distribution(o, *s.model, *s.config);
}

// Model FLOPs of a training step: 6 per parameter per token (forward and
// backward), plus attention's scores and weighted sums: 12 L B T^2 C.
double model_flops(const LanguageModelConfig& c, double params, double batch, double seq) {
  return 6 * params * batch * seq +
         12 * double(c.layers()) * batch * seq * seq * double(c.attention_width());
}

void print_prediction(const StepPrediction& p, const Cluster& c, bool bf16) {
  std::printf("\npredicted on cluster '%s' (%s):\n", c.name.c_str(),
              bf16 ? "bf16 mixed precision" : "f32");
  std::printf("  step             %.4g s\n  compute          %.4g s\n", p.step_s, p.compute_s);
  for (const auto& [key, t] : p.collective_s)
    std::printf("  %-16s %.4g s over %s\n", key.first.c_str(), t, key.second.c_str());
  if (p.hidden_communication_s > 0)
    std::printf("  hidden           %.4g s of communication behind compute (gradient buckets)\n",
                p.hidden_communication_s);
  std::printf("  tokens/s         %.4g\n  model FLOP/s     %.4g per device\n", p.tokens_per_s,
              p.model_flops_per_device_per_s);
  std::printf("  peak memory      %s per device (weights %s, optimizer state %s, activations %s)\n",
              format_in_mib(p.memory.total()).c_str(), format_in_mib(p.memory.weights).c_str(),
              format_in_mib(p.memory.optimizer_state).c_str(),
              format_in_mib(p.memory.activations).c_str());
}

// The remedies a plan that does not fit has not tried yet.
std::string what_else_might_fit(const PlanOptions& o) {
  std::string r = "use more devices, a smaller batch";
  if (o.plan != "auto") r += ", --plan auto (it can split weights and optimizer state over data)";
  if (!o.recompute) r += ", --recompute";
  if (o.dtype != "bf16") r += ", --dtype bf16";
  return r;
}

// "json" or "py": the form --export-layout-map's file takes; "" for neither.
std::string layout_map_format(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".json" ? "json" : ext == ".py" ? "py" : "";
}

// Device 0's bytes: its blocks of weights and optimizer state, and the
// planned buffers of its step (what `plan` reports as the total).
int64_t device_bytes(const Partition& p) {
  const int d = p.devices.at(0);
  int64_t bytes = static_cast<int64_t>(plan_buffers(p.local[d], p.outputs[d]).total_bytes());
  for (size_t id = 0; id < p.leaf_name.size(); ++id) {
    const int local = p.local_of[d][id];
    if (local >= 0 && p.local[d].node(local).is_parameter())
      bytes += numel(p.local[d].node(local).shape) * 4;
  }
  return bytes;
}

// The weights' (not the optimizer slots') layouts and shapes, by path.
void weight_layouts(const Partition& p, std::map<std::string, Sharding>& layouts,
                    std::map<std::string, Shape>& shapes) {
  const int d = p.devices.at(0);
  for (size_t id = 0; id < p.leaf_name.size(); ++id) {
    const std::string& path = p.leaf_name[id];
    const int local = p.local_of[d][id];
    if (local < 0 || !p.local[d].node(local).is_parameter()) continue;
    if (path.rfind("optimizer.", 0) == 0) continue;
    layouts[path] = p.sharding[id];
    shapes[path] = p.global_shape[id];
  }
}

// What --divisible cost: AutoShard's plan without it, on the same mesh,
// against `kept`: each dimension that lost its split, then the predicted
// step time and the bytes per device of both.
std::vector<std::string> lost_splits(Subject& s, const Partition& kept, const AutoShard& planned) {
  AutoShardOptions options = planned.options();
  options.divisible = false;
  auto free = std::make_shared<AutoShard>(kept.mesh, planned.batch_dim_name(), options);
  free->zero1 = planned.zero1;
  std::shared_ptr<Distribution> restore = s.model->distribution_strategy();
  s.model->set_distribution(free);
  const Partition p = s.model->plan_training(s.x, s.y, s.y_dtype);
  s.model->set_distribution(restore);
  std::map<std::string, Sharding> was, now;
  std::map<std::string, Shape> shapes;
  weight_layouts(p, was, shapes);
  weight_layouts(kept, now, shapes);
  const DeviceMesh& mesh = kept.mesh;
  // One line per weight of the repeated layers ("layers.*.mlp.up_proj.kernel").
  std::vector<std::string> out;
  std::map<std::string, int> counts;
  std::vector<std::string> order;
  std::map<std::string, std::string> first;  // a pattern's first weight
  for (const auto& [path, layout] : was)
    for (int d : uneven_dims(layout, shapes[path], mesh)) {
      const std::string line = " " + shape_str(shapes[path]) + ": dimension " + std::to_string(d) +
                               " (" + std::to_string(shapes[path][d]) + ") lost its split over " +
                               mesh.axis_name(layout.dims[d]) + " (" +
                               std::to_string(mesh.axis_size(layout.dims[d])) +
                               "): " + layout.to_string(mesh) + " -> " + now[path].to_string(mesh);
      const std::string key =
          std::regex_replace(path, std::regex(R"(\.\d+\.)"), ".*.") + '\x1f' + line;
      if (counts[key]++ == 0) order.push_back(key), first[key] = path;
    }
  for (const std::string& key : order) {
    const size_t cut = key.find('\x1f');
    const std::string times =
        counts[key] == 1 ? "" : " (" + std::to_string(counts[key]) + " weights)";
    out.push_back((counts[key] == 1 ? first[key] : key.substr(0, cut)) + times +
                  key.substr(cut + 1));
  }
  char cost[256];
  const double before = free->predicted_step_s(), after = planned.predicted_step_s();
  const double bytes_before = double(device_bytes(p)), bytes_after = double(device_bytes(kept));
  std::snprintf(cost, sizeof cost,
                "cost of --divisible: %+.4g ms per step (%.4g -> %.4g ms predicted), %+.2f MiB "
                "per device (%.2f -> %.2f MiB)",
                (after - before) * 1e3, before * 1e3, after * 1e3,
                (bytes_after - bytes_before) / 1048576.0, bytes_before / 1048576.0,
                bytes_after / 1048576.0);
  out.push_back(out.empty() ? "no split lost: every split of the plan without --divisible divides"
                            : cost);
  if (out.size() > 1) out.back() = cost;
  return out;
}

// --export-layout-map: the plan's weights as Keras variables, written as a
// LayoutMap (plan/layout_map_export.h). Returns the number of variables.
size_t export_layout_map(const PlanOptions& o, const Subject& s, const Partition& p,
                         const Distribution& dist, double step_s, double bytes,
                         const std::vector<std::string>& lost) {
  std::map<std::string, Sharding> layouts;
  std::map<std::string, Shape> shapes;
  weight_layouts(p, layouts, shapes);
  // A saved Keras model's own variables, or the KerasHub backbone's of a
  // language model (a Hugging Face directory or a KerasHub preset).
  std::string backbone;
  std::vector<KerasVariable> variables =
      s.keras ? keras_file_variables(*s.keras, shapes)
              : keras_hub_variables(s.config->keras_hub_variables(), shapes, &backbone);
  std::set<std::string> covered;
  for (const KerasVariable& v : variables) covered.insert(v.weight);
  for (const auto& [path, layout] : layouts)
    AS_CHECK(covered.count(path), "--export-layout-map: autoshard's weight '", path,
             "' is no Keras variable of --model '", o.model, "'",
             backbone.empty() ? "" : " (KerasHub " + backbone + ")");
  LayoutMapExport e =
      make_layout_map_export(std::move(variables), p.mesh, [&](const std::string& w) {
        auto it = layouts.find(w);
        AS_CHECK(it != layouts.end(),
                 "--export-layout-map: the plan has no "
                 "weight '",
                 w, "'");
        return it->second;
      });
  // Keras splits the inputs over batch_dim_name, which must be a mesh axis.
  if (p.mesh.axis_index(dist.batch_dim_name()) < 0) {
    std::vector<int> shape = p.mesh.shape();
    std::vector<std::string> names = p.mesh.axis_names();
    shape.insert(shape.begin(), 1);
    names.insert(names.begin(), dist.batch_dim_name());
    e.mesh = DeviceMesh(shape, names);
  }
  e.batch_dim_name = dist.batch_dim_name();
  e.model = backbone.empty() ? o.model : o.model + " (KerasHub " + backbone + ")";
  e.step_s = step_s;
  e.bytes_per_device = bytes;
  e.cluster = o.cluster;
  e.divisible = o.divisible;
  e.lost_splits = lost;
  const std::vector<std::string> uneven = uneven_splits(e);
  if (!uneven.empty() && World::process().leader()) {
    std::string list;
    for (const std::string& u : uneven) list += (list.empty() ? "" : "; ") + u;
    std::fprintf(stderr,
                 "autoshard: warning: --export-layout-map: %zu split(s) do not divide their "
                 "dimension (%s); Keras on JAX refuses them: plan with --divisible\n",
                 uneven.size(), list.c_str());
  }
  const std::string text =
      layout_map_format(o.export_layout_map) == "py" ? layout_map_python(e) : layout_map_json(e);
  write_output_file(o.export_layout_map, "--export-layout-map", text, o.overwrite);
  return e.entries.size();
}

// --html: the report as a picture, with the step priced on --cluster
// (predicted or not) for its charts.
void write_plan_html(const PlanOptions& o, const Subject& s, const Partition& p,
                     const nlohmann::json& report) {
  nlohmann::json page = report;
  page["figures"] = plan_figures(p, Cluster::for_this_run(o.cluster, o.hosts), o.dtype == "bf16");
  const std::string batch = s.config
                                ? "B=" + std::to_string(o.batch) + " T=" + std::to_string(o.seq)
                                : "x " + shape_str(s.x);
  const std::string title = "plan " + o.plan + " for " + o.model + " on mesh " +
                            p.mesh.to_string() + ", " + batch + (o.zero1 ? ", ZeRO-1" : "");
  write_output_file(o.html, "--html", plan_html(page, title), o.overwrite);
}

// --devices N --predict for a language model under AutoShard: pipelines of
// N devices are priced too (app/pipeline_choice.h) and the faster plan that
// fits is shown; not with the outputs only a plan without a pipe axis has.
bool prices_pipelines(const PlanOptions& o) {
  return o.mesh.empty() && o.devices > 1 && o.predict && o.plan == "auto" &&
         !names_keras_model(o.model) && o.export_layout_map.empty() && o.export_problem.empty() &&
         !o.divisible && o.html.empty() && o.trace.empty();
}

// The output paths and the flags that go with them, checked before any
// planning (cli/output_file.h's rule).
void check_plan_outputs(const PlanOptions& o) {
  if (!o.out.empty()) check_output_path(o.out, "--out", o.overwrite);
  if (!o.export_problem.empty())
    check_output_path(o.export_problem, "--export-problem", o.overwrite);
  if (!o.html.empty()) check_output_path(o.html, "--html", o.overwrite);
  if (!o.trace.empty()) {
    check_output_path(o.trace, "--trace", o.overwrite);
    AS_CHECK(o.predict, "--trace draws the predicted step: it needs --predict");
    AS_CHECK(o.trace.ends_with(".json"), "--trace '", o.trace,
             "' must end in .json (a Chrome Trace Event Format file for Perfetto)");
  }
  if (!o.export_layout_map.empty()) {
    check_output_path(o.export_layout_map, "--export-layout-map", o.overwrite);
    AS_CHECK(layout_map_format(o.export_layout_map) != "", "--export-layout-map '",
             o.export_layout_map, "' must end in .json or .py (the form to write)");
  }
}

// The devices whose programs are lowered: device 0, or with --trace, which
// draws every device, all of them (up to 64).
std::vector<int> lowered_devices(const PlanOptions& o, const Distribution& dist) {
  std::vector<int> lowered{0};
  if (!o.trace.empty()) {
    lowered.resize(size_t(std::min(dist.mesh().size(), 64)));
    std::iota(lowered.begin(), lowered.end(), 0);
  }
  return lowered;
}

// --predict: the step priced on `cluster` (and drawn for --trace), with the
// memory of this process's in-process devices.
StepPrediction predict_plan(const PlanOptions& o, const Subject& subject, const Partition& p,
                            const Cluster& cluster) {
  Model& model = *subject.model;
  const bool bf16 = o.dtype == "bf16";
  // Tokens and model FLOPs: a Keras model's example counts as one token.
  const double tokens = subject.config ? double(o.batch) * double(o.seq) : double(o.batch);
  const double flops = subject.config ? model_flops(*subject.config, double(model.count_params()),
                                                    double(o.batch), double(o.seq))
                                      : 6 * double(model.count_params()) * double(o.batch);
  StepPrediction predicted = predict(p, cluster, {bf16, tokens, flops});
  if (!o.trace.empty())
    write_output_file(o.trace, "--trace",
                      predicted_timeline(p, cluster, {bf16, tokens, flops}, 64, 0,
                                         "autoshard prediction on " + cluster.name)
                          .dump(),
                      o.overwrite);
  // In-process devices share one process: its memory is every device's.
  if (p.mesh.size() <= 64)
    predicted.process_bytes =
        in_process_bytes(model.plan_training(subject.x, subject.y, subject.y_dtype,
                                             World::process().local_devices(p.mesh)),
                         cluster, bf16);
  return predicted;
}

// What only AutoShard has, added to the report `j` (pages/plan_report.h): its
// reasons (and the pipelines' that lost), the problem it solved
// (--export-problem) and, with --divisible, the splits it gave up. Returns
// those lost splits.
std::vector<std::string> add_autoshard_findings(const PlanOptions& o, Subject& subject,
                                                const Partition& p, Distribution& dist,
                                                const std::vector<std::string>& pipe_why,
                                                nlohmann::json& j) {
  auto* a = dynamic_cast<AutoShard*>(&dist);
  if (a) {
    j["reasons"] = a->reasons();
    for (const std::string& l : pipe_why) j["reasons"].push_back(l);
    if (!o.export_problem.empty())
      write_output_file(o.export_problem, "--export-problem", a->problem().to_json() + "\n",
                        o.overwrite);
  } else {
    AS_CHECK(o.export_problem.empty(),
             "--export-problem needs --plan auto (only AutoShard poses a problem)");
  }
  std::vector<std::string> lost;
  if (a && o.divisible) {
    lost = lost_splits(subject, p, *a);
    j["lost_splits"] = lost;
  }
  return lost;
}

// The largest device's bytes of one kind (plan_report's "bytes_per_device").
double largest_device_bytes(const nlohmann::json& report, const char* what) {
  return report["bytes_per_device"][what].get<double>();
}

// The report as text: the weights' table (in the leaves' order), AutoShard's
// reasons, lost splits, the collectives of one step, memory and prediction.
void print_plan(const PlanOptions& o, const Subject& subject, const Partition& p,
                const nlohmann::json& j, const std::vector<std::string>& lost,
                const StepPrediction* predicted, const Cluster* cluster, size_t exported) {
  const DeviceMesh& mesh = p.mesh;
  const std::string batch = subject.config
                                ? "B=" + std::to_string(o.batch) + " T=" + std::to_string(o.seq)
                                : "x " + shape_str(subject.x);
  std::printf("plan %s for %s on mesh %s (%d devices), %s%s\n\n", o.plan.c_str(), o.model.c_str(),
              mesh.to_string().c_str(), mesh.size(), batch.c_str(), o.zero1 ? ", ZeRO-1" : "");
  std::printf("%-40s %-16s %-20s %s\n", "parameter", "shape", "layout", "bytes/device");
  const nlohmann::json& params = j["parameters"];
  for (size_t id = 0; id < p.leaf_name.size(); ++id) {
    const std::string& path = p.leaf_name[id];
    if (!params.contains(path)) continue;
    std::printf("%-40s %-16s %-20s %s\n", path.c_str(), shape_str(p.global_shape[id]).c_str(),
                p.sharding[id].to_string(mesh).c_str(),
                format_in_mib(params[path]["bytes_per_device"].get<double>()).c_str());
  }
  if (j.contains("reasons")) {
    std::printf("\nwhy (AutoShard):\n");
    for (const auto& line : j["reasons"]) std::printf("  %s\n", line.get<std::string>().c_str());
  }
  if (!lost.empty()) {
    std::printf("\n--divisible (splits that divide only):\n");
    for (const std::string& line : lost) std::printf("  %s\n", line.c_str());
  }
  std::map<std::pair<std::string, std::string>, std::pair<int, int64_t>> totals;
  for (const CollectiveRecord& c : p.collectives) {
    auto& t = totals[{c.kind, c.axis}];
    t.first += 1;
    t.second += c.bytes;
  }
  std::printf("\ncollectives of one training step (device 0):\n  %-16s %-8s %6s %14s\n", "kind",
              "axis", "count", "bytes");
  for (const auto& [key, t] : totals)
    std::printf("  %-16s %-8s %6d %14s\n", key.first.c_str(), key.second.c_str(), t.first,
                format_in_mib(double(t.second)).c_str());
  auto largest = [&j](const char* what) { return format_in_mib(largest_device_bytes(j, what)); };
  std::printf(
      "\nmemory per device (largest device):\n  weights          %s\n  optimizer state  %s\n"
      "  activations      %s (planned buffers of the step)\n  total            %s\n",
      largest("weights").c_str(), largest("optimizer_state").c_str(),
      largest("activations").c_str(), largest("total").c_str());
  if (predicted) print_prediction(*predicted, *cluster, o.dtype == "bf16");
  if (exported > 0)
    std::printf("\nKeras LayoutMap of %zu variables written to %s\n", exported,
                o.export_layout_map.c_str());
}

// The pipelines of --devices N --predict (app/pipeline_choice.h). They are
// priced beside the plan without a pipe axis where no answer depends on the
// cores the two share: every plan counted in work (--deterministic), in one
// process (under mpirun each plan broadcasts the leader's answers, in
// turn). On 1,024 devices the pricing is a tenth of the command's CPU time,
// on one core, and the mesh search leaves a core idle at times.
class PipelinePricing {
 public:
  void start(const PlanOptions& o, const Cluster& priced_on) {
    CommonOptions priced = o;
    const LanguageModelConfig config = model_config(priced);
    const PipelineRun run = pipeline_run(priced, priced_on, o.dtype == "bf16");
    auto price = [this, run, config, devices = o.devices] {
      return choose_pipeline(run, config, devices, why_);
    };
    if (o.deterministic_plan && !World::process().distributed())
      beside_ = std::async(std::launch::async, std::move(price));
    else
      best_ = price();
  }
  // The fastest pipeline that fits (none: none fits, or none was priced).
  const std::optional<PricedPipeline>& best() {
    if (beside_.valid()) best_ = beside_.get();
    return best_;
  }
  // Its lines of `why`, one per shape priced.
  std::vector<std::string>& why() {
    best();
    return why_;
  }
  // After an error of the plan without a pipe axis: the pricing's own error,
  // which came first when the two ran in turn, still does.
  void rethrow_first() { best(); }

 private:
  std::vector<std::string> why_;
  std::optional<PricedPipeline> best_;
  std::future<std::optional<PricedPipeline>> beside_;
};

void plan_without_pipe_axis(PlanOptions& o, const Cluster& priced_on, PipelinePricing& pipelines);

void run_plan(PlanOptions& o) {
  // Under mpirun every rank plans (and predicts its run as ranks); rank 0 prints.
  if (!World::process().leader() && !std::freopen("/dev/null", "w", stdout))
    fail("cannot silence rank ", World::process().rank(), "'s output");
  check_plan_outputs(o);
  if (pipeline_requested(o, o.pipeline)) {
    AS_CHECK(o.export_layout_map.empty() && o.export_problem.empty() && !o.divisible &&
                 o.html.empty() && o.trace.empty(),
             "--export-layout-map, --export-problem, --divisible, --html and --trace are not "
             "available with a "
             "pipe axis yet (each stage's plan is priced, not exported); drop them or the pipe "
             "axis");
    return run_pipeline_plan(o, o.pipeline, {o.json, o.predict, o.overwrite, o.out, o.dtype});
  }
  AS_CHECK(!o.divisible || o.plan == "auto",
           "--divisible restricts AutoShard's choices; it needs "
           "--plan auto, not --plan ",
           o.plan);
  // What --predict prices on (read once; without --predict, nothing).
  const Cluster priced_on = o.predict ? Cluster::for_this_run(o.cluster, o.hosts) : Cluster{};
  PipelinePricing pipelines;
  if (prices_pipelines(o)) pipelines.start(o, priced_on);
  try {
    plan_without_pipe_axis(o, priced_on, pipelines);
  } catch (...) {
    pipelines.rethrow_first();
    throw;
  }
}

// The plan of --mesh or --devices without a pipe axis, and its report; or,
// with --devices N --predict, the pipeline when it is faster.
void plan_without_pipe_axis(PlanOptions& o, const Cluster& priced_on, PipelinePricing& pipelines) {
  auto show_pipeline = [&](const std::string& unpiped) {
    pipelines.why().push_back(unpiped);
    report_pipeline(o, *pipelines.best(), priced_on, o.dtype == "bf16",
                    {o.json, o.predict, o.overwrite, o.out, o.dtype}, pipelines.why());
  };
  if (o.mesh.empty() && o.devices == 0) o.devices = 2;
  o.bf16 = o.dtype == "bf16";
  Subject subject = names_keras_model(o.model) ? keras_subject(o) : language_subject(o);
  Model& model = *subject.model;
  std::shared_ptr<Distribution> dist;
  try {
    dist = distribution_of(o, subject);
  } catch (const Error& e) {
    // Only AutoShard's "nothing fits" gives way to a pipeline that does.
    if (!pipelines.best() || !std::string(e.what()).starts_with("AutoShard: no ")) throw;
    return show_pipeline(cat("without a pipe axis: ", e.what()));
  }
  model.set_distribution(dist);
  check_layout_map(o, dist.get(), model);
  const Partition p =
      model.plan_training(subject.x, subject.y, subject.y_dtype, lowered_devices(o, *dist));
  std::optional<StepPrediction> predicted;
  std::optional<Cluster> cluster;
  if (o.predict) {
    cluster = priced_on;
    predicted = predict_plan(o, subject, p, *cluster);
    const bool fits = predicted->memory.total() <= cluster->memory_bytes;
    const UnpipedStep unpiped{p.mesh.to_string(), predicted->step_s, predicted->memory.total(),
                              fits};
    if (pipelines.best() && pipeline_is_faster(*pipelines.best(), unpiped))
      return show_pipeline(unpiped_line(unpiped));
    AS_CHECK(fits, "the plan does not fit: ", format_in_mib(predicted->memory.total()),
             " per device (weights ", format_in_mib(predicted->memory.weights),
             ", optimizer state ", format_in_mib(predicted->memory.optimizer_state),
             ", activations ", format_in_mib(predicted->memory.activations), ") but cluster '",
             cluster->name, "' has ", format_in_mib(cluster->memory_bytes), "; ",
             what_else_might_fit(o));
  }

  // The report (pages/plan_report.h).
  nlohmann::json j = plan_report(p);
  const std::vector<std::string> lost =
      add_autoshard_findings(o, subject, p, *dist, pipelines.why(), j);
  if (predicted) j["predicted"] = prediction_report(*predicted);
  size_t exported = 0;
  if (!o.export_layout_map.empty()) {
    const auto* a = dynamic_cast<const AutoShard*>(dist.get());
    exported = export_layout_map(
        o, subject, p, *dist,
        predicted ? predicted->step_s
        : a       ? a->predicted_step_s()
                  : 0,
        predicted ? predicted->memory.total() : largest_device_bytes(j, "total"), lost);
  }
  if (!o.out.empty()) write_output_file(o.out, "--out", j.dump(2) + "\n", o.overwrite);
  if (!o.html.empty()) write_plan_html(o, subject, p, j);
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  print_plan(o, subject, p, j, lost, predicted ? &*predicted : nullptr,
             cluster ? &*cluster : nullptr, exported);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "show how a model is laid out over a mesh, and why");
  add_common(cmd, *o);
  cmd->add_flag("--json", o->json, "print the plan as JSON");
  cmd->add_option("--out", o->out, "also write the JSON plan to FILE");
  cmd->add_flag("--predict", o->predict, "predict step time and memory on --cluster");
  cmd->get_option("--cluster")->each([o](const std::string&) { o->predict = true; });
  cmd->add_option("--export-problem", o->export_problem,
                  "write the problem AutoShard solved (IOPDDL JSON, for autoshard solve)");
  cmd->add_option("--export-layout-map", o->export_layout_map,
                  "write the plan as a Keras LayoutMap: FILE.json, or FILE.py defining "
                  "get_layout_map(device_mesh)");
  cmd->add_option("--html", o->html,
                  "also write the plan as a picture: one self-contained HTML page (mesh, weights' "
                  "blocks, the predicted step, memory over the step, rejected alternatives)");
  cmd->add_option("--trace", o->trace,
                  "with --predict: also write the predicted step as a timeline (FILE.json, "
                  "Chrome Trace Event Format: open it in Perfetto beside train --trace's)");
  cmd->add_flag("--divisible", o->divisible,
                "only splits that divide their dimension (JAX's NamedSharding needs them); "
                "reports each split lost and its cost");
  add_overwrite(cmd, o->overwrite);
  add_pipeline_flags(cmd, o->pipeline);
  cmd->add_option("--dtype", o->dtype, "f32, or bf16 mixed precision (prediction)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace autoshard::cli
