"""The README's first screen works as written: its Python quick start (read
from README.md, not copied here) runs and prints two equal loss curves, and
``python -m autoshard`` prints its report with a passing self-check."""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARKER = "<!-- quickstart:"


def quickstart_block():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    after = text[text.index(MARKER):]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match, "README.md: no ```python block after the quickstart marker"
    return match.group(1)


def run_python(code_or_args, timeout=300):
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


def curve(line):
    return [float(v) for v in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", line.split(":", 1)[1])]


def test_readme_python_quick_start_runs_and_the_mesh_equals_one_device():
    out = run_python(quickstart_block())
    assert out.returncode == 0, out.stderr
    lines = {line.split(":", 1)[0].strip(): line for line in out.stdout.splitlines() if ":" in line}
    one, mesh = curve(lines["one device"]), curve(lines["2x2 mesh"])
    assert len(one) == 3 and len(mesh) == 3
    # Printed rounded to 5 places: equal to float tolerance (a last digit may round apart).
    assert all(abs(a - b) <= 1.5e-5 for a, b in zip(one, mesh)), (one, mesh)
    assert one[-1] < one[0]  # and it learns


def test_python_m_autoshard_reports_and_self_checks():
    out = run_python(["-m", "autoshard"])
    assert out.returncode == 0, out.stdout + out.stderr
    for field in ("autoshard ", "python ", "blas: ", "devices: ", "self-check: "):
        assert field in out.stdout
    assert "equal" in out.stdout.splitlines()[-1]
