"""`pip install ./python` (the README's way in) into a fresh virtual
environment, offline, then `python -m autoshard` from another directory runs
the installed copy. The extension this build made is reused
(AUTOSHARD_PIP_PREBUILT), so the test checks the install, not the compile."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pip_install_into_a_fresh_venv_then_python_m_autoshard(tmp_path):
    built = glob.glob(os.path.join(REPO, "python", "autoshard", "_native*.so"))
    if not built:
        pytest.skip("the extension is not built")
    source = tmp_path / "python"
    shutil.copytree(os.path.join(REPO, "python"), source,
                    ignore=shutil.ignore_patterns("_native*.so", "__pycache__", "build",
                                                  "*.egg-info", "tests"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["AUTOSHARD_PIP_PREBUILT"] = built[0]
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation",
                              "--no-index", "--quiet", str(source)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = subprocess.run([str(venv / "bin" / "python"), "-m", "autoshard"], cwd=elsewhere,
                            capture_output=True, text=True, env=env, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr
    first = report.stdout.splitlines()[0]
    assert first.startswith("autoshard ") and str(venv) in first  # the installed copy
    assert "equal" in report.stdout.splitlines()[-1]
