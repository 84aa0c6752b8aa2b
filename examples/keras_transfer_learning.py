# %% [markdown]
# # Transfer learning: freeze a base, train a head, unfreeze, fine-tune
#
# Keras's recipe (keras.io/guides/transfer_learning) on a mesh of 4 in-process
# devices (data=2, model=2):
#
# 1. a base network is trained on task A and saved;
# 2. a new model reuses the base's layers and weights with a new head for
#    task B; the base is frozen (`layer.trainable = False`) and only the head
#    trains: the base's weights get no gradient, no optimizer state and no
#    all-reduce, and its BatchNormalization runs in inference mode;
# 3. the base is unfrozen, the model recompiled (Keras 3 fixes trainability
#    at compile) with a low learning rate, and the whole model fine-tuned.
#
#     python3 examples/keras_transfer_learning.py   # AUTOSHARD_EXAMPLE_EPOCHS=2 for a quick run

# %%
import os
import tempfile

import numpy as np

import autoshard
import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import DeviceMesh, ModelParallel, LayoutMap, set_distribution

EPOCHS = int(os.environ.get("AUTOSHARD_EXAMPLE_EPOCHS", "6"))
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)

# Two related tasks on the same 32 features: A has 4 classes, B has 3, both
# read from the same hidden projections (what the base learns).
hidden = rng.normal(size=(32, 6)).astype(np.float32)
x_a = rng.normal(size=(2048, 32)).astype(np.float32)
y_a = np.argmax(np.tanh(x_a @ hidden)[:, :4], axis=1)
x_b = rng.normal(size=(256, 32)).astype(np.float32)
y_b = np.argmax(np.tanh(x_b @ hidden)[:, 2:5], axis=1)


def base_layers():
    """The base, with the same layer names in both models (its weights'
    paths: "base_1.kernel", ...)."""
    return [layers.Dense(64, activation="relu", name="base_1"),
            layers.BatchNormalization(name="base_bn"),
            layers.Dense(32, activation="relu", name="base_2")]


mesh = DeviceMesh((2, 2), ("data", "model"))
layout_map = LayoutMap(mesh)
layout_map["base_1.kernel"] = (None, "model")
layout_map["base_2.kernel"] = ("model", None)
set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))

# %% [markdown]
# ## 1. Train the base on task A, and save it

# %%
pretrained = keras.Sequential([keras.Input((32,)), *base_layers(),
                               layers.Dense(4, name="head_a")])
pretrained.compile(keras.optimizers.Adam(1e-2),
                   keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                   metrics=["accuracy"])
pretrained.fit(x_a, y_a, batch_size=64, epochs=EPOCHS, verbose=0)
print(f"task A accuracy: {pretrained.evaluate(x_a, y_a, verbose=0)[1]:.3f}")
path = os.path.join(tempfile.mkdtemp(prefix="autoshard-transfer-"), "pretrained.keras")
pretrained.save(path)

# %% [markdown]
# ## 2. A new head on the frozen base
# The base's weights come from the saved model by path; every base layer is
# frozen before compile.

# %%
saved = keras.models.load_model(path)
by_path = dict(zip([v.path for v in saved.weights], saved.get_weights()))
model = keras.Sequential([keras.Input((32,)), *base_layers(), layers.Dense(3, name="head_b")])
model.set_weights([by_path.get(v.path, w) for v, w in zip(model.weights, model.get_weights())])
for layer in model.layers[:-1]:
    layer.trainable = False
model.compile(keras.optimizers.Adam(1e-2),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
print("trainable:", [v.path for v in model.trainable_weights])
print("frozen:", [v.path for v in model.non_trainable_weights])
plan = autoshard.plan(model, mesh, batch=64, cluster="a100-80g")
print(f"optimizer state per device: {plan.memory_per_device['optimizer_state']} bytes "
      "(the head's only)")
base_before = model.get_weights()[:6]
history = model.fit(x_b, y_b, batch_size=64, epochs=EPOCHS, verbose=0)
frozen_kept = all(np.array_equal(a, b) for a, b in zip(base_before, model.get_weights()[:6]))
print(f"head trained: loss {history.history['loss'][0]:.4f} -> "
      f"{history.history['loss'][-1]:.4f}; base unchanged: {frozen_kept}")

# %% [markdown]
# ## 3. Unfreeze, recompile with a low learning rate, fine-tune

# %%
for layer in model.layers:
    layer.trainable = True
model.compile(keras.optimizers.Adam(1e-4),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(x_b, y_b, batch_size=64, epochs=max(1, EPOCHS // 2), verbose=0)
base_moved = not np.array_equal(base_before[0], model.get_weights()[0])
print(f"fine-tuned: loss {history.history['loss'][0]:.4f} -> {history.history['loss'][-1]:.4f}; "
      f"base trained: {base_moved}")
print(f"task B accuracy: {model.evaluate(x_b, y_b, verbose=0)[1]:.3f}")
set_distribution(None)
