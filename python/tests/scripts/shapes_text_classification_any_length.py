"""Text classification on sequences of any length, in the style of Keras's
"Bidirectional LSTM on IMDB" and "Text classification from scratch"
examples: keras.Input(shape=(None,)), integer 0/1 labels of shape (n,)
against a (n, 1) sigmoid output, reviews padded to a different length in
each round. Synthetic data: a review is positive when it holds more of the
"good" tokens (ids 2-9) than of the "bad" ones (ids 10-17)."""

import numpy as np

import autoshard.keras as keras

keras.utils.set_random_seed(42)
max_features = 200
rng = np.random.default_rng(0)


def reviews(n, length):
    tokens = rng.integers(18, max_features, size=(n, length))
    good = rng.random((n, length)) < 0.15
    bad = rng.random((n, length)) < 0.15
    tokens[good] = rng.integers(2, 10, size=good.sum())
    tokens[bad & ~good] = rng.integers(10, 18, size=(bad & ~good).sum())
    labels = (good.sum(1) > (bad & ~good).sum(1)).astype("int64")  # integer labels, shape (n,)
    return keras.utils.pad_sequences(tokens, maxlen=length), labels


inputs = keras.Input(shape=(None,), dtype="int32")
x = keras.layers.Embedding(max_features, 16)(inputs)
x = keras.layers.Conv1D(16, 3, padding="same", activation="relu")(x)
x = keras.layers.LSTM(16, return_sequences=True)(x)
x = keras.layers.GlobalMaxPooling1D()(x)
outputs = keras.layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)
model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy", metrics=["accuracy"])

# Two rounds of training at two padded lengths; 100 reviews in batches of
# 32 end each epoch with a short batch of 4.
for length in (24, 40):
    x_train, y_train = reviews(100, length)
    history = model.fit(x_train, y_train, batch_size=32, epochs=3, shuffle=False, verbose=0)
    for epoch, loss in enumerate(history.history["loss"]):
        print(f"length {length} epoch {epoch + 1} loss: {loss:.6f}")
x_test, y_test = reviews(40, 31)
print(f"test at length 31 loss: {model.evaluate(x_test, y_test, verbose=0)[0]:.6f}")
