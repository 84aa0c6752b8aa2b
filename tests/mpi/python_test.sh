#!/usr/bin/env bash
# The same Python script under `mpirun -np 2 python3 script.py` runs one rank
# per process (python/autoshard initialises MPI as the command line does):
# a Hugging Face model's fit losses and greedy ids, and a Keras model's fit
# losses, equal those of one process running the mesh's devices in-process
# (and of one device, to float rounding); an exception on one rank stops both
# within a time limit; Ctrl-C on one rank stops both ranks' fit at one step.
#
#   tests/mpi/python_test.sh PATH/TO/python3 PATH/TO/python PATH/TO/tests/data
set -euo pipefail
py=$1
export PYTHONPATH=$2
data=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0; passed=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failures=$((failures + 1)); echo "FAILED: $*"; }
# Every run has a time limit, and is killed 5 s after it (a rank left waiting
# in a collective must not hang the test).
ranks() { timeout -k 5 90 mpirun -np "$1" -x PYTHONPATH "$py" "${@:2}"; }
alone() { timeout -k 5 90 "$py" "$@"; }

cat >"$work/hf.py" <<'PY'
import sys
import numpy as np
import autoshard
from autoshard import world_rank
path, mesh, plan = sys.argv[1], sys.argv[2] or None, sys.argv[3]
model = autoshard.from_pretrained(path, mesh=mesh, plan=plan, seed=2)
losses = model.fit(np.arange(600) % model.vocab_size, batch_size=4, seq_len=8, steps=4,
                   learning_rate=3e-3)
ids = model.generate([5, 9, 3], max_new_tokens=6, temperature=0)
if world_rank() == 0:
    print("ranks", autoshard.world_size())
    print("losses", " ".join(repr(x) for x in losses))
    print("ids", ids)
PY
cat >"$work/keras.py" <<'PY'
import sys
import numpy as np
import autoshard.keras as keras
from autoshard import world_rank
if sys.argv[1]:
    mesh = keras.distribution.DeviceMesh((2,), ("data",))
    keras.distribution.set_distribution(keras.distribution.DataParallel(device_mesh=mesh))
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(3)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
history = model.fit(x, np.arange(32) % 3, batch_size=8, epochs=3, shuffle=False, verbose=0)
if world_rank() == 0:
    print("losses", " ".join(repr(x) for x in history.history["loss"]))
PY
cat >"$work/fails.py" <<'PY'
import sys
import numpy as np
import autoshard
from autoshard import world_rank
model = autoshard.from_pretrained(sys.argv[1], mesh="data=2")
if world_rank() == 1:
    raise RuntimeError("rank 1 fails on purpose")
model.fit(np.arange(600) % model.vocab_size, batch_size=4, seq_len=8, steps=10**6)
PY
cat >"$work/interrupted.py" <<'PY'
import os, signal, sys
import numpy as np
import autoshard
from autoshard import world_rank
model = autoshard.from_pretrained(sys.argv[1], mesh="data=2")
steps = []
def on_step(step, loss):
    steps.append(step)
    if step == 2 and world_rank() == 1:  # Ctrl-C on one rank only
        os.kill(os.getpid(), signal.SIGINT)
try:
    model.fit(np.arange(600) % model.vocab_size, batch_size=4, seq_len=8, steps=10**6,
              on_step=on_step)
except KeyboardInterrupt:
    print(f"rank {world_rank()} interrupted after {len(steps)} steps", flush=True)
PY

# The losses line of two outputs: equal (tolerance 0), or within a relative one.
close() {
  paste -d' ' <(grep '^losses' "$1" | tr ' ' '\n' | tail -n +2) \
              <(grep '^losses' "$2" | tr ' ' '\n' | tail -n +2) |
    awk -v tol="$3" 'NF != 2 { bad = 1 }
      { d = $1 - $2; if (d < 0) d = -d; if (d > tol * $2) bad = 1; n++ }
      END { exit (bad || n == 0) }'
}

llama=$data/hf_llama
alone "$work/hf.py" "$llama" "" auto >"$work/one" 2>&1 || { cat "$work/one"; exit 1; }
for case in "data=2 auto" "model=2 megatron"; do
  mesh=${case% *}; plan=${case#* }
  alone "$work/hf.py" "$llama" "$mesh" "$plan" >"$work/threads" 2>&1 || { cat "$work/threads"; exit 1; }
  if ranks 2 "$work/hf.py" "$llama" "$mesh" "$plan" >"$work/mpi" 2>&1 &&
     grep -q '^ranks 2$' "$work/mpi" && close "$work/mpi" "$work/threads" 0 &&
     close "$work/mpi" "$work/one" 1e-5 &&
     [ "$(grep '^ids' "$work/mpi")" = "$(grep '^ids' "$work/one")" ]; then
    pass "from_pretrained on $mesh: mpirun -np 2 python3 equals in-process devices and one device"
  else
    fail "from_pretrained on $mesh under mpirun"; cat "$work/mpi" "$work/threads"
  fi
done

alone "$work/keras.py" "" >"$work/one" 2>&1 || { cat "$work/one"; exit 1; }
alone "$work/keras.py" data >"$work/threads" 2>&1 || { cat "$work/threads"; exit 1; }
if ranks 2 "$work/keras.py" data >"$work/mpi" 2>&1 && close "$work/mpi" "$work/threads" 0 &&
   close "$work/mpi" "$work/one" 1e-5; then
  pass "keras DataParallel fit: mpirun -np 2 python3 equals in-process devices and one device"
else
  fail "keras fit under mpirun"; cat "$work/mpi" "$work/threads"
fi

# An exception on rank 1 stops both ranks (MPI_Abort from sys.excepthook)
# long before the time limit, naming the rank and the exception.
start=$SECONDS
if ! ranks 2 "$work/fails.py" "$llama" >"$work/mpi" 2>&1 && [ $((SECONDS - start)) -lt 60 ] &&
   grep -q 'autoshard: error on rank 1: RuntimeError: rank 1 fails on purpose' "$work/mpi"; then
  pass "an exception on one rank stops every rank ($((SECONDS - start)) s)"
else
  fail "an exception on one rank"; cat "$work/mpi"
fi

# Ctrl-C on one rank: every rank raises KeyboardInterrupt after the same step.
# (mpirun may forward the two ranks' lines run together: match the phrases.)
if ranks 2 "$work/interrupted.py" "$llama" >"$work/mpi" 2>&1 &&
   [ "$(grep -o 'rank [0-9]* interrupted after [0-9]* steps' "$work/mpi" | sort | tr '\n' ';')" = \
     'rank 0 interrupted after 3 steps;rank 1 interrupted after 3 steps;' ]; then
  pass "KeyboardInterrupt on one rank stops every rank's fit after the same step"
else
  fail "KeyboardInterrupt under mpirun"; cat "$work/mpi"
fi

echo "$passed passed, $failures failed"
[ "$failures" = 0 ]
