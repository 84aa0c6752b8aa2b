#include "autoshard/plan/calibration.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "autoshard/comm/mpi_communicator.h"
#include "autoshard/comm/thread_communicator.h"
#include "autoshard/comm/world.h"
#include "autoshard/ir/blas_core.h"
#include "autoshard/ir/ops.h"
#include "autoshard/runtime/executor.h"

namespace autoshard {

namespace {

using Clock = std::chrono::steady_clock;

// Runs f until `min_seconds` have passed (at least twice); seconds per call,
// the best of three batches (noise on a shared machine only slows).
template <typename F>
double time_it(F&& f, double min_seconds) {
  f();  // warm up
  double best = 1e300;
  for (int batch = 0; batch < 3; ++batch) {
    int calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      f();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_seconds / 3 || calls < 2);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

double resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024;
  return 0;
}

// Seconds of one core's product C[m,n] = A[m,k] B[k,n].
double gemm_seconds(int64_t m, int64_t n, int64_t k, double seconds) {
  std::vector<float> a(m * k, 1.0f), b(k * n, 0.5f), c(m * n);
  return time_it(
      [&] {
        // The products the engine runs (a private OpenBLAS copy when NumPy
        // loaded the shared one first: ir/blas_core.h).
        blas::sgemm(false, false, int(m), int(n), int(k), 1.0f, a.data(), int(k), b.data(),
                    int(n), 0.0f, c.data(), int(n));
      },
      seconds);
}

GemmTiming time_gemm(int64_t m, int64_t n, int64_t k, double seconds) {
  return {2.0 * double(m * n * k), 4.0 * double(m * k + k * n), gemm_seconds(m, n, k, seconds)};
}

// Bytes/s (or FLOP/s) of one of autoshard's own kernels on one core.
double kernel_rate(bool flops, int64_t elements, double seconds) {
  Graph g;
  Value a = g.parameter("a", {elements}), b = g.parameter("b", {elements});
  Value y = flops ? ops::gelu(a) : a + b;
  Executor exec(g, {y.id});
  Tensor ta = Tensor::full({elements}, 0.5f), tb = Tensor::full({elements}, 0.25f);
  exec.bind(a.id, ta);
  exec.bind(b.id, tb);
  const double t = time_it([&] { exec.run(); }, seconds);
  // The cost model's own count: gelu states 20 FLOPs per element.
  return flops ? 20.0 * double(elements) / t : 12.0 * double(elements) / t;
}

double machine_bandwidth(int cores, double seconds) {
  const int64_t per = int64_t{16} << 20;  // 16M floats per thread
  std::vector<std::vector<float>> src(cores, std::vector<float>(per, 1.0f)),
      dst(cores, std::vector<float>(per));
  const double t = time_it(
      [&] {
        std::vector<std::thread> threads;
        for (int c = 0; c < cores; ++c)
          threads.emplace_back([&, c] { std::copy(src[c].begin(), src[c].end(), dst[c].begin()); });
        for (auto& th : threads) th.join();
      },
      seconds);
  return 2.0 * 4.0 * double(per) * cores / t;  // read and write
}

double op_overhead(double seconds) {
  Graph g;
  Value x = g.parameter("x", {4});
  for (int i = 0; i < 1000; ++i) x = ops::scale(x, 1.0);
  Executor exec(g, {x.id});
  Tensor t = Tensor::full({4}, 1.0f);
  exec.bind(g.find_parameter("x"), t);
  return time_it([&] { exec.run(); }, seconds) / 1000;
}

// All-reduce seconds over two in-process devices for each size.
std::vector<std::pair<double, double>> thread_all_reduce(const std::vector<int64_t>& sizes,
                                                         double seconds) {
  const DeviceMesh mesh({2}, {"x"});
  ThreadWorld world(mesh);
  std::vector<std::pair<double, double>> points;
  for (int64_t count : sizes) {
    std::vector<std::vector<float>> bufs(2, std::vector<float>(count, 1.0f));
    const double t = time_it(
        [&] {
          world.run([&](int rank, Communicator& comm) {
            for (int k = 0; k < 8; ++k)
              comm.all_reduce(bufs[rank].data(), count, ReduceOp::Sum, mesh_groups(mesh, rank)[0]);
          });
        },
        seconds);
    points.push_back({4.0 * double(count), t / 8});
  }
  return points;
}

// Rounds of work on `devices` in-process devices: each does `passes` of
// about 2 us of work, then (with `reduce`) a small all-reduce; `rounds`
// rounds between the start and the join of all devices.
class Rounds {
 public:
  Rounds(int devices, int passes, int rounds, bool reduce)
      : mesh_({devices}, {"x"}),
        world_(mesh_),
        passes_(passes),
        rounds_(rounds),
        reduce_(reduce),
        work_(devices, std::vector<float>(int64_t{1} << 16, 1.0f)),
        bufs_(devices, std::vector<float>(1024, 1.0f)),
        sink_(devices, 0) {}

  // Seconds a round takes at best over `seconds` of repeats.
  double best(double seconds) {
    return time_it([&] { run(); }, seconds) / rounds_;
  }

  // The median over `samples` runs (for what varies from run to run, where
  // the best would be the luckiest).
  double median(int samples) {
    run();  // warm up
    std::vector<double> t;
    for (int k = 0; k < samples; ++k) {
      const auto start = Clock::now();
      run();
      t.push_back(std::chrono::duration<double>(Clock::now() - start).count() / rounds_);
    }
    std::nth_element(t.begin(), t.begin() + samples / 2, t.end());
    return t[samples / 2];
  }

 private:
  void run() {
    world_.run([&](int rank, Communicator& comm) {
      for (int k = 0; k < rounds_; ++k) {
        for (int pass = 0; pass < passes_; ++pass)
          for (float& x : work_[rank]) x = x * 0.999f + 0.001f;
        sink_[rank] += work_[rank][k % 1024];
        if (reduce_)
          comm.all_reduce(bufs_[rank].data(), 1024, ReduceOp::Sum, mesh_groups(mesh_, rank)[0]);
      }
    });
  }

  DeviceMesh mesh_;
  ThreadWorld world_;
  int passes_, rounds_;
  bool reduce_;
  std::vector<std::vector<float>> work_, bufs_;
  std::vector<double> sink_;
};

// The slice of Cluster::oversubscribed_slice, from stretches of work between
// collectives on one device more than cores against a core each: the part g
// of the last turn a stretch of W seconds pays gives q = W g / (1 - g).
// Time slicing varies from run to run: medians, two stretch lengths (about
// 3 and 12 ms: a small model's layer pieces), the geometric mean.
double oversubscribed_slice(int cores, double wait, int samples, nlohmann::json& m) {
  const int over = cores + 1;
  Cluster shared;
  shared.shared_cores = cores;
  const double last_turn = shared.last_turn_idle(over);
  if (last_turn <= 0) return 0;  // one core: no idle turn
  double log_q = 0;
  for (auto [passes, rounds] : {std::pair{1300, 8}, std::pair{5200, 4}}) {
    const double own = Rounds(cores, passes, rounds, true).median(samples);
    const double shared = Rounds(over, passes, rounds, true).median(samples);
    const double paid = (shared - wait) / own - double(over) / cores;
    const double g = std::clamp(paid / last_turn, 0.05, 0.9);
    log_q += std::log(own * g / (1 - g)) / 2;
    m["stretches_oversubscribed"].push_back(
        {{"own_core_s", own}, {"shared_s", shared}, {"last_turn_paid", g}});
  }
  return std::exp(log_q);
}

// All-reduces of each size between the ranks: blocking, or started and
// waited for as gradient buckets run them (`buckets`).
std::vector<std::pair<double, double>> mpi_all_reduce(const std::vector<int64_t>& sizes,
                                                      double seconds, bool buckets) {
  const DeviceMesh mesh({World::process().size()}, {"x"});
  MpiCommunicator comm(mesh);
  const CommGroup g = mesh_groups(mesh, comm.rank())[0];
  std::vector<std::pair<double, double>> points;
  for (int64_t count : sizes) {
    std::vector<float> buf(count, 1.0f);
    // Every rank runs the same number of calls: time a fixed count.
    const int calls = std::max(4, int(seconds * 2e9 / std::max<int64_t>(4096, count * 4) / 10));
    World::process().barrier();
    const auto start = Clock::now();
    for (int k = 0; k < calls; ++k) {
      if (!buckets) {
        comm.all_reduce(buf.data(), count, ReduceOp::Sum, g);
        continue;
      }
      comm.wait_all_reduce(comm.start_all_reduce(buf.data(), count, ReduceOp::Sum, g));
    }
    const double t = std::chrono::duration<double>(Clock::now() - start).count() / calls;
    points.push_back({4.0 * double(count), t});
  }
  return points;
}

}  // namespace

// The bandwidth from the large messages (a least-squares slope over those of
// 1 MiB and up), the latency from the smallest one.
std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& points) {
  if (points.empty()) return {0, 1e12};
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : points)
    if (x >= (1 << 20) || points.size() < 3) n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  double slope = n >= 2 ? (n * sxy - sx * sy) / std::max(1e-300, n * sxx - sx * sx) : 0;
  if (slope <= 0) slope = points.back().second / std::max(1.0, points.back().first);
  const auto smallest = *std::min_element(points.begin(), points.end());
  return {std::max(0.0, smallest.second - smallest.first * slope), 1.0 / slope};
}

// The squares set the peak and the curve (what they pack included); the
// products over few rows, the packing bandwidth from what they take beyond
// the curve against what they pack beyond a square of their FLOPs.
GemmFit fit_gemm(const std::vector<GemmTiming>& squares, const std::vector<GemmTiming>& few_rows) {
  GemmFit fit;
  for (const GemmTiming& t : squares) fit.peak = std::max(fit.peak, t.flops / t.seconds);
  Cluster curve;
  for (const GemmTiming& t : squares)
    curve.gemm_efficiency.push_back({t.flops, t.flops / t.seconds / fit.peak});
  std::sort(curve.gemm_efficiency.begin(), curve.gemm_efficiency.end());
  fit.efficiency = curve.gemm_efficiency;
  double extra = 0, bytes = 0;
  for (const GemmTiming& t : few_rows) {
    extra += t.seconds - t.flops / (fit.peak * curve.gemm_fraction(t.flops));
    bytes += std::max(0.0, t.packed_bytes - Cluster::square_packed_bytes(t.flops));
  }
  fit.packing_bandwidth = extra > 0 && bytes > 0 ? bytes / extra : 0;
  return fit;
}

Calibration calibrate(const CalibrateOptions& o) {
  Calibration cal;
  Cluster& c = cal.cluster;
  nlohmann::json& m = cal.measurements;
  const double seconds = o.quick ? 0.02 : 0.3;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.name = "cpu";
  c.shared_cores = cores;
  const std::vector<int64_t> collective_sizes =
      o.quick ? std::vector<int64_t>{1024, 1 << 16, 1 << 20}
              : std::vector<int64_t>{1024,    1 << 12, 1 << 14, 1 << 16,
                                     1 << 18, 1 << 20, 1 << 22, 1 << 24};
  if (World::process().distributed()) {
    // Under mpirun: the MPI link only (rank 0 reports).
    // (and as gradient buckets' non-blocking all-reduces reach it).
    const auto points = mpi_all_reduce(collective_sizes, seconds, false);
    const auto [alpha, bandwidth] = fit_alpha_beta(points);
    // A 2-rank all-reduce moves 2 (n - 1) / n = 1 buffer in 2 (n - 1) = 2 steps.
    c.mpi_link = LinkLevel{"mpi", 0, bandwidth, alpha / 2, 1.0};
    const auto lane = mpi_all_reduce(collective_sizes, seconds, true);
    const auto [lane_alpha, lane_bandwidth] = fit_alpha_beta(lane);
    c.mpi_link->bucket_bandwidth = lane_bandwidth;
    c.mpi_link->bucket_latency = lane_alpha / 2;
    m["mpi_all_reduce"] = points;
    m["mpi_bucket_all_reduce"] = lane;
    return cal;
  }
  openblas_set_num_threads(1);
  (void)gemm_seconds(32, 32, 32, 0.001);  // BLAS buffers exist before the process is measured
  c.process_bytes = resident_bytes();
  // GEMM: one core, square sizes for the curve, and products over few rows
  // of a transformer layer's weight (768 x 3072, either way round) for the
  // packing of the operands.
  const std::vector<int64_t> sizes =
      o.quick ? std::vector<int64_t>{32, 128, 512}
              : std::vector<int64_t>{16, 32, 64, 128, 256, 512, 1024, 1536};
  std::vector<GemmTiming> squares, skinny;
  for (int64_t n : sizes) squares.push_back(time_gemm(n, n, n, seconds));
  for (auto [m, n, k] : o.quick ? std::vector<std::array<int64_t, 3>>{{32, 1024, 256}}
                                : std::vector<std::array<int64_t, 3>>{
                                      {32, 3072, 768}, {64, 3072, 768}, {64, 768, 3072}})
    skinny.push_back(time_gemm(m, n, k, seconds));
  const GemmFit fit = fit_gemm(squares, skinny);
  for (const auto& [name, timings] :
       {std::pair{"gemm_squares_one_core", &squares}, std::pair{"gemm_few_rows_one_core", &skinny}})
    for (const GemmTiming& t : *timings)
      m[name].push_back({{"flops", t.flops}, {"packed_bytes", t.packed_bytes}, {"s", t.seconds}});
  c.gemm_efficiency = fit.efficiency;
  c.gemm_packing_bandwidth = fit.packing_bandwidth;
  const double peak = fit.peak;
  c.flops_f32 = c.flops_bf16 = peak * cores;
  // Streaming kernels on one core, and the machine's bandwidth on all.
  const int64_t elements = o.quick ? int64_t{1} << 20 : int64_t{1} << 23;
  c.kernel_bandwidth = kernel_rate(false, elements, seconds);
  c.kernel_flops = kernel_rate(true, elements, seconds);
  c.memory_bandwidth = std::max(c.kernel_bandwidth, machine_bandwidth(cores, seconds));
  c.stream_efficiency = 1;
  c.op_overhead = op_overhead(seconds);
  m["kernel_bandwidth_one_core"] = c.kernel_bandwidth;
  m["kernel_flops_one_core"] = c.kernel_flops;
  m["copy_bandwidth_all_cores"] = c.memory_bandwidth;
  m["op_overhead_s"] = c.op_overhead;
  m["process_bytes"] = c.process_bytes;
  // Memory: what the machine has now.
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemTotal:", 0) == 0) c.memory_bytes = std::stod(line.substr(9)) * 1024;
  // In-process collectives: two devices.
  const auto points = thread_all_reduce(collective_sizes, seconds);
  const auto [alpha, bandwidth] = fit_alpha_beta(points);
  c.links = {{"shared memory", 0, bandwidth, alpha / 2, 1.0}};
  m["thread_all_reduce"] = points;
  // One device more than cores. The share of the cores each device gets,
  // against a core each, over a long stretch of work (time slicing; the
  // uneven end of the stretch amortised); and what a collective adds between
  // short pieces of work (waking members that sleep in it).
  const int over = cores + 1, passes = 40;
  const double own_core = Rounds(cores, passes, 256, false).best(seconds);
  const double shared = Rounds(over, passes, 256, false).best(seconds);
  const double short_rounds = Rounds(over, passes, 16, false).best(seconds);
  const double with_collective = Rounds(over, passes, 16, true).best(seconds);
  c.oversubscribed_efficiency = std::clamp(own_core * over / cores / shared, 0.1, 1.0);
  c.oversubscribed_wait = std::max(0.0, with_collective - short_rounds);
  m["thread_round_oversubscribed"] = {{"devices", over},
                                      {"own_core_s", own_core},
                                      {"shared_s", shared},
                                      {"short_rounds_s", short_rounds},
                                      {"with_collective_s", with_collective}};
  c.oversubscribed_slice = oversubscribed_slice(cores, c.oversubscribed_wait, o.quick ? 3 : 5, m);
  return cal;
}

}  // namespace autoshard
