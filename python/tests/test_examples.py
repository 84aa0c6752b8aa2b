"""examples/keras_cnn_plan.py runs (a few steps) and its CNN learns."""

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
