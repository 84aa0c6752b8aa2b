"""keras.callbacks with Keras 3's rules: hook order, each built-in callback's
effect, train_on_batch with metrics and the progress display."""

import csv
import os

import numpy as np
import pytest

import autoshard.keras as keras

_WEIGHTS = {}


def _model(lr=0.1, optimizer=None, metrics=("accuracy",)):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer or keras.optimizers.SGD(lr), "sparse_categorical_crossentropy",
                  metrics=list(metrics))
    # The same initial weights for every model of a test (names differ),
    # whatever other tests ran before (the engine's initializers draw from
    # one generator for the whole process).
    rng = np.random.default_rng(7)
    model.set_weights(_WEIGHTS.setdefault("w", [
        rng.uniform(-0.8, 0.8, size=w.shape).astype("float32") if w.ndim > 1 else
        np.zeros_like(w) for w in model.get_weights()]))
    return model


def _data(n=16):
    x = np.random.default_rng(0).normal(size=(n, 4)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.5).astype("int32")


def _same(a, b):
    return all(np.array_equal(u, v) for u, v in zip(a, b))


class Recorder(keras.callbacks.Callback):
    HOOKS = ["on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
             "on_train_batch_begin", "on_train_batch_end", "on_test_begin", "on_test_end",
             "on_test_batch_begin", "on_test_batch_end", "on_predict_begin", "on_predict_end",
             "on_predict_batch_begin", "on_predict_batch_end"]

    def __init__(self):
        super().__init__()
        self.trace = []
        for name in self.HOOKS:
            setattr(self, name, self._recording(name))

    def _recording(self, name):
        def hook(*args, logs=None):
            index = [a for a in args if isinstance(a, int)]
            self.trace.append(name[3:] + (str(index[0]) if index else ""))
        return hook


class Traced(keras.callbacks.Callback):
    """The hooks as methods of a subclass (wants_batches looks at the class)."""

    def __init__(self):
        super().__init__()
        self.trace = []

    def on_train_begin(self, logs=None):
        self.trace.append("train_begin")

    def on_train_end(self, logs=None):
        self.trace.append("train_end")

    def on_epoch_begin(self, epoch, logs=None):
        self.trace.append(f"epoch_begin{epoch}")

    def on_epoch_end(self, epoch, logs=None):
        self.trace.append(f"epoch_end{epoch}:" + ",".join(logs))

    def on_train_batch_begin(self, batch, logs=None):
        self.trace.append(f"train_batch_begin{batch}")

    def on_train_batch_end(self, batch, logs=None):
        self.trace.append(f"train_batch_end{batch}")

    def on_test_begin(self, logs=None):
        self.trace.append("test_begin")

    def on_test_end(self, logs=None):
        self.trace.append("test_end")

    def on_test_batch_begin(self, batch, logs=None):
        self.trace.append(f"test_batch_begin{batch}")

    def on_test_batch_end(self, batch, logs=None):
        self.trace.append(f"test_batch_end{batch}")

    def on_predict_begin(self, logs=None):
        self.trace.append("predict_begin")

    def on_predict_end(self, logs=None):
        self.trace.append("predict_end")

    def on_predict_batch_begin(self, batch, logs=None):
        self.trace.append(f"predict_batch_begin{batch}")

    def on_predict_batch_end(self, batch, logs=None):
        self.trace.append(f"predict_batch_end{batch}:{logs['outputs'].shape[0]}")


def test_hooks_fire_in_keras_order():
    x, y = _data(16)
    model = _model()
    t = Traced()
    model.fit(x, y, batch_size=8, epochs=2, validation_data=(x[:12], y[:12]),
              validation_batch_size=8, callbacks=[t], verbose=0, shuffle=False)
    epoch = lambda e: [f"epoch_begin{e}", "train_batch_begin0", "train_batch_end0",
                       "train_batch_begin1", "train_batch_end1", "test_begin",
                       "test_batch_begin0", "test_batch_end0", "test_batch_begin1",
                       "test_batch_end1", "test_end",
                       f"epoch_end{e}:loss,accuracy,val_loss,val_accuracy"]
    assert t.trace == ["train_begin"] + epoch(0) + epoch(1) + ["train_end"]
    t.trace.clear()
    model.evaluate(x, y, batch_size=10, callbacks=[t], verbose=0)
    assert t.trace == ["test_begin", "test_batch_begin0", "test_batch_end0",
                       "test_batch_begin1", "test_batch_end1", "test_end"]
    t.trace.clear()
    p = model.predict(x, batch_size=10, callbacks=[t], verbose=0)
    assert t.trace == ["predict_begin", "predict_batch_begin0", "predict_batch_end0:10",
                       "predict_batch_begin1", "predict_batch_end1:6", "predict_end"]
    assert np.array_equal(p, model.predict(x, batch_size=10))


def test_validation_by_batches_gives_the_engines_values():
    x, y = _data(20)
    plain, traced = _model(), _model()
    h1 = plain.fit(x, y, batch_size=8, epochs=2, validation_data=(x[:13], y[:13]),
                   validation_batch_size=5, verbose=0, shuffle=False)
    h2 = traced.fit(x, y, batch_size=8, epochs=2, validation_data=(x[:13], y[:13]),
                    validation_batch_size=5, verbose=0, shuffle=False, callbacks=[Traced()])
    for k in ("val_loss", "val_accuracy"):
        assert np.allclose(h1.history[k], h2.history[k], rtol=1e-12, atol=0)


def test_a_callback_raising_in_any_hook_stops_fit_with_it():
    x, y = _data()
    for hook in ("on_train_batch_begin", "on_test_end", "on_train_end"):
        class Boom(keras.callbacks.Callback):
            pass

        def boom(self, *args, **kwargs):
            raise KeyError("boom in " + hook)

        setattr(Boom, hook, boom)
        with pytest.raises(KeyError, match=hook):
            _model().fit(x, y, batch_size=8, epochs=2, validation_data=(x, y),
                         callbacks=[Boom()], verbose=0)


def test_stop_training_ends_fit_after_the_batch():
    x, y = _data(32)
    ends = []

    class StopAtBegin(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 1:
                self.model.stop_training = True  # Keras: this batch still runs

        def on_train_batch_end(self, batch, logs=None):
            ends.append(batch)

        def on_epoch_end(self, epoch, logs=None):
            ends.append(f"epoch_end{epoch}")

    h = _model().fit(x, y, epochs=3, batch_size=8, verbose=0, shuffle=False,
                     callbacks=[StopAtBegin()])
    assert ends == [0, 1, "epoch_end0"] and len(h.history["loss"]) == 1


def test_model_checkpoint(tmp_path):
    x, y = _data(32)
    model = _model(0.5)
    every = keras.callbacks.ModelCheckpoint(str(tmp_path / "m-{epoch:02d}-{loss:.3f}.keras"),
                                            monitor="loss")
    best = keras.callbacks.ModelCheckpoint(tmp_path / "best.keras", monitor="val_accuracy",
                                           save_best_only=True, mode="max")
    weights = keras.callbacks.ModelCheckpoint(tmp_path / "w.weights.h5", save_weights_only=True)
    seen = []
    keep = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda e, logs: seen.append((model.get_weights(), logs["val_accuracy"])))
    h = model.fit(x, y, batch_size=8, epochs=3, validation_data=(x, y), shuffle=False,
                  callbacks=[keep, every, best, weights], verbose=0)
    names = sorted(f for f in os.listdir(tmp_path) if f.startswith("m-"))
    assert names == [f"m-{e + 1:02d}-{loss:.3f}.keras" for e, loss in
                     enumerate(h.history["loss"])]
    # Each epoch's file holds that epoch's weights.
    for name, (w, _) in zip(names, seen):
        assert _same(keras.models.load_model(tmp_path / name).get_weights(), w)
    # save_best_only: the first epoch of the highest val_accuracy.
    accs = [a for _, a in seen]
    assert _same(keras.models.load_model(tmp_path / "best.keras").get_weights(),
                 seen[int(np.argmax(accs))][0])
    other = _model()
    other.load_weights(tmp_path / "w.weights.h5")
    assert _same(other.get_weights(), model.get_weights())
    with pytest.raises(ValueError, match="weights.h5"):
        keras.callbacks.ModelCheckpoint(tmp_path / "w.h5", save_weights_only=True)
    with pytest.raises(ValueError, match=".keras"):
        keras.callbacks.ModelCheckpoint(tmp_path / "m.pt")


def test_early_stopping():
    x, y = _data()
    # A learning rate of 1e-30: the loss never improves after the first epoch.
    h = _model(1e-30).fit(x, y, epochs=10, batch_size=8, verbose=0, shuffle=False,
                        callbacks=[keras.callbacks.EarlyStopping(monitor="loss", patience=1)])
    assert len(h.history["loss"]) == 2
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=2, start_from_epoch=3)
    h = _model(1e-30).fit(x, y, epochs=10, batch_size=8, verbose=0, shuffle=False,
                        callbacks=[stop])
    assert len(h.history["loss"]) == 6 and stop.stopped_epoch == 5
    # restore_best_weights: "max" of a falling loss makes epoch 0 the best.
    model, seen = _model(0.5), []
    keep = keras.callbacks.LambdaCallback(on_epoch_end=lambda e, l: seen.append(
        model.get_weights()))
    stop = keras.callbacks.EarlyStopping(monitor="loss", mode="max", patience=2,
                                         restore_best_weights=True)
    h = model.fit(x, y, epochs=10, batch_size=8, verbose=0, shuffle=False,
                  callbacks=[keep, stop])
    assert len(h.history["loss"]) == 3 and h.history["loss"][2] < h.history["loss"][0]
    assert _same(model.get_weights(), seen[0])
    with pytest.raises(ValueError, match="maximized or minimized"):
        _model().fit(x, y, epochs=1, verbose=0,
                     callbacks=[keras.callbacks.EarlyStopping(monitor="mystery")])


def test_csv_logger(tmp_path):
    x, y = _data()
    path = tmp_path / "log.csv"
    model = _model()
    h = model.fit(x, y, epochs=3, batch_size=8, verbose=0,
                  callbacks=[keras.callbacks.CSVLogger(path)])
    rows = list(csv.reader(open(path)))
    assert rows[0] == ["epoch", "accuracy", "loss"]
    assert [int(r[0]) for r in rows[1:]] == [0, 1, 2]
    assert [float(r[2]) for r in rows[1:]] == pytest.approx(h.history["loss"], rel=1e-12)
    model.fit(x, y, epochs=2, batch_size=8, verbose=0,
              callbacks=[keras.callbacks.CSVLogger(path, separator=";", append=True)])
    lines = open(path).read().splitlines()
    assert len(lines) == 6 and lines[4].startswith("0;")  # no second header


def test_learning_rate_scheduler_equals_setting_the_rate():
    x, y = _data(32)
    direct = _model(0.1)
    for epoch, lr in enumerate([0.1, 0.4, 0.05]):
        direct.optimizer.learning_rate = lr
        direct.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False)
    scheduled = _model(0.1)
    rates = {0: 0.1, 1: 0.4, 2: 0.05}
    h = scheduled.fit(x, y, epochs=3, batch_size=8, verbose=0, shuffle=False,
                      callbacks=[keras.callbacks.LearningRateScheduler(lambda e: rates[e])])
    assert _same(direct.get_weights(), scheduled.get_weights())
    assert h.history["learning_rate"] == [0.1, 0.4, 0.05]
    assert scheduled.optimizer.learning_rate == pytest.approx(0.05)
    # The two-argument form gets the current rate.
    model = _model(0.2)
    model.fit(x, y, epochs=2, verbose=0, callbacks=[
        keras.callbacks.LearningRateScheduler(lambda e, lr: lr * 0.5)])
    assert model.optimizer.learning_rate == pytest.approx(0.05)
    with pytest.raises(ValueError, match="should be a float"):
        model.fit(x, y, epochs=1, verbose=0,
                  callbacks=[keras.callbacks.LearningRateScheduler(lambda e: 1)])


def test_terminate_on_nan(capsys):
    x, _ = _data(24)
    y = x.sum(axis=1, keepdims=True)

    def regression():
        # NaN in the data is refused; a step of 1e30 makes the second
        # batch's loss infinite.
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(1e30), "mse")
        return model

    seen = []
    count = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(b))
    h = regression().fit(x, y, epochs=3, batch_size=8, verbose=0, shuffle=False,
                         callbacks=[count, keras.callbacks.TerminateOnNaN()])
    assert seen == [0, 1] and len(h.history["loss"]) == 1
    assert "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="NaN or Inf loss"):
        regression().fit(x, y, epochs=3, batch_size=8, verbose=0, shuffle=False,
                         callbacks=[keras.callbacks.TerminateOnNaN(raise_error=True)])


def test_reduce_lr_on_plateau():
    x, y = _data()
    model = _model(1e-12)
    h = model.fit(x, y, epochs=3, batch_size=8, verbose=0, shuffle=False, callbacks=[
        keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1)])
    assert h.history["learning_rate"] == pytest.approx([1e-12, 5e-13, 2.5e-13])
    with pytest.raises(ValueError, match="factor"):
        keras.callbacks.ReduceLROnPlateau(factor=2.0)


def test_train_on_batch_with_metrics():
    x, y = _data(8)
    model = _model()
    before = model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)
    logs = model.train_on_batch(x, y, return_dict=True)
    assert list(logs) == ["loss", "accuracy"]
    assert logs["loss"] == pytest.approx(before["loss"], rel=1e-6)
    assert logs["accuracy"] == before["accuracy"]
    assert isinstance(model.train_on_batch(x, y), list)
    assert model.test_on_batch(x, y, return_dict=True) == model.evaluate(
        x, y, batch_size=8, return_dict=True, verbose=0)
    plain = _model(metrics=())
    assert isinstance(plain.train_on_batch(x, y), float)


def test_progress_bar(capfd):
    x, y = _data(16)
    model = _model()
    model.fit(x, y, epochs=2, batch_size=8, validation_data=(x, y), verbose=1)
    err = capfd.readouterr().err
    assert "Epoch 1/2" in err and "Epoch 2/2" in err
    assert "2/2 \u2501\u2501\u2501\u2501" in err
    assert " - accuracy: " in err and " - loss: " in err and " - val_loss: " in err
    model.fit(x, y, epochs=1, batch_size=8, verbose=2)
    err = capfd.readouterr().err
    assert "2/2 - " in err and "\u2501" not in err
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    model.evaluate(x, y, verbose=0)
    assert capfd.readouterr().err == ""
    model.evaluate(x, y, batch_size=8, verbose=1)
    assert "2/2 \u2501" in capfd.readouterr().err


def test_batch_hooks_run_only_where_defined_in_list_order():
    """CallbackList calls the batch hooks of the callbacks that define them
    (a method, Keras's on_batch_* names, or LambdaCallback's functions), in
    the list's order, and skips those that only inherit them."""
    x, y = _data(16)
    calls = []

    class Legacy(keras.callbacks.Callback):
        def on_batch_begin(self, batch, logs=None):
            calls.append(f"legacy_begin{batch}")

        def on_batch_end(self, batch, logs=None):
            calls.append(f"legacy_end{batch}")

    plain = keras.callbacks.Callback()  # the base class's hooks only
    lam = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: calls.append(f"lambda_end{batch}:" + ",".join(logs)))
    hooks = keras.callbacks.CallbackList([Legacy(), plain, lam], model=_model())
    assert hooks._batch_begin_hooks == hooks.callbacks[:1]
    assert hooks._batch_end_hooks == [hooks.callbacks[0], lam]
    _model().fit(x, y, batch_size=8, epochs=1, callbacks=[Legacy(), plain, lam], verbose=0,
                 shuffle=False)
    assert calls == ["legacy_begin0", "legacy_end0", "lambda_end0:loss,accuracy",
                     "legacy_begin1", "legacy_end1", "lambda_end1:loss,accuracy"]
