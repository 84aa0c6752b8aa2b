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


def test_transfer_learning_example_freezes_then_fine_tunes():
    env = dict(os.environ, AUTOSHARD_EXAMPLE_EPOCHS="3",
               PYTHONPATH=os.path.join(REPO, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    script = os.path.join(REPO, "examples", "keras_transfer_learning.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=180,
                         env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "trainable: ['head_b/kernel', 'head_b/bias']" in text
    assert "base unchanged: True" in text  # frozen: no step moved the base
    assert "base trained: True" in text  # unfrozen and recompiled: it trains
    head = re.search(r"head trained: loss ([0-9.]+) -> ([0-9.]+)", text)
    assert float(head.group(2)) < float(head.group(1))
    # Adam's slots for the head alone (32 * 3 + 3 floats, twice), on each of the 4 devices
    # at most.
    state = int(re.search(r"optimizer state per device: (\d+) bytes", text).group(1))
    assert 0 < state <= 2 * (32 * 3 + 3) * 4


def test_seq2seq_example_trains_and_decodes_from_the_encoder_states():
    env = dict(os.environ, AUTOSHARD_EXAMPLE_EPOCHS="12",
               PYTHONPATH=os.path.join(REPO, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    script = os.path.join(REPO, "examples", "keras_seq2seq.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr
    loss = re.search(r"trained: loss ([0-9.]+) -> ([0-9.]+)", out.stdout)
    assert float(loss.group(2)) < 0.5 * float(loss.group(1))
    # Greedy decoding through the inference models (encoder states, then
    # the decoder step by step from the states it returns) reverses most digits.
    assert float(re.search(r"decoded digits right: ([0-9.]+)", out.stdout).group(1)) > 0.5


def test_next_frame_example_runs_and_learns():
    # Keras's conv_lstm example: ConvLSTM2D, BatchNormalization and Conv3D on
    # clips of open length, trained on data=2,model=2 (smaller here).
    env = dict(os.environ, AUTOSHARD_EXAMPLE_EPOCHS="3", AUTOSHARD_EXAMPLE_FILTERS="8",
               PYTHONPATH=os.path.join(REPO, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    script = os.path.join(REPO, "examples", "keras_next_frame.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=180,
                         env=env)
    assert out.returncode == 0, out.stderr
    epochs = re.findall(r"epoch \d+: loss ([0-9.]+) val_loss ([0-9.]+)", out.stdout)
    assert len(epochs) == 3
    assert float(epochs[-1][0]) < float(epochs[0][0])  # it learns
    assert float(epochs[-1][1]) < float(epochs[0][1])
    assert "trained on mesh data=2,model=2" in out.stdout
    assert "next frame: mean abs error" in out.stdout
