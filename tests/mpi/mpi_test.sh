#!/usr/bin/env bash
# The same sharded programs on MPI ranks (mpirun --oversubscribe): losses
# match in-process devices on even and uneven meshes of 2, 3 and 4 ranks;
# every rank writes its blocks of one checkpoint, which another mesh resumes;
# a failing or killed rank takes the others down within a time limit.
#
#   tests/mpi/mpi_test.sh PATH/TO/autoshard
set -euo pipefail
cli=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0; passed=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failures=$((failures + 1)); echo "FAILED: $*"; }

# Compares the "loss" of two JSON-lines logs, step by step, to 1e-5 relative.
same_losses() {
  paste -d' ' <(grep -o '"loss":[^,]*' "$1" | cut -d: -f2) <(grep -o '"loss":[^,]*' "$2" | cut -d: -f2) |
    awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1; n++ }
         END { exit (bad || n == 0) }'
}

# (--overwrite: each case writes its logs again.)
args="train --model tiny --batch 6 --seq 16 --steps 5 --sample 0 --lr 3e-3 --overwrite"
for case in "2 model=2" "2 data=2" "3 model=3" "3 data=3" "4 data=2,model=2" "4 model=4"; do
  np=${case%% *}; mesh=${case#* }
  $cli $args --mesh "$mesh" --log "$work/threads.jsonl" >/dev/null 2>&1
  if mpirun -np "$np" "$cli" $args --mesh "$mesh" --log "$work/mpi.jsonl" >"$work/out" 2>&1 &&
     same_losses "$work/mpi.jsonl" "$work/threads.jsonl"; then
    pass "mpirun -np $np --mesh $mesh matches in-process devices"
  else
    fail "mpirun -np $np --mesh $mesh"; cat "$work/out"
  fi
done

# Fully sharded data parallelism on 3 ranks (uneven blocks of every weight,
# gathered before use, gradients reduce-scattered), beside Megatron's
# model axis, and over every device of a mesh of two axes (the batch and the
# weights over the tuple (data,shard): all-reduces over both axes at once):
# the losses of in-process devices.
for case in "3 data=3" "4 data=2,model=2" "4 data=2,shard=2"; do
  np=${case%% *}; mesh=${case#* }
  $cli $args --mesh "$mesh" --plan fsdp --log "$work/threads.jsonl" >/dev/null 2>&1
  if mpirun -np "$np" "$cli" $args --mesh "$mesh" --plan fsdp --log "$work/mpi.jsonl" \
       >"$work/out" 2>&1 && same_losses "$work/mpi.jsonl" "$work/threads.jsonl"; then
    pass "mpirun -np $np --mesh $mesh --plan fsdp matches in-process devices"
  else
    fail "mpirun -np $np --mesh $mesh --plan fsdp"; cat "$work/out"
  fi
done

# Transfers split into rounds (MPI counts are ints): with at most 5 elements
# per MPI call every collective takes many rounds, and the losses still match.
for case in "3 model=3" "4 data=2,model=2"; do
  np=${case%% *}; mesh=${case#* }
  $cli $args --mesh "$mesh" --log "$work/threads.jsonl" >/dev/null 2>&1
  if AUTOSHARD_MPI_MAX_COUNT=5 mpirun -np "$np" -x AUTOSHARD_MPI_MAX_COUNT "$cli" $args --mesh "$mesh" \
       --log "$work/mpi.jsonl" >"$work/out" 2>&1 && same_losses "$work/mpi.jsonl" "$work/threads.jsonl"; then
    pass "mpirun -np $np --mesh $mesh in rounds of 5 elements matches in-process devices"
  else
    fail "rounds of 5 elements, mpirun -np $np --mesh $mesh"; cat "$work/out"
  fi
done

# Pipeline stages as ranks, with the in-process pipeline's losses (which are
# one device's, tests/pipeline_test.cc): each rank one device of one stage
# (stage p is ranks p n .. p n + n - 1, n devices inside a stage; pipe-only
# meshes n = 1), holding that stage's weights only; activations and
# gradients over MPI point to point.
for case in "2 pipe=2 1f1b tiny 1 4" "3 pipe=3 gpipe mini 1 4" "2 pipe=2 interleaved mini 2 4" \
            "4 data=2,pipe=2 1f1b tiny 1 2" "4 pipe=2,model=2 gpipe mini 1 2" \
            "4 data=2,pipe=2 interleaved mini 2 2"; do
  read -r np mesh schedule model chunks microbatches <<<"$case"
  pipe_args="train --model $model --batch 6 --seq 16 --steps 4 --sample 0 --lr 3e-3 --overwrite \
    --mesh $mesh --microbatches $microbatches --pipe-schedule $schedule --virtual-stages $chunks"
  $cli $pipe_args --log "$work/threads.jsonl" >/dev/null 2>&1
  if timeout 120 mpirun -np "$np" "$cli" $pipe_args --log "$work/mpi.jsonl" >"$work/out" 2>&1 &&
     same_losses "$work/mpi.jsonl" "$work/threads.jsonl"; then
    pass "mpirun -np $np --mesh $mesh ($schedule) matches in-process stages"
  else
    fail "pipeline on mpirun -np $np --mesh $mesh ($schedule)"; cat "$work/out"
  fi
done

# A pipeline on too few ranks, or saving a model no rank holds whole: one
# error line (on each rank), before any training.
if ! timeout 60 mpirun -np 3 "$cli" train --model tiny --steps 1 --mesh data=2,pipe=2 >"$work/out" 2>&1 &&
   grep -q 'start one rank per device (mpirun -np 4)' "$work/out" &&
   ! timeout 60 mpirun -np 2 "$cli" train --model tiny --steps 1 --mesh pipe=2 --save "$work/saved" \
     >"$work/out2" 2>&1 && grep -q -- '--save with a pipe axis under mpirun' "$work/out2"; then
  pass "a pipeline's bad rank count or --save under mpirun is one error"
else
  fail "pipeline bad input under mpirun"; cat "$work/out" "$work/out2"
fi

# Memory per rank shrinks with the stages: on a model whose 8 blocks hold
# nearly all its weights, rank 0 (stage 0) of pipe=4 peaks well below rank
# 0 of pipe=2 (each rank holds its stage's weights, gradients and state).
echo '{"model_type": "gpt2", "n_layer": 8, "n_head": 8, "n_embd": 512, "vocab_size": 256,
       "n_positions": 16}' >"$work/deep.json"
peak() { grep -o '"peak_rss_bytes":[0-9]*' "$1" | tail -n 1 | cut -d: -f2; }
deep_args="train --model $work/deep.json --batch 4 --seq 16 --steps 2 --sample 0 --overwrite"
if timeout 180 mpirun -np 2 "$cli" $deep_args --mesh pipe=2 --log "$work/p2.jsonl" >"$work/out" 2>&1 &&
   timeout 180 mpirun -np 4 "$cli" $deep_args --mesh pipe=4 --log "$work/p4.jsonl" >>"$work/out" 2>&1 &&
   awk -v two="$(peak "$work/p2.jsonl")" -v four="$(peak "$work/p4.jsonl")" \
     'BEGIN { print "rank 0 peak: pipe=2 " two / 2^20 " MiB, pipe=4 " four / 2^20 " MiB";
              exit !(two > 0 && four < 0.8 * two) }'; then
  pass "a rank holds its stage's weights only (rank 0's peak falls with more stages)"
else
  fail "memory per rank with stages"; cat "$work/out"
fi

# A checkpoint saved by 2 ranks running stages resumes in-process on
# model=2 where the uninterrupted one-device run is (a constant learning
# rate: --steps 2 and 4 take the same steps).
const_args="train --model tiny --batch 6 --seq 16 --sample 0 --lr-schedule constant --overwrite"
if timeout 120 mpirun -np 2 "$cli" $const_args --steps 2 --mesh pipe=2 \
     --checkpoint-dir "$work/pipe-ckpt" >"$work/out" 2>&1 &&
   $cli $const_args --steps 4 --mesh model=2 --resume --checkpoint-dir "$work/pipe-ckpt" \
     --log "$work/pipe-resumed.jsonl" >>"$work/out" 2>&1 &&
   $cli $const_args --steps 4 --log "$work/threads.jsonl" >/dev/null 2>&1 &&
   tail -n 2 "$work/threads.jsonl" >"$work/last2.jsonl" &&
   same_losses "$work/pipe-resumed.jsonl" "$work/last2.jsonl"; then
  pass "a checkpoint of stages on 2 ranks resumes on model=2"
else
  fail "pipeline checkpoint under mpirun"; cat "$work/out"
fi

# The same from 4 ranks of data=2,pipe=2, each writing only its stage's
# blocks (the tied embedding once): resumed in-process on model=2; and the
# default sample is skipped with a note (no rank holds the whole model).
if timeout 120 mpirun -np 4 "$cli" ${const_args/--sample 0/--sample 10} --steps 2 --mesh data=2,pipe=2 \
     --checkpoint-dir "$work/pipe4-ckpt" >"$work/out" 2>&1 &&
   [ "$(grep -c '^no sample: ' "$work/out")" = 1 ] &&
   $cli $const_args --steps 4 --mesh model=2 --resume --checkpoint-dir "$work/pipe4-ckpt" \
     --log "$work/pipe4-resumed.jsonl" >>"$work/out" 2>&1 &&
   same_losses "$work/pipe4-resumed.jsonl" "$work/last2.jsonl"; then
  pass "a checkpoint of data=2,pipe=2 on 4 ranks resumes on model=2"
else
  fail "data=2,pipe=2 checkpoint under mpirun"; cat "$work/out"
fi

# AutoShard's plan on 3 ranks moves splits between dimensions with
# all-to-alls (MPI_Alltoallv, uneven pieces): the same losses as in-process.
$cli $args --mesh model=3 --plan auto --deterministic --log "$work/threads.jsonl" >/dev/null 2>&1
if mpirun -np 3 "$cli" $args --mesh model=3 --plan auto --deterministic --log "$work/mpi.jsonl" \
     >"$work/out" 2>&1 && same_losses "$work/mpi.jsonl" "$work/threads.jsonl" &&
   $cli plan --model tiny --batch 6 --seq 16 --mesh model=3 --plan auto --deterministic |
     grep -q '^ *all_to_all'; then
  pass "mpirun -np 3 --plan auto (all-to-alls) matches in-process devices"
else
  fail "mpirun -np 3 --plan auto"; cat "$work/out"
fi

# Ranks price their collectives on the calibrated MPI link (a cluster whose
# mpi_link is 5000 times slower than its in-process link): plan --predict
# under mpirun predicts the slow all-reduce, in-process the fast one; only
# rank 0 prints.
cat >"$work/cluster.json" <<'JSON'
{"name": "c", "device": {"flops": {"f32": 50e9}, "gemm_efficiency": [[1e9, 0.8]],
  "memory_bytes": 8589934592, "memory_bandwidth": 2e10}, "shared_cores": 2,
 "links": [{"name": "shm", "devices_per_group": 0, "bandwidth": 5e9, "latency_s": 1e-6}],
 "mpi_link": {"name": "mpi", "devices_per_group": 0, "bandwidth": 1e6, "latency_s": 1e-3}}
JSON
predict="plan --model tiny --batch 6 --seq 16 --mesh data=2 --plan data --predict --cluster $work/cluster.json"
reduce_s() { awk '$1 == "all_reduce" && $3 == "s" { print $2 }' "$1"; }
if $cli $predict >"$work/threads.txt" 2>&1 && timeout 60 mpirun -np 2 "$cli" $predict >"$work/out" 2>&1 &&
   [ "$(grep -c '^predicted on cluster' "$work/out")" = 1 ] &&
   awk -v t="$(reduce_s "$work/threads.txt")" -v m="$(reduce_s "$work/out")" \
     'BEGIN { exit !(t > 0 && m > 1000 * t) }'; then
  pass "plan --predict under mpirun prices the MPI link"
else
  fail "MPI link pricing"; cat "$work/threads.txt" "$work/out"
fi

# The default run (training, then a generated sample, which every rank helps
# compute) ends normally, and only rank 0 prints.
if timeout 120 mpirun -np 2 "$cli" train --model tiny --steps 3 --seq 32 --sample 20 --mesh model=2 >"$work/out" 2>&1 &&
   [ "$(grep -c '^sample: ' "$work/out")" = 1 ]; then
  pass "training with a sample on 2 ranks prints once and exits"
else
  fail "sample under MPI"; cat "$work/out"
fi

# --trace under mpirun: each rank writes its own device's timeline
# (FILE.rankN.json) with its steps and collectives.
if timeout 120 mpirun -np 2 "$cli" train --model tiny --steps 3 --seq 16 --sample 0 --mesh data=2 \
     --trace "$work/trace.json" --trace-steps 2:3 >"$work/out" 2>&1 &&
   python3 - "$work/trace.rank0.json" "$work/trace.rank1.json" <<'PY'
import json, sys
for rank, path in enumerate(sys.argv[1:]):
    events = json.load(open(path))["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    # its own device (and its communication lane) beside the steps
    assert f"device {rank}" in tracks, tracks
    assert all(t == "steps" or t.startswith(f"device {rank}") for t in tracks), tracks
    steps = [e["name"] for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert steps == ["step 2", "step 3"], steps
    assert any(e["ph"] == "X" and e["cat"] == "collective" for e in events)
PY
then
  pass "--trace on 2 ranks writes one timeline per rank"
else
  fail "--trace under mpirun"; cat "$work/out"; ls "$work"
fi

# Generation over the sharded key-value cache: sampling from a seed gives the
# same tokens on MPI ranks as on in-process devices (and one device).
llama="$(dirname "$0")/../data/hf_llama"
gen="generate --weights $llama --prompt-ids 3,17,101,64 --max-new-tokens 12 --temperature 1.2 --top-k 40 --top-p 0.9 --seed 5 --json"
ids() { grep -o '"output_ids":\[[^]]*\]' "$1"; }
$cli $gen >"$work/one.json" 2>&1
for case in "3 model=3" "4 data=2,model=2"; do
  np=${case%% *}; mesh=${case#* }
  $cli $gen --mesh "$mesh" >"$work/threads.json" 2>&1
  if mpirun -np "$np" "$cli" $gen --mesh "$mesh" >"$work/mpi.json" 2>&1 &&
     [ "$(grep -c output_ids "$work/mpi.json")" = 1 ] && [ -n "$(ids "$work/one.json")" ] &&
     [ "$(ids "$work/mpi.json")" = "$(ids "$work/threads.json")" ] &&
     [ "$(ids "$work/mpi.json")" = "$(ids "$work/one.json")" ]; then
    pass "generate on mpirun -np $np --mesh $mesh samples the in-process tokens"
  else
    fail "generate under MPI on $mesh"; cat "$work/mpi.json" "$work/threads.json" "$work/one.json"
  fi
done

# Each rank writes its own blocks of one checkpoint; resume on another mesh.
$cli train --model tiny --batch 6 --seq 16 --steps 8 --sample 0 --lr 3e-3 --lr-schedule constant --log "$work/full.jsonl" >/dev/null 2>&1
mpirun -np 3 "$cli" train --model tiny --batch 6 --seq 16 --steps 4 --sample 0 --lr 3e-3 --lr-schedule constant --mesh model=3 \
  --checkpoint-dir "$work/ckpt" --save-every 4 >/dev/null 2>&1
$cli train --model tiny --batch 6 --seq 16 --steps 8 --sample 0 --lr 3e-3 --lr-schedule constant --mesh data=2 \
  --checkpoint-dir "$work/ckpt" --resume --log "$work/resumed.jsonl" >/dev/null 2>&1
if tail -n 4 "$work/full.jsonl" >"$work/tail.jsonl" && same_losses "$work/resumed.jsonl" "$work/tail.jsonl"; then
  pass "checkpoint written by 3 ranks resumes on data=2 with the same losses"
else
  fail "MPI checkpoint resume"
fi

# Resuming twice in one checkpoint directory keeps the ranks agreeing on
# every temporary name, and --keep prunes the run's own older checkpoints.
ok_all=1
for run in 1 2 3; do
  mpirun -np 2 "$cli" train --model tiny --batch 6 --seq 16 --steps $((run * 4)) --sample 0 --mesh model=2 \
    --checkpoint-dir "$work/again" --save-every 2 --keep 2 $([ $run = 1 ] || echo --resume) \
    >"$work/out" 2>&1 || { ok_all=0; cat "$work/out"; }
done
if [ "$ok_all" = 1 ] && [ "$(ls -A "$work/again" | tr '\n' ' ')" = "step-00000010 step-00000012 " ]; then
  pass "three runs resuming in one checkpoint directory on 2 ranks keep the last 2 steps"
else
  fail "resuming and pruning under MPI: $(ls -A "$work/again" | tr '\n' ' ')"
fi

# convert under mpirun: rank 0 converts alone, nothing else is left behind.
mkdir -p "$work/conv"
if mpirun -np 2 "$cli" convert "$(dirname "$0")/../data/hf_llama" "$work/conv/out" >"$work/out" 2>&1 &&
   [ "$(ls -A "$work/conv" | tr '\n' ' ')" = "out " ] && [ -f "$work/conv/out/config.json" ]; then
  pass "convert on 2 ranks writes OUT once and leaves no temporary"
else
  fail "convert under MPI: $(ls -A "$work/conv" | tr '\n' ' ')"; cat "$work/out"
fi

# A rank that fails with an error stops every rank, naming itself.
start=$(date +%s)
if mpirun -np 2 "$cli" train --model tiny --mesh model=3 >"$work/out" 2>&1; then
  fail "a mesh larger than the ranks must fail"
elif grep -q "error on rank" "$work/out" && grep -q "mpirun started 2 ranks" "$work/out"; then
  pass "a failing rank stops the job with a message naming it ($(( $(date +%s) - start )) s)"
else
  fail "error message"; cat "$work/out"
fi

# More ranks than devices: every rank gives the same error, never a crash.
for mesh_arg in "--mesh model=2" "--devices 2"; do
  for attempt in 1 2 3; do
    if mpirun -np 3 "$cli" train --model tiny --steps 2 --sample 0 $mesh_arg >"$work/out" 2>&1; then
      fail "mpirun -np 3 $mesh_arg must fail"; break
    elif ! grep -q "mpirun started 3 ranks" "$work/out" || grep -qi "segmentation\|signal 11" "$work/out"; then
      fail "mpirun -np 3 $mesh_arg: wrong error"; cat "$work/out"; break
    fi
  done
done
pass "more ranks than devices is the same clear error on every attempt"

# kill -9 of one rank mid-training: the others exit non-zero within 30 s.
marker="autoshard-kill-test-$$"
mpirun -np 3 bash -c "exec -a $marker-\$OMPI_COMM_WORLD_RANK $cli train --model mini --steps 100000 --sample 0 --mesh model=3" \
  >"$work/out" 2>&1 &
job=$!
for _ in $(seq 100); do pgrep -f "$marker-1" >/dev/null && break; sleep 0.1; done
sleep 1
pkill -9 -f "$marker-1" || true
killed_at=$(date +%s)
status=0
timeout 30 tail --pid=$job -f /dev/null || status=$?
if [ "$status" = 0 ] && ! wait $job; then
  pass "killing rank 1 stopped the job in $(( $(date +%s) - killed_at )) s"
  grep -m1 -i "rank" "$work/out" || true
else
  fail "the job did not stop within 30 s of killing rank 1"; kill -9 $job 2>/dev/null || true
fi
pkill -9 -f "$marker" 2>/dev/null || true

echo "$passed passed, $failures failed"
[ "$failures" = 0 ]
