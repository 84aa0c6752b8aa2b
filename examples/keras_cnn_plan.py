# %% [markdown]
# # A CNN planned on 4 devices, then trained
#
# A notebook as a plain script (cells are `# %%` comments: VS Code, Jupytext
# and Spyder run them one by one). It builds a small convolutional network
# with `autoshard.keras`, asks AutoShard how it would lay the network out
# over 4 in-process devices and why, and trains it under that plan on
# synthetic images.
#
#     python3 examples/keras_cnn_plan.py      # AUTOSHARD_EXAMPLE_STEPS=2 for a quick run

# %%
import os

import numpy as np

import autoshard
import autoshard.keras as keras

STEPS = int(os.environ.get("AUTOSHARD_EXAMPLE_STEPS", "30"))  # training steps
BATCH = 32
keras.utils.set_random_seed(0)

# %% [markdown]
# ## The model
# Two convolutions with pooling, then a classifier: 16x16 RGB images, 4 classes.

# %%
model = keras.Sequential([
    keras.Input((16, 16, 3)),
    keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
    keras.layers.MaxPooling2D(2),
    keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
    keras.layers.MaxPooling2D(2),
    keras.layers.Flatten(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(4),
], name="cnn")
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
model.summary()

# %% [markdown]
# ## The plan
# `autoshard.plan` runs the planner `autoshard plan` runs: with a number of
# devices it also chooses the mesh's shape. In a notebook the plan draws
# itself as a table; `plan.explanation` holds the planner's reasons.

# %%
plan = autoshard.plan(model, 4, batch=BATCH)
print(plan)
print(f"\npredicted step: {plan.step_time * 1e3:.3f} ms, "
      f"{plan.memory_per_device['total'] / 2**20:.2f} MiB per device")

# %% [markdown]
# ## Training under the plan
# `autoshard.TensorParallel` plans the same way and compiles the model under
# the plan; `fit` then runs every step sharded over the 4 devices.

# %%
rng = np.random.default_rng(0)
n = STEPS * BATCH
labels = rng.integers(0, 4, size=n)
# The class is the quadrant that is brighter: learnable by the convolutions.
images = rng.normal(size=(n, 2, 8, 2, 8, 3)).astype(np.float32)
images[np.arange(n), labels // 2, :, labels % 2] += 1.0
images = images.reshape(n, 16, 16, 3)

tp = autoshard.TensorParallel(model, world_size=4, batch_size=BATCH)
tp.compile(optimizer=keras.optimizers.Adam(1e-3),
           loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
           metrics=["accuracy"])
print("trained on mesh", dict(zip(tp.device_mesh.axis_names, tp.device_mesh.shape)))
history = tp.fit(images, labels, batch_size=BATCH, epochs=3, verbose=0)
for epoch, (loss, acc) in enumerate(zip(history.history["loss"], history.history["accuracy"])):
    print(f"epoch {epoch + 1}: loss {loss:.4f}, accuracy {acc:.3f}")
