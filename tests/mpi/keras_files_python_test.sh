#!/usr/bin/env bash
# Keras files from Python under `mpirun -np 2 python3 script.py`: every rank
# calls model.save / save_weights (ModelCheckpoint, replacing the file each
# epoch), the weights are gathered and rank 0 alone writes; one process then
# loads the checkpoint and predicts what the two ranks predicted.
#
#   tests/mpi/keras_files_python_test.sh PATH/TO/python3 PATH/TO/python
set -euo pipefail
py=$1
export PYTHONPATH=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/train.py" <<'PY'
import os
import sys

import numpy as np

import autoshard.keras as keras
from autoshard import world_rank

out = sys.argv[1]
mesh = keras.distribution.DeviceMesh((2,), ("data",))
keras.distribution.set_distribution(keras.distribution.DataParallel(device_mesh=mesh))
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(3)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
callbacks = [keras.callbacks.ModelCheckpoint(os.path.join(out, "model.keras")),
             keras.callbacks.ModelCheckpoint(os.path.join(out, "model.weights.h5"),
                                             save_weights_only=True)]
model.fit(x, np.arange(32) % 3, batch_size=8, epochs=2, shuffle=False, verbose=0,
          callbacks=callbacks)
predictions = model.predict(x)
if world_rank() == 0:
    np.save(os.path.join(out, "predictions.npy"), predictions)
PY

cat >"$work/check.py" <<'PY'
import os
import sys

import numpy as np

import autoshard.keras as keras

out = sys.argv[1]
files = sorted(f for f in os.listdir(out) if not f.endswith(".py"))
assert files == ["model.keras", "model.weights.h5", "predictions.npy"], files
x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
want = np.load(os.path.join(out, "predictions.npy"))
model = keras.models.load_model(os.path.join(out, "model.keras"))
assert np.allclose(model.predict(x), want, rtol=1e-5, atol=1e-6)
other = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(3)])
other.load_weights(os.path.join(out, "model.weights.h5"))
assert all(np.array_equal(a, b) for a, b in zip(other.get_weights(), model.get_weights()))
print("ok")
PY

timeout -k 5 90 mpirun -np 2 -x PYTHONPATH "$py" "$work/train.py" "$work"
result=$(timeout -k 5 60 "$py" "$work/check.py" "$work")
[ "$result" = ok ] || { echo "FAILED: $result"; exit 1; }
echo "ok: ModelCheckpoint under mpirun -np 2 writes once, from rank 0, and reloads"
