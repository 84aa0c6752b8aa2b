# %% [markdown]
# # autoshard's quick start, as a notebook
#
# A notebook as a plain script: cells are `# %%` comments (VS Code, Jupytext
# and Spyder run them one by one; `python3 examples/quickstart_notebook.py`
# runs them all). Its rendered page, `quickstart_notebook.html` beside it, is
# made by `tools/render_notebook.py examples/quickstart_notebook.py`.
#
# It trains one Keras model on one device and on a 2x2 mesh of in-process
# devices (the README's quick start), then shows the plan AutoShard chose
# for the mesh and why.

# %%
import numpy as np

import autoshard
import autoshard.keras as keras

rng = np.random.default_rng(0)
x = rng.random((512, 20), dtype="float32")
y = (x[:, :10].sum(axis=1) > x[:, 10:].sum(axis=1)).astype("int32")  # 2 classes to learn


def make_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu", name="hidden"),
                              keras.layers.Dense(2, activation="softmax", name="out")], name="classifier")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


# %% [markdown]
# ## One device, then a 2x2 mesh
# `set_distribution` decides where the models built after it live: `None` is
# one device; `AutoShard(mesh)` lets the planner choose every layout on the
# mesh. The user code between is Keras's.

# %%
mesh = keras.distribution.DeviceMesh((2, 2), ("data", "model"))  # 4 devices: threads
curves = {}
for name, distribution in [("one device", None), ("2x2 mesh", keras.distribution.AutoShard(mesh))]:
    keras.distribution.set_distribution(distribution)
    history = make_model().fit(x, y, batch_size=32, epochs=3, verbose=0).history
    curves[name] = history["loss"]
    print(f"{name:>10}: loss {np.round(history['loss'], 6)}, accuracy {history['accuracy'][-1]:.3f}")
keras.distribution.set_distribution(None)
print("largest difference:", max(abs(a - b) for a, b in zip(*curves.values())))

# %% [markdown]
# ## The plan
# `autoshard.plan` runs the planner the mesh above ran: which device holds
# which block of each weight, the predicted step and memory, and the reasons.
# In a notebook the plan draws itself.

# %%
plan = autoshard.plan(make_model(), mesh, batch=32)
print(plan)

# %%
plan
