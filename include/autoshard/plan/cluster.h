// Cluster: the machines a plan is for, as the cost model sees them. Each
// device has peak FLOP/s per dtype (reached by large matrix products along
// a measured or published efficiency curve), memory and its bandwidth;
// devices talk over a hierarchy of links (NVLink inside a node, InfiniBand
// between nodes; shared memory for in-process devices), each with a
// bandwidth per device and a latency.
//
// A mesh's devices are numbered row-major (see DeviceMesh), so its last axis
// is innermost: an axis each of whose groups lies whole inside one group of
// a link level (8 devices per node, say) talks over that level; an axis one
// of whose groups straddles two, over the next (model = 3 on nodes of 8:
// NVLink; data = 3, model = 3 on nodes of 4: {3, 4, 5} straddles, the
// network).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autoshard/tensor/mesh.h"

namespace autoshard {

struct LinkLevel {
  std::string name;           // "nvlink", "infiniband", "shared memory"
  int devices_per_group = 0;  // devices one group of this level holds (0: every device)
  double bandwidth = 0;       // bytes/s each device sends (and receives) over it
  double latency = 0;         // seconds per message step
  double efficiency = 1;      // fraction of the bandwidth collectives reach
  // What gradient buckets' non-blocking all-reduces reach over this level
  // where that differs (MPI over TCP: Open MPI's libnbc ring, on a lane of
  // its own, against the blocking all-reduce); 0: the same as above.
  double bucket_bandwidth = 0;
  double bucket_latency = 0;
};

struct Cluster {
  std::string name;
  // Per device.
  double flops_f32 = 0, flops_bf16 = 0;  // peak FLOP/s
  // Fraction of peak a matrix product reaches, by its FLOPs: points
  // (flops, fraction) interpolated in log(flops), flat beyond the ends.
  std::vector<std::pair<double, double>> gemm_efficiency;
  // Bytes/s at which one device (on a CPU, one core) copies a product's
  // operands into BLAS's panels (0: not modelled, as for the accelerator
  // presets). The curve, measured on squares, includes what a square
  // packs; a product over few rows packs more for its FLOPs (the weight of
  // a layer is packed whether 64 or 4096 tokens pass through it) and pays
  // the excess at this bandwidth.
  double gemm_packing_bandwidth = 0;
  double memory_bytes = 0;
  double memory_bandwidth = 0;   // bytes/s
  double stream_efficiency = 1;  // fraction of memory bandwidth other kernels reach
  // Bytes/s and FLOP/s one device's non-GEMM kernels reach on their own (0:
  // the bandwidth times stream_efficiency, and the peak). On a CPU, one
  // core's: a device's kernels run on its share of the cores, so it gets
  // this times its cores, up to its share of memory_bandwidth.
  double kernel_bandwidth = 0;
  double kernel_flops = 0;
  double op_overhead = 0;  // seconds each kernel costs on top (launch, dispatch)
  // Memory a process holds besides tensors (code, libraries, BLAS buffers):
  // part of a CPU device's peak, 0 for accelerators.
  double process_bytes = 0;
  // In-process CPU devices share one machine: its cores (and so FLOP/s and
  // bandwidth, given here for the whole machine) are divided among the
  // devices of a mesh. 0: each device has its own.
  int shared_cores = 0;
  // When a mesh has one in-process device more than cores, the fraction of
  // its share each device still gets: devices take the cores in turns, and
  // the last turn leaves cores idle, which time slicing recovers in part.
  // Calibrated; share() scales the loss to other device counts by the idle
  // cores of the last turn (none when the devices are a multiple of the
  // cores).
  double oversubscribed_efficiency = 1;
  // And the seconds each collective call then takes to wake members that
  // sleep in it, instead of the link's latency. Calibrated with one device
  // more than cores and short pieces of work between collectives.
  double oversubscribed_wait = 0;
  // How far time slicing evens out the turns between two collectives (0:
  // not calibrated, share() applies throughout). A stretch of W seconds of
  // each device's own work between collectives ends when the last turn
  // does: it takes W x devices / cores, plus W x turns x idle x q / (q + W)
  // for the cores the last turn leaves idle, q this slice. Stretches much
  // shorter than q pay all of the last turn, much longer ones little.
  double oversubscribed_slice = 0;
  std::vector<LinkLevel> links;  // innermost first; the last spans every device
  // MPI ranks on this machine talk over this instead (CPU clusters, when
  // calibrated under mpirun too).
  std::optional<LinkLevel> mpi_link;
  // The machines a CPU cluster's devices spread over, evenly: each has its
  // own shared_cores (MPI ranks on several hosts).
  int hosts = 1;

  // Built in: "a100-80g", "h100-80g" (vendors' published figures, see
  // docs/cost-model.md) and "cpu" (this machine: the last calibration, or
  // defaults when none was run).
  static Cluster preset(const std::string& name);
  // A preset name, or a JSON file (as to_json writes; `autoshard calibrate`
  // writes one).
  static Cluster named(const std::string& name_or_file);
  static Cluster from_json(const std::string& text, const std::string& source);
  // named(), as this process's devices use it: under mpirun, collectives
  // over the calibrated mpi_link (where there is one) and each host's cores
  // shared by the ranks on it (see as_mpi_ranks). `hosts` > 0: the devices
  // are MPI ranks spread over that many machines, whether or not this
  // process runs under mpirun (plan --hosts); 0: as the run was started.
  static Cluster for_this_run(const std::string& name_or_file, int hosts = 0);
  // This cluster as MPI ranks over `hosts` machines see it: every mesh axis
  // talks over mpi_link (when calibrated), and a machine's cores are shared
  // by its own ranks only.
  Cluster as_mpi_ranks(int hosts) const;
  // How many of a mesh's `devices` share one machine's cores.
  int devices_per_host(int devices) const;
  std::string to_json() const;
  // Where `autoshard calibrate` keeps this machine's figures:
  // $AUTOSHARD_HOME/cpu.json, else ~/.cache/autoshard/cpu.json.
  static std::string calibration_path();

  // Per device, on a mesh of `devices` (shared machines divide).
  double device_flops(bool bf16, int devices) const;
  // FLOP/s of one device's non-GEMM kernels.
  double device_kernel_flops(int devices) const;
  // Bytes/s of one device's streaming kernels.
  double device_bandwidth(int devices) const;
  // Seconds one device of a mesh of `devices` takes, beyond the curve, to
  // pack the operands of a product of `flops` whose operands hold
  // `packed_bytes` (fp32): the excess over a square product of the same
  // FLOPs at the packing bandwidth (0 when not modelled).
  double gemm_packing_seconds(double flops, double packed_bytes, int devices = 1) const;
  // The fp32 operand bytes of a square product of `flops`.
  static double square_packed_bytes(double flops);
  // The fraction of peak a product of `flops` reaches on one device of a
  // mesh of `devices` (on a shared machine, spread over its threads).
  double gemm_fraction(double flops, int devices = 1) const;
  // The link level mesh axis `axis` talks over.
  const LinkLevel& link(const DeviceMesh& mesh, int axis) const;
  // A shared machine's `whole` figure as one of `devices` in-process devices gets it.
  double share(double whole, int devices) const;
  // Whether `devices` in-process devices outnumber this machine's cores.
  bool oversubscribed(int devices) const;
  // Seconds a stretch of work between two collectives takes on `devices`
  // oversubscribed in-process devices, `own_core_s` being what it takes each
  // device on a core of its own (see oversubscribed_slice).
  double stretch_seconds(double own_core_s, int devices) const;
  // The cores' idle time in the last turn of `devices` oversubscribed
  // in-process devices, in stretches (turns x idle fraction of the cores):
  // what a stretch between collectives pays on top of the cores' share
  // when it is shorter than the slice; 0 on a core each.
  double last_turn_idle(int devices) const;
  // Cores each of `devices` in-process devices runs its kernels on (1 when
  // devices do not share a machine).
  int cores_per_device(int devices) const;
  // Throws autoshard::Error when the cluster cannot hold the mesh (a finite
  // last level smaller than the mesh).
  void check_mesh(const DeviceMesh& mesh) const;
};

}  // namespace autoshard
