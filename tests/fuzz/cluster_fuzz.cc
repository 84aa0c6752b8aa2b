// libFuzzer target for cluster files (`--cluster FILE`, calibrate's
// output): any bytes give a cluster or an autoshard::Error, and a cluster
// that is accepted gives the cost model finite, positive rates and times.
// Any other exception, a crash, a hang or a figure that is NaN, infinite,
// zero or negative where it must not be is a finding (ASan + UBSan).
//
//   scripts/fuzz.sh [SECONDS]
#include <cmath>
#include <cstdint>
#include <string>

#include "autoshard/error.h"
#include "autoshard/plan/cluster.h"

namespace {

void require_positive(double v) {
  if (!(std::isfinite(v) && v > 0)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  autoshard::Cluster c;
  try {
    c = autoshard::Cluster::from_json(text, "fuzz");
  } catch (const autoshard::Error&) {
    return 0;
  }
  for (int devices : {1, 3, 64, 1 << 20}) {
    require_positive(c.device_flops(false, devices));
    require_positive(c.device_flops(true, devices));
    require_positive(c.device_kernel_flops(devices));
    require_positive(c.device_bandwidth(devices));
    for (double flops : {1.0, 1e9, 1e15}) require_positive(c.gemm_fraction(flops, devices));
    const double packing = c.gemm_packing_seconds(1e9, 1e8, devices);
    if (!(std::isfinite(packing) && packing >= 0)) __builtin_trap();
    const double stretch = c.stretch_seconds(1e-3, devices);
    if (!(std::isfinite(stretch) && stretch >= 0)) __builtin_trap();
  }
  for (const autoshard::LinkLevel& l : c.links) {
    require_positive(l.bandwidth * l.efficiency);
    if (!(std::isfinite(l.latency) && l.latency >= 0)) __builtin_trap();
  }
  (void)autoshard::Cluster::from_json(c.to_json(), "round trip");  // what it writes, it reads
  return 0;
}
