# %% [markdown]
# # KerasHub presets on autoshard
#
# A KerasHub user's script after changing its import: load a preset sharded
# by AutoShard, read the plan, fine-tune, generate, save a preset; then the
# Keras tensor-parallel quick start on a BERT preset. Notebook cells (`# %%`);
# runs as a script too (python/tests/test_keras_hub_python.py runs it on the
# tiny presets of tests/data/keras_hub). Give other presets with
# AUTOSHARD_GPT2_PRESET and AUTOSHARD_BERT_PRESET
# (local directories).

# %%
import os
import tempfile

import numpy as np

import autoshard
import autoshard.keras_hub as keras_hub  # was: import keras_hub

HUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "keras_hub")
GPT2 = os.environ.get("AUTOSHARD_GPT2_PRESET", os.path.join(HUB, "gpt2"))
BERT = os.environ.get("AUTOSHARD_BERT_PRESET", os.path.join(HUB, "bert"))

# %% [markdown]
# ## Load sharded: `sharding="auto"` (keras-hub#2806)
# AutoShard chooses the mesh over this process's devices and every layout
# for the model's first step (here: fit's training step); `print(lm.plan)`
# then lists each KerasHub variable's layout and why.

# %%
lm = keras_hub.models.GPT2CausalLM.from_preset(GPT2, sharding="auto")

# %% [markdown]
# ## Fine-tune on preprocessed batches, then generate

# %%
rng = np.random.default_rng(0)
tokens = rng.integers(0, lm.vocab_size, (16, 9))
x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((16, 8), np.int32)}
y = tokens[:, 1:]
lm.compile(optimizer=autoshard.keras.optimizers.Adam(1e-2), sampler="greedy")
history = lm.fit(x, y, batch_size=8, epochs=3)
for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch}: loss {loss:.4f}")
print(lm.plan)
prompt = {"token_ids": np.array([[5, 9, 3, 0, 0, 0, 0, 0]]),
          "padding_mask": np.array([[1, 1, 1, 0, 0, 0, 0, 0]])}
print("generated:", lm.generate(prompt, stop_token_ids=None)["token_ids"][0].tolist())

# %% [markdown]
# ## Save a preset (a new directory; an existing non-empty one is refused)

# %%
with tempfile.TemporaryDirectory() as tmp:
    lm.save_to_preset(os.path.join(tmp, "finetuned"))
    again = keras_hub.models.GPT2CausalLM.from_preset(os.path.join(tmp, "finetuned"))
    print("saved preset, largest logit difference:",
          float(np.abs(again(x) - lm(x)).max()))

# %% [markdown]
# LoRA fine-tuning (`enable_lora`, `save_lora_weights`) has its own
# notebook: examples/keras_hub_lora.py.

# %% [markdown]
# ## The Keras tensor-parallel quick start
# `TensorParallelKeras(BertBackbone.from_preset(...))`, compile, fit on the
# `{"token_ids", "segment_ids"}` dict (the preset's classification head).

# %%
ids = rng.integers(2, 90, (16, 6))
labels = np.arange(16) % 2
ids[labels == 1, 1] = 1  # class 1: token 1 in second place
tp = autoshard.TensorParallel(keras_hub.models.BertBackbone.from_preset(BERT), world_size=2)
tp.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = tp.fit({"token_ids": ids, "segment_ids": np.zeros_like(ids)}, labels, batch_size=8,
                 epochs=6)
loss, accuracy = tp.evaluate({"token_ids": ids}, labels)
print(f"tensor parallel on {tp.plan.mesh}: loss {history.history['loss'][0]:.4f} -> {loss:.4f}, "
      f"accuracy {accuracy:.2f}")
