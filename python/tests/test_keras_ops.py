"""keras.ops: eagerly on NumPy arrays, and traced into the engine's graph
(through a model's predict and training) against NumPy."""

import math

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import ops

RNG = np.random.default_rng(3)
A = RNG.normal(size=(4, 3, 5)).astype(np.float32)
B = RNG.normal(size=(4, 3, 5)).astype(np.float32)
POS = (np.abs(A) + 0.5).astype(np.float32)
M = RNG.normal(size=(4, 5, 2)).astype(np.float32)


def traced(fn, *arrays):
    """fn's result inside the engine: ops on keras.Input results become
    layers of a functional model, run by predict."""
    inputs = [keras.Input(a.shape[1:], dtype="int32" if a.dtype.kind == "i" else "float32")
              for a in arrays]
    model = keras.Model(inputs, fn(*inputs))
    return model.predict(list(arrays) if len(arrays) > 1 else arrays[0], verbose=0)


def erf(x):
    return np.vectorize(math.erf)(x)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


CASES = {  # name: (keras.ops form, NumPy reference, inputs)
    "add": (lambda a, b: ops.add(a, b), np.add, (A, B)),
    "sub_operator": (lambda a, b: a - b * 2.0, lambda a, b: a - b * 2, (A, B)),
    "rsub_neg": (lambda a: 1.0 - (-a), lambda a: 1 + a, (A,)),
    "div": (lambda a, b: a / b, np.divide, (A, POS)),
    "power": (lambda a: ops.power(a, 3), lambda a: a ** 3, (A,)),
    "power_real": (lambda a: a ** 1.5, lambda a: a ** 1.5, (POS,)),
    "exp_log_sqrt": (lambda a: ops.exp(a) + ops.log(a) + ops.sqrt(a),
                     lambda a: np.exp(a) + np.log(a) + np.sqrt(a), (POS,)),
    "square_abs_sign": (lambda a: ops.square(a) + ops.abs(a) * ops.sign(a),
                        lambda a: a * a + np.abs(a) * np.sign(a), (A,)),
    "clip": (lambda a: ops.clip(a, -0.5, 0.3), lambda a: np.clip(a, -0.5, 0.3), (A,)),
    "maximum_minimum": (lambda a, b: ops.maximum(a, b) - 2 * ops.minimum(a, 0.1),
                        lambda a, b: np.maximum(a, b) - 2 * np.minimum(a, 0.1), (A, B)),
    "where": (lambda a, b: ops.where(a > b, a, b * 3),
              lambda a, b: np.where(a > b, a, b * 3), (A, B)),
    "comparisons": (lambda a, b: (ops.greater_equal(a, b) + ops.less(a, 0.2) * 2
                                  + ops.equal(a, a) * 4 + ops.not_equal(a, b) * 8),
                    lambda a, b: ((a >= b) + (a < 0.2) * 2.0 + 4 + (a != b) * 8.0), (A, B)),
    "relu_sigmoid_tanh": (lambda a: ops.relu(a) + ops.sigmoid(a) + ops.tanh(a),
                          lambda a: np.maximum(a, 0) + 1 / (1 + np.exp(-a)) + np.tanh(a), (A,)),
    "silu_gelu": (lambda a: ops.silu(a) + ops.gelu(a, approximate=False),
                  lambda a: a / (1 + np.exp(-a)) + 0.5 * a * (1 + erf(a / np.sqrt(2))), (A,)),
    "softmax_axis1": (lambda a: ops.softmax(a, axis=1), lambda a: softmax(a, 1), (A,)),
    "log_softmax": (lambda a: ops.log_softmax(a), lambda a: np.log(softmax(a)), (A,)),
    "erf": (lambda a: ops.erf(a), erf, (A,)),
    "sum_mean": (lambda a: ops.sum(a, axis=1) + ops.mean(a, axis=1),
                 lambda a: a.sum(1) + a.mean(1), (A,)),
    "sum_keepdims": (lambda a: ops.sum(a, axis=(1, 2), keepdims=True) * a,
                     lambda a: a.sum((1, 2), keepdims=True) * a, (A,)),
    "max_min": (lambda a: ops.max(a, axis=1, keepdims=True) - ops.min(a, axis=-1, keepdims=True)
                + ops.max(a),
                lambda a: a.max(1, keepdims=True) - a.min(-1, keepdims=True) + a.max(), (A,)),
    "var_std": (lambda a: ops.var(a, axis=-1) + ops.std(a, axis=-1),
                lambda a: a.var(-1) + a.std(-1), (A,)),
    "argmax": (lambda a: ops.argmax(a, axis=-1), lambda a: a.argmax(-1).astype(np.float32),
               (A,)),
    "matmul": (lambda a, m: ops.matmul(a, m), np.matmul, (A, M)),
    "matmul_operator": (lambda a, m: a @ m[0], lambda a, m: a @ m[0], (A, M)),
    "matmul_vector": (lambda a, m: ops.matmul(a, m[0, :, 0]), lambda a, m: a @ m[0, :, 0],
                      (A, M)),
    "einsum": (lambda a, b: ops.einsum("btc,bsc->bts", a, b),
               lambda a, b: np.einsum("btc,bsc->bts", a, b), (A, B)),
    "einsum_three": (lambda a, b, m: ops.einsum("btc,bsc,bcd->btd", a, b, m),
                     lambda a, b, m: np.einsum("btc,bsc,bcd->btd", a, b, m), (A, B, M)),
    "dot": (lambda a, m: ops.dot(a, m[0]), lambda a, m: np.dot(a, m[0]), (A, M)),
    "tensordot": (lambda a, b: ops.tensordot(a, b, axes=([1, 2], [1, 2])),
                  lambda a, b: np.tensordot(a, b, axes=([1, 2], [1, 2])), (A, B)),
    "reshape_transpose": (lambda a: ops.transpose(ops.reshape(a, (-1, 5, 3)), (0, 2, 1)),
                          lambda a: a.reshape(-1, 5, 3).transpose(0, 2, 1), (A,)),
    "expand_squeeze": (lambda a: ops.squeeze(ops.expand_dims(a, 1), axis=1) * 2,
                       lambda a: a * 2, (A,)),
    "concatenate_stack": (lambda a, b: ops.concatenate([a, ops.stack([a, b], 1)[:, 1]], -1),
                          lambda a, b: np.concatenate([a, b], -1), (A, B)),
    "split": (lambda a: ops.split(a, [1, 4], axis=-1)[1] + ops.array_split(a, 3, -1)[0][..., :1],
              lambda a: a[..., 1:4] + a[..., :1], (A,)),
    "slicing": (lambda a: a[:, 1:, None, -2] + a[:, :2, None, 0],
                lambda a: a[:, 1:, None, -2] + a[:, :2, None, 0], (A,)),
    "broadcast_tile_repeat": (
        lambda a: ops.broadcast_to(a[:, :1], (4, 2, 5)) + ops.tile(a[:, :1], (1, 2, 1))
        + ops.repeat(a[:, :1], 2, axis=1),
        lambda a: np.broadcast_to(a[:, :1], (4, 2, 5)) + np.tile(a[:, :1], (1, 2, 1))
        + np.repeat(a[:, :1], 2, axis=1), (A,)),
    "take": (lambda a: ops.take(a, [4, 0, 0], axis=2), lambda a: np.take(a, [4, 0, 0], 2), (A,)),
    "cumsum": (lambda a: ops.cumsum(a, axis=1), lambda a: np.cumsum(a, 1), (A,)),
    "zeros_ones_like": (lambda a: ops.ones_like(a) * 3 + ops.zeros_like(a) + a,
                        lambda a: a + 3, (A,)),
    "stop_gradient_cast": (lambda a: ops.stop_gradient(ops.cast(a, "float32")),
                           lambda a: a, (A,)),
    "normalize": (lambda a: ops.normalize(a, axis=-1),
                  lambda a: a / np.linalg.norm(a, axis=-1, keepdims=True), (A,)),
    "keras_activations": (lambda a: keras.activations.relu(a) + keras.activations.softmax(a),
                          lambda a: np.maximum(a, 0) + softmax(a), (A,)),
    "logical": (lambda a, b: ops.logical_and(a > 0, b > 0) + 2 * ops.logical_or(a > 0, b > 0)
                + 4 * ops.logical_not(a > 0),
                lambda a, b: ((a > 0) & (b > 0)) + 2.0 * ((a > 0) | (b > 0)) + 4.0 * (a <= 0),
                (A, B)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_traced_op_equals_numpy(name):
    fn, reference, arrays = CASES[name]
    want = reference(*[a.astype(np.float64) for a in arrays])
    got = traced(fn, *arrays)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_op_equals_numpy(name):
    fn, reference, arrays = CASES[name]
    got = fn(*arrays)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, reference(*[a.astype(np.float64) for a in arrays]),
                               rtol=2e-5, atol=2e-5)


def test_integer_ops_take_ids():
    ids = np.array([[0, 3, 2], [1, 1, 4]], np.int32)
    table = RNG.normal(size=(2, 5, 4)).astype(np.float32)
    got = traced(lambda i: ops.one_hot(i, 5), ids)
    np.testing.assert_array_equal(got, np.eye(5, dtype=np.float32)[ids])
    got = traced(lambda t, i: ops.take(t, i, axis=1), table, ids)
    np.testing.assert_allclose(got, np.take(table, ids, axis=1))
    with pytest.raises(ValueError, match="int32"):
        traced(lambda i: i[:, 0], ids)
    np.testing.assert_array_equal(ops.one_hot(ids, 5), np.eye(5)[ids])


def test_concatenate_joins_many_parts_and_names_a_mismatch():
    parts = [RNG.normal(size=(2, 1, 3)).astype(np.float32) for _ in range(40)]
    got = traced(lambda *xs: ops.concatenate(list(xs), axis=1), *parts)
    np.testing.assert_array_equal(got, np.concatenate(parts, axis=1))
    with pytest.raises(ValueError, match=r"input 1 of shape \(4, 2, 4\) does not match"):
        traced(lambda a, b: ops.concatenate([a, b], axis=1), A, A[:, :2, :4])


def test_shape_convert_and_eager_only_ops():
    assert ops.shape(A) == (4, 3, 5)
    assert ops.convert_to_tensor([1.0, 2.0]).dtype == np.float32
    np.testing.assert_array_equal(ops.convert_to_numpy(A), A)
    values, idx = ops.top_k(np.array([[1.0, 3.0, 2.0]]), 2)
    np.testing.assert_array_equal(idx, [[1, 2]])
    np.testing.assert_array_equal(ops.arange(4), np.arange(4))
    inp = keras.Input((3,))
    with pytest.raises(ValueError, match="convert_to_numpy"):
        ops.convert_to_numpy(inp)


def test_an_op_not_implemented_names_itself():
    with pytest.raises(NotImplementedError, match="keras.ops.fft2"):
        ops.fft2(A)
    assert "matmul" in ops.__all__ and "sum" in ops.__all__


def test_ops_reachable_as_keras_ops():
    from autoshard.keras import ops as same
    assert keras.ops is same


def test_comparisons_take_no_gradient_and_max_shares_its_gradient():
    """A model whose loss goes through a comparison, a maximum and a where
    trains (the comparison takes no gradient, as in Keras), and its
    gradient equals finite differences."""
    inp = keras.Input((3,))
    d = keras.layers.Dense(4, name="d")(inp)
    out = ops.where(d > 0.1, d, d * 0.5) + ops.max(d, axis=-1, keepdims=True)
    model = keras.Model(inp, out)
    model.compile(keras.optimizers.SGD(learning_rate=1.0), "mse")
    x = RNG.normal(size=(8, 3)).astype(np.float32)
    y = RNG.normal(size=(8, 4)).astype(np.float32)
    start = model.get_weights()
    grads = finite_difference_gradient(model, x, y)
    model.train_on_batch(x, y)
    for w0, w1, g in zip(start, model.get_weights(), grads):
        np.testing.assert_allclose(w0 - w1, g, rtol=2e-2, atol=2e-3)


def finite_difference_gradient(model, x, y, eps=1e-3):
    """The loss's gradient by central differences, weight by weight (in
    float64 sums of float32 losses: eps large enough for float32)."""
    weights = [w.astype(np.float64) for w in model.get_weights()]
    out = []
    for k, w in enumerate(weights):
        g = np.zeros_like(w)
        for i in np.ndindex(w.shape):
            losses = []
            for sign in (1, -1):
                trial = [v.copy() for v in weights]
                trial[k][i] += sign * eps
                model.set_weights([v.astype(np.float32) for v in trial])
                losses.append(model.evaluate(x, y, batch_size=len(x), verbose=0))
            g[i] = (losses[0] - losses[1]) / (2 * eps)
        out.append(g)
    model.set_weights([w.astype(np.float32) for w in weights])
    return out
