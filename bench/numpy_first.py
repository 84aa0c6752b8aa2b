#!/usr/bin/python3
"""The speed of autoshard's products when NumPy loaded OpenBLAS first.

    PYTHONPATH=python /usr/bin/python3 bench/numpy_first.py [--rounds 3]

NumPy and autoshard share Debian's OpenBLAS, whose kernels are fixed when it
loads. On a CPU newer than the library, NumPy imported first loads it with
the SSE3 "Prescott" kernels; autoshard then runs its products on a private
copy of the library with the CPU's best kernels (ir/blas_core.h
`use_private_openblas`). Three fresh interpreters per round, each reporting
autoshard's sgemm peak (n = 1024 on the library's threads,
`autoshard.blas_info(measure_peak=True)`):

- autoshard first: the baseline, the kernels chosen before OpenBLAS loads;
- NumPy first: OpenBLAS loaded with the Prescott kernels for real
  (OPENBLAS_CORETYPE=Prescott, removed before autoshard is imported, as on
  a CPU the library does not know), then autoshard with its private copy;
- NumPy first, no copy: the same with AUTOSHARD_KEEP_BLAS_CORE=1, which is
  what every NumPy-first script got before the copy.

Prints a table on stderr (each as a ratio to the baseline of its round; the
best round) and one JSON object on stdout.
"""

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEAK = "import autoshard, json; print(json.dumps(autoshard.blas_info(measure_peak=True)))"
NUMPY_FIRST = "import os, numpy\nos.environ.pop('OPENBLAS_CORETYPE')\n"

CASES = {
    "autoshard first": (PEAK, {}),
    "NumPy first": (NUMPY_FIRST + PEAK, {"OPENBLAS_CORETYPE": "Prescott"}),
    "NumPy first, no copy": (NUMPY_FIRST + PEAK,
                             {"OPENBLAS_CORETYPE": "Prescott", "AUTOSHARD_KEEP_BLAS_CORE": "1"}),
}


def measure(code, env_changes):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "AUTOSHARD_KEEP_BLAS_CORE",
                        "AUTOSHARD_SIMULATE_BLAS_CORE", "AUTOSHARD_OPENBLAS_OWN_CORE")}
    env.update(env_changes)
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    best = {name: None for name in CASES}
    for _ in range(args.rounds):
        infos = {name: measure(*CASES[name]) for name in CASES}
        base = infos["autoshard first"]["sgemm_peak_gflops"]
        for name, info in infos.items():
            ratio = info["sgemm_peak_gflops"] / base
            if best[name] is None or ratio > best[name]["ratio"]:
                best[name] = {"ratio": ratio, "gflops": info["sgemm_peak_gflops"],
                              "core": info["core"], "private_copy": info["private_copy"]}
    print(f"{'case':<22} {'core':<12} {'copy':<5} {'GFLOP/s':>8} {'/ first':>8}", file=sys.stderr)
    for name, r in best.items():
        print(f"{name:<22} {r['core']:<12} {str(r['private_copy']):<5} {r['gflops']:>8.1f} "
              f"{r['ratio']:>8.2f}", file=sys.stderr)
    print(json.dumps({"bench": "numpy_first", "rounds": args.rounds, "cases": best}))


if __name__ == "__main__":
    main()
