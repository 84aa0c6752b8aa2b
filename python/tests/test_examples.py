"""The examples run: examples/keras_cnn_plan.py (a few steps, its CNN learns) and
the quick-start notebook (one device's losses on the mesh, its page committed)."""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_keras_cnn_plan_example_runs_and_learns():
    env = dict(os.environ, AUTOSHARD_EXAMPLE_STEPS="4",
               PYTHONPATH=os.path.join(REPO, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "keras_cnn_plan.py")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Plan on mesh" in text and "why (AutoShard):" in text  # the plan and its reasons
    assert re.search(r"conv2d\.kernel\s+3x3x3x16", text)
    assert "trained on mesh" in text
    losses = [float(v) for v in re.findall(r"epoch \d+: loss ([0-9.]+)", text)]
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_quickstart_notebook_runs_with_one_device_losses_on_the_mesh():
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    notebook = os.path.join(REPO, "examples", "quickstart_notebook.py")
    out = subprocess.run([sys.executable, notebook], capture_output=True, text=True, timeout=180,
                         env=env)
    assert out.returncode == 0, out.stderr
    largest = float(re.search(r"largest difference: (\S+)", out.stdout).group(1))
    assert largest < 1e-5
    assert "Plan on mesh" in out.stdout
    # Its rendered page is committed beside it (tools/render_notebook.py).
    page = open(os.path.join(REPO, "examples", "quickstart_notebook.html"), encoding="utf-8").read()
    assert "largest difference" in page and "<iframe srcdoc=" in page
