"""A subclassed keras.Model in the style of Keras's "Making new layers and
models via subclassing": layers made in __init__, a residual call, a custom
layer with weights of its own, trained with compile/fit."""

import numpy as np

import autoshard.keras as keras
from autoshard.keras import layers, ops


class Linear(layers.Layer):
    def __init__(self, units=32, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(
            shape=(input_shape[-1], self.units),
            initializer="random_normal",
            trainable=True,
        )
        self.b = self.add_weight(shape=(self.units,), initializer="zeros", trainable=True)

    def call(self, inputs):
        return ops.matmul(inputs, self.w) + self.b


class ResidualMLP(keras.Model):
    def __init__(self, width=64, depth=3, num_classes=10, **kwargs):
        super().__init__(**kwargs)
        self.stem = Linear(width)
        self.blocks = [layers.Dense(width, activation="relu") for _ in range(depth)]
        self.norm = layers.LayerNormalization()
        self.classifier = layers.Dense(num_classes)

    def call(self, inputs):
        x = ops.relu(self.stem(inputs))
        for block in self.blocks:
            x = x + block(x)
        return self.classifier(self.norm(x))


keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x_train = rng.normal(size=(512, 32)).astype("float32")
y_train = (x_train[:, :10] ** 2).argmax(axis=1)

model = ResidualMLP()
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
history = model.fit(x_train, y_train, batch_size=64, epochs=4, verbose=0)
print("losses:", history.history["loss"])
print("evaluate:", model.evaluate(x_train, y_train, verbose=0))
print("predictions:", model.predict(x_train[:2], verbose=0).shape)
