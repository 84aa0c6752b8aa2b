# %% [markdown]
# # LoRA fine-tuning of a KerasHub preset on autoshard
#
# KerasHub's most used recipe (its Gemma LoRA guide) after changing the
# import: `GemmaCausalLM.from_preset(..., sharding="auto")`,
# `backbone.enable_lora(rank=4)`, `compile`, `fit`, `generate`, then the
# adapters alone saved to a `.lora.h5` file and put on a fresh model.
# Notebook cells (`# %%`); runs as a script too
# (python/tests/test_keras_hub_python.py runs it on the tiny Gemma preset of
# tests/data/keras_hub). Give another preset (a local directory) with
# AUTOSHARD_GEMMA_PRESET.

# %%
import os
import tempfile

import numpy as np

import autoshard
import autoshard.keras as keras  # was: import keras
import autoshard.keras_hub as keras_hub  # was: import keras_hub

HUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "keras_hub")
PRESET = os.environ.get("AUTOSHARD_GEMMA_PRESET", os.path.join(HUB, "gemma"))

# %% [markdown]
# ## Load sharded
# `sharding="auto"` (keras-hub#2806): AutoShard chooses the mesh over this
# process's devices and the layout of every variable, adapters included,
# when the first step (here fit's) is planned. Each device reads only its
# block of each weight.

# %%
gemma_lm = keras_hub.models.GemmaCausalLM.from_preset(PRESET, sharding="auto")
print(f"{gemma_lm.count_params()} parameters before LoRA")

# %% [markdown]
# ## Enable LoRA
# Adapters of rank 4 on every layer's query and value projections
# (Keras's `EinsumDense.enable_lora`: `kernel + a @ b`, `b` from zeros, so
# the model starts as it was); every other weight is frozen.

# %%
gemma_lm.backbone.enable_lora(rank=4)
print(f"{gemma_lm.count_params()} parameters with LoRA")

# %% [markdown]
# ## Fine-tune
# KerasHub's guide compiles with AdamW and the sparse categorical
# cross-entropy of the logits, then fits. Here the batches are preprocessed
# (token ids with their padding mask, the next tokens as targets: what
# `GemmaCausalLMPreprocessor` makes of text), a synthetic task the adapters
# can learn: each row counts up from a random start.

# %%
rng = np.random.default_rng(0)
start = rng.integers(0, gemma_lm.vocab_size - 9, (16, 1))
tokens = start + np.arange(9)
x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((16, 8), np.int32)}
y = tokens[:, 1:]
gemma_lm.compile(
    optimizer=keras.optimizers.AdamW(learning_rate=1e-2, weight_decay=0.01),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
    sampler="greedy",
)
history = gemma_lm.fit(x, y, batch_size=4, epochs=4)
for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch}: loss {loss:.4f}")
print(gemma_lm.plan)

# %% [markdown]
# ## Generate with the adapters
# A preset with a tokenizer takes text (`gemma_lm.generate("...",
# max_length=64)`); the tiny one here has none, so the prompt is a
# preprocessed dict whose padding mask marks the prompt.

# %%
prompt = {"token_ids": np.array([[5, 6, 7, 0, 0, 0, 0, 0]]),
          "padding_mask": np.array([[1, 1, 1, 0, 0, 0, 0, 0]])}
generated = gemma_lm.generate(prompt, stop_token_ids=None)["token_ids"][0]
print("generated:", generated.tolist())

# %% [markdown]
# ## Save and reload the adapters
# `save_lora_weights` writes the adapters alone (KerasHub's `.lora.h5`
# layout, a few kilobytes here against the model's megabytes);
# `load_lora_weights` enables LoRA at the file's rank on a fresh model of
# the same preset, which then gives the fine-tuned logits, here on a mesh of
# two devices.

# %%
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "gemma.lora.h5")
    gemma_lm.backbone.save_lora_weights(path)
    print(f"adapter file: {os.path.getsize(path)} bytes")
    fresh = keras_hub.models.GemmaCausalLM.from_preset(PRESET, mesh="model=2")
    fresh.backbone.load_lora_weights(path)
    print("reloaded adapters, largest logit difference:",
          float(np.abs(fresh(x) - gemma_lm(x)).max()))
    print("reloaded adapters on", fresh.mesh)
