"""A weight a layer declares but never uses (Keras allows it: the weight is
saved and loaded, and takes no gradient). A sharded step drops what nothing
it computes reads, so such a weight is absent from its partitioned program;
predicting, evaluating and training sharded must still equal one device."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import (AutoShard, DeviceMesh, LayoutMap, ModelParallel,
                                          set_distribution)


class ScaleWithSpare(layers.Layer):
    """x * w; `spare` is declared and never read."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")
        self.spare = self.add_weight(shape=(input_shape[-1], 4), initializer="ones",
                                     name="spare")

    def call(self, x):
        return x * self.w


def model(optimizer):
    keras.utils.set_random_seed(3)
    x = keras.Input((8,))
    out = layers.Dense(2)(ScaleWithSpare(name="scale")(layers.Dense(8)(x)))
    m = keras.Model(x, out)
    m.compile(optimizer, "mse")
    return m


def distribution(kind, mesh):
    if kind == "autoshard":
        return AutoShard(mesh=mesh)
    layout_map = LayoutMap(mesh)
    layout_map["scale.*spare"] = ("model", None)  # the unused weight split too
    layout_map["dense.*kernel"] = (None, "model")
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


@pytest.mark.parametrize("kind", ["autoshard", "layout_map"])
@pytest.mark.parametrize("shape", [(2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_declared_unused_weight_runs_sharded_as_on_one_device(kind, shape, optimizer):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 8)).astype(np.float32)
    y = rng.normal(size=(8, 2)).astype(np.float32)
    single = model(optimizer)
    weights = single.get_weights()
    set_distribution(distribution(kind, DeviceMesh(shape, ("data", "model"))))
    sharded = model(optimizer)
    set_distribution(None)
    sharded.set_weights(weights)
    # A forward pass first: the unused weight is absent from its program.
    np.testing.assert_allclose(sharded.predict(x, verbose=0), single.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sharded.evaluate(x, y, verbose=0),
                               single.evaluate(x, y, verbose=0), rtol=1e-5)
    h1 = single.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h2 = sharded.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h2.history["loss"], h1.history["loss"], rtol=1e-5)
    for a, b in zip(sharded.get_weights(), single.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    spare = sharded.get_layer("scale").spare.numpy()
    np.testing.assert_array_equal(spare, np.ones((8, 4), np.float32))  # no gradient: unchanged
    np.testing.assert_allclose(sharded.predict(x, verbose=0), single.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-6)
