"""Bad input from Python (docs/python.md, "Bad input and what a save may
touch"): saves that never delete what a user had, numbers that are finite
or refused, arguments checked as Keras checks them, engine errors as
ValueError/OSError with messages naming the argument, Ctrl-C in predict and
evaluate."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import autoshard
import autoshard.keras as keras
from autoshard import _checks, _native


def _model(units=3, features=7, lr=None):
    m = keras.Sequential([keras.Input((features,)), keras.layers.Dense(units)])
    m.compile(keras.optimizers.SGD(lr) if lr else "adam", "mse")
    return m


def _data(n=16, features=7, units=3, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, features)).astype("float32"),
            rng.normal(size=(n, units)).astype("float32"))


# --- saves: what a save may touch ---------------------------------------------


def _user_dir(path):
    """A directory holding a user's files; returns a snapshot of them."""
    (path / "sub").mkdir(parents=True)
    (path / "thesis.txt").write_text("years of work")
    (path / "sub" / "data.csv").write_text("1,2\n")
    return _snapshot(path)


def _snapshot(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            full = os.path.join(root, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


def _checkpoint_into(model, target):
    x, y = _data()
    model.fit(x, y, epochs=1, verbose=0, callbacks=[keras.callbacks.ModelCheckpoint(target)])


# (name of the directory the user has, the save call on it, the error it
# raises or None, a fragment of the message)
SAVES_ON_A_USER_DIRECTORY = [
    ("web", lambda m, p: m.save(p, save_format="tfjs", overwrite=False), FileExistsError,
     "not empty; pass overwrite=True"),
    ("web", lambda m, p: keras.models.save_model(m, p, overwrite=False, save_format="tfjs"),
     FileExistsError, "not empty"),
    ("x.keras", lambda m, p: m.save(p), IsADirectoryError, "a directory is there"),
    ("x.keras", lambda m, p: m.save(p, overwrite=False), IsADirectoryError, "directory"),
    ("x.h5", lambda m, p: m.save(p), IsADirectoryError, "a file was asked for"),
    ("plain", lambda m, p: m.save(p, save_format="keras"), IsADirectoryError, "directory"),
    ("plain", lambda m, p: m.save(p, save_format="h5"), IsADirectoryError, "directory"),
    ("plain", lambda m, p: m.save(p), ValueError, "extension"),
    ("m.weights.h5", lambda m, p: m.save_weights(p), IsADirectoryError, "directory"),
    ("ck.keras", _checkpoint_into, OSError, "directory"),
    # overwrite=True (Keras's default): only model.json and its shard are written
    ("web", lambda m, p: m.save(p, save_format="tfjs"), None, None),
]


@pytest.mark.parametrize("name,save,error,fragment", SAVES_ON_A_USER_DIRECTORY)
def test_a_users_directory_survives_every_save(tmp_path, name, save, error, fragment):
    target = tmp_path / name
    before = _user_dir(target)
    model = _model()
    if error is None:
        save(model, target)
    else:
        with pytest.raises(error, match=fragment):
            save(model, target)
    after = _snapshot(target)
    assert {k: after[k] for k in before if k in after} == before
    if error is not None:
        assert after == before  # nothing added either
        assert sorted(os.listdir(tmp_path)) == [name]  # no temporary left beside it


def test_tfjs_save_into_a_directory_replaces_only_its_own_files(tmp_path):
    target = tmp_path / "web"
    before = _user_dir(target)
    first, second = _model(), _model()
    first.save(target, save_format="tfjs")
    second.save(target, save_format="tfjs")  # replaces model.json and the shard
    after = _snapshot(target)
    assert set(after) == set(before) | {"model.json", "group1-shard1of1.bin"}
    loaded = keras.models.load_model(target)
    for a, b in zip(loaded.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not [f for f in os.listdir(target) if f.startswith(".autoshard")]


def test_a_failed_tfjs_save_leaves_the_directory_as_it_was(tmp_path):
    target = tmp_path / "web"
    before = _user_dir(target)
    (target / "model.json").mkdir()  # where the save's file would go
    with pytest.raises(IsADirectoryError, match="model.json"):
        _model().save(target, save_format="tfjs")
    assert _snapshot(target) == before
    assert sorted(os.listdir(target)) == ["model.json", "sub", "thesis.txt"]


class _FailingWriter:
    """A Keras file whose write fails halfway (a full disk, say)."""

    def save(self, native, out, fmt):
        if fmt == "tfjs":
            os.makedirs(out)
            out = os.path.join(out, "model.json")
        with open(out, "w") as f:
            f.write("partial")
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("name,fmt", [("m.keras", None), ("m.h5", None), ("web", "tfjs")])
def test_a_save_that_fails_while_writing_leaves_what_was_there(tmp_path, monkeypatch, name,
                                                                fmt):
    from autoshard.keras import _model_files as saving  # where model.save finds it

    target = tmp_path / name
    if fmt == "tfjs":
        _user_dir(target)
        (target / "model.json").write_text("the user's old model")
        before = _snapshot(target)
    else:
        target.write_text("mine")
    model = _model()
    monkeypatch.setattr(saving, "_keras_file_of", lambda model, fmt="keras": _FailingWriter())
    with pytest.raises(OSError, match="No space left"):
        model.save(target, **({"save_format": fmt} if fmt else {}))
    assert os.listdir(tmp_path) == [name]  # no temporary left beside it
    if fmt == "tfjs":
        assert _snapshot(target) == before
        assert not [f for f in os.listdir(target) if f.startswith(".")]
    else:
        assert target.read_text() == "mine"


def test_tfjs_save_into_an_empty_directory_needs_no_overwrite(tmp_path):
    (tmp_path / "web").mkdir()
    _model().save(tmp_path / "web", save_format="tfjs", overwrite=False)
    assert sorted(os.listdir(tmp_path / "web")) == ["group1-shard1of1.bin", "model.json"]


@pytest.mark.parametrize("save,name,error", [
    (lambda m, p: m.save(p, save_format="tfjs"), "model.txt", NotADirectoryError),
    (lambda m, p: m.save(p, overwrite=False), "m.keras", FileExistsError),
    (lambda m, p: m.save_weights(p, overwrite=False), "m.weights.h5", FileExistsError),
])
def test_a_users_file_is_never_replaced_by_a_directory_or_without_overwrite(
        tmp_path, save, name, error):
    target = tmp_path / name
    target.write_text("mine")
    with pytest.raises(error, match=name):
        save(_model(), target)
    assert target.read_text() == "mine"
    assert os.listdir(tmp_path) == [name]


def test_overwrite_replaces_a_file_of_the_same_name_as_keras_does(tmp_path):
    target = tmp_path / "m.keras"
    target.write_text("old")
    model = _model()
    model.save(target)
    assert keras.models.load_model(target).count_params() == model.count_params()
    weights = tmp_path / "m.weights.h5"
    weights.write_text("old")
    model.save_weights(weights)
    assert weights.read_bytes()[:4] == b"\x89HDF"


@pytest.mark.parametrize("save,name", [
    (lambda m, p: m.save(p), "m.keras"),
    (lambda m, p: m.save(p), "m.h5"),
    (lambda m, p: m.save_weights(p), "m.weights.h5"),
])
def test_a_symlink_is_written_through_as_keras_does(tmp_path, save, name):
    # Keras's open(path, "wb") writes the file the link names; the link stays.
    (tmp_path / "elsewhere").mkdir()
    real = tmp_path / "elsewhere" / name
    real.write_text("old")
    link = tmp_path / name
    link.symlink_to(real)
    save(_model(), link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes()[:2] in (b"PK", b"\x89H")
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", name]
    assert os.listdir(tmp_path / "elsewhere") == [name]  # no temporary left
    # A link to a directory: refused, the directory kept.
    link.unlink()
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(IsADirectoryError, match="a directory is there"):
        save(_model(), link)
    assert os.listdir(tmp_path / "elsewhere") == [name]


@pytest.mark.parametrize("save,fragment", [
    (lambda m: m.save(""), "save: filepath is empty"),
    (lambda m: m.save("", save_format="tfjs"), "save: filepath is empty"),
    (lambda m: m.save_weights(""), "save_weights: filepath is empty"),
    (lambda m: m.save("a\0b.keras"), "NUL byte"),
    (lambda m: m.save_weights("a\0b.weights.h5"), "NUL byte"),
])
def test_empty_and_nul_paths_are_refused_before_anything_is_written(tmp_path, monkeypatch, save,
                                                                    fragment):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    with pytest.raises(ValueError, match=fragment):
        save(_model())
    assert sorted(os.listdir(tmp_path)) == ["cwd"] and not os.listdir(".")


@pytest.mark.parametrize("load,error,fragment", [
    (lambda: keras.models.load_model(5), TypeError, "load_model: filepath must be a path"),
    (lambda: keras.models.load_model(""), ValueError, "load_model: filepath is empty"),
    (lambda: _model().load_weights(None), TypeError, "load_weights: filepath must be a path"),
    (lambda: _model().load_weights("a\0.weights.h5"), ValueError, "load_weights: .*NUL byte"),
])
def test_load_paths_are_checked(load, error, fragment):
    with pytest.raises(error, match=fragment):
        load()


def test_bytes_paths_are_paths(tmp_path):
    model = _model()
    model.save_weights(os.fsencode(tmp_path / "m.weights.h5"))
    model.save(os.fsencode(tmp_path / "m.keras"))
    assert sorted(os.listdir(tmp_path)) == ["m.keras", "m.weights.h5"]


def test_a_folder_a_save_cannot_write_in_is_named(tmp_path, monkeypatch):
    import tempfile

    mkdtemp = tempfile.mkdtemp

    def refuse(suffix=None, prefix=None, dir=None):
        # As in a read-only folder (the tests run as root, who may write there).
        if dir is None:
            return mkdtemp(suffix, prefix)
        raise PermissionError(13, "Permission denied", os.path.join(dir, prefix + "x"))

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    with pytest.raises(PermissionError, match="cannot write in the folder") as e:
        _model().save(tmp_path / "m.keras")
    assert e.value.filename == str(tmp_path)


def test_a_file_that_appears_during_a_save_without_overwrite_is_kept(tmp_path, monkeypatch):
    from autoshard.keras import _model_files as saving  # where model.save finds it

    target = tmp_path / "m.keras"
    real = saving._keras_file_of

    class Racing:
        def __init__(self, kf):
            self.kf = kf

        def save(self, native, out, fmt):
            self.kf.save(native, out, fmt)
            target.write_text("written meanwhile")  # another process's file

    monkeypatch.setattr(saving, "_keras_file_of",
                        lambda model, fmt="keras": Racing(real(model, fmt)))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        _model().save(target, overwrite=False)
    assert target.read_text() == "written meanwhile"
    assert os.listdir(tmp_path) == ["m.keras"]


# --- numbers: finite or refused ------------------------------------------------


def _with(array, index, value):
    a = array.copy()
    a[index] = value
    return a


X, Y = _data()
NON_FINITE = [
    ("fit x NaN", lambda m: m.fit(_with(X, (3, 2), np.nan), Y, verbose=0),
     r"fit: x element \[3, 2\] is NaN"),
    ("fit y inf", lambda m: m.fit(X, _with(Y, (5, 1), np.inf), verbose=0),
     r"fit: y element \[5, 1\] is inf"),
    ("fit float64 -inf", lambda m: m.fit(_with(X.astype("f8"), (0, 6), -np.inf), Y, verbose=0),
     r"x element \[0, 6\] is -inf"),
    ("fit float64 past float32", lambda m: m.fit(_with(X.astype("f8"), (2, 3), 1e39), Y,
                                                 verbose=0),
     r"fit: x element \[2, 3\] is 1e\+39, beyond float32's range"),
    ("fit validation x", lambda m: m.fit(X, Y, validation_data=(_with(X, (1, 1), np.nan), Y),
                                         verbose=0), r"validation_data\[0\] element \[1, 1\]"),
    ("fit validation y", lambda m: m.fit(X, Y, validation_data=(X, _with(Y, (2, 0), np.inf)),
                                         verbose=0), r"validation_data\[1\] element \[2, 0\]"),
    ("evaluate x", lambda m: m.evaluate(_with(X, (15, 0), -np.inf), Y, verbose=0),
     r"evaluate: x element \[15, 0\] is -inf"),
    ("evaluate y list", lambda m: m.evaluate(X, [[float("nan")] * 3] + Y[1:].tolist(),
                                             verbose=0), r"evaluate: y element \[0, 0\] is NaN"),
    ("predict", lambda m: m.predict(_with(X, (7, 4), np.nan), verbose=0),
     r"predict: x element \[7, 4\] is NaN"),
    ("predict_on_batch", lambda m: m.predict_on_batch(_with(X, (2, 2), np.inf)),
     r"predict_on_batch: x element \[2, 2\]"),
    ("train_on_batch", lambda m: m.train_on_batch(X, _with(Y, (4, 2), np.nan)),
     r"train_on_batch: y element \[4, 2\] is NaN"),
    ("test_on_batch", lambda m: m.test_on_batch(_with(X, (9, 1), np.inf), Y),
     r"test_on_batch: x element \[9, 1\] is inf"),
    ("set_weights NaN", lambda m: m.set_weights([_with(m.get_weights()[0], (6, 2), np.nan),
                                                 m.get_weights()[1]]),
     r"set_weights: weights\['.*kernel'\] element \[6, 2\] is NaN"),
    ("fit on 0 rows", lambda m: m.fit(X[:0], Y[:0], verbose=0), "fit: x has no examples"),
    ("evaluate on 0 rows", lambda m: m.evaluate(X[:0], Y[:0], verbose=0),
     "evaluate: x has no examples"),
    ("predict on 0 rows", lambda m: m.predict(X[:0], verbose=0), "predict: x has no examples"),
    ("empty validation_data", lambda m: m.fit(X, Y, validation_data=(X[:0], Y[:0]), verbose=0),
     "validation_data\\[0\\] has no examples"),
    ("validation_split 1.0", lambda m: m.fit(X, Y, validation_split=1.0, verbose=0),
     "validation_split must be a finite number, >= 0, < 1"),
    ("validation_split leaving no training", lambda m: m.fit(X[:1], Y[:1], validation_split=0.5,
                                                             verbose=0),
     "leaves 0 for training and 1 for validation"),
    ("validation_split leaving no validation", lambda m: m.fit(X, Y, validation_split=1e-17,
                                                               verbose=0),
     "leaves 16 for training and 0 for validation"),
]


@pytest.mark.parametrize("name,call,fragment", NON_FINITE, ids=[c[0] for c in NON_FINITE])
def test_non_finite_and_empty_data_is_refused_and_the_model_kept(name, call, fragment):
    m = _model()
    before = m.get_weights()
    with pytest.raises(ValueError, match=fragment):
        call(m)
    for a, b in zip(m.get_weights(), before):
        np.testing.assert_array_equal(a, b)


def test_several_inputs_name_the_input():
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))
    m = keras.Model([a, b], out)
    m.compile("sgd", "mse")
    xb = np.ones((4, 2), "float32")
    xb[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"fit: x\['b'\] element \[1, 1\] is NaN"):
        m.fit({"a": np.ones((4, 3), "float32"), "b": xb}, np.ones((4, 1), "float32"), verbose=0)


def test_a_loss_that_turns_non_finite_stops_fit_naming_the_batch():
    x, y = _data(64)
    m = _model(lr=1e30)
    with pytest.raises(ValueError, match=r"training diverged: the loss is (nan|infinite) at "
                                         r"epoch 1, batch \d+ of 8"):
        m.fit(x, y, batch_size=8, epochs=3, verbose=0)


def test_terminate_on_nan_stops_without_an_error_as_in_keras(capsys):
    x, y = _data(64)
    m = _model(lr=1e30)
    history = m.fit(x, y, batch_size=8, epochs=3, verbose=0,
                    callbacks=[keras.callbacks.TerminateOnNaN()])
    assert len(history.history["loss"]) == 1
    assert "Invalid loss, terminating training" in capsys.readouterr().out


def test_train_on_batch_refuses_a_non_finite_loss():
    x, y = _data()
    m = _model(lr=1e30)
    with pytest.raises(ValueError, match="train_on_batch: training diverged: the loss is"):
        for _ in range(6):
            m.train_on_batch(x, y)


def test_the_finiteness_check_reads_the_array_once_when_it_is_finite():
    big = np.full((4, 3), 3e38, np.float32)  # its sum overflows; no element is bad
    _checks.finite(big, "x", "fit")
    with pytest.raises(ValueError, match=r"x element \[3, 2\] is NaN"):
        _checks.finite(_with(big, (3, 2), np.nan), "x", "fit")


# --- arguments: checked as Keras checks them ----------------------------------


def _fit(**kwargs):
    x, y = _data()
    return lambda: _model().fit(x, y, verbose=0, **kwargs)


def _layout_map():
    return keras.distribution.LayoutMap(keras.distribution.DeviceMesh((1,), ("model",)))


def _fit_generator():
    _model().fit((X[i:i + 4] for i in range(0, 16, 4)), verbose=0)


def _fit_dict_y():
    m = _model()
    m.fit(X, {"other": Y}, verbose=0)


i7 = keras.Input((7,))
ARGUMENTS = [
    ("epochs=-3", _fit(epochs=-3), ValueError,
     "fit: epochs must be an integer from 0 to 2147483647, got -3"),
    ("epochs=2**62", _fit(epochs=2**62, initial_epoch=2**62 - 1), ValueError,
     "epochs must be an integer from 0"),
    ("epochs=1.5", _fit(epochs=1.5), TypeError, "fit: epochs must be an integer"),
    ("initial_epoch=-1", _fit(initial_epoch=-1), ValueError, "initial_epoch"),
    ("batch_size=0", _fit(batch_size=0), ValueError, "fit: batch_size must be an integer >= 1, "
                                                     "got 0"),
    ("batch_size=4.7", _fit(batch_size=4.7), TypeError, "batch_size must be an integer >= 1, "
                                                        "got 4.7"),
    ("batch_size='8'", _fit(batch_size="8"), TypeError, "got '8'"),
    ("validation_freq=0", _fit(validation_data=(X, Y), validation_freq=0), ValueError,
     "validation_freq must be an integer from 1"),
    ("validation_data=(x,)", _fit(validation_data=(X,)), ValueError,
     r"validation_data must be a tuple \(x_val, y_val\).*got a tuple of 1"),
    ("validation_data=x", _fit(validation_data=X), ValueError,
     r"got a ndarray of shape \(16, 7\)"),
    ("validation_batch_size=-2", _fit(validation_split=0.5, validation_batch_size=-2),
     ValueError, "validation_batch_size"),
    ("verbose=7", lambda: _model().fit(X, Y, verbose=7), ValueError,
     "verbose must be 'auto', 0, 1 or 2"),
    ("callbacks=[3]", _fit(callbacks=[3]), TypeError,
     r"callbacks\[0\] must be a keras.callbacks.Callback"),
    ("evaluate batch_size=-1", lambda: _model().evaluate(X, Y, batch_size=-1, verbose=0),
     ValueError, "evaluate: batch_size"),
    ("predict batch_size=True", lambda: _model().predict(X, batch_size=True, verbose=0),
     TypeError, "predict: batch_size must be an integer"),
    ("predict steps=3", lambda: _model().predict(X, steps=3, verbose=0), ValueError, "steps"),
    ("Model(i, 5)", lambda: keras.Model(i7, 5), TypeError,
     "Model: outputs must be a KerasTensor .*got 5"),
    ("Model([i, 'x'], o)", lambda: keras.Model([i7, "x"], keras.layers.Dense(2)(i7)), TypeError,
     r"Model: inputs\[1\] must be a KerasTensor"),
    ("Model(name=3)", lambda: keras.Model(i7, keras.layers.Dense(2)(i7), name=3), TypeError,
     "name must be a string"),
    ("Sequential([5])", lambda: keras.Sequential([5]), TypeError, "5 is not a layer"),
    ("Dense(10**30)", lambda: keras.layers.Dense(10**30), ValueError,
     "Dense: units must be an integer from 1 to 9223372036854775807, got 1000000"),
    ("Dense(0)", lambda: keras.layers.Dense(0), ValueError, "Dense: units"),
    ("Dense('5')", lambda: keras.layers.Dense("5"), TypeError, "Dense: units must be an integer"),
    ("Dense(3.0)", lambda: keras.layers.Dense(3.0), TypeError, "got 3.0"),
    ("Conv2D kernel (3, 'a')", lambda: keras.layers.Conv2D(4, (3, "a")), TypeError,
     r"Conv2D: kernel_size\[1\] must be an integer"),
    ("Conv1D kernel (2, 2)", lambda: keras.layers.Conv1D(4, (2, 2)), ValueError,
     "kernel_size must be an integer or 1 integers"),
    ("Dropout(1.5)", lambda: keras.layers.Dropout(1.5), ValueError, "Dropout: rate"),
    ("Dropout seed=-1", lambda: keras.layers.Dropout(0.1, seed=-1), ValueError, "seed"),
    ("Embedding(0, 4)", lambda: keras.layers.Embedding(0, 4), ValueError, "input_dim"),
    ("LayerNormalization(epsilon=-1)", lambda: keras.layers.LayerNormalization(epsilon=-1),
     ValueError, "epsilon must be a finite number, > 0"),
    ("Rescaling(nan)", lambda: keras.layers.Rescaling(float("nan")), ValueError, "scale"),
    ("Input((7, -2))", lambda: keras.Input((7, -2)), ValueError, r"Input: shape\[1\]"),
    ("Input('7')", lambda: keras.Input("7"), TypeError, "Input: shape must be a tuple"),
    ("Input(dtype='nope')", lambda: keras.Input((7,), dtype="nope"), ValueError,
     "Input: dtype must be 'float32' or 'int32', got 'nope'"),
    ("predict x dict without the input", lambda: _model().predict({"other": X}, verbose=0),
     ValueError, "predict: x has no array for the model's input"),
    ("fit y dict without the output", _fit_dict_y, ValueError,
     "fit: y has no targets for the model's output"),
    ("fit x generator", _fit_generator, ValueError,
     r"fit: each batch must be a tuple \(x, y\)"),
    ("predict x object", lambda: _model().predict(object(), verbose=0), ValueError,
     "predict: x must be a NumPy array"),
    ("set_random_seed(2**70)", lambda: keras.utils.set_random_seed(2**70), ValueError,
     "set_random_seed: seed must be an integer from 0 to 18446744073709551615"),
    ("set_random_seed('a')", lambda: keras.utils.set_random_seed("a"), TypeError,
     "set_random_seed: seed must be an integer"),
    ("LayoutMap key 5", lambda: _layout_map().__setitem__(5, (None, "model")), TypeError,
     "LayoutMap: keys are regular expressions"),
    ("LayoutMap key 'dense['", lambda: _layout_map().__setitem__("dense[", (None, "model")),
     ValueError, r"LayoutMap: key 'dense\[' is not a regular expression"),
    ("LayoutMap value 5", lambda: _layout_map().__setitem__("k", 5), TypeError,
     r"LayoutMap\['k'\]: a layout is a tuple"),
    ("LayoutMap value ((1, 2),)", lambda: _layout_map().__setitem__("k", ((1, 2),)), ValueError,
     r"LayoutMap\['k'\]: TensorLayout: each dimension takes a mesh axis name"),
    ("TensorLayout(5)", lambda: keras.distribution.TensorLayout(5), TypeError,
     "TensorLayout: axes is a tuple"),
    ("ModelParallel(layout_map=5)", lambda: keras.distribution.ModelParallel(layout_map=5),
     TypeError, "ModelParallel: layout_map must be a keras.distribution.LayoutMap"),
    ("ModelParallel batch_dim_name=5", lambda: keras.distribution.ModelParallel(
        layout_map=_layout_map(), batch_dim_name=5), TypeError, "batch_dim_name"),
    ("DataParallel(device_mesh=5)", lambda: keras.distribution.DataParallel(device_mesh=5),
     TypeError, "DataParallel: device_mesh must be a keras.distribution.DeviceMesh"),
    ("DataParallel(devices=5)", lambda: keras.distribution.DataParallel(devices=5), TypeError,
     "DataParallel: devices is a list"),
    ("AutoShard(5)", lambda: keras.distribution.AutoShard(5), TypeError,
     "AutoShard: mesh must be a keras.distribution.DeviceMesh"),
    ("plan devices 2**40", lambda: autoshard.plan(_model(), 2**40, 32), ValueError,
     "plan: the number of devices must be at least 1"),
    ("plan batch 2**70", lambda: autoshard.plan(_model(), 2, 2**70), ValueError,
     "plan: batch must be a positive integer"),
    ("plan seed -1", lambda: autoshard.plan("tiny", 2, 8, seed=-1), ValueError, "plan: seed"),
    ("plan seq 2**70", lambda: autoshard.plan("tiny", 2, 8, seq=2**70), ValueError,
     "plan: seq"),
    ("learning_rate = -1", lambda: setattr(keras.optimizers.Adam(), "learning_rate", -1.0),
     ValueError, "Adam: learning_rate must be a finite number, >= 0"),
    ("build((None, 2**40))", lambda: keras.Sequential([keras.layers.Dense(3)]).build(
        (None, 2**40)), ValueError, r"needs 4.00 TiB \(float32\); .* is available "
                                    r"\(AUTOSHARD_MEMORY_LIMIT caps it\)"),
    ("build((None, 0))", lambda: keras.Sequential([keras.layers.Dense(3)]).build((None, 0)),
     ValueError, r"input_shape\[1\]"),
    ("DeviceMesh((2, -1))", lambda: keras.distribution.DeviceMesh((2, -1), ("a", "b")),
     ValueError, r"DeviceMesh: shape\[1\] must be an integer from 1"),
    ("DeviceMesh((2.5,))", lambda: keras.distribution.DeviceMesh((2.5,), ("a",)), TypeError,
     r"shape\[0\]"),
    ("list_devices(-5)", lambda: autoshard.list_devices(-5), ValueError,
     "list_devices: count must be an integer from 0"),
    ("list_devices(2.5)", lambda: autoshard.list_devices(2.5), TypeError, "count"),
    ("list_devices(10**6)", lambda: autoshard.list_devices(10**6), ValueError,
     "at most 256 in-process devices"),
    ("compile metrics", lambda: _model().compile("adam", "mse", metrics=["mae", "perplexity_at_k"]),
     ValueError, r"compile: metrics\[1\]: unknown metric 'perplexity_at_k' \(known: accuracy"),
    ("compile loss", lambda: _model().compile("adam", "nope"), ValueError, "compile: loss: "),
    ("SGD(learning_rate=inf)", lambda: keras.optimizers.SGD(float("inf")), ValueError,
     "SGD: learning_rate must be a finite number, > 0, got inf"),
    ("Adam(beta_1='x')", lambda: keras.optimizers.Adam(beta_1="x"), TypeError, "beta_1"),
    ("learning_rate = nan", lambda: setattr(keras.optimizers.Adam(), "learning_rate",
                                            float("nan")), ValueError, "Adam: learning_rate"),
    ("Huber(delta=nan)", lambda: keras.losses.Huber(delta=float("nan")), ValueError, "delta"),
    ("BinaryAccuracy(threshold=2)", lambda: keras.metrics.BinaryAccuracy(threshold=2),
     ValueError, "threshold"),
    ("SparseTopK(k=0)", lambda: keras.metrics.SparseTopKCategoricalAccuracy(k=0), ValueError,
     "k must be an integer from 1"),
    ("save filepath=3", lambda: _model().save(3), TypeError, "save: filepath must be a path"),
]


@pytest.mark.parametrize("name,call,error,fragment", ARGUMENTS, ids=[c[0] for c in ARGUMENTS])
def test_arguments_are_checked(name, call, error, fragment):
    with pytest.raises(error, match=fragment) as e:
        call()
    message = str(e.value)
    assert "Invoked with" not in message and "array(" not in message and len(message) < 400


@pytest.mark.parametrize("bad", [
    (i for i in range(3)), "abc", np.float32(3), [[1, 2], [3]], np.array([[np.nan] * 7] * 4),
    np.zeros((4, 7), complex),
], ids=["generator", "string", "scalar", "ragged", "NaN", "complex"])
def test_refused_data_does_not_become_a_sequentials_input(bad):
    # A Sequential without keras.Input takes its input's shape from the
    # first data; data refused must leave it unbuilt, taking good data next.
    m = keras.Sequential([keras.layers.Dense(3)])
    m.compile("adam", "mse")
    with pytest.raises(ValueError, match="fit: x"):
        m.fit(bad, Y[:4], verbose=0)
    m.fit(X, Y, verbose=0)
    assert m.predict(X, verbose=0).shape == (16, 3)


def test_nested_lists_build_a_sequentials_input():
    m = keras.Sequential([keras.layers.Dense(3)])
    m.compile("adam", "mse")
    m.fit(X.tolist(), Y.tolist(), verbose=0)
    assert m.predict(X, verbose=0).shape == (16, 3)


@pytest.mark.parametrize("damage", ["truncated", "text", "other shape"])
def test_load_weights_errors_name_the_users_file_not_a_temporary(tmp_path, damage):
    path = tmp_path / "m.weights.h5"
    _model().save_weights(path)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif damage == "text":
        path.write_text("hello")
    model = _model(units=4) if damage == "other shape" else _model()
    before = model.get_weights()
    with pytest.raises(ValueError) as e:
        model.load_weights(path)
    message = str(e.value)
    assert message.startswith(f"load_weights: '{path}'") and "autoshard-weights" not in message
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


_TWO_THREADS = """
import sys, threading
import numpy as np
import autoshard.keras as keras
m = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64), keras.layers.Dense(4)])
m.compile("adam", "mse")
x = np.random.rand(1024, 32).astype("float32")
y = np.random.rand(1024, 4).astype("float32")
work = {
    "predict": lambda: m.predict(x, batch_size=64, verbose=0),
    "fit": lambda: m.fit(x, y, batch_size=64, verbose=0),
    "save": lambda: m.save(sys.argv[1]),
}
def loop(f):
    for _ in range(10):
        f()
threads = [threading.Thread(target=loop, args=(work[k],)) for k in sys.argv[2:]]
[t.start() for t in threads]
[t.join() for t in threads]
print("done")
"""


_TWO_THREADS_LM = """
import threading
import numpy as np
from autoshard import hf
m = hf.LanguageModel.from_config("tiny")
work = {
    "generate": lambda: m.generate([1, 2, 3], max_new_tokens=8),
    "logits": lambda: m.logits(np.array([[1, 2, 3, 4]])),
}
def loop(f):
    for _ in range(12):
        f()
threads = [threading.Thread(target=loop, args=(work[k],)) for k in ("generate", "logits")]
[t.start() for t in threads]
[t.join() for t in threads]
print("done")
"""


@pytest.mark.parametrize("calls", [("predict", "save"), ("fit", "save"), ("language model",)])
def test_one_model_used_from_two_threads_does_not_crash(tmp_path, calls):
    # The engine's calls release the GIL; one call at a time per model. (A
    # race: before the lock, each case crashed in about half the runs.)
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(autoshard.__file__)))
    script = _TWO_THREADS_LM if calls == ("language model",) else _TWO_THREADS
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "m.keras"), *calls],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "done", run.stderr[-2000:]


@pytest.fixture
def tiny_tokenizer(tmp_path):
    import json

    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    return autoshard.Tokenizer.from_file(tmp_path)


@pytest.mark.parametrize("call,error,fragment", [
    (lambda t: t.encode("ab\ud800"), ValueError, "encode: text holds '\\\\ud800' at index 2"),
    (lambda t: t.decode([2**40]), ValueError, "decode: id 1099511627776 is outside"),
    (lambda t: t.decode([1.5]), TypeError, r"decode: ids\[0\] must be an integer"),
    (lambda t: t.decode(5), TypeError, "decode takes a list of token ids"),
    (lambda t: t.id_to_token(2**70), ValueError, "id_to_token: id must be an integer"),
    (lambda t: t.token_to_id(5), TypeError, "token_to_id takes a str"),
])
def test_tokenizer_arguments_are_checked(tiny_tokenizer, call, error, fragment):
    with pytest.raises(error, match=fragment) as e:
        call(tiny_tokenizer)
    assert "incompatible function arguments" not in str(e.value)
    assert tiny_tokenizer.decode(np.array([2, 0])) == "aba"


def test_csv_logger_on_a_fifo_with_no_reader_is_an_error_not_a_hang(tmp_path):
    fifo = tmp_path / "log.csv"
    os.mkfifo(fifo)
    for append in (False, True):
        with pytest.raises(OSError, match="CSVLogger: a FIFO with no reader"):
            _model().fit(X, Y, verbose=0,
                         callbacks=[keras.callbacks.CSVLogger(fifo, append=append)])
    # With a reader, the rows go to it, as with open() (a pipe holds them).
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _model().fit(X, Y, epochs=2, verbose=0, callbacks=[keras.callbacks.CSVLogger(fifo)])
        rows = os.read(reader, 65536).decode().splitlines()
    finally:
        os.close(reader)
    assert rows[0] == "epoch,loss" and len(rows) == 3


def _ids_model():
    m = keras.Sequential([keras.Input((2,), dtype="int32"), keras.layers.Embedding(10, 3),
                          keras.layers.Flatten(), keras.layers.Dense(3)])
    m.compile("adam", "sparse_categorical_crossentropy")
    return m


@pytest.mark.parametrize("call,fragment", [
    # float ids past int32 were cast (undefined in C++, INT32_MIN in NumPy
    # with a RuntimeWarning) and reported as a token id the user never gave
    (lambda m: m.predict(np.array([[1e20, 2.0]]), verbose=0),
     r"predict: x: input 'input\w*' must hold whole class ids within int32; element 0 is 1e\+20"),
    (lambda m: m.predict(np.array([[-3e9, 2.0]]), verbose=0), "element 0 is -3e"),
    # uint64 read as int64 wrapped 2^64 - 1 to -1
    (lambda m: m.predict(np.array([[2**64 - 1, 2]], dtype=np.uint64), verbose=0),
     r"predict: x: .*element 0 \(18446744073709551615\) does not fit in int32"),
    (lambda m: m.fit(np.array([[1, 2]]), np.array([2**64 - 1], dtype=np.uint64), verbose=0),
     r"fit: y: targets of 'output\w*' element 0 \(18446744073709551615\)"),
    (lambda m: m.fit(np.array([[2**40, 2]]), np.array([1]), verbose=0), r"fit: x: input"),
])
def test_ids_that_do_not_fit_int32_are_refused_naming_x_or_y(call, fragment):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's cast warning would be a second message
        with pytest.raises(ValueError, match=fragment):
            call(_ids_model())


@pytest.mark.parametrize("loss,units,y", [
    # Keras casts targets to what the loss takes: 0/1 labels as ints or bools
    ("binary_crossentropy", 1, (X[:, :1] > 0).astype("int64")),
    ("binary_crossentropy", 1, X[:, :1] > 0),
    ("mse", 3, np.arange(48).reshape(16, 3) % 5),
    ("categorical_crossentropy", 3, np.eye(3, dtype="int32")[np.arange(16) % 3]),
    # and class ids given as whole floats
    ("sparse_categorical_crossentropy", 3, (np.arange(16) % 3).astype("float64")),
])
def test_targets_are_cast_to_what_the_loss_takes_as_keras_does(loss, units, y):
    m = keras.Sequential([keras.Input((7,)), keras.layers.Dense(units, activation="sigmoid")])
    m.compile("adam", loss, metrics=["accuracy"])
    m.fit(X, y, verbose=0, validation_data=(X, y))
    m.evaluate(X, y, verbose=0)
    m.train_on_batch(X, y)
    m.test_on_batch(X, y)


def test_class_ids_that_are_not_whole_are_refused_naming_y():
    m = keras.Sequential([keras.Input((7,)), keras.layers.Dense(3)])
    m.compile("adam", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match=r"fit: y holds class ids for a sparse categorical "
                                         r"crossentropy; element \[2\] is 1.5"):
        m.fit(X, _with(np.zeros(16), 2, 1.5), verbose=0)


def test_what_keras_takes_is_taken():
    # verbose=False/True (common in scripts), NumPy numbers, a learning rate
    # set to 0 (a schedule that decays to 0): as in Keras.
    for verbose in (False, True, np.int64(0)):
        _model().fit(X, Y, verbose=verbose, epochs=np.int64(1), batch_size=np.int32(8))
        _model().evaluate(X, Y, verbose=verbose)
        _model().predict(X, verbose=verbose)
    assert keras.optimizers.SGD(np.float32(0.5)).learning_rate == 0.5
    assert keras.Input(np.array([7])).shape[-1] == 7
    assert isinstance(autoshard.blas_info(0), dict)  # was a pybind11 TypeError
    m = _model()
    before = m.get_weights()
    m.fit(X, Y, epochs=2, verbose=0,
          callbacks=[keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.0)])
    assert all(np.array_equal(a, b) for a, b in zip(before, m.get_weights()))


# --- engine errors: ValueError/OSError, messages naming the argument --------------


def test_targets_that_do_not_fit_name_y_and_the_output():
    m = _model()
    x, _ = _data()
    with pytest.raises(ValueError, match=r"fit: y \(the targets of the model's output "
                                         r"'[a-z_0-9]+'\): MeanSquaredError: targets \[16\] do "
                                         r"not match predictions \[16, 3\]"):
        m.fit(x, np.zeros(16, "float32"), batch_size=16, verbose=0)


def test_a_token_id_out_of_range_names_x_and_the_vocabulary():
    m = keras.Sequential([keras.Input((4,), dtype="int32"), keras.layers.Embedding(10, 3)])
    with pytest.raises(ValueError, match=r"predict: x holds a token id .*token id 11 is out of "
                                         r"range for a table of 10 rows.*input_dim"):
        m.predict(np.array([[1, 2, 11, 3]], "int32"), verbose=0)


def test_a_library_error_inside_the_engine_is_a_value_error(tmp_path):
    m = _model()
    m.save(tmp_path / "m.keras")
    kf = _native.KerasFile.read(str(tmp_path / "m.keras"), False)
    with pytest.raises(ValueError):
        kf.set_compile("{")  # nlohmann's parse error, not a RuntimeError


@pytest.mark.parametrize("text,fragment", [
    ("[" * 100000, "nested too deeply"),
    ('{"a": 1,', "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
], ids=["deep", "broken", "not-utf8"])
def test_json_read_from_python_is_one_value_error_naming_the_file(tmp_path, text, fragment):
    path = tmp_path / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=f"model config '.*config.json' .*{fragment}"):
        _checks.read_json(path, "model config")


def test_a_deep_tokenizer_config_is_a_value_error(tmp_path):
    from autoshard.tokenizer import _config_flag

    (tmp_path / "tokenizer_config.json").write_text('{"a":' * 50000)
    with pytest.raises(ValueError, match="tokenizer config '.*tokenizer_config.json'"):
        _config_flag(str(tmp_path), "add_bos_token")


# --- Ctrl-C -------------------------------------------------------------------------


def _interrupted_within(call, seconds):
    """Sends SIGINT to this process 0.2 s into ``call``; the time until
    KeyboardInterrupt came (the call must run far longer uninterrupted)."""
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        timer.cancel()
    elapsed = time.monotonic() - start
    assert elapsed < seconds, f"KeyboardInterrupt came after {elapsed:.1f} s"


# Batches of one row: each an engine call of microseconds, a pass of seconds.
ROWS = 400_000


def test_ctrl_c_stops_predict_between_batches():
    m = _model(units=2, features=4)
    x = np.ones((ROWS, 4), "float32")
    _interrupted_within(lambda: m.predict(x, batch_size=1, verbose=0), 1.5)


def test_ctrl_c_stops_evaluate_between_batches():
    m = _model(units=2, features=4)
    x, y = np.ones((ROWS, 4), "float32"), np.ones((ROWS, 2), "float32")
    _interrupted_within(lambda: m.evaluate(x, y, batch_size=1, verbose=0), 1.5)


def test_build_refuses_a_shape_past_the_memory_limit(monkeypatch):
    monkeypatch.setenv("AUTOSHARD_MEMORY_LIMIT", "1KiB")
    with pytest.raises(ValueError, match=r"needs 4.00 KiB \(float32\); 1.00 KiB is available"):
        keras.Sequential([keras.layers.Dense(3)]).build((None, 1024))
    small = keras.Sequential([keras.layers.Dense(3)])
    small.build((None, 16))
    assert small.count_params() == 16 * 3 + 3


# --- Hugging Face models: the same checks ---------------------------------------

GPT2 = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "hf_gpt2")


@pytest.fixture(scope="module")
def gpt2():
    return autoshard.from_pretrained(GPT2)


LANGUAGE_MODEL_ARGUMENTS = [
    ("generate max_new_tokens=10**30", lambda m: m.generate([1, 2], max_new_tokens=10**30),
     ValueError, "generate: max_new_tokens must be an integer from 0 to 2147483647"),
    ("generate temperature=nan", lambda m: m.generate([1, 2], temperature=float("nan")),
     ValueError, "temperature"),
    ("generate top_p=0", lambda m: m.generate([1, 2], top_p=0), ValueError, "top_p"),
    ("generate on_token=3", lambda m: m.generate([1, 2], on_token=3), TypeError, "on_token"),
    ("generate prompt id -1", lambda m: m.generate([1, -1], max_new_tokens=1), ValueError,
     r"generate: prompt: token id -1 is outside the model's vocabulary of \d+"),
    ("logits id past the vocabulary", lambda m: m.logits(np.array([[1, 10**6]])), ValueError,
     r"logits: ids: token id 1000000 is outside the model's vocabulary of \d+ \(ids 0 to"),
    ("fit batch_size=0", lambda m: m.fit(np.arange(100) % 60, batch_size=0, steps=1),
     ValueError, "fit: batch_size"),
    ("fit steps=2.5", lambda m: m.fit(np.arange(100) % 60, steps=2.5), TypeError, "steps"),
    ("fit learning_rate=inf", lambda m: m.fit(np.arange(100) % 60, steps=1,
                                              learning_rate=float("inf")), ValueError,
     "learning_rate"),
    ("fit seed=-1", lambda m: m.fit(np.arange(100) % 60, steps=1, seed=-1), ValueError, "seed"),
]


@pytest.mark.parametrize("name,call,error,fragment", LANGUAGE_MODEL_ARGUMENTS,
                         ids=[c[0] for c in LANGUAGE_MODEL_ARGUMENTS])
def test_language_model_arguments_are_checked(gpt2, name, call, error, fragment):
    with pytest.raises(error, match=fragment) as e:
        call(gpt2)
    message = str(e.value)
    assert "Invoked with" not in message and len(message) < 400


@pytest.mark.parametrize("kwargs,error,fragment", [
    ({"seed": -1}, ValueError, "from_pretrained: seed"),
    ({"devices": 2.0}, TypeError, "devices"),
    ({"memory_per_device": float("nan")}, ValueError, "memory_per_device"),
])
def test_from_pretrained_checks_its_numbers(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        autoshard.from_pretrained(GPT2, **kwargs)
