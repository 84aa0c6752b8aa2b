"""Keras's distribution guide ("Distributed training with Keras 3"): a model
parallel MLP whose layout map names Keras 3 variable paths, d1/kernel and
d2/kernel, trained on MNIST-shaped synthetic data fed by a
keras.utils.PyDataset."""

import numpy as np

import autoshard.keras as keras

keras.utils.set_random_seed(3)
devices = keras.distribution.list_devices()[:2]
mesh = keras.distribution.DeviceMesh(shape=(1, 2), axis_names=["data", "model"],
                                     devices=devices)
layout_map = keras.distribution.LayoutMap(mesh)
layout_map["d1/kernel"] = (None, "model")
layout_map["d1/bias"] = ("model",)
layout_map["d2/kernel"] = ("model", None)
layout_map["d2/output"] = ("data", None)  # a layer output's layout, as the guide sets one
model_parallel = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="data")
keras.distribution.set_distribution(model_parallel)

inputs = keras.Input(shape=(28, 28, 1))
y = keras.layers.Flatten()(inputs)
y = keras.layers.Dense(units=64, activation="relu", name="d1")(y)
y = keras.layers.Dropout(0.2, seed=1)(y)
y = keras.layers.Dense(units=10, activation="softmax", name="d2")(y)
model = keras.Model(inputs=inputs, outputs=y)
model.compile(loss="sparse_categorical_crossentropy", optimizer=keras.optimizers.Adam(1e-3))


class Digits(keras.utils.PyDataset):
    """Blobs whose brightness pattern gives the digit (uint8 pixels)."""

    def __init__(self, batches, batch_size=32, **kwargs):
        super().__init__(**kwargs)
        rng = np.random.default_rng(0)
        self.labels = rng.integers(0, 10, size=batches * batch_size).astype("uint8")
        images = rng.integers(0, 60, size=(len(self.labels), 28, 28, 1))
        for i, label in enumerate(self.labels):
            images[i, 2 * label:2 * label + 6, :, 0] += 150
        self.images = images.astype("uint8")
        self.batch_size = batch_size

    def __len__(self):
        return len(self.labels) // self.batch_size

    def __getitem__(self, i):
        part = slice(i * self.batch_size, (i + 1) * self.batch_size)
        return self.images[part].astype("float32") / 255.0, self.labels[part]


history = model.fit(Digits(8), epochs=3, verbose=0)
for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch + 1} loss: {loss:.6f}")
keras.distribution.set_distribution(None)
