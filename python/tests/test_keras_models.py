"""autoshard.keras as a Keras 3 user drives it: Sequential, functional models,
compile/fit/evaluate/predict, weights, callbacks and errors."""

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers


def digits_like(n=512, features=784, classes=10, seed=0):
    """Synthetic MNIST-shaped data a small MLP can learn: labels from a linear teacher."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    teacher = rng.normal(size=(features, classes)).astype(np.float32)
    return x, np.argmax(x @ teacher, axis=1).astype(np.int64)


def mlp(name=None):
    return keras.Sequential([
        keras.Input(shape=(784,)),
        layers.Dense(64, activation="relu"),
        layers.Dense(10, activation="softmax"),
    ], name=name)


def test_import_from_any_directory(tmp_path):
    out = subprocess.run([sys.executable, "-c", "import autoshard, autoshard.keras; "
                          "print(autoshard.keras.layers.Dense.__name__)"],
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Dense"


def test_quick_start_sequential_learns():
    # The Keras work's quick start: a custom Sequential on 784 inputs.
    x, y = digits_like()
    model = keras.Sequential([
        layers.Dense(128, activation="relu", input_shape=(784,)),
        layers.Dropout(0.1),
        layers.Dense(64, activation="relu"),
        layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=6, verbose=0)
    assert set(history.history) == {"loss", "accuracy"}
    assert len(history.history["loss"]) == 6
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    assert history.history["accuracy"][-1] > 0.8
    loss, accuracy = model.evaluate(x, y, verbose=0)
    assert accuracy > 0.8 and loss < history.history["loss"][0]
    predictions = model.predict(x[:7], verbose=0)
    assert predictions.shape == (7, 10) and predictions.dtype == np.float32
    np.testing.assert_allclose(predictions.sum(axis=1), 1.0, rtol=1e-5)


def test_sequential_builds_from_the_first_batch():
    x, y = digits_like(64, features=12)
    model = keras.Sequential([layers.Dense(8, activation="tanh"), layers.Dense(3)])
    model.compile(keras.optimizers.SGD(learning_rate=0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y % 3, epochs=1, verbose=0)
    assert [w.shape for w in model.get_weights()] == [(12, 8), (8,), (8, 3), (3,)]
    assert model.count_params() == 12 * 8 + 8 + 8 * 3 + 3


def test_functional_model_of_two_inputs_and_two_outputs():
    a = keras.Input(shape=(6,), name="a")
    b = keras.Input(shape=(4,), name="b")
    h = layers.Concatenate()([layers.Dense(8, activation="relu")(a), b])
    cls = layers.Dense(3, name="cls")(h)
    reg = layers.Dense(1, name="reg")(layers.Add()([h, h]))
    model = keras.Model(inputs=[a, b], outputs=[cls, reg])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss={"cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        "reg": "mse"},
                  loss_weights={"cls": 1.0, "reg": 0.5})
    rng = np.random.default_rng(3)
    xa, xb = rng.normal(size=(40, 6)), rng.normal(size=(40, 4))
    y_cls, y_reg = rng.integers(0, 3, size=40), rng.normal(size=(40, 1))
    history = model.fit([xa, xb], [y_cls, y_reg], batch_size=8, epochs=3, verbose=0,
                        shuffle=False)
    assert history.history["loss"][-1] < history.history["loss"][0]
    p_cls, p_reg = model.predict({"a": xa, "b": xb}, verbose=0)
    assert p_cls.shape == (40, 3) and p_reg.shape == (40, 1)


def test_get_weights_in_keras_order_and_set_weights_round_trip():
    inputs = keras.Input(shape=(8, 8, 3))
    x = layers.Conv2D(4, 3, activation="relu")(inputs)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(5)(x)
    model = keras.Model(inputs, outputs)
    shapes = [w.shape for w in model.get_weights()]
    assert shapes == [(3, 3, 3, 4), (4,), (3 * 3 * 4, 5), (5,)]
    rng = np.random.default_rng(7)
    new = [rng.normal(size=s).astype(np.float32) for s in shapes]
    model.set_weights(new)
    for got, want in zip(model.get_weights(), new):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="shape"):
        model.set_weights([np.zeros((3, 3, 3, 5))] + new[1:])
    with pytest.raises(ValueError, match="4 weights"):
        model.set_weights(new[:2])


def test_train_on_batch_returns_that_batch_loss_and_fit_the_mean():
    x, y = digits_like(48)
    first = mlp()
    first.compile("sgd", "sparse_categorical_crossentropy")
    second = mlp()
    second.compile("sgd", "sparse_categorical_crossentropy")
    second.set_weights(first.get_weights())
    before = first.evaluate(x[:16], y[:16], batch_size=16, verbose=0)
    losses = [first.train_on_batch(x[i:i + 16], y[i:i + 16], return_dict=True)["loss"]
              for i in range(0, 48, 16)]
    assert losses[0] == pytest.approx(before, rel=1e-6)
    history = second.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert history.history["loss"][0] == pytest.approx(np.mean(losses), rel=1e-12)
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_validation_data_and_split():
    x, y = digits_like(80)
    model = mlp()
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    h = model.fit(x, y, epochs=2, batch_size=16, validation_data=(x[:20], y[:20]), verbose=0)
    assert set(h.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    h = model.fit(x, y, epochs=1, batch_size=16, validation_split=0.25, verbose=0)
    assert len(h.history["val_loss"]) == 1


def test_callbacks_fire_in_keras_order_and_can_stop():
    x, y = digits_like(32)
    events = []

    class Recorder(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            events.append("train_begin")

        def on_epoch_begin(self, epoch, logs=None):
            events.append(f"epoch_begin {epoch}")

        def on_train_batch_end(self, batch, logs=None):
            events.append(f"batch_end {batch}")
            assert "loss" in logs

        def on_epoch_end(self, epoch, logs=None):
            events.append(f"epoch_end {epoch}")
            if epoch == 1:
                self.model.stop_training = True

        def on_train_end(self, logs=None):
            events.append("train_end")

    model = mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    h = model.fit(x, y, batch_size=16, epochs=5, callbacks=[Recorder()], verbose=0)
    assert events == ["train_begin", "epoch_begin 0", "batch_end 0", "batch_end 1", "epoch_end 0",
                      "epoch_begin 1", "batch_end 0", "batch_end 1", "epoch_end 1", "train_end"]
    assert len(h.history["loss"]) == 2


def test_a_callback_raising_stops_fit_with_its_exception():
    x, y = digits_like(32)

    class Boom(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise RuntimeError("boom at batch %d" % batch)

    model = mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    with pytest.raises(RuntimeError, match="boom at batch 0"):
        model.fit(x, y, batch_size=16, epochs=2, callbacks=[Boom()], verbose=0, shuffle=False)


def test_errors_raise_value_error():
    model = mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError):
        model.predict(np.zeros((4, 783), np.float32))
    with pytest.raises(ValueError):
        model.fit(np.zeros((4, 784), np.float32), np.zeros(5, np.int64), verbose=0)
    with pytest.raises(ValueError, match="optimizer"):
        model.compile("nadamax", "mse")
    with pytest.raises(ValueError):
        layers.Dense(3, activation="swoosh")
    with pytest.raises(ValueError):
        keras.Sequential([layers.Dense(3)]).get_weights()


def test_the_gil_is_released_while_the_engine_runs():
    x, y = digits_like(2048)
    model = mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    t = threading.Thread(target=tick)
    t.start()
    try:
        model.fit(x, y, batch_size=256, epochs=3, verbose=0, shuffle=False)
    finally:
        done.set()
        t.join()
    assert len(ticks) > 5


def test_layers_of_the_first_slice_build_and_train():
    ids = keras.Input(shape=(5,), dtype="int32")
    h = layers.Embedding(20, 8)(ids)
    h = layers.LSTM(6, return_sequences=True)(h)
    h = layers.BatchNormalization()(h)
    h = layers.Conv1D(4, 2, padding="same")(h)
    h = layers.GlobalAveragePooling1D()(h)
    out = layers.Dense(2, activation="softmax")(layers.Activation("tanh")(h))
    model = keras.Model(ids, out)
    model.compile(keras.optimizers.RMSprop(), "sparse_categorical_crossentropy",
                  metrics=[keras.metrics.SparseCategoricalAccuracy()])
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, size=(16, 5))
    h = model.fit(x, x[:, 0] % 2, epochs=2, batch_size=8, verbose=0)
    assert "sparse_categorical_accuracy" in h.history
    model.summary(print_fn=lambda s: None)


def test_ctrl_c_stops_fit_at_a_step_boundary_with_keyboard_interrupt():
    x, y = digits_like(256)
    model = mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    steps = []

    class Count(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            steps.append(batch)

    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            model.fit(x, y, batch_size=8, epochs=100000, callbacks=[Count()], verbose=0,
                      shuffle=False)
    finally:
        timer.cancel()
    assert steps  # it had started; the model is still usable
    assert model.predict(x[:2], verbose=0).shape == (2, 10)


def bert_classifier():
    # The Keras work's second quick start, small: a BERT-style encoder block
    # over token ids and a classifier head.
    ids = keras.Input(shape=(8,), dtype="int32", name="token_ids")
    h = layers.Embedding(16, 32)(ids)
    a = layers.MultiHeadAttention(num_heads=4, key_dim=8)(h)
    h = layers.LayerNormalization()(layers.Add()([h, a]))
    f = layers.Dense(32)(layers.Dense(64, activation="gelu")(h))
    h = layers.LayerNormalization()(layers.Add()([h, f]))
    out = layers.Dense(2, activation="softmax")(layers.GlobalAveragePooling1D()(h))
    model = keras.Model(ids, out)
    model.compile(keras.optimizers.Adam(learning_rate=3e-3), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def token_task(n=256):
    # Label 1 when token 1 occurs in the sequence.
    rng = np.random.default_rng(0)
    x = rng.integers(2, 16, size=(n, 8))
    y = rng.integers(0, 2, size=n)
    x[y == 1, rng.integers(0, 8, size=(y == 1).sum())] = 1
    return x, y


@pytest.mark.parametrize("sharded", [False, True])
def test_bert_classifier_quick_start_learns(sharded):
    if sharded:
        mesh = keras.distribution.DeviceMesh((2, 2), ("data", "model"))
        layout_map = keras.distribution.LayoutMap(mesh)
        layout_map[r"(query|key|value)\.kernel"] = (None, "model", None)
        layout_map[r"attention_output\.kernel"] = ("model", None, None)
        keras.distribution.set_distribution(
            keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="data"))
    x, y = token_task()
    history = bert_classifier().fit(x, y, batch_size=32, epochs=6, verbose=0)
    assert list(history.history) == ["loss", "accuracy"]
    assert history.history["accuracy"][-1] > 0.95


def test_a_stock_layers_weights_are_its_own_through_the_model():
    # Keras's layer.weights / get_weights / set_weights on stock layers: the
    # layer's own variables, kernel then bias, read and written in the model.
    dense = keras.layers.Dense(3, name="d")
    assert dense.get_weights() == []  # not in a built model yet
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, name="first"), dense])
    kernel, bias = dense.get_weights()
    np.testing.assert_array_equal(kernel, model.get_weights()[2])
    assert [v.path for v in dense.weights] == ["d/kernel", "d/bias"]
    dense.set_weights([np.ones((5, 3), np.float32), np.full(3, 2.0, np.float32)])
    x = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    first_kernel, first_bias = model.layers[0].get_weights()
    want = (x @ first_kernel + first_bias) @ np.ones((5, 3)) + 2.0
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5)
