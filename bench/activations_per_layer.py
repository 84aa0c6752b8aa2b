#!/usr/bin/env python3
"""Activation memory per transformer layer: AutoShard's prediction against
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", Table 2), on a few GPT shapes.

    python3 bench/activations_per_layer.py [PATH/TO/autoshard]   # ~20 s

For each shape, `plan --plan megatron --predict --json` (a100-80g, bf16) is
run on GPT models of 2 and 4 layers; half the difference of the predicted
activation bytes (the executor's buffer plan, plus its gradient buckets'
buffers: docs/cost-model.md) is one layer's share. The paper counts the
activations stored for the backward pass at 16 bits, s = sequence,
b = micro-batch, h = hidden, a = heads, t = tensor parallel size:

    no recompute, tensor parallel   sbh (10 + 24/t + 5as/(ht))
    full recompute                  2sbh   (the layer's input alone)

(With dropout; without it the two 1-byte masks of sbh/t and the as^2 b
attention mask go: sbh (8 + 24/t + 2as/(ht)).) Under full recompute the
peak of a step is at the end of its backward pass, where every layer's
weight gradient (2 bytes per element in bf16, 12h^2/t per layer) is alive
beside the stored inputs: that is subtracted before the comparison (the
weights figure, 6 bytes per element, gives the layer's elements).
"""
import json
import os
import subprocess
import sys
import tempfile

cli = sys.argv[1] if len(sys.argv) > 1 else "build/autoshard"
# (s, b, h, a): GPT-2 medium's layer at two lengths, GPT-3 175B's layer.
shapes = [(1024, 2, 1024, 16), (2048, 1, 1024, 16), (2048, 1, 12288, 96)]


def predicted(layers, s, b, h, a, t, dropout, recompute):
    config = {"model_type": "gpt2", "n_layer": layers, "n_head": a, "n_embd": h,
              "vocab_size": 51200, "n_positions": s, "resid_pdrop": dropout}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config, f)
    try:
        cmd = [cli, "plan", "--model", f.name, "--batch", str(b), "--seq", str(s),
               "--mesh", f"model={t}", "--plan", "megatron", "--cluster", "a100-80g",
               "--dtype", "bf16", "--predict", "--json",
               "--memory-per-device", "1TiB"] + (["--recompute"] if recompute else [])
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: {run.stderr.strip()}")
        out = run.stdout
    finally:
        os.unlink(f.name)
    return json.loads(out)["predicted"]["memory_bytes"]


def per_layer(s, b, h, a, t, dropout, recompute):
    two, four = (predicted(n, s, b, h, a, t, dropout, recompute) for n in (2, 4))
    activations = (four["activations"] - two["activations"]) / 2
    if recompute:  # the weight gradients alive at the peak: 2 of the 6 bytes per element
        activations -= (four["weights"] - two["weights"]) / 2 / 3
    return activations


def paper(s, b, h, a, t, dropout, recompute):
    sbh = s * b * h
    if recompute:
        return 2 * sbh
    if dropout:
        return sbh * (10 + 24 / t + 5 * a * s / (h * t))
    return sbh * (8 + 24 / t + 2 * a * s / (h * t))


print(f"{'s':>5} {'b':>2} {'h':>6} {'a':>3} {'t':>2} {'dropout':>7} {'recompute':>9} "
      f"{'ours sbh':>9} {'paper sbh':>9} {'ours/paper':>10}")
for s, b, h, a in shapes:
    for t in (8,) if h > 4096 else (1, 2):
        for dropout in (0.1, 0.0):
            for recompute in (False, True):
                ours = per_layer(s, b, h, a, t, dropout, recompute)
                theirs = paper(s, b, h, a, t, dropout, recompute)
                print(f"{s:5} {b:2} {h:6} {a:3} {t:2} {dropout:7} {str(recompute):>9} "
                      f"{ours / (s * b * h):9.2f} {theirs / (s * b * h):9.2f} "
                      f"{ours / theirs:10.3f}", flush=True)
