"""keras.distribution on in-process devices, and Python against the C++ API
bit for bit (python/tests/reference_mlp.cc trains the same model)."""

import os
import subprocess

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import (DataParallel, DeviceMesh, LayoutMap, ModelParallel,
                                          set_distribution)


def test_device_mesh_without_devices_uses_in_process_devices():
    mesh = DeviceMesh(shape=(2, 2), axis_names=("data", "model"))
    assert mesh.devices.tolist() == [["cpu:0", "cpu:1"], ["cpu:2", "cpu:3"]]
    assert mesh.axis_names == ("data", "model")
    with pytest.raises(ValueError):
        DeviceMesh(shape=(2, 2), axis_names=("data",))
    with pytest.raises(ValueError):
        DeviceMesh(shape=(2,), axis_names=("data",), devices=["gpu:0", "gpu:1"])


def test_layout_map_follows_keras_lookup():
    mesh = DeviceMesh((1, 2), ("data", "model"))
    layout_map = LayoutMap(mesh)
    layout_map["d1.kernel"] = (None, "model")
    layout_map[".*bias"] = ("model",)
    layout_map["dense.*kernel"] = ("model", None)
    assert layout_map["d1.kernel"].axes == (None, "model")  # exact key wins
    assert layout_map["x.d2.bias"].axes == ("model",)  # re.search, not a full match
    assert layout_map["embedding"] is None
    layout_map["d.*"] = (None, None)
    with pytest.raises(ValueError, match="several"):
        layout_map["dense_3.kernel"]


def make_data(n=48):
    rng = np.random.default_rng(11)
    return (rng.normal(size=(n, 784)).astype(np.float32),
            rng.integers(0, 10, size=n).astype(np.int32))


def reference_model():
    model = keras.Sequential([keras.Input((784,), name="x"),
                              layers.Dense(32, activation="relu", name="d1"),
                              layers.Dense(10, name="d2")])
    model.compile(keras.optimizers.Adam(),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def model_parallel():
    mesh = DeviceMesh(shape=(2, 2), axis_names=("data", "model"))
    layout_map = LayoutMap(mesh)
    layout_map["d1.kernel"] = (None, "model")
    layout_map["d2.kernel"] = ("model", None)
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


@pytest.mark.parametrize("mesh", ["", "data=2,model=2"])
def test_python_equals_the_cpp_api_bit_for_bit(tmp_path, mesh):
    reference = os.environ.get("AUTOSHARD_PY_REFERENCE")
    if not reference:
        pytest.skip("AUTOSHARD_PY_REFERENCE (build/python/autoshard_py_reference) not set")
    if mesh:
        set_distribution(model_parallel())
    model = reference_model()
    x, y = make_data()
    rng = np.random.default_rng(5)
    weights = [(rng.normal(size=w.shape) * 0.1).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    for variable, w in zip(model.weights, weights):
        np.save(tmp_path / f"{variable.path.replace('/', '.')}.npy", w)  # the C++ paths
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    subprocess.run([reference, str(tmp_path)] + ([mesh] if mesh else []), check=True)
    out = tmp_path / "out"
    np.testing.assert_array_equal(np.float32(history.history["loss"]), np.load(out / "loss.npy"))
    np.testing.assert_array_equal(model.predict(x, batch_size=16), np.load(out / "pred.npy"))
    for variable, w in zip(model.weights, model.get_weights()):
        np.testing.assert_array_equal(w, np.load(out / f"{variable.path.replace('/', '.')}.npy"))


def assert_trains_like_one_device(distribution, atol):
    """The reference model built under `distribution` and one built on one
    device, from the same weights, train to the same losses and weights
    (21 examples in batches of 5 and a last of 1: uneven over data=2)."""
    x, y = make_data(21)
    single = reference_model()
    weights = single.get_weights()
    set_distribution(distribution)
    sharded = reference_model()
    sharded.set_weights(weights)
    set_distribution(None)
    h1 = single.fit(x, y, batch_size=5, epochs=2, shuffle=False, verbose=0)
    h2 = sharded.fit(x, y, batch_size=5, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    for a, b in zip(single.get_weights(), sharded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol)


def test_model_parallel_set_before_building_applies_and_matches_one_device():
    # (atol 1e-5, as below: on OpenBLAS's Haswell and Zen kernels (AMD EPYC,
    # Zen 3) two of 25,088 weights moved 3.5e-6 for the same reason, where
    # its Sandybridge kernels, and its Cooperlake ones on Intel Xeons, round
    # them alike.)
    assert_trains_like_one_device(model_parallel(), atol=1e-5)


def test_data_parallel_scope():
    x, y = make_data(32)
    with DataParallel(devices=["cpu:0", "cpu:1"]).scope() as dist:
        assert keras.distribution.distribution() is dist
        model = reference_model()
    assert keras.distribution.distribution() is None
    h = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert h.history["loss"][1] < h.history["loss"][0]


def test_a_tuple_of_axes_splits_a_dimension_over_both():
    """Keras's TensorLayout with a tuple: ("data", "model") splits a weight's
    dimension over all four devices; training matches one device, and axes
    out of the mesh's order are refused by name."""
    mesh = DeviceMesh(shape=(2, 2), axis_names=("data", "model"))
    layout_map = LayoutMap(mesh)
    layout_map["d1.kernel"] = (("data", "model"), None)
    layout_map["d2.kernel"] = (None, ("data", "model"))
    assert layout_map["d1.kernel"].axes == (("data", "model"), None)
    # (atol 1e-5: Adam turns a gradient element near zero into a step whose
    # sign its rounding decides; summed in another order, one of 25,088 moved.)
    assert_trains_like_one_device(
        ModelParallel(layout_map=layout_map, batch_dim_name="data"), atol=1e-5)
    backwards = LayoutMap(mesh)
    backwards["d1.kernel"] = (("model", "data"), None)
    with pytest.raises(ValueError, match="in the mesh's order"):
        set_distribution(ModelParallel(layout_map=backwards, batch_dim_name="data"))
        reference_model()
    set_distribution(None)
