// Calibration: measures this machine for the cost model's "cpu" cluster.
// GEMM FLOP/s over a range of sizes on one core (the efficiency curve, not
// one number), the bandwidth and FLOP/s autoshard's own streaming kernels
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

// Fits time = alpha + bytes / bandwidth to (bytes, seconds) points by least
// squares; returns {alpha, bandwidth}.
std::pair<double, double> fit_alpha_beta(const std::vector<std::pair<double, double>>& points);

}  // namespace autoshard
