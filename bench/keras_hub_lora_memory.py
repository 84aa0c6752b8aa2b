"""Peak memory of LoRA fine-tuning a Gemma-2B-shaped KerasHub preset (random
weights made here) through autoshard.keras_hub, against the sum of what it
must hold: the frozen weights, the adapters, the optimizer's state of the
adapters and the training step's activations.

    python3 bench/keras_hub_lora_memory.py make DIR [--layers 18] [--vocab 256000]   # the preset
    python3 bench/keras_hub_lora_memory.py run DIR [--seq 128] [--batch 1] [--steps 2] \
        [--dtype float32|bfloat16]
    python3 bench/keras_hub_lora_memory.py compare DIR [--seq 128] ...   # both dtypes

``make`` writes a GemmaBackbone preset of Gemma 2B's shapes (KerasHub's
gemma_2b_en config: vocabulary 256000, hidden 2048, 18 layers, 8 query
heads, 1 key-value head, head_dim 256, intermediate_dim 32768) with
autoshard's initial (seeded) weights in f32; ``--layers`` and ``--vocab``
make a smaller model of the same layer shapes. ``run`` is KerasHub's LoRA recipe (``from_preset``,
``backbone.enable_lora(rank=4)``, ``compile``, ``fit``), in its own
process, printing the peak resident memory (VmHWM) after each phase and one
JSON line; ``--dtype bfloat16`` is ``from_preset(dtype="bfloat16")``, whose
frozen base is held in bfloat16 (the weights' bytes are the engine's own
count, ``weight_bytes``). ``compare`` runs both dtypes, each in its own
process, and prints a table and one JSON line. A scaled-down model that
runs in well under a minute on 2 cores: ``make DIR --layers 2 --vocab
32000``, then ``compare DIR --seq 64``. bench/README.md records runs.
"""

import argparse
import json
import os
import sys
import tempfile
import time

GEMMA_2B = {"vocabulary_size": 256000, "num_layers": 18, "num_query_heads": 8,
            "num_key_value_heads": 1, "hidden_dim": 2048, "intermediate_dim": 32768,
            "head_dim": 256, "layer_norm_epsilon": 1e-6, "dropout": 0.0,
            "query_head_dim_normalize": True, "use_post_ffw_norm": False,
            "use_post_attention_norm": False, "final_logit_soft_cap": None,
            "attention_logit_soft_cap": None, "sliding_window_size": 4096,
            "use_sliding_window_attention": False}
GIB = 1024 ** 3


def peak_rss():
    """The process's peak resident memory so far (VmHWM), bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def make(directory, layers, vocab):
    import autoshard.keras_hub as keras_hub

    config = dict(GEMMA_2B, num_layers=layers, vocabulary_size=vocab)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump({"module": "keras_hub.src.models.gemma.gemma_backbone",
                       "class_name": "GemmaBackbone", "config": config,
                       "registered_name": "keras_hub>GemmaBackbone"}, f, indent=2)
        lm = keras_hub.models.GemmaCausalLM.from_preset(tmp, load_weights=False, seed=1)
        lm.save_to_preset(directory)
    print(f"wrote {directory}: {lm.count_params()} parameters, peak RSS "
          f"{peak_rss() / GIB:.2f} GiB", file=sys.stderr)


def activation_bytes(c, batch, seq):
    """What a training step of this shape keeps for its backward pass, in
    f32 (an estimate, counted per layer: the two norms' inputs and outputs,
    q, k, v, the attention's output and its projection, the MLP's gate, up,
    their GELU product and the down projection; then the final norm and the
    logits with their softmax and gradient)."""
    tokens = batch * seq
    C, D, I = c["hidden_dim"], c["head_dim"], c["intermediate_dim"] // 2
    q, kv = c["num_query_heads"] * D, c["num_key_value_heads"] * D
    per_layer = tokens * (6 * C + 2 * q + 2 * kv + 4 * I)
    head = tokens * (2 * C + 3 * c["vocabulary_size"])
    return 4 * (c["num_layers"] * per_layer + head)


def adapter_parameters(c, rank):
    """Keras's EinsumDense.enable_lora on each layer's query and value:
    lora_kernel_a [C, heads, rank] and lora_kernel_b [rank, head_dim]."""
    C, D = c["hidden_dim"], c["head_dim"]
    heads = c["num_query_heads"] + c["num_key_value_heads"]
    return c["num_layers"] * (C * heads * rank + 2 * rank * D)


def run(directory, seq, batch, steps, rank, dtype="float32"):
    import numpy as np

    import autoshard
    import autoshard.keras_hub as keras_hub

    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)["config"]
    phases = {}
    start = time.time()
    lm = keras_hub.models.GemmaCausalLM.from_preset(directory, dtype=dtype)
    phases["from_preset"] = peak_rss()
    lm.backbone.enable_lora(rank=rank)
    phases["enable_lora"] = peak_rss()
    lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-4))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, config["vocabulary_size"], (batch * steps, seq + 1))
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((batch * steps, seq), np.int32)}
    history = lm.fit(x, tokens[:, 1:], batch_size=batch, epochs=1, shuffle=False)
    phases["fit"] = peak_rss()
    seconds = time.time() - start
    # Counted after fit: a call that builds the model before it (count_params,
    # a forward pass) makes fit build it anew for training, copying the weights
    # over, which holds both copies for a moment (twice the weights).
    lora = adapter_parameters(config, rank)
    base = lm.count_params() - lora
    adapters = 4 * lora
    # The base's bytes as the engine holds them (2 per weight held in
    # bfloat16), the adapters (float32) taken out.
    weights = lm._native.weight_bytes() - adapters
    optimizer = 2 * adapters  # Adam's two slots, for the adapters alone
    activations = activation_bytes(config, batch, seq)
    total = weights + adapters + optimizer + activations
    report = {"dtype": dtype, "layers": config["num_layers"], "parameters": base,
              "adapter_parameters": lora, "seq": seq, "batch": batch, "steps": steps,
              "losses": history.steps, "weights_bytes": weights, "adapters_bytes": adapters,
              "optimizer_bytes": optimizer, "activations_bytes_estimate": activations,
              "sum_bytes": total, "peak_rss_bytes": phases, "seconds": round(seconds, 1)}
    for name, value in [(f"weights ({dtype})", weights), ("adapters", adapters),
                        ("optimizer state (Adam)", optimizer),
                        ("activations (estimate)", activations), ("sum", total)]:
        print(f"{name:24s} {value / GIB:8.3f} GiB", file=sys.stderr)
    for name, value in phases.items():
        print(f"peak RSS after {name:12s} {value / GIB:8.3f} GiB ({value / total:.2f} x the sum)",
              file=sys.stderr)
    print(json.dumps(report))


def compare(directory, seq, batch, steps, rank):
    """Both dtypes, each in a process of its own (peak RSS is per process)."""
    import subprocess

    reports = []
    for dtype in ("float32", "bfloat16"):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "run", directory,
                              "--seq", str(seq), "--batch", str(batch), "--steps", str(steps),
                              "--rank", str(rank), "--dtype", dtype],
                             capture_output=True, text=True, check=True)
        reports.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'base dtype':10s} {'weights':>9s} {'adapters':>9s} {'Adam':>9s} "
          f"{'activations':>11s} {'sum':>9s} {'peak RSS':>9s} {'RSS/sum':>7s}  (GiB)",
          file=sys.stderr)
    for r in reports:
        peak = r["peak_rss_bytes"]["fit"]
        print(f"{r['dtype']:10s} {r['weights_bytes'] / GIB:9.3f} {r['adapters_bytes'] / GIB:9.4f} "
              f"{r['optimizer_bytes'] / GIB:9.4f} {r['activations_bytes_estimate'] / GIB:11.3f} "
              f"{r['sum_bytes'] / GIB:9.3f} {peak / GIB:9.3f} {peak / r['sum_bytes']:7.2f}",
              file=sys.stderr)
    f32, bf16 = reports
    print(json.dumps({"float32": f32, "bfloat16": bf16,
                      "peak_rss_ratio": bf16["peak_rss_bytes"]["fit"] /
                      f32["peak_rss_bytes"]["fit"],
                      "loss_difference": max(abs(a - b) for a, b in
                                             zip(f32["losses"], bf16["losses"]))}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["make", "run", "compare"])
    parser.add_argument("directory")
    parser.add_argument("--layers", type=int, default=GEMMA_2B["num_layers"])
    parser.add_argument("--vocab", type=int, default=GEMMA_2B["vocabulary_size"])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args()
    if args.mode == "make":
        make(args.directory, args.layers, args.vocab)
    elif args.mode == "compare":
        compare(args.directory, args.seq, args.batch, args.steps, args.rank)
    else:
        run(args.directory, args.seq, args.batch, args.steps, args.rank, args.dtype)


if __name__ == "__main__":
    main()
