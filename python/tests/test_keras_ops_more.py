"""keras.ops added after the first set: prod, sort, argsort, top_k,
take_along_axis, scatter, scatter_update, cond, and a where that selects
(an infinity or NaN in the branch not taken never reaches the result).
Traced forms against NumPy, gradients against finite differences, a
sharded run against one device."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers, ops
from autoshard.keras.distribution import DeviceMesh, ModelParallel, LayoutMap, set_distribution
from test_keras_ops import finite_difference_gradient, traced

RNG = np.random.default_rng(11)
A = RNG.normal(size=(4, 3, 5)).astype(np.float32)
B = RNG.normal(size=(4, 3, 5)).astype(np.float32)
TIES = np.array([[[2.0, 1.0, 2.0, -1.0, 1.0]] * 3] * 4, np.float32)
ORDER = np.argsort(RNG.normal(size=(4, 3, 5)), axis=-1).astype(np.int32)

CASES = {  # name: (ops form, NumPy reference, inputs)
    "prod_axis": (lambda a: ops.prod(a, axis=-1), lambda a: np.prod(a, -1), (A,)),
    "prod_axes_keepdims": (lambda a: ops.prod(a, axis=(0, 2), keepdims=True) + a,
                           lambda a: np.prod(a, (0, 2), keepdims=True) + a, (A[:, :, :3],)),
    "prod_all": (lambda a: ops.prod(a[:, :2, :3]) + a[:, 0, 0],
                 lambda a: np.prod(a[:, :2, :3]) + a[:, 0, 0], (A,)),
    "sort": (lambda a: ops.sort(a), lambda a: np.sort(a, -1), (A,)),
    "sort_axis1": (lambda a: ops.sort(a, axis=1), lambda a: np.sort(a, 1), (A,)),
    "sort_ties": (lambda a: ops.sort(a), lambda a: np.sort(a, -1), (TIES,)),
    "argsort_ties": (lambda a: ops.argsort(a),
                     lambda a: np.argsort(a, -1, kind="stable").astype(np.float32), (TIES,)),
    "argsort_axis1": (lambda a: ops.argsort(a, axis=1),
                      lambda a: np.argsort(a, 1, kind="stable").astype(np.float32), (A,)),
    "top_k_values": (lambda a: ops.top_k(a, 3)[0],
                     lambda a: -np.sort(-a, -1, kind="stable")[..., :3], (A,)),
    "top_k_indices_ties": (lambda a: ops.top_k(a, 2)[1],
                           lambda a: np.argsort(-a, -1, kind="stable")[..., :2]
                           .astype(np.float32), (TIES,)),
    "take_along_axis_argsort": (lambda a: ops.take_along_axis(a, ops.argsort(a), axis=-1),
                                lambda a: np.sort(a, -1), (A,)),
    "take_along_axis_ids": (lambda a, i: ops.take_along_axis(a, i, axis=2),
                            lambda a, i: np.take_along_axis(a, i.astype(np.int64), 2),
                            (A, ORDER)),
    "take_along_axis_const": (lambda a: ops.take_along_axis(a, np.array([[[4], [0], [2]]]), 2),
                              lambda a: np.take_along_axis(a, np.array([[[4], [0], [2]]]), 2),
                              (A,)),
    "scatter_const": (lambda a: ops.scatter(np.array([[0, 1], [2, 0], [0, 1]]), a[0, 0, :3],
                                            (3, 2))[None] + a[:, :, :2],
                      lambda a: np.array([[0, a[0, 0, 0] + a[0, 0, 2]], [0, 0],
                                          [a[0, 0, 1], 0]])[None] + a[:, :, :2], (A,)),
    "scatter_update_const": (lambda a: ops.scatter_update(a, np.array([[0, 2], [3, 1]]),
                                                          a[:2, 0] * 10),
                             lambda a: upd(a, [[0, 2], [3, 1]], a[:2, 0] * 10), (A,)),
    "where_select": (lambda a, b: ops.where(a > 0, a, b * 2), lambda a, b: np.where(a > 0, a, b * 2),
                     (A, B)),
}


def upd(a, idx, values):
    out = a.copy()
    for (i, j), v in zip(idx, values):
        out[i, j] = v
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_traced_op_equals_numpy(name):
    fn, reference, arrays = CASES[name]
    want = reference(*[a.astype(np.float64) if a.dtype == np.float32 else a for a in arrays])
    got = traced(fn, *arrays)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_op_equals_numpy(name):
    fn, reference, arrays = CASES[name]
    got = fn(*arrays)
    np.testing.assert_allclose(np.asarray(got, np.float64), reference(*arrays),
                               rtol=2e-5, atol=2e-5)


def test_eager_forms_keep_kerass_types():
    values, idx = ops.top_k(np.array([[1.0, 3.0, 2.0]]), 2)
    assert idx.dtype == np.int32 and idx.tolist() == [[1, 2]]
    assert ops.argsort(np.array([3.0, 1.0])).dtype == np.int32
    np.testing.assert_array_equal(ops.scatter([[1], [1]], [2.0, 3.0], (3,)), [0, 5, 0])
    assert ops.cond(True, lambda: 1, lambda: 2) == 1
    assert ops.cond(np.float32(0), lambda: 1, lambda: 2) == 2


def test_where_takes_neither_inf_nor_nan_from_the_branch_not_taken():
    x = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
    # log of a negative is NaN and 1/0 is inf, but only where not chosen.
    got = traced(lambda a: ops.where(a > 0, ops.log(a), 1.0 / (a * 0.0)), x)
    want = np.where(x > 0, np.log(np.abs(x)), -np.inf)
    np.testing.assert_array_equal(got, want)
    got = traced(lambda a: ops.where(a < 0, a, ops.sqrt(a)) + 1.0, x)  # NaN not taken
    np.testing.assert_allclose(got, np.where(x < 0, x, np.sqrt(np.abs(x))) + 1, rtol=1e-6)
    got = traced(lambda a: ops.where(a < 0, ops.log(a), 0.0), x)  # NaN taken: NaN
    assert np.isnan(got[0, 1]) and got[0, 0] == 0.0


def test_cond_takes_a_python_bool_and_refuses_a_traced_predicate():
    inp = keras.Input((4,))
    out = ops.cond(True, lambda: inp * 2.0, lambda: inp * 3.0)
    model = keras.Model(inp, out)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(model.predict(x, verbose=0), x * 2)

    class Branchy(layers.Layer):
        def call(self, x):
            return ops.cond(ops.sum(x) > 0, lambda: x, lambda: -x)

    with pytest.raises(ValueError, match="ops.cond.*branch on data.*ops.where"):
        model = keras.Sequential([keras.Input((4,)), Branchy()])
        model.predict(x, verbose=0)


def test_cond_on_training_picks_the_branch_per_step():
    # Keras's test_cond_raw_bool_compile: the predicate is the trace's mode.
    class ExampleLayer(layers.Layer):
        def call(self, x, training=False):
            return ops.cond(training, lambda: x, lambda: x * 2.0)

    model = keras.Sequential([keras.Input((4,)), ExampleLayer()])
    model.compile(keras.optimizers.SGD(), keras.losses.MeanSquaredError())
    x = np.ones((2, 4), np.float32)
    y = np.zeros((2, 4), np.float32)
    assert model.evaluate(x, y, batch_size=2, verbose=0) == pytest.approx(4.0)  # x * 2
    assert model.train_on_batch(x, y) == pytest.approx(1.0)  # x


def test_traced_scatter_of_ids_and_its_gradient():
    """ops.scatter with int32 indices from the data is one ScatterAdd; the
    values' gradient (a gather) equals finite differences."""
    ids_in = keras.Input((3, 1), dtype="int32")
    x_in = keras.Input((2,))

    class Scatter(layers.Layer):
        def build(self, shapes):
            self.rows = self.add_weight(shape=(3, 2), initializer="random_normal", name="rows")

        def call(self, inputs):
            ids, x = inputs
            table = ops.scatter(ops.reshape(ids, (3, 1)), self.rows * ops.sum(x), (5, 2))
            return ops.reshape(table, (1, 10))

    out = Scatter()([ids_in, x_in])
    model = keras.Model([ids_in, x_in], out)
    model.compile(keras.optimizers.SGD(learning_rate=1.0), "mse")
    ids = np.array([[[4], [1], [4]]], np.int32)
    x = np.array([[0.5, 0.7]], np.float32)
    rows = model.get_weights()[0]
    want = np.zeros((5, 2))
    np.add.at(want, [4, 1, 4], rows * 1.2)
    np.testing.assert_allclose(model.predict([ids, x], verbose=0), want.reshape(1, 10),
                               rtol=1e-6)
    y = RNG.normal(size=(1, 10)).astype(np.float32)
    grads = finite_difference_gradient(model, [ids, x], y)
    start = model.get_weights()
    model.train_on_batch([ids, x], y)
    np.testing.assert_allclose(start[0] - model.get_weights()[0], grads[0], rtol=2e-2, atol=2e-3)


class Sorter(layers.Layer):
    """A layer whose output goes through every new op."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 6), initializer="glorot_normal",
                                 name="w")

    def call(self, x):
        h = ops.matmul(x, self.w)  # [b, 6]
        values, idx = ops.top_k(h, 4)
        s = ops.sort(h) + ops.take_along_axis(h, ops.argsort(-h), axis=-1)
        p = ops.prod(ops.tanh(h[:, :3]) + 1.5, axis=-1, keepdims=True)
        u = ops.scatter_update(h, np.array([[0, 5]]), ops.ones((1,)) * 0.25)
        return ops.concatenate([values * p, s, u, idx * 0.0], axis=-1)


def sorter_model(learning_rate=0.5):
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((5,)), Sorter(name="sorter")])
    model.compile(keras.optimizers.SGD(learning_rate=learning_rate), "mse")
    return model


def test_gradients_through_sort_top_k_prod_and_scatter_update():
    model = sorter_model()
    x = RNG.normal(size=(6, 5)).astype(np.float32)
    y = RNG.normal(size=(6, 20)).astype(np.float32)
    grads = finite_difference_gradient(model, x, y)
    start = model.get_weights()
    model.train_on_batch(x, y)
    np.testing.assert_allclose(start[0] - model.get_weights()[0], 0.5 * grads[0], rtol=3e-2,
                               atol=3e-3)  # SGD's learning rate 0.5


def test_sharded_run_equals_one_device():
    x = RNG.normal(size=(8, 5)).astype(np.float32)
    y = RNG.normal(size=(8, 20)).astype(np.float32)
    model = sorter_model(0.01)
    one = model.fit(x, y, batch_size=8, epochs=3, verbose=0).history["loss"]
    mesh = DeviceMesh((2, 2), ["data", "model"])
    layout = LayoutMap(mesh)
    layout["sorter/w"] = (None, "model")
    set_distribution(ModelParallel(layout_map=layout, batch_dim_name="data"))
    model = sorter_model(0.01)
    sharded = model.fit(x, y, batch_size=8, epochs=3, verbose=0).history["loss"]
    np.testing.assert_allclose(sharded, one, rtol=1e-5)
    assert one[-1] < one[0]
