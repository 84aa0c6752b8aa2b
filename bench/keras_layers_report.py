#!/usr/bin/env python3
"""The table of bench/keras_layers.sh: the sgemm peak's JSON as argument,
one {"ours": ..., "torch": ..., "python": ...} line per model on stdin
("python": the same model from Python with NumPy imported first, or {})."""
import json
import sys

NAMES = {
    "resnet": "ResNet-18-style, 32x32x3, batch 64",
    "lstm": "2-layer LSTM(512) LM, batch 32, 64 steps",
    "gru": "2-layer GRU(512) LM, batch 32, 64 steps",
}


def main():
    peak = json.loads(sys.argv[1])
    top = peak["peak_gflops"]
    print(f"\nsgemm peak on {peak['threads']} threads: {top:.1f} GFLOP/s\n")
    print("| step | autoshard s | GFLOP/s | of peak | PyTorch s | of peak | speed-up "
          "| from Python, NumPy first: s | of peak |")
    print("|---|---|---|---|---|---|---|---|---|")
    for line in sys.stdin:
        r = json.loads(line)
        a, t = r["ours"], r["torch"]
        flops = a["step_flops"]
        ours = flops / a["median_step_s"] * 1e-9
        cells = [NAMES[a["model"]], f"{a['median_step_s']:.3f}", f"{ours:.1f}", f"{ours / top:.0%}"]
        if t:
            theirs = flops / t["median_step_s"] * 1e-9
            cells += [f"{t['median_step_s']:.3f}", f"{theirs / top:.0%}",
                      f"{t['median_step_s'] / a['median_step_s']:.2f}x"]
        else:
            cells += ["", "", ""]
        py = r.get("python") or {}
        if py:
            cells += [f"{py['median_step_s']:.3f}",
                      f"{flops / py['median_step_s'] * 1e-9 / top:.0%}"]
        else:
            cells += ["", ""]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
