"""Keras's "Simple custom layer example: Antirectifier", on synthetic
MNIST-shaped data (the download replaced by arrays of the same shapes)."""

import numpy as np

import autoshard.keras as keras
from autoshard.keras import layers, ops


class Antirectifier(layers.Layer):
    def __init__(self, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.initializer = initializer

    def build(self, input_shape):
        output_dim = input_shape[-1]
        self.kernel = self.add_weight(
            shape=(output_dim * 2, output_dim),
            initializer=self.initializer,
            name="kernel",
            trainable=True,
        )

    def call(self, inputs):
        inputs -= ops.mean(inputs, axis=-1, keepdims=True)
        pos = ops.relu(inputs)
        neg = ops.relu(-inputs)
        concatenated = ops.concatenate([pos, neg], axis=-1)
        mixed = ops.matmul(concatenated, self.kernel)
        return mixed

    def get_config(self):
        base_config = super().get_config()
        return {**base_config, "initializer": self.initializer}


keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x_train = rng.random((600, 784)).astype("float32")
y_train = (x_train[:, :10] * np.arange(1, 11)).argmax(axis=1)

model = keras.Sequential(
    [
        keras.Input(shape=(784,)),
        layers.Dense(64, activation="relu"),
        Antirectifier(),
        layers.Dense(64, activation="relu"),
        Antirectifier(),
        layers.Dropout(0.1),
        layers.Dense(10),
    ]
)
model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.RMSprop(),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)
history = model.fit(x_train, y_train, batch_size=64, epochs=4, validation_split=0.15,
                    verbose=0)
print("losses:", history.history["loss"])
