#!/usr/bin/env bash
# AutoShard choosing the whole layout for N devices (`plan --devices N
# --predict`: every mesh shape without a pipe axis, and every pipeline
# data=D,pipe=P,model=T with its schedule and micro-batch) against the
# configurations Narayanan et al. (SC'21, Table 1) published for the same
# model, GPUs and batch, both predicted on a100-80g (bf16, sequence 2048,
# recomputation). Also how long the choice takes here.
#
#   bench/devices.sh [PATH/TO/autoshard]
set -euo pipefail
cli=${1:-build/autoshard}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common="--cluster a100-80g --seq 2048 --dtype bf16 --recompute --predict --json"
# model GPUs batch published-mesh published-plan
rows=("1.7b 32 512 data=32 data"
      "3.6b 64 512 data=32,model=2 megatron"
      "7.5b 128 512 data=32,model=4 megatron"
      "18.4b 256 1024 data=32,pipe=1,model=8 megatron"
      "39.1b 512 1536 data=32,pipe=2,model=8 megatron"
      "76.1b 1024 1792 data=32,pipe=4,model=8 megatron"
      "145.6b 1536 2304 data=24,pipe=8,model=8 megatron"
      "310.1b 1920 2160 data=15,pipe=16,model=8 megatron"
      "529.6b 2520 2520 data=9,pipe=35,model=8 megatron"
      "1t 3072 3072 data=6,pipe=64,model=8 megatron")
for row in "${rows[@]}"; do
  read -r model n batch mesh plan <<<"$row"
  config=bench/configs/megatron-$model.json
  extra=""
  [[ $mesh == *pipe=1,* ]] && extra="--microbatch-size 1"
  $cli plan --model "$config" --batch "$batch" --mesh "$mesh" --plan "$plan" $extra $common \
    >"$work/published.json"
  start=$(date +%s.%N)
  $cli plan --model "$config" --batch "$batch" --devices "$n" $common >"$work/auto.json"
  end=$(date +%s.%N)
  python3 - "$work/published.json" "$work/auto.json" "$model" "$n" "$mesh" "$start" "$end" <<'PY'
import json, sys
pub, auto = (json.load(open(f)) for f in sys.argv[1:3])
order = ["data", "pipe", "model", "seq"]
mesh = lambda j: ",".join(f"{k}={j['mesh'][k]}" for k in sorted(j["mesh"], key=order.index))
def shape(j):
    p = j["predicted"]
    if "schedule" not in p: return ""
    v = f" v={p['virtual_stages']}" if p["virtual_stages"] > 1 else ""
    return f"{p['schedule']}{v}, {p['microbatches']} x {p['microbatch_size']}"
print(json.dumps({"model": sys.argv[3], "devices": int(sys.argv[4]),
                  "published_mesh": sys.argv[5], "published_step_s": pub["predicted"]["step_s"],
                  "published_peak_bytes": pub["predicted"]["peak_bytes_per_device"],
                  "auto_mesh": mesh(auto), "auto_pipeline": shape(auto),
                  "auto_step_s": auto["predicted"]["step_s"],
                  "auto_peak_bytes": auto["predicted"]["peak_bytes_per_device"],
                  "planning_s": float(sys.argv[7]) - float(sys.argv[6])}))
PY
done >"$work/rows.jsonl"
python3 - "$work/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'model':7} {'GPUs':>5} {'published mesh':24} {'step s':>7} {'GiB':>5}  {'AutoShard --devices':24} {'pipeline':22} {'step s':>7} {'GiB':>5} {'ratio':>6} {'plan s':>6}", file=sys.stderr)
for r in rows:
    print(f"{r['model']:7} {r['devices']:5} {r['published_mesh']:24} {r['published_step_s']:7.2f} {r['published_peak_bytes']/2**30:5.1f}  "
          f"{r['auto_mesh']:24} {r['auto_pipeline']:22} {r['auto_step_s']:7.2f} {r['auto_peak_bytes']/2**30:5.1f} "
          f"{r['auto_step_s']/r['published_step_s']:6.3f} {r['planning_s']:6.2f}", file=sys.stderr)
print(json.dumps(rows))
PY
