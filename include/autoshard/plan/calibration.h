// Calibration: measures this machine for the cost model's "cpu" cluster.
// GEMM FLOP/s over a range of sizes on one core (the efficiency curve, not
// one number) and the bandwidth at which it packs operands (products over
// few rows), the bandwidth and FLOP/s autoshard's own streaming kernels
// reach on one core, the machine's memory bandwidth on every core, the
// per-op overhead of the executor, the memory a process holds besides its
// tensors, and the latency and bandwidth of the in-process collectives
// (fitted to a line over message sizes). Under mpirun the MPI collectives are
// measured instead, as the cluster's MPI link.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/plan/cluster.h"

namespace autoshard {

struct CalibrateOptions {
  bool quick = false;  // fewer sizes and repetitions (seconds instead of tens)
};

struct Calibration {
  Cluster cluster;
  nlohmann::json measurements;  // every point measured, for the record
};

Calibration calibrate(const CalibrateOptions& options = {});

// One timed matrix product: its FLOPs, the bytes of its two operands, seconds.
struct GemmTiming {
  double flops = 0, packed_bytes = 0, seconds = 0;
};

struct GemmFit {
  double peak = 0;                                    // FLOP/s
  std::vector<std::pair<double, double>> efficiency;  // (flops, fraction of peak)
  double packing_bandwidth = 0;                       // bytes/s (0: none seen)
};

// Fits the curve (and peak) to square products, and the packing bandwidth
// to products over few rows: time = flops / (peak x efficiency(flops)) +
// their packed bytes beyond a square's of the same FLOPs / bandwidth (see
// Cluster::gemm_packing_bandwidth).
GemmFit fit_gemm(const std::vector<GemmTiming>& squares, const std::vector<GemmTiming>& few_rows);

// Fits time = alpha + bytes / bandwidth to (bytes, seconds) points by least
// squares; returns {alpha, bandwidth}.
std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& points);

}  // namespace autoshard
