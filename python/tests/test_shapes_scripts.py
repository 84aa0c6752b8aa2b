"""The Keras-guide-style scripts of python/tests/scripts/shapes_*.py
(unknown lengths, Keras's targets, the functional surface, Keras 3 variable
paths in a LayoutMap, PyDataset): each runs unchanged, its printed losses
fall, and a sharded run prints the one-device losses.

Each run is a fresh interpreter: automatic layer names ("dense_1"), which
seed the initial weights, then start afresh as they do for a user."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What runs before the script: a distribution set, or set_distribution
# made to do nothing (the script's own ModelParallel then runs on one device).
PRELUDES = {
    "one device": "",
    "data=2": "d.set_distribution(d.DataParallel(devices=['cpu:0', 'cpu:1']))",
    "AutoShard model=2": "d.set_distribution(d.AutoShard(d.DeviceMesh((1, 2), ('data', 'model'))))",
    "no distribution": "d.set_distribution = lambda value: None",
}


def run_script(name, prelude="one device"):
    """The losses the script prints ("... loss: 0.123")."""
    code = ("import runpy, sys, warnings\nwarnings.simplefilter('ignore')\n"
            "import autoshard.keras.distribution as d\n"
            f"{PRELUDES[prelude]}\nrunpy.run_path(sys.argv[1], run_name='__main__')\n")
    env = dict(os.environ, PYTHONPATH=PACKAGE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code, os.path.join(SCRIPTS, name)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{name} ({prelude}) failed:\n{done.stderr[-3000:]}"
    losses = [float(v) for v in re.findall(r"loss: ([-0-9.eE+]+)", done.stdout)]
    assert losses, f"{name} printed no losses:\n{done.stdout}"
    return losses


@pytest.mark.parametrize("name", ["shapes_text_classification_any_length.py",
                                  "shapes_functional_api_guide.py"])
def test_script_losses_fall_and_sharded_runs_equal_one_device(name):
    one = run_script(name)
    assert one[-1] < one[0]
    for prelude in ("data=2", "AutoShard model=2"):
        np.testing.assert_allclose(run_script(name, prelude), one, rtol=1e-5, err_msg=prelude)


def test_distribution_guide_script_equals_one_device():
    sharded = run_script("shapes_distribution_guide.py")  # ModelParallel on model=2, as written
    assert sharded[-1] < sharded[0]
    np.testing.assert_allclose(run_script("shapes_distribution_guide.py", "no distribution"),
                               sharded, rtol=1e-5)
