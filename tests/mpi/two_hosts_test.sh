#!/usr/bin/env bash
# Two "hosts" on this machine: two network namespaces joined by a veth pair,
# MPI over TCP between them (mpirun starts the remote rank through an rsh agent
# that enters the other namespace). A model=2 run across the two hosts must
# give the losses of two in-process devices. Needs root for `ip netns`;
# exits 77 (skipped) where that is not allowed.
#
#   tests/mpi/two_hosts_test.sh PATH/TO/autoshard
set -euo pipefail
cli=$(readlink -f "$1")
ns1=as_h1_$$ ns2=as_h2_$$ ip1=10.231.$(( $$ % 200 )).1 ip2=10.231.$(( $$ % 200 )).2
work=$(mktemp -d)
cleanup() { ip netns del "$ns1" 2>/dev/null || true; ip netns del "$ns2" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
if ! ip netns add "$ns1" 2>/dev/null; then echo "skipped: ip netns is not allowed here"; exit 77; fi
ip netns add "$ns2"
ip link add "v1_$$" type veth peer name "v2_$$"
ip link set "v1_$$" netns "$ns1"
ip link set "v2_$$" netns "$ns2"
ip -n "$ns1" addr add "$ip1/24" dev "v1_$$"
ip -n "$ns2" addr add "$ip2/24" dev "v2_$$"
ip -n "$ns1" link set "v1_$$" up; ip -n "$ns1" link set lo up
ip -n "$ns2" link set "v2_$$" up; ip -n "$ns2" link set lo up

# The rsh agent: "agent [options] HOST command..." runs command in HOST's namespace.
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
args="train --model tiny --batch 6 --seq 16 --steps 4 --sample 0 --mesh model=2"
"$cli" $args --log "$work/threads.jsonl" >/dev/null 2>&1
timeout 120 ip netns exec "$ns1" mpirun --hostfile "$work/hosts" -np 2 \
  --mca plm_rsh_agent "$work/agent.sh" --mca btl tcp,self \
  --mca btl_tcp_if_include "$ip1/24" --mca oob_tcp_if_include "$ip1/24" \
  -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
  "$cli" $args --log "$work/hosts.jsonl" >"$work/out" 2>&1 || { cat "$work/out"; echo "0 passed, 1 failed"; exit 1; }
if paste -d' ' <(grep -o '"loss":[^,]*' "$work/hosts.jsonl" | cut -d: -f2) \
               <(grep -o '"loss":[^,]*' "$work/threads.jsonl" | cut -d: -f2) |
   awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1; n++ } END { exit (bad || n != 4) }'; then
  echo "ok: model=2 across two network namespaces over TCP matches in-process devices"
  echo "1 passed, 0 failed"
else
  echo "FAILED: losses differ"; cat "$work/hosts.jsonl" "$work/threads.jsonl"
  echo "0 passed, 1 failed"; exit 1
fi
