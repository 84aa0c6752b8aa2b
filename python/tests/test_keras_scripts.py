"""The Keras-guide-style scripts under python/tests/scripts/ (custom layers,
keras.ops, a subclassed model), run unchanged: their losses fall, and run
under a distribution set before the script starts (the script itself
unchanged) they are one device's losses."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# The shapes_* scripts have their own test (test_shapes_scripts.py).
SCRIPTS = sorted(f for f in os.listdir(os.path.join(HERE, "scripts"))
                 if f.endswith(".py") and not f.startswith("shapes_"))

# Runs a script after setting a distribution: the mesh given, every Dense
# kernel split over "model" where the mesh has that axis.
WRAPPER = """
import runpy, sys
from autoshard.keras.distribution import (AutoShard, DataParallel, DeviceMesh, LayoutMap,
                                          ModelParallel, set_distribution)
mesh = sys.argv[1]
if mesh == "data=2":
    set_distribution(DataParallel(devices=["cpu:0", "cpu:1"]))
elif mesh == "auto":
    set_distribution(AutoShard(mesh=DeviceMesh((2, 2), ("data", "model"))))
else:
    shape = (2, 2) if mesh == "data=2,model=2" else (1, 2)
    layout_map = LayoutMap(DeviceMesh(shape, ("data", "model")))
    layout_map["dense.*kernel"] = (None, "model")
    set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run(script, mesh=None):
    path = os.path.join(HERE, "scripts", script)
    command = [sys.executable, path] if mesh is None else [sys.executable, "-c", WRAPPER, mesh,
                                                           path]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("losses:"))
    return [float(v) for v in re.findall(r"[-+0-9.e]+", line.split(":", 1)[1])]


@pytest.fixture(scope="module")
def one_device():
    return {}


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_and_its_loss_falls(script, one_device):
    losses = run(script)
    one_device[script] = losses
    assert len(losses) >= 3 and losses[-1] < losses[0], losses


@pytest.mark.parametrize("mesh", ["data=2", "model=2", "data=2,model=2", "auto"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_sharded_script_equals_one_device(script, mesh, one_device):
    want = one_device.get(script) or run(script)
    one_device[script] = want
    np.testing.assert_allclose(run(script, mesh), want, rtol=1e-5)
