"""The Keras tensor-parallel work's two quick starts (its README: "Using
Custom Keras Models" and "Using KerasNLP Models"), written for
``import autoshard.keras as keras``: the same calls, with data a small
learnable synthetic task so that each runs in seconds and must learn."""

from contextlib import nullcontext

import numpy as np
import pytest

import autoshard
import autoshard.keras as keras


def digits_like(n=512, seed=0):
    """784 features, 10 classes: a class prototype plus noise (MNIST's shapes)."""
    rng = np.random.default_rng(seed)
    prototypes = rng.normal(size=(10, 784)).astype("float32")
    y_train = rng.integers(0, 10, size=n)
    x_train = prototypes[y_train] + rng.normal(scale=2.0, size=(n, 784)).astype("float32")
    return x_train.astype("float32"), y_train.astype("int32")


def custom_sequential():
    # The README's custom model, layer for layer.
    return keras.Sequential([
        keras.layers.Dense(1000, activation="relu", input_shape=(784,)),
        keras.layers.Dense(500, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])


@pytest.mark.parametrize("wrapped", [False, True])
def test_custom_sequential_quick_start_learns(wrapped):
    keras.utils.set_random_seed(0)
    x_train, y_train = digits_like()
    model = custom_sequential()
    # "Wrap with tensor parallelism": autoshard.TensorParallel, or the model itself.
    tp_model = autoshard.TensorParallel(model, world_size=2) if wrapped else model
    tp_model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    history = tp_model.fit(x_train, y_train, epochs=5, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0]
    accuracy = np.mean(np.argmax(tp_model.predict(x_train, verbose=0), axis=1) == y_train)
    assert accuracy > 0.5  # chance: 0.1


def bert_like_classifier(vocabulary=64, length=16, width=32):
    """A BERT-style encoder over token_ids and segment_ids (BertBackbone's
    inputs) with a two-class head."""
    token_ids = keras.Input(shape=(length,), dtype="int32", name="token_ids")
    segment_ids = keras.Input(shape=(length,), dtype="int32", name="segment_ids")
    h = keras.layers.Add()([keras.layers.Embedding(vocabulary, width)(token_ids),
                            keras.layers.Embedding(2, width)(segment_ids)])
    h = keras.layers.LayerNormalization()(h)
    attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16)(h)
    h = keras.layers.LayerNormalization()(keras.layers.Add()([h, attention]))
    ffn = keras.layers.Dense(width)(keras.layers.Dense(64, activation="gelu")(h))
    h = keras.layers.LayerNormalization()(keras.layers.Add()([h, ffn]))
    logits = keras.layers.Dense(2, activation="softmax")(keras.layers.GlobalAveragePooling1D()(h))
    return keras.Model({"token_ids": token_ids, "segment_ids": segment_ids}, logits)


def token_task(n=256, vocabulary=64, length=16, seed=0):
    # Label 1 when token 1 occurs in the sequence; segment ids all 0 as in
    # the README's inputs.
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, vocabulary, size=(n, length)).astype("int32")
    y = rng.integers(0, 2, size=n).astype("int32")
    ids[y == 1, rng.integers(0, length, size=int((y == 1).sum()))] = 1
    return {"token_ids": ids, "segment_ids": np.zeros((n, length), "int32")}, y


@pytest.mark.parametrize("sharded", [False, True])
def test_bert_classifier_quick_start_learns(sharded):
    keras.utils.set_random_seed(1)
    inputs, y = token_task()
    # autoshard.TensorParallel takes models of one input; this one has two
    # (token_ids, segment_ids), so it is sharded by AutoShard set as the
    # distribution, which is what the wrapper does.
    mesh = keras.distribution.DeviceMesh((2, 2), ("data", "model"))
    scope = keras.distribution.AutoShard(mesh=mesh).scope() if sharded else nullcontext()
    with scope:  # a distribution applies to the models compiled under it
        tp_bert = bert_like_classifier()
        tp_bert.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                        metrics=["accuracy"])
    history = tp_bert.fit(x=inputs, y=y, epochs=8, verbose=0)
    assert list(history.history) == ["loss", "accuracy"]
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert history.history["accuracy"][-1] > 0.8  # chance: 0.5
    held_out, y_held = token_task(n=64, seed=1)
    _, accuracy = tp_bert.evaluate(held_out, y_held, verbose=0)
    assert accuracy > 0.7


def test_quick_start_model_saves_and_reloads(tmp_path):
    keras.utils.set_random_seed(0)
    x_train, y_train = digits_like(n=128)
    model = custom_sequential()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=1, verbose=0)
    model.save(tmp_path / "quick_start.keras")
    again = keras.models.load_model(tmp_path / "quick_start.keras")
    assert np.array_equal(again.predict(x_train[:16]), model.predict(x_train[:16]))
    # It goes on training from the file's compile config.
    history = again.fit(x_train, y_train, epochs=2, verbose=0)
    assert set(history.history) == {"loss", "accuracy"}
