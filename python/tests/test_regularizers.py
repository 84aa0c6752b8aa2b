"""Regularizers (kernel_, bias_, activity_regularizer; model.losses) and
constraints (kernel_, bias_constraint, applied after each update), against
NumPy, on data=2,model=2 against one device, and read from files."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import constraints, layers, regularizers
from autoshard.keras.distribution import DeviceMesh, LayoutMap, ModelParallel, set_distribution


@pytest.fixture(autouse=True)
def no_distribution():
    set_distribution(None)
    yield
    set_distribution(None)


def data(n=8, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 5)).astype(np.float32),
            rng.normal(size=(n, 3)).astype(np.float32))


def model_with(lr=0.1, **dense_args):
    model = keras.Sequential([keras.Input((5,)), layers.Dense(4, name="d", **dense_args),
                              layers.Dense(3, name="out")])
    model.compile(keras.optimizers.SGD(learning_rate=lr), "mse")
    return model


def forward(weights, x):
    w1, b1, w2, b2 = [w.astype(np.float64) for w in weights]
    h = x @ w1 + b1
    return h, h @ w2 + b2


def mse(p, y):
    return np.mean((p - y) ** 2)


def test_weight_penalties_are_added_to_the_loss_and_listed_in_model_losses():
    x, y = data()
    model = model_with(kernel_regularizer=regularizers.L2(0.05), bias_regularizer="l1")
    rng = np.random.default_rng(2)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    _, p = forward(weights, x)
    penalty = 0.05 * np.sum(weights[0].astype(np.float64) ** 2) + 0.01 * np.abs(weights[1]).sum()
    assert model.test_on_batch(x, y) == pytest.approx(mse(p, y) + penalty, rel=1e-5)
    assert model.evaluate(x, y, verbose=0) == pytest.approx(mse(p, y) + penalty, rel=1e-5)
    np.testing.assert_allclose(sorted(model.losses),
                               sorted([0.05 * np.sum(weights[0].astype(np.float64) ** 2),
                                       0.01 * np.abs(weights[1]).sum()]), rtol=1e-5)


def test_a_frozen_layers_regularizers_are_not_counted():
    """Keras 3 adds the regularizers of trainable weights only
    (Layer._get_regularization_losses iterates trainable_weights): a frozen
    layer's penalty leaves the loss and model.losses."""
    x, y = data()
    model = model_with(kernel_regularizer=regularizers.L2(0.05))
    rng = np.random.default_rng(4)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    _, p = forward(weights, x)
    assert model.test_on_batch(x, y) > mse(p, y) + 0.01  # counted while trainable
    model.get_layer("d").trainable = False
    model.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    assert model.test_on_batch(x, y) == pytest.approx(mse(p, y), rel=1e-5)
    assert model.losses == []


def test_an_l2_step_is_numpys():
    x, y = data()
    model = model_with(kernel_regularizer=regularizers.L2(0.1))
    weights = model.get_weights()
    model.train_on_batch(x, y)
    w1, b1, w2, b2 = [w.astype(np.float64) for w in weights]
    h = x @ w1 + b1
    g = 2 * (h @ w2 + b2 - y) / y.size
    gh = g @ w2.T
    np.testing.assert_allclose(model.get_weights()[0], w1 - 0.1 * (x.T @ gh + 0.2 * w1),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.get_weights()[2], w2 - 0.1 * h.T @ g, rtol=1e-5, atol=1e-6)


def test_activity_and_orthogonal_penalties():
    x, y = data()
    model = model_with(activity_regularizer=regularizers.L1L2(l1=0.01, l2=0.02),
                       kernel_regularizer=regularizers.OrthogonalRegularizer(0.5, "columns"))
    weights = model.get_weights()
    h, p = forward(weights, x)
    # Keras 3's Layer.__call__ adds the activity penalty as it is (not per example).
    activity = 0.01 * np.abs(h).sum() + 0.02 * np.sum(h ** 2)
    cols = weights[0].astype(np.float64)
    cols = cols / np.linalg.norm(cols, axis=0, keepdims=True)
    gram = np.abs(cols.T @ cols)
    k = gram.shape[0]
    ortho = 0.5 * 0.5 * (gram.sum() - np.trace(gram)) / (k * (k - 1) / 2)
    assert model.test_on_batch(x, y) == pytest.approx(mse(p, y) + activity + ortho, rel=1e-5)


def test_constraints_hold_after_every_step_as_numpy():
    x, y = data()
    model = model_with(lr=0.5, kernel_constraint=constraints.MaxNorm(0.3),
                       bias_constraint="non_neg")
    for step in range(3):
        w1, b1, w2, b2 = [w.astype(np.float64) for w in model.get_weights()]
        h = x @ w1 + b1
        g = 2 * (h @ w2 + b2 - y) / y.size
        gh = g @ w2.T
        k = w1 - 0.5 * x.T @ gh
        norms = np.sqrt((k ** 2).sum(axis=0, keepdims=True))
        want_k = k * np.clip(norms, 0, 0.3) / (1e-7 + norms)
        want_b = np.maximum(b1 - 0.5 * gh.sum(0), 0)
        model.train_on_batch(x, y)
        got = model.get_weights()
        np.testing.assert_allclose(got[0], want_k, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], want_b, rtol=1e-5, atol=1e-6)
        assert np.all(np.linalg.norm(got[0], axis=0) <= 0.3 + 1e-6)
        assert np.all(got[1] >= 0)


def test_unit_and_min_max_norm():
    x, y = data()
    for c, check in [(constraints.UnitNorm(axis=0),
                      lambda w: np.testing.assert_allclose(np.linalg.norm(w, axis=0), 1,
                                                           rtol=1e-5)),
                     (constraints.MinMaxNorm(0.5, 0.6, rate=1.0, axis=1),
                      lambda w: np.all((np.linalg.norm(w, axis=1) > 0.5 - 1e-5) &
                                       (np.linalg.norm(w, axis=1) < 0.6 + 1e-5)))]:
        model = model_with(kernel_constraint=c)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        assert check(model.get_weights()[0]) in (None, True)
        np.testing.assert_allclose(model.get_weights()[0], c(model.get_weights()[0]), rtol=1e-5,
                                   atol=1e-6)


def sharded():
    mesh = DeviceMesh((2, 2), ("data", "model"))
    layout_map = LayoutMap(mesh)
    layout_map["d.kernel"] = (None, "model")
    layout_map["out.kernel"] = ("model", None)
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


def penalized():
    return model_with(lr=0.2, kernel_regularizer=regularizers.L1L2(0.01, 0.02),
                      activity_regularizer="l2", kernel_constraint=constraints.MaxNorm(0.4),
                      bias_constraint=constraints.NonNeg())


def orthogonal():
    return model_with(lr=0.2, kernel_regularizer=regularizers.OrthogonalRegularizer(0.3))


@pytest.mark.parametrize("make", [penalized, orthogonal])
def test_sharded_equals_one_device(make):
    x, y = data(n=10)
    single = make()
    set_distribution(sharded())
    split = make()
    set_distribution(None)
    split.set_weights(single.get_weights())
    h1 = single.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    h2 = split.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    for a, b in zip(single.get_weights(), split.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_saved_model_keeps_its_regularizers_and_constraints(tmp_path):
    x, y = data()
    model = penalized()
    path = str(tmp_path / "penalized.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.test_on_batch(x, y) == pytest.approx(model.test_on_batch(x, y), rel=1e-6)
    model.train_on_batch(x, y)
    loaded.train_on_batch(x, y)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_bad_regularizers_and_constraints_are_refused():
    with pytest.raises(ValueError, match="unknown regularizer 'l3'"):
        layers.Dense(2, kernel_regularizer="l3")
    with pytest.raises(ValueError, match="custom regularizer functions"):
        layers.Dense(2, kernel_regularizer=lambda w: 0.0)
    with pytest.raises(ValueError, match="unknown constraint"):
        layers.Dense(2, kernel_constraint="positive")
    with pytest.raises(ValueError, match="recurrent_regularizer"):
        layers.Dense(2, recurrent_regularizer="l2")
    with pytest.raises(ValueError, match="l2"):
        regularizers.L2(-1.0)


def test_a_file_with_an_unknown_regularizer_names_the_layer_and_field(tmp_path):
    import zipfile

    path = str(tmp_path / "m.keras")
    model_with(kernel_regularizer=regularizers.L2(0.01)).save(path)
    bad = str(tmp_path / "bad.keras")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                data = data.replace(b'"L2"', b'"L7"')
            dst.writestr(item, data)
    with pytest.raises(ValueError, match=r"layer 'd'.*kernel_regularizer.*'l7' is not supported"):
        keras.models.load_model(bad)


def test_a_wrappers_inner_regularizer_is_refused_not_ignored(tmp_path):
    import json
    import os
    import shutil

    here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "tests", "data", "keras_layers", "tfjs")
    shutil.copy(os.path.join(here, "bidirectional_sum.weights.bin"), tmp_path)
    with open(os.path.join(here, "bidirectional_sum.json")) as f:
        doc = json.load(f)
    bidi = next(l for l in doc["modelTopology"]["config"]["layers"]
                if l["class_name"] == "Bidirectional")
    bidi["config"]["layer"]["config"]["kernel_regularizer"] = {"class_name": "L2",
                                                               "config": {"l2": 0.01}}
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="layer's kernel_regularizer is not supported"):
        keras.models.load_model(str(path))
