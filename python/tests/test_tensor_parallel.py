"""autoshard.TensorParallel: the Keras work's wrapper, planned by AutoShard."""

import numpy as np
import pytest

import autoshard
import autoshard.keras as keras
from autoshard.keras.distribution import AutoShard, DeviceMesh, set_distribution


def make_model():
    # Keras's README model, smaller: Dense layers with input_shape, softmax out.
    return keras.Sequential([
        keras.layers.Dense(64, activation="relu", input_shape=(20,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])


def data(n=64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 20)).astype(np.float32)
    y = (np.abs(x[:, :10]).argmax(axis=1)).astype(np.int64)
    return x, y


def train(model_or_tp, x, y):
    model_or_tp.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                        metrics=["accuracy"])
    history = model_or_tp.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    return (history.history, model_or_tp.evaluate(x, y, batch_size=16, return_dict=True),
            model_or_tp.predict(x, batch_size=16))


def test_tensor_parallel_equals_autoshard_distribution_and_one_device():
    x, y = data()
    keras.utils.set_random_seed(7)
    reference = make_model()
    start = reference.get_weights()

    tp_model = make_model()
    tp_model.set_weights(start)
    tp = autoshard.TensorParallel(tp_model, world_size=4, batch_size=16)
    tp_history, tp_eval, tp_pred = train(tp, x, y)
    mesh = tp.device_mesh
    assert int(np.prod(mesh.shape)) == 4 and "data" in mesh.axis_names
    assert tp.plan.mesh == dict(zip(mesh.axis_names, mesh.shape))
    # The plan keys the engine's paths ("dense.kernel"); model.weights
    # shows Keras 3's ("dense/kernel").
    assert set(tp.plan.layouts) == {w.path.replace("/", ".") for w in tp_model.weights}

    # The same model under set_distribution(AutoShard(mesh)) on that mesh.
    set_distribution(AutoShard(mesh=DeviceMesh(mesh.shape, mesh.axis_names)))
    same = make_model()
    same.set_weights(start)
    same_history, same_eval, same_pred = train(same, x, y)
    set_distribution(None)
    # Two solves of one step under the clock may settle on different, equally
    # valid plans (which of them wins can depend on the machine's load), so
    # the two agree to float tolerance, as each does with one device.
    np.testing.assert_allclose(tp_history["loss"], same_history["loss"], rtol=1e-5)
    np.testing.assert_allclose(tp_eval["loss"], same_eval["loss"], rtol=1e-5)
    np.testing.assert_allclose(tp_pred, same_pred, rtol=1e-4, atol=1e-6)
    for a, b in zip(tp.get_weights(), same.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

    # One device: equal within float tolerance (sums split differently).
    one_history, one_eval, one_pred = train(reference, x, y)
    np.testing.assert_allclose(tp_history["loss"], one_history["loss"], rtol=1e-5)
    np.testing.assert_allclose(tp_eval["loss"], one_eval["loss"], rtol=1e-5)
    np.testing.assert_allclose(tp_pred, one_pred, rtol=1e-4, atol=1e-6)
    assert tp_history["loss"][-1] < tp_history["loss"][0]  # it learns


def two_input_model(as_dict):
    # A functional model of two inputs (Keras's multi-input example, small).
    title, body = keras.Input((12,), name="title"), keras.Input((8,), name="body")
    h = keras.layers.Concatenate()([keras.layers.Dense(16, activation="relu")(title),
                                    keras.layers.Dense(16, activation="relu")(body)])
    out = keras.layers.Dense(4, activation="softmax")(h)
    return keras.Model({"title": title, "body": body} if as_dict else [title, body], out)


@pytest.mark.parametrize("as_dict", [True, False])
def test_tensor_parallel_takes_models_of_several_inputs(as_dict):
    rng = np.random.default_rng(3)
    title = rng.normal(size=(32, 12)).astype(np.float32)
    body = rng.normal(size=(32, 8)).astype(np.float32)
    y = (np.abs(title[:, :4]) + np.abs(body[:, :4])).argmax(axis=1).astype(np.int64)
    x = {"title": title, "body": body} if as_dict else [title, body]
    keras.utils.set_random_seed(11)
    reference = two_input_model(as_dict)
    start = reference.get_weights()
    model = two_input_model(as_dict)
    model.set_weights(start)
    tp = autoshard.TensorParallel(model, world_size=2)
    tp_history, tp_eval, tp_pred = train(tp, x, y)
    assert tuple(tp.device_mesh.shape) == (1, 2) and tp.plan is None
    assert isinstance(tp.distribution, AutoShard)
    one_history, one_eval, one_pred = train(reference, x, y)
    np.testing.assert_allclose(tp_history["loss"], one_history["loss"], rtol=1e-5)
    np.testing.assert_allclose(tp_eval["loss"], one_eval["loss"], rtol=1e-5)
    np.testing.assert_allclose(tp_pred, one_pred, rtol=1e-4, atol=1e-6)
    assert tp_history["loss"][-1] < tp_history["loss"][0]
    for a, b in zip(tp.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_tensor_parallel_arguments():
    model = make_model()
    tp = autoshard.TensorParallel(model, world_size=2, distributed_backend="jax",
                                  use_parameter_sharding=True)
    assert tp.world_size == 2 and tp.plan is None and "not compiled" in repr(tp)
    with pytest.raises(ValueError, match="compile"):
        tp.fit(*data())
    assert tp.count_params() == model.count_params()  # the model's own methods
    for bad in (dict(world_size=0), dict(world_size="2"), dict(distributed_backend="mpi"),
                dict(use_parameter_sharding=False), dict(world_size=2, device_count=3),
                dict(nonsense=1)):
        with pytest.raises(ValueError):
            autoshard.TensorParallel(model, **bad)
    with pytest.raises(ValueError, match="autoshard.keras or autoshard.keras_hub model"):
        autoshard.TensorParallel(object(), world_size=2)
