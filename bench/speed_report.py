#!/usr/bin/env python3
"""Turns bench/speed.sh's measurements into ratios: each step as a fraction
of the sgemm peak measured in the same run (model FLOPs 6 x parameters x
tokens) and as a speed-up over PyTorch. Table on stderr, JSON on stdout."""
import json
import sys

peak = json.loads(sys.argv[1])
out = lambda s="": print(s, file=sys.stderr)
print(json.dumps({"sgemm_peak_gflops": peak["peak_gflops"], "threads": peak["threads"]}))
core = f", core {peak['core']} chosen by {peak['core_chosen_by']}" if "core" in peak else ""
out(f"sgemm peak on {peak['threads']} threads: {peak['peak_gflops']:.1f} GFLOP/s (n = 768..2048{core})")
if len(sys.argv) > 2:  # the kernels OpenBLAS chooses by itself, for the record
    shipped = json.loads(sys.argv[2])
    print(json.dumps({"sgemm_peak_as_shipped_gflops": shipped["peak_gflops"],
                      "core_as_shipped": shipped.get("core")}))
    out(f"as shipped (OpenBLAS's own core {shipped.get('core')}): {shipped['peak_gflops']:.1f} GFLOP/s")
rows = [json.loads(line) for line in sys.stdin]
torch_cores = sorted({r["torch"]["openblas_coretype"] for r in rows
                      if r["torch"].get("openblas_coretype")})
if torch_cores:
    out(f"PyTorch on OpenBLAS core {', '.join(torch_cores)} (OPENBLAS_CORETYPE)")
out()
out(f"{'step':<34}{'autoshard s':>12}{'GFLOP/s':>9}{'of peak':>9}{'PyTorch s':>11}{'speed-up':>10}")
for r in rows:
    ours, torch = r["ours"], r["torch"]
    gflops = 6.0 * ours["params"] * ours["batch"] * ours["seq"] / ours["median_step_s"] * 1e-9
    fraction = gflops / peak["peak_gflops"]
    theirs = torch.get("median_step_s")
    row = f"{r['name']:<34}{ours['median_step_s']:>12.3f}{gflops:>9.1f}{fraction:>9.0%}"
    row += f"{theirs:>11.3f}{theirs / ours['median_step_s']:>9.2f}x" if theirs else f"{'-':>11}{'-':>10}"
    out(row)
    print(json.dumps({"name": r["name"], "step_s": ours["median_step_s"], "gflops": gflops,
                      "fraction_of_peak": fraction, "pytorch_step_s": theirs,
                      "speedup_over_pytorch": theirs / ours["median_step_s"] if theirs else None}))
