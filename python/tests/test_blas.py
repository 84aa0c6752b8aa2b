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


@needs_simd
def test_kernels_below_the_cpu_are_replaced_before_openblas_loads():
    out = run(INFO, AUTOSHARD_SIMULATE_BLAS_CORE="Prescott")
    info = json.loads(out.stdout)
    assert info["chosen_by"] == "autoshard" and info["library_choice"] == "Prescott"
    assert info["core"].lower() == BEST.lower()
    assert "set by autoshard, OpenBLAS chose Prescott" in info["description"]
    assert "Warning" not in out.stderr


@needs_simd
def test_openblas_loaded_first_by_numpy_is_named_with_the_fix():
    out = run("import numpy\n" + INFO, AUTOSHARD_SIMULATE_BLAS_CORE="Prescott")
    info = json.loads(out.stdout)
    assert info["core"] == "Prescott" and info["chosen_by"] == "OpenBLAS"
    assert "RuntimeWarning" in out.stderr
    assert f"OPENBLAS_CORETYPE={BEST}" in out.stderr and "Import autoshard before NumPy" in out.stderr


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
