#include "autoshard/plan/cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "autoshard/environment.h"
#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/json.h"
#include "autoshard/memory_size.h"

namespace autoshard {

namespace {

// NVIDIA DGX A100 (80 GB): 312 TFLOP/s dense bf16, 19.5 fp32, 80 GB HBM2e
// at 2.0 TB/s; NVLink 3 at 300 GB/s per direction per GPU within a node of
// 8; one 200 Gb/s HDR InfiniBand port per GPU between nodes. Efficiencies
// are assumptions stated in docs/cost-model.md.
Cluster a100() {
  Cluster c;
  c.name = "a100-80g";
  c.flops_f32 = 19.5e12;
  c.flops_bf16 = 312e12;
  c.gemm_efficiency = {{1e7, 0.05},  {1e8, 0.20},  {1e9, 0.45},
                       {1e10, 0.70}, {1e11, 0.80}, {1e12, 0.82}};
  c.memory_bytes = 80.0 * (1 << 30);
  c.memory_bandwidth = 2.0e12;
  c.stream_efficiency = 0.8;
  c.op_overhead = 5e-6;
  c.links = {{"nvlink", 8, 300e9, 2e-6, 0.8}, {"infiniband", 0, 200e9 / 8, 5e-6, 0.8}};
  return c;
}

// NVIDIA DGX H100: 989 TFLOP/s dense bf16, 67 fp32, 80 GB HBM3 at 3.35
// TB/s; NVLink 4 at 450 GB/s per direction; one 400 Gb/s NDR port per GPU.
// A faster device needs larger products to reach the same fraction.
Cluster h100() {
  Cluster c;
  c.name = "h100-80g";
  c.flops_f32 = 67e12;
  c.flops_bf16 = 989e12;
  c.gemm_efficiency = {{3e7, 0.05},  {3e8, 0.20},  {3e9, 0.45},
                       {3e10, 0.65}, {3e11, 0.75}, {3e12, 0.78}};
  c.memory_bytes = 80.0 * (1 << 30);
  c.memory_bandwidth = 3.35e12;
  c.stream_efficiency = 0.8;
  c.op_overhead = 5e-6;
  c.links = {{"nvlink", 8, 450e9, 2e-6, 0.8}, {"infiniband", 0, 400e9 / 8, 5e-6, 0.8}};
  return c;
}

// This machine before any calibration: an AVX2 core's 32 FLOP per cycle at
// 2.5 GHz, 20 GB/s of memory bandwidth, the memory available now, the cores
// shared by the devices.
Cluster cpu_default() {
  Cluster c;
  c.name = "cpu";
  c.shared_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.oversubscribed_efficiency = 0.8;
  c.flops_f32 = c.flops_bf16 = 80e9 * c.shared_cores;
  c.gemm_efficiency = {{1e5, 0.10}, {1e6, 0.40}, {1e7, 0.70}, {1e8, 0.85}, {1e9, 0.90}};
  c.memory_bytes = double(available_memory_bytes().value_or(int64_t{16} << 30));
  c.memory_bandwidth = 20e9;
  c.stream_efficiency = 0.5;
  c.op_overhead = 2e-6;
  c.links = {{"shared memory", 0, 5e9, 5e-6, 1.0}};
  return c;
}

// A cluster file's fields, range-checked against physical bounds (see
// docs/cost-model.md): a figure outside them is a typo or a unit mistake,
// and would drive the cost model's times to 0, infinity or below zero.
class ClusterFields {
 public:
  explicit ClusterFields(std::string source) : source_(std::move(source)) {}

  // An object whose keys must all be known (a misspelt field would silently
  // fall back to its default).
  const nlohmann::json& object(const nlohmann::json& parent, const char* key,
                               std::initializer_list<const char*> known) const {
    AS_CHECK(parent.contains(key), in(), "needs \"", key, "\"");
    const nlohmann::json& j = parent[key];
    check_keys(j, key, known);
    return j;
  }
  void check_keys(const nlohmann::json& j, const std::string& what,
                  std::initializer_list<const char*> known) const {
    AS_CHECK(j.is_object(), in(), "\"", what, "\" must be an object");
    for (const auto& [k, v] : j.items()) {
      bool ok = false;
      for (const char* name : known) ok = ok || k == name;
      if (ok) continue;
      std::string list;
      for (const char* name : known) list += (list.empty() ? "" : ", ") + std::string(name);
      fail(in(), "\"", what, "\" has an unknown field \"", k, "\" (known: ", list, ")");
    }
  }
  // A number in [lo, hi], or `fallback` when absent; `zero_ok`: 0 also
  // (meaning "not modelled").
  double number(const nlohmann::json& j, const char* key, double lo, double hi,
                std::optional<double> fallback = std::nullopt, bool zero_ok = false) const {
    if (!j.contains(key)) {
      AS_CHECK(fallback.has_value(), in(), "needs ", field(key), " (a number from ", figure(lo),
               " to ", figure(hi), ")");
      return *fallback;
    }
    AS_CHECK(j[key].is_number(), in(), field(key), " must be a number, not ", j[key].type_name());
    const double v = j[key].get<double>();
    AS_CHECK(std::isfinite(v) && ((v >= lo && v <= hi) || (zero_ok && v == 0)), in(), field(key),
             " is ", figure(v), "; it must be ", zero_ok ? "0 or " : "", "from ", figure(lo),
             " to ", figure(hi), " (see docs/cost-model.md)");
    return v;
  }
  int whole(const nlohmann::json& j, const char* key, int lo, int hi,
            std::optional<double> fallback = std::nullopt) const {
    const double v = number(j, key, lo, hi, fallback);
    AS_CHECK(v == std::floor(v), in(), field(key), " is ", v, "; it must be a whole number");
    return static_cast<int>(v);
  }
  std::string text(const nlohmann::json& j, const char* key, const std::string& fallback) const {
    if (!j.contains(key)) return fallback;
    AS_CHECK(j[key].is_string(), in(), field(key), " must be a string, not ", j[key].type_name());
    return j[key].get<std::string>();
  }
  std::string in() const { return "cluster '" + source_ + "': "; }
  // Where the next fields are, for messages: "device.", "links[1].", ...
  void at(std::string prefix) { prefix_ = std::move(prefix); }

 private:
  // A bound or value as people write it: 1048576, not 1.04858e+06.
  static std::string figure(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
    return cat(v);
  }
  std::string field(const char* key) const { return "\"" + prefix_ + key + "\""; }

  std::string source_, prefix_;
};

// Physical bounds of a cluster's figures (docs/cost-model.md lists them).
constexpr double kMinRate = 1e6;    // FLOP/s and bytes/s: a megaflop, a megabyte per second
constexpr double kMaxFlops = 1e18;  // an exaflop per device
constexpr double kMaxBandwidth = 1e15;
constexpr double kMaxBytes = 1e15;  // a petabyte per device
constexpr double kMinFraction = 1e-3;
constexpr int kMaxCores = 1 << 16;
constexpr int kMaxGroup = 1 << 24;  // the largest mesh

// A cluster file is a few kilobytes; a megabyte is surely something else.
constexpr uint64_t kMaxClusterFileBytes = 1 << 20;

}  // namespace

std::string Cluster::calibration_path() {
  if (const std::optional<std::string> home = env::home()) return *home + "/cpu.json";
  const char* user = std::getenv("HOME");
  return std::string(user ? user : ".") + "/.cache/autoshard/cpu.json";
}

Cluster Cluster::preset(const std::string& name) {
  if (name == "a100-80g") return a100();
  if (name == "h100-80g") return h100();
  if (name == "cpu") {
    const std::string path = calibration_path();
    if (std::filesystem::exists(path))
      return from_json(read_input_file(path, "calibration", kMaxClusterFileBytes), path);
    return cpu_default();
  }
  fail("unknown cluster '", name, "' (known: cpu, a100-80g, h100-80g; or a cluster JSON file)");
}

Cluster Cluster::named(const std::string& name_or_file) {
  if (name_or_file.find('/') == std::string::npos && !name_or_file.ends_with(".json"))
    return preset(name_or_file);
  return from_json(read_input_file(name_or_file, "cluster file", kMaxClusterFileBytes),
                   name_or_file);
}

Cluster Cluster::from_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = parse_json_text(text, "cluster '" + source + "'");
  ClusterFields f(source);
  AS_CHECK(j.is_object(), f.in(), "must be an object with \"device\" and \"links\"");
  f.check_keys(j, "cluster",
               {"name", "device", "shared_cores", "oversubscribed_efficiency",
                "oversubscribed_wait_s", "oversubscribed_slice_s", "links", "mpi_link", "hosts",
                // What `autoshard calibrate` measured, kept beside the figures
                // fitted from it for people to read; not used for pricing.
                "measurements"});
  Cluster c;
  c.name = f.text(j, "name", source);
  const auto& d = f.object(
      j, "device",
      {"flops", "gemm_efficiency", "gemm_packing_bandwidth", "memory_bytes", "memory_bandwidth",
       "stream_efficiency", "kernel_bandwidth", "kernel_flops", "process_bytes", "op_overhead_s"});
  const auto& flops = f.object(d, "flops", {"f32", "bf16"});
  f.at("device.flops.");
  c.flops_f32 = f.number(flops, "f32", kMinRate, kMaxFlops);
  c.flops_bf16 = f.number(flops, "bf16", kMinRate, kMaxFlops, c.flops_f32);
  AS_CHECK(d.contains("gemm_efficiency") && d["gemm_efficiency"].is_array() &&
               !d["gemm_efficiency"].empty() && d["gemm_efficiency"].size() <= 1000,
           f.in(), "\"gemm_efficiency\" must be a list of 1 to 1000 [flops, fraction] points");
  for (const auto& p : d["gemm_efficiency"]) {
    AS_CHECK(p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number(), f.in(),
             "gemm_efficiency entries are [flops, fraction]");
    const double at = p[0].get<double>(), fraction = p[1].get<double>();
    AS_CHECK(std::isfinite(at) && at >= 1 && at <= 1e30 && std::isfinite(fraction) &&
                 fraction >= kMinFraction && fraction <= 1,
             f.in(), "gemm_efficiency entry [", at, ", ", fraction,
             "]: flops must be from 1 to 1e30 and the fraction from ", kMinFraction, " to 1");
    c.gemm_efficiency.push_back({at, fraction});
  }
  std::sort(c.gemm_efficiency.begin(), c.gemm_efficiency.end());
  for (size_t i = 1; i < c.gemm_efficiency.size(); ++i)
    AS_CHECK(c.gemm_efficiency[i].first > c.gemm_efficiency[i - 1].first, f.in(),
             "gemm_efficiency has two points at ", c.gemm_efficiency[i].first, " flops");
  f.at("device.");
  c.memory_bytes = f.number(d, "memory_bytes", 1 << 20, kMaxBytes);
  c.memory_bandwidth = f.number(d, "memory_bandwidth", kMinRate, kMaxBandwidth);
  c.stream_efficiency = f.number(d, "stream_efficiency", kMinFraction, 1, 1.0);
  c.kernel_bandwidth = f.number(d, "kernel_bandwidth", kMinRate, kMaxBandwidth, 0.0, true);
  c.gemm_packing_bandwidth =
      f.number(d, "gemm_packing_bandwidth", kMinRate, kMaxBandwidth, 0.0, true);
  c.process_bytes = f.number(d, "process_bytes", 0, kMaxBytes, 0.0);
  c.kernel_flops = f.number(d, "kernel_flops", kMinRate, kMaxFlops, 0.0, true);
  c.op_overhead = f.number(d, "op_overhead_s", 0, 1, 0.0);
  f.at("");
  c.shared_cores = f.whole(j, "shared_cores", 0, kMaxCores, 0);
  c.oversubscribed_efficiency = f.number(j, "oversubscribed_efficiency", kMinFraction, 1, 1.0);
  c.oversubscribed_wait = f.number(j, "oversubscribed_wait_s", 0, 1, 0.0);
  c.oversubscribed_slice = f.number(j, "oversubscribed_slice_s", 0, 10, 0.0);
  c.hosts = f.whole(j, "hosts", 1, kMaxGroup, 1);
  AS_CHECK(j.contains("links") && j["links"].is_array() && !j["links"].empty() &&
               j["links"].size() <= 16,
           f.in(), "\"links\" must list 1 to 16 levels");
  auto level_of = [&](const nlohmann::json& l, const std::string& what) {
    f.at("");
    f.check_keys(l, what,
                 {"name", "devices_per_group", "bandwidth", "latency_s", "efficiency",
                  "bucket_bandwidth", "bucket_latency_s"});
    f.at(what + ".");
    LinkLevel level;
    level.name = f.text(l, "name", "link");
    level.devices_per_group = f.whole(l, "devices_per_group", 0, kMaxGroup);
    level.bandwidth = f.number(l, "bandwidth", 1e3, kMaxBandwidth);
    level.latency = f.number(l, "latency_s", 0, 10);
    level.efficiency = f.number(l, "efficiency", kMinFraction, 1, 1.0);
    if (l.contains("bucket_bandwidth")) {
      level.bucket_bandwidth = f.number(l, "bucket_bandwidth", 1e3, kMaxBandwidth);
      level.bucket_latency = f.number(l, "bucket_latency_s", 0, 10, level.latency);
    }
    return level;
  };
  for (const auto& l : j["links"])
    c.links.push_back(level_of(l, cat("links[", c.links.size(), "]")));
  if (j.contains("mpi_link")) c.mpi_link = level_of(j["mpi_link"], "mpi_link");
  for (size_t i = 1; i < c.links.size(); ++i)
    AS_CHECK(c.links[i - 1].devices_per_group > 0 &&
                 (c.links[i].devices_per_group == 0 ||
                  c.links[i].devices_per_group % c.links[i - 1].devices_per_group == 0),
             f.in(), "each link level must hold whole groups of the level inside");
  return c;
}

std::string Cluster::to_json() const {
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& [f, e] : gemm_efficiency) curve.push_back({f, e});
  auto level_json = [](const LinkLevel& l) {
    nlohmann::json j{{"name", l.name},
                     {"devices_per_group", l.devices_per_group},
                     {"bandwidth", l.bandwidth},
                     {"latency_s", l.latency},
                     {"efficiency", l.efficiency}};
    if (l.bucket_bandwidth > 0) {
      j["bucket_bandwidth"] = l.bucket_bandwidth;
      j["bucket_latency_s"] = l.bucket_latency;
    }
    return j;
  };
  nlohmann::json links_json = nlohmann::json::array();
  for (const LinkLevel& l : links) links_json.push_back(level_json(l));
  nlohmann::json j = {{"name", name},
                      {"device",
                       {{"flops", {{"f32", flops_f32}, {"bf16", flops_bf16}}},
                        {"gemm_efficiency", curve},
                        {"gemm_packing_bandwidth", gemm_packing_bandwidth},
                        {"memory_bytes", memory_bytes},
                        {"memory_bandwidth", memory_bandwidth},
                        {"stream_efficiency", stream_efficiency},
                        {"kernel_bandwidth", kernel_bandwidth},
                        {"kernel_flops", kernel_flops},
                        {"process_bytes", process_bytes},
                        {"op_overhead_s", op_overhead}}},
                      {"shared_cores", shared_cores},
                      {"oversubscribed_efficiency", oversubscribed_efficiency},
                      {"oversubscribed_wait_s", oversubscribed_wait},
                      {"oversubscribed_slice_s", oversubscribed_slice},
                      {"links", links_json}};
  if (mpi_link) j["mpi_link"] = level_json(*mpi_link);
  if (hosts > 1) j["hosts"] = hosts;
  return j.dump(2);
}

namespace {

// `devices` beyond `cores` take the cores in turns: how many turns, and the
// fraction of the cores' time the last turn leaves idle.
int turns(int devices, int cores) {
  return (devices + cores - 1) / cores;
}
double idle(int devices, int cores) {
  return 1 - double(devices) / double(cores * turns(devices, cores));
}

}  // namespace

// A shared machine's figure divided among `devices`, less what
// oversubscription costs: `devices` beyond the cores take them in turns, the
// last turn leaving cores idle; the calibrated loss at one device more than
// cores is scaled by the idle fraction.
double Cluster::share(double whole, int devices) const {
  const int n = devices_per_host(devices);
  if (n <= shared_cores) return whole / n;
  const double calibrated = idle(shared_cores + 1, shared_cores);
  const double efficiency =
      calibrated > 0 ? 1 - (1 - oversubscribed_efficiency) * idle(n, shared_cores) / calibrated
                     : oversubscribed_efficiency;
  return whole / n * efficiency;
}

int Cluster::devices_per_host(int devices) const {
  return (std::max(1, devices) + hosts - 1) / hosts;
}

bool Cluster::oversubscribed(int devices) const {
  return shared_cores > 0 && devices_per_host(devices) > shared_cores;
}

double Cluster::last_turn_idle(int devices) const {
  if (!oversubscribed(devices)) return 0;
  const int n = devices_per_host(devices);
  return turns(n, shared_cores) * idle(n, shared_cores);
}

double Cluster::stretch_seconds(double own_core_s, int devices) const {
  if (!oversubscribed(devices) || own_core_s <= 0) return own_core_s;
  const double w = own_core_s, q = oversubscribed_slice;
  return w * devices_per_host(devices) / shared_cores + w * last_turn_idle(devices) * q / (q + w);
}

double Cluster::device_flops(bool bf16, int devices) const {
  const double peak = bf16 ? flops_bf16 : flops_f32;
  return shared_cores > 0 ? share(peak, devices) : peak;
}

// Cores of a shared machine each device's kernels run on (they split their
// loops over the device's share of the cores; see tensor/parallel.h).
int Cluster::cores_per_device(int devices) const {
  return shared_cores > 0 ? std::max(1, shared_cores / devices_per_host(devices)) : 1;
}

double Cluster::device_kernel_flops(int devices) const {
  const double own = kernel_flops > 0 ? kernel_flops * cores_per_device(devices) : flops_f32;
  return shared_cores > 0 ? std::min(own, share(flops_f32, devices)) : own;
}

double Cluster::device_bandwidth(int devices) const {
  const double own = kernel_bandwidth > 0 ? kernel_bandwidth * cores_per_device(devices)
                                          : memory_bandwidth * stream_efficiency;
  return shared_cores > 0 ? std::min(own, share(memory_bandwidth, devices)) : own;
}

double Cluster::square_packed_bytes(double flops) {
  const double n = std::cbrt(flops / 2);
  return 2 * 4 * n * n;
}

double Cluster::gemm_packing_seconds(double flops, double packed_bytes, int devices) const {
  if (gemm_packing_bandwidth <= 0) return 0;
  const double bandwidth = shared_cores > 0 ? share(gemm_packing_bandwidth * shared_cores, devices)
                                            : gemm_packing_bandwidth;
  return std::max(0.0, packed_bytes - square_packed_bytes(flops)) / bandwidth;
}

double Cluster::gemm_fraction(double flops, int devices) const {
  // The curve is one core's (or one accelerator's): a product spread over t
  // threads runs like t products of a t-th the size.
  if (shared_cores > 0) flops /= cores_per_device(devices);
  if (gemm_efficiency.empty()) return 1;
  if (flops <= gemm_efficiency.front().first) return gemm_efficiency.front().second;
  if (flops >= gemm_efficiency.back().first) return gemm_efficiency.back().second;
  for (size_t i = 1; i < gemm_efficiency.size(); ++i)
    if (flops <= gemm_efficiency[i].first) {
      const auto [f0, e0] = gemm_efficiency[i - 1];
      const auto [f1, e1] = gemm_efficiency[i];
      const double t = std::log(flops / f0) / std::log(f1 / f0);
      return e0 + t * (e1 - e0);
    }
  return gemm_efficiency.back().second;
}

namespace {

// Whether every group of `axis` lies inside one group of `per` consecutive
// devices. A group is {f + k * stride : k < size}, f = o * span + i for
// o < outer (the groups along the axes outside) and i < stride; it fits
// when f mod per + (size - 1) * stride < per. f mod per repeats with o
// every per / gcd(span, per) values, so at most that many o are checked.
bool groups_fit(int64_t stride, int64_t size, int64_t outer, int64_t per) {
  const int64_t span = stride * size, reach = (size - 1) * stride;
  if (reach >= per) return false;
  const int64_t period = std::min(outer, per / std::gcd(span, per));
  for (int64_t o = 0; o < period; ++o) {
    // i = 0's group starts at `first`; the last i's at first + stride - 1
    // (past per - 1 it wraps, and the group ending there crosses).
    const int64_t first = o * span % per;
    if (first + stride - 1 + reach >= per) return false;
  }
  return true;
}

}  // namespace

Cluster Cluster::as_mpi_ranks(int machines) const {
  Cluster c = *this;
  c.hosts = std::max(1, machines);
  if (mpi_link) {
    c.links = {*mpi_link};
    c.links.back().devices_per_group = 0;
  }
  return c;
}

// An axis talks over the innermost level one of whose groups holds each of
// its groups whole; a group that straddles two groups of a level (three
// devices 3, 4, 5 on nodes of four) is priced on the level above: the
// axis's collectives run in all its groups at once, so the slowest sets the
// pace. Any mesh shape and node size: data = 2, model = 3 on nodes of 8
// ({0, 1, 2}, {3, 4, 5}) talks over the node's link; data = 3, model = 3
// does not ({6, 7, 8} straddles two nodes).
const LinkLevel& Cluster::link(const DeviceMesh& mesh, int axis) const {
  // A collective tuple's groups are strided blocks like an axis's; another
  // tuple is priced as the run of axes from its first member to its last
  // (its groups lie inside that run's: on no faster a link).
  if (!mesh.collective_axis(axis)) {
    const std::vector<int> members = axis_members(axis);
    std::vector<int> run;  // the wide axes from the first member to the last
    for (int a = members.front(); a <= members.back(); ++a)
      if (mesh.axis_size(a) > 1) run.push_back(a);
    if (run.empty()) return links.front();  // one device: no link
    axis = tuple_axis(run);
  }
  const int64_t stride = mesh.axis_stride(axis);
  const int64_t size = mesh.axis_size(axis);
  const int64_t outer = mesh.size() / (stride * size);
  for (const LinkLevel& l : links)
    if (l.devices_per_group == 0 || size <= 1 ||
        groups_fit(stride, size, outer, l.devices_per_group))
      return l;
  return links.back();
}

void Cluster::check_mesh(const DeviceMesh& mesh) const {
  AS_CHECK(!links.empty(), "cluster '", name, "' has no links");
  const int last = links.back().devices_per_group;
  AS_CHECK(last == 0 || mesh.size() <= last, "mesh ", mesh.to_string(), " has ", mesh.size(),
           " devices but cluster '", name, "' has ", last);
}

}  // namespace autoshard
