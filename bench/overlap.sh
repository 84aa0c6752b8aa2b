#!/usr/bin/env bash
# Communication behind computation over a slow link: two MPI ranks in two
# network namespaces joined by a veth pair shaped to RATE (default 1gbit)
# with tc, training GPT-2 (default gpt2, 124M) on data=2. Measured in this
# one run:
#   compute        one rank's share of the step alone (half the batch, one
#                  device, one core: what each rank computes)
#   unbucketed     the data=2 step with --no-overlap: compute + all-reduces
#   communication  unbucketed - compute
#   bucketed       the data=2 step with gradient buckets (default 25 MiB)
# and the step as a ratio to max(compute, communication), with the cost
# model's prediction for the same link (plan --predict on this machine's
# calibration with the network level set to RATE). Needs root (ip netns).
#
#   bench/overlap.sh [BUILD_DIR] [MODEL] [STEPS] [RATE]
set -euo pipefail
build=$(readlink -f "${1:-build}"); model=${2:-gpt2}; steps=${3:-4}; rate=${4:-1gbit}
cli="$build/autoshard"
batch=4 seq=64
ns1=as_o1_$$ ns2=as_o2_$$ ip1=10.232.$(( $$ % 200 )).1 ip2=10.232.$(( $$ % 200 )).2
work=$(mktemp -d)
cleanup() { ip netns del "$ns1" 2>/dev/null || true; ip netns del "$ns2" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
export AUTOSHARD_HOME="$work/home"
mkdir -p "$AUTOSHARD_HOME"

ip netns add "$ns1"; ip netns add "$ns2"
ip link add "o1_$$" type veth peer name "o2_$$"
ip link set "o1_$$" netns "$ns1"; ip link set "o2_$$" netns "$ns2"
ip -n "$ns1" addr add "$ip1/24" dev "o1_$$"; ip -n "$ns2" addr add "$ip2/24" dev "o2_$$"
ip -n "$ns1" link set "o1_$$" up; ip -n "$ns1" link set lo up
ip -n "$ns2" link set "o2_$$" up; ip -n "$ns2" link set lo up
# RATE each way (each end shapes what it sends). The bucket holds 2 MB: a
# smaller one (under rate / HZ) caps the rate below RATE between timer ticks.
tc -n "$ns1" qdisc add dev "o1_$$" root tbf rate "$rate" burst 2mb latency 100ms
tc -n "$ns2" qdisc add dev "o2_$$" root tbf rate "$rate" burst 2mb latency 100ms

cat >"$work/agent.sh" <<AGENT
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in $ip1) ns=$ns1 ;; $ip2) ns=$ns2 ;; *) echo "unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$work/agent.sh"
printf '%s slots=1\n%s slots=1\n' "$ip1" "$ip2" >"$work/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

median_step_s() {  # LOG: the median step after the first (warm-up)
  python3 -c "
import json, statistics, sys
ms = [json.loads(l)['step_ms'] for l in open(sys.argv[1])][1:]
print(statistics.median(ms) / 1e3)" "$1"
}
train=(train --model "$model" --seq "$seq" --steps "$steps" --sample 0 --lr-schedule constant)
across_hosts() {  # ARGS...: one autoshard rank in each namespace
  timeout 900 ip netns exec "$ns1" mpirun --hostfile "$work/hosts" -np 2 \
    --mca plm_rsh_agent "$work/agent.sh" --mca btl tcp,self \
    --mca btl_tcp_if_include "$ip1/24" --mca oob_tcp_if_include "$ip1/24" \
    -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM -x AUTOSHARD_HOME \
    "$cli" "$@" >"$work/out" 2>&1 || { cat "$work/out"; exit 1; }
}
two_hosts() {  # LOG [ARGS...]
  local log=$1; shift
  across_hosts "${train[@]}" --batch "$batch" --mesh data=2 --plan data --log "$log" "$@"
}

AUTOSHARD_THREADS=1 "$cli" "${train[@]}" --batch $((batch / 2)) --log "$work/compute.jsonl" \
  >/dev/null 2>&1
compute=$(median_step_s "$work/compute.jsonl")
two_hosts "$work/plain.jsonl" --no-overlap
plain=$(median_step_s "$work/plain.jsonl")
two_hosts "$work/buckets.jsonl"
bucketed=$(median_step_s "$work/buckets.jsonl")

# The predictions: this machine's calibration, each rank a host of its own
# (one device per group) joined by the link, priced once at its nominal RATE
# and once as two ranks measured it over MPI (calibrate under mpirun across
# the namespaces: what the link delivers, TCP and the shaping included).
"$cli" calibrate --out "$AUTOSHARD_HOME/cpu.json" >/dev/null 2>&1
across_hosts calibrate --no-mpi --out "$work/link.json"  # all-reduces up to 16 MiB
python3 - "$AUTOSHARD_HOME/cpu.json" "$work" "$rate" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
work, rate = sys.argv[2], sys.argv[3]
bits = float(rate[:-4]) * {"g": 1e9, "m": 1e6, "k": 1e3}[rate[-4].lower()]
nominal = {"name": "veth", "devices_per_group": 0, "bandwidth": bits / 8, "latency_s": 1e-4,
           "efficiency": 0.94}
measured = json.load(open(f"{work}/link.json"))["mpi_link"] | {"name": "veth (measured)",
                                                              "devices_per_group": 0}
c.pop("mpi_link", None)
for name, link in [("nominal", nominal), ("measured", measured)]:
    c["name"] = f"two hosts over {rate} ({name})"
    c["links"] = [c["links"][0] | {"devices_per_group": 1}, link]
    json.dump(c, open(f"{work}/cluster-{name}.json", "w"))
PY
for link in nominal measured; do
  "$cli" plan --model "$model" --batch "$batch" --seq "$seq" --mesh data=2 --plan data \
    --cluster "$work/cluster-$link.json" --predict --json >"$work/plan-$link.json"
done

python3 - "$compute" "$plain" "$bucketed" "$work" "$model" "$rate" <<'PY'
import json, sys
compute, plain, bucketed = (float(x) for x in sys.argv[1:4])
work, model, rate = sys.argv[4:7]
nominal = json.load(open(f"{work}/plan-nominal.json"))["predicted"]
pred = json.load(open(f"{work}/plan-measured.json"))["predicted"]
link = json.load(open(f"{work}/link.json"))["mpi_link"]
comm = max(plain - compute, 0)
bound = max(compute, comm)
print(f"{model} on data=2, two MPI ranks over a veth shaped to {rate}")
print(f"{'':<40}{'seconds':>10}")
for name, v in [("compute (one rank's share)", compute), ("unbucketed step (--no-overlap)", plain),
                ("communication (difference)", comm), ("bucketed step", bucketed),
                ("max(compute, communication)", bound),
                ("predicted, link at its nominal rate", nominal["step_s"]),
                ("predicted, link as MPI measured it", pred["step_s"])]:
    print(f"{name:<40}{v:>10.3f}")
print(f"the link as two MPI ranks measured it: {link['bandwidth'] / 1e6:.1f} MB/s, "
      f"latency {link['latency_s'] * 1e6:.0f} us")
print(f"bucketed / max(compute, communication): {bucketed / bound:.3f} (target <= 1.15)")
print(f"predicted (measured link) / bucketed: {pred['step_s'] / bucketed:.3f} "
      f"(target within 0.75-1.25; nominal rate: {nominal['step_s'] / bucketed:.3f})")
print(json.dumps({"bench": "overlap", "model": model, "rate": rate, "compute_s": compute,
                  "unbucketed_s": plain, "communication_s": comm, "bucketed_s": bucketed,
                  "predicted_s": pred["step_s"], "predicted_nominal_link_s": nominal["step_s"],
                  "measured_link_bytes_per_s": link["bandwidth"], "predicted_hidden_s":
                  pred.get("hidden_communication_s", 0)}))
PY
