"""The Python package runs the best OpenBLAS kernels for the CPU, as the command does.

Each case runs a fresh interpreter: OpenBLAS chooses its kernels once, when it
loads. AUTOSHARD_SIMULATE_BLAS_CORE=Prescott makes autoshard act as though
OpenBLAS had chosen its SSE3 kernels (what Debian's 0.3.21 does on CPUs newer
than it).
"""

import json
import os
import subprocess
import sys

import pytest

import autoshard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEST = autoshard.blas_info()["best"]
needs_simd = pytest.mark.skipif(not BEST, reason="this CPU runs only OpenBLAS's SSE kernels")


def run(code, **env):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OPENBLAS_CORETYPE", "AUTOSHARD_OPENBLAS_OWN_CORE",
                          "AUTOSHARD_KEEP_BLAS_CORE", "AUTOSHARD_SIMULATE_BLAS_CORE")}
    clean.update(env)
    clean["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-W", "always", "-c", code], env=clean,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


INFO = "import autoshard, json; print(json.dumps(autoshard.blas_info()))"
# A product through autoshard against NumPy's: the largest difference.
PRODUCT = """
import numpy, autoshard.keras as keras
x = numpy.random.default_rng(0).standard_normal((300, 200)).astype('float32')
m = keras.Sequential([keras.Input((200,)), keras.layers.Dense(150, use_bias=False)])
print(float(numpy.abs(m.predict(x, verbose=0) - x @ m.get_weights()[0]).max()))
"""


@needs_simd
def test_kernels_below_the_cpu_are_replaced_before_openblas_loads():
    out = run(INFO, AUTOSHARD_SIMULATE_BLAS_CORE="Prescott")
    info = json.loads(out.stdout)
    assert info["chosen_by"] == "autoshard" and info["library_choice"] == "Prescott"
    assert info["core"].lower() == BEST.lower()
    assert "set by autoshard, OpenBLAS chose Prescott" in info["description"]
    assert "Warning" not in out.stderr


@needs_simd
def test_openblas_loaded_first_by_numpy_gets_a_private_copy():
    out = run("import numpy\n" + INFO + PRODUCT, AUTOSHARD_SIMULATE_BLAS_CORE="Prescott")
    info = json.loads(out.stdout.splitlines()[0])
    assert info["core"].lower() == BEST.lower() and info["private_copy"]
    assert info["chosen_by"] == "autoshard" and info["library_choice"] == "Prescott"
    assert "autoshard runs a private copy" in info["description"]
    assert "Warning" not in out.stderr
    assert float(out.stdout.splitlines()[1]) < 1e-4  # products through the copy are right


@needs_simd
def test_a_real_slow_openblas_loaded_first_is_replaced_for_autoshard_only():
    # NumPy loads OpenBLAS with its SSE3 kernels for real (as on a CPU newer
    # than the library); the variable is gone by the time autoshard loads, as
    # when nobody set it.
    code = "import os, numpy\nos.environ.pop('OPENBLAS_CORETYPE')\n" + INFO + PRODUCT
    out = run(code, OPENBLAS_CORETYPE="Prescott")
    info = json.loads(out.stdout.splitlines()[0])
    assert info["core"].lower() == BEST.lower() and info["private_copy"]
    assert info["library_choice"].lower() == "prescott"
    assert "Warning" not in out.stderr
    assert float(out.stdout.splitlines()[1]) < 1e-4  # the copy's products against NumPy's


def test_the_users_choice_and_the_keep_switch_are_kept():
    info = json.loads(run(INFO, OPENBLAS_CORETYPE="Haswell").stdout)
    assert info["chosen_by"] == "OPENBLAS_CORETYPE" and info["core"].lower() == "haswell"
    out = run(INFO, AUTOSHARD_SIMULATE_BLAS_CORE="Prescott", AUTOSHARD_KEEP_BLAS_CORE="1")
    info = json.loads(out.stdout)
    assert info["core"] == "Prescott" and info["chosen_by"] == "OpenBLAS"
    assert "Warning" not in out.stderr


def test_blas_info_measures_the_peak_on_request():
    info = autoshard.blas_info(measure_peak=True)
    assert info["library"].startswith("OpenBLAS") and info["sgemm_peak_gflops"] > 0
    assert "sgemm_peak_gflops" not in autoshard.blas_info()


def test_a_malformed_keep_switch_is_an_error_naming_it():
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    clean.update(AUTOSHARD_KEEP_BLAS_CORE="yes", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", "import autoshard"], env=clean,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "ValueError: AUTOSHARD_KEEP_BLAS_CORE is 'yes': set it to 1" in out.stderr
