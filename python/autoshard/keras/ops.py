"""keras.ops: Keras 3's operations, on traced tensors and on NumPy arrays.

Inside a custom layer's ``call`` (or a subclassed Model's) every operation
becomes primitives of the engine's step graph (autoshard/ir/ops.h), so a
model written with ops is differentiated, planned and split over devices
like one of stock layers: each op here is composed from the engine's
builders (einsum, add, mul, reductions, pad, reshape, ...) whose sharding
rules and gradients are the engine's own. On NumPy arrays (or numbers) the
same names compute eagerly and return NumPy arrays. On keras.Input results
(a functional model) an op is recorded as a layer of the model.

Names, semantics and where they depart from Keras: docs/python.md ("keras.ops").
"""

import builtins
import functools
import math

import numpy as np

from .. import _native
from ._traced import TracedTensor, Variable, current_trace, dtype_name
from .tensors import KerasTensor

_t = _native.traced

__all__ = []


# --- modes --------------------------------------------------------------------

def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


def _is_traced(a):
    return isinstance(a, (TracedTensor, Variable))


def _keras_op(numpy_fn):
    """Registers a Keras op whose traced form is the decorated function and
    whose eager form (NumPy arrays in, NumPy out) is ``numpy_fn``."""

    def wrap(traced_fn):
        @functools.wraps(traced_fn)
        def op(*args, **kwargs):
            flat = list(_flat(args)) + list(_flat(kwargs.values()))
            if any(_is_traced(a) for a in flat):
                return traced_fn(*args, **kwargs)
            if any(isinstance(a, KerasTensor) for a in flat):
                return _symbolic(op, args, kwargs)
            if current_trace() is not None and traced_fn.__name__ in _CREATION:
                return traced_fn(*args, **kwargs)  # tensors made inside a call (arange)
            if numpy_fn is None:
                raise ValueError(f"ops.{traced_fn.__name__} is supported inside a layer's call "
                                 "only")
            return numpy_fn(*args, **kwargs)

        __all__.append(traced_fn.__name__)
        return op

    return wrap


# Ops that make a tensor from numbers: traced when called inside a call.
_CREATION = {"arange", "zeros", "ones", "full", "eye"}


def _symbolic(op, args, kwargs):
    """``op`` on keras.Input results: a layer of the functional model that
    runs ``op`` on its inputs when the model is traced (a split: one layer
    per part, each taking its part)."""
    from .layers import OpLayer
    if op.__name__ in ("split", "array_split", "top_k"):
        if op.__name__ == "top_k":  # (values, indices)
            count = 2
        else:
            sections = args[1] if len(args) > 1 else kwargs["indices_or_sections"]
            count = sections if isinstance(sections, int) else len(sections) + 1

        def part(i):
            def take_part(*a, **k):
                return op(*a, **k)[i]
            take_part.__name__ = op.__name__
            return OpLayer(take_part, args, kwargs).output
        return [part(i) for i in range(count)]
    return OpLayer(op, args, kwargs).output


def _not_implemented(name):
    def missing(*args, **kwargs):
        raise NotImplementedError(f"keras.ops.{name} is not implemented in autoshard.keras "
                                  "(docs/python.md lists the ops there are)")
    missing.__name__ = name
    return missing


# --- traced values ---------------------------------------------------------------

def _trace():
    trace = current_trace()
    if trace is None:
        raise ValueError("ops: traced tensors are used outside the call that made them")
    return trace


def _v(x):
    """x's engine Value: a traced tensor's, a variable's in this trace, or a
    constant made of a number (or a NumPy array holding one value)."""
    if isinstance(x, TracedTensor):
        return x._value
    if isinstance(x, Variable):
        return x.value()._value
    a = np.asarray(x, dtype=np.float32)
    if a.size and np.all(a == a.reshape(-1)[0]):
        return _t.constant(_trace(), list(a.shape), float(a.reshape(-1)[0]))
    raise ValueError(f"ops: a constant array of shape {a.shape} with differing values cannot "
                     "enter a traced call (only numbers and arrays of one value can); make it "
                     "a weight with add_weight(trainable=False) and set_weights")


def _w(value):
    return TracedTensor(value)


def _shape(x):
    return tuple(_v(x).shape)


def _axis(axis, rank):
    a = int(axis)
    if not -rank <= a < builtins.max(rank, 1):
        raise ValueError(f"ops: axis {axis} is out of range for a tensor of rank {rank}")
    return a % rank if rank else 0


def _axes(axis, rank):
    if axis is None:
        return list(range(rank))
    axes = [axis] if isinstance(axis, int) else list(axis)
    return sorted({_axis(a, rank) for a in axes})


def _const(like, value):
    return _t.constant(_trace(), list(_shape(like)), float(value))


# --- arithmetic -------------------------------------------------------------------

@_keras_op(np.add)
def add(x1, x2):
    return _w(_t.add(_v(x1), _v(x2)))


@_keras_op(np.subtract)
def subtract(x1, x2):
    return _w(_t.sub(_v(x1), _v(x2)))


@_keras_op(np.multiply)
def multiply(x1, x2):
    return _w(_t.mul(_v(x1), _v(x2)))


@_keras_op(np.true_divide)
def divide(x1, x2):
    return _w(_t.div(_v(x1), _v(x2)))


true_divide = divide
__all__.append("true_divide")


@_keras_op(np.negative)
def negative(x):
    return _w(_t.scale(_v(x), -1.0))


@_keras_op(np.power)
def power(x1, x2):
    if isinstance(x2, (int, float)) and not isinstance(x2, bool):
        if x2 == 2:
            return square(x1)
        if x2 == 0.5:
            return sqrt(x1)
        if x2 == 1:
            return x1
        if x2 == -1:
            return divide(1.0, x1)
        if float(x2).is_integer() and 0 < x2 <= 8:
            out = x1
            for _ in range(int(x2) - 1):
                out = multiply(out, x1)
            return out
    # exp(x2 log x1): positive bases only (documented).
    return exp(multiply(x2, log(x1)))


def _unary(name, np_fn):
    @_keras_op(np_fn)
    def op(x):
        return _w(_t.unary(_v(x), name, 0.0))
    op.__name__ = op.__qualname__ = name
    __all__[-1] = name
    return op


def _np_erf(x):
    return np.vectorize(math.erf, otypes=[np.float32])(np.asarray(x, np.float32))


exp = _unary("exp", np.exp)
log = _unary("log", np.log)
sqrt = _unary("sqrt", np.sqrt)
rsqrt = _unary("rsqrt", lambda x: 1.0 / np.sqrt(x))
square = _unary("square", np.square)
abs = _unary("abs", np.abs)  # noqa: A001 (Keras's name)
absolute = abs
__all__.append("absolute")


@_keras_op(np.sign)
def sign(x):
    return subtract(greater(x, 0.0), less(x, 0.0))


@_keras_op(np.reciprocal)
def reciprocal(x):
    return divide(1.0, x)


@_keras_op(lambda x: np.log(1 + x))
def log1p(x):
    return log(add(x, 1.0))


@_keras_op(lambda x: np.exp(x) - 1)
def expm1(x):
    return subtract(exp(x), 1.0)


@_keras_op(_np_erf)
def erf(x):
    # Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7, float32's
    # rounding): the engine has no erf primitive; this composes exp, abs
    # and sign, with their gradients.
    a = abs(x)
    t = divide(1.0, add(multiply(a, 0.3275911), 1.0))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 +
                                                                           t * 1.061405429))))
    return multiply(sign(x), subtract(1.0, multiply(poly, exp(negative(square(x))))))


# --- comparisons and selection (float 0/1 results) ------------------------------------

def _step(d):
    """1 where d > 0, else 0 (relu_grad(d, 1)); takes no gradient."""
    v = _v(d)
    return _w(_t.relu_grad(v, _t.constant(_trace(), list(v.shape), 1.0)))


@_keras_op(lambda a, b: np.greater(a, b))
def greater(x1, x2):
    return _step(subtract(x1, x2))


@_keras_op(lambda a, b: np.less(a, b))
def less(x1, x2):
    return _step(subtract(x2, x1))


@_keras_op(lambda a, b: np.greater_equal(a, b))
def greater_equal(x1, x2):
    return subtract(1.0, less(x1, x2))


@_keras_op(lambda a, b: np.less_equal(a, b))
def less_equal(x1, x2):
    return subtract(1.0, greater(x1, x2))


@_keras_op(lambda a, b: np.equal(a, b))
def equal(x1, x2):
    return subtract(1.0, add(greater(x1, x2), less(x1, x2)))


@_keras_op(lambda a, b: np.not_equal(a, b))
def not_equal(x1, x2):
    return add(greater(x1, x2), less(x1, x2))


@_keras_op(np.logical_and)
def logical_and(x1, x2):
    return multiply(not_equal(x1, 0.0), not_equal(x2, 0.0))


@_keras_op(np.logical_or)
def logical_or(x1, x2):
    return maximum(not_equal(x1, 0.0), not_equal(x2, 0.0))


@_keras_op(np.logical_not)
def logical_not(x):
    return equal(x, 0.0)


@_keras_op(np.logical_xor)
def logical_xor(x1, x2):
    return not_equal(not_equal(x1, 0.0), not_equal(x2, 0.0))


def _np_where(condition, x1=None, x2=None):
    if x1 is None or x2 is None:
        return np.where(condition)
    return np.where(condition, x1, x2)


@_keras_op(_np_where)
def where(condition, x1=None, x2=None):
    if x1 is None or x2 is None:
        raise ValueError("ops.where(condition) (the indices form) is not supported inside a "
                         "layer's call: give x1 and x2")
    c = not_equal(condition, 0.0)
    return add(_select(c, x1), _select(subtract(1.0, c), x2))


def _select(mask, x):
    """x where mask (0 or 1) is 1, else 0, broadcast together: relu_grad
    is the engine's select (``mask <= 0 ? 0 : x``), so an infinity or a NaN
    where the mask is 0 never reaches the result (a product would give NaN),
    and x's gradient is masked the same way; the mask takes none."""
    return _w(_t.relu_grad(_v(mask), _v(x)))


@_keras_op(np.maximum)
def maximum(x1, x2):
    return add(x1, relu(subtract(x2, x1)))


@_keras_op(np.minimum)
def minimum(x1, x2):
    return subtract(x1, relu(subtract(x1, x2)))


@_keras_op(np.clip)
def clip(x, x_min, x_max):
    return minimum(maximum(x, x_min), x_max)


# --- activations ------------------------------------------------------------------------

def _np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float32)))


def _np_softmax(x, axis=-1):
    x = np.asarray(x, np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_log_softmax(x, axis=-1):
    x = np.asarray(x, np.float32)
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def _np_gelu(x, approximate=True):
    x = np.asarray(x, np.float32)
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _np_erf(x / np.sqrt(2)))


@_keras_op(lambda x: np.maximum(x, 0))
def relu(x):
    return _w(_t.relu(_v(x)))


@_keras_op(_np_sigmoid)
def sigmoid(x):
    return _w(_t.sigmoid(_v(x)))


@_keras_op(np.tanh)
def tanh(x):
    return _w(_t.tanh(_v(x)))


@_keras_op(lambda x: x * _np_sigmoid(x))
def silu(x):
    return _w(_t.silu(_v(x)))


swish = silu
__all__.append("swish")


@_keras_op(_np_gelu)
def gelu(x, approximate=True):
    return _w(_t.gelu(_v(x), bool(approximate)))


@_keras_op(lambda x: np.logaddexp(0, x))
def softplus(x):
    return _w(_t.unary(_v(x), "softplus", 0.0))


@_keras_op(lambda x: -np.logaddexp(0, -x))
def log_sigmoid(x):
    return negative(softplus(negative(x)))


@_keras_op(lambda x, negative_slope=0.2: np.where(x >= 0, x, negative_slope * x))
def leaky_relu(x, negative_slope=0.2):
    return _w(_t.unary(_v(x), "leaky_relu", float(negative_slope)))


@_keras_op(lambda x, alpha=1.0: np.where(x >= 0, x, alpha * (np.exp(x) - 1)))
def elu(x, alpha=1.0):
    return _w(_t.unary(_v(x), "elu", float(alpha)))


@_keras_op(lambda x: np.clip(x, 0, 6))
def relu6(x):
    return _w(_t.unary(_v(x), "relu6", 0.0))


@_keras_op(lambda x: x / (1 + np.abs(x)))
def softsign(x):
    return _w(_t.unary(_v(x), "softsign", 0.0))


def _last_axis(fn, x, axis):
    """fn over ``axis``: the engine's softmax-like ops work on the last axis."""
    v = _v(x)
    rank = len(v.shape)
    a = _axis(axis, rank)
    if a == rank - 1:
        return _w(fn(v))
    perm = [i for i in range(rank) if i != a] + [a]
    back = list(np.argsort(perm))
    return _w(_t.transpose(fn(_t.transpose(v, perm)), back))


@_keras_op(_np_softmax)
def softmax(x, axis=-1):
    return _last_axis(_t.softmax, x, axis)


@_keras_op(_np_log_softmax)
def log_softmax(x, axis=-1):
    return _last_axis(_t.log_softmax, x, axis)


def activation(x, name):
    """keras.activations' function ``name`` on a traced tensor or a model's
    tensor (the engine's activation of that name)."""
    if isinstance(x, KerasTensor):
        def apply(t):
            return activation(t, name)
        apply.__name__ = name
        return _symbolic(apply, (x,), {})
    return _w(_t.activation(_v(x), name))


# --- reductions ----------------------------------------------------------------------

def _keep(out, x, axes, keepdims):
    if not keepdims:
        return out
    shape = [1 if i in axes else d for i, d in enumerate(_shape(x))]
    return _w(_t.reshape(_v(out), shape))


@_keras_op(lambda x, axis=None, keepdims=False: np.sum(x, axis=_np_axis(axis),
                                                      keepdims=keepdims))
def sum(x, axis=None, keepdims=False):  # noqa: A001 (Keras's name)
    axes = _axes(axis, len(_shape(x)))
    return _keep(_w(_t.reduce_sum(_v(x), axes)), x, axes, keepdims)


@_keras_op(lambda x, axis=None, keepdims=False: np.mean(x, axis=_np_axis(axis),
                                                       keepdims=keepdims))
def mean(x, axis=None, keepdims=False):
    shape = _shape(x)
    axes = _axes(axis, len(shape))
    count = math.prod(shape[a] for a in axes)
    return _w(_t.scale(_v(sum(x, axes, keepdims)), 1.0 / count))


def _np_axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _stop(x):
    # row_max over a trailing axis of one: x itself, taking no gradient.
    v = _v(x)
    return _w(_t.reshape(_t.row_max(_t.reshape(v, list(v.shape) + [1])), list(v.shape)))


def _reduce_max(x, axes):
    """The maximum over ``axes`` (kept, as ones), with the gradient shared
    among the elements that reach it (JAX's rule)."""
    v = _v(x)
    shape = list(v.shape)
    rest = [i for i in range(len(shape)) if i not in axes]
    moved = _t.transpose(v, rest + axes) if axes != list(range(len(shape)))[-len(axes):] else v
    moved = _t.reshape(moved, [shape[i] for i in rest] + [math.prod(shape[a] for a in axes)])
    top = _t.row_max(moved)
    kept = [1 if i in axes else d for i, d in enumerate(shape)]
    top = _w(_t.reshape(top, kept))
    hit = equal(x, top)
    return divide(sum(multiply(x, hit), axes, True), sum(hit, axes, True))


@_keras_op(lambda x, axis=None, keepdims=False, initial=None: np.max(
    x, axis=_np_axis(axis), keepdims=keepdims, initial=initial))
def max(x, axis=None, keepdims=False, initial=None):  # noqa: A001
    axes = _axes(axis, len(_shape(x)))
    out = _reduce_max(x, axes)
    if initial is not None:
        out = maximum(out, initial)
    return out if keepdims else _w(_t.reshape(_v(out), [d for i, d in enumerate(_shape(x))
                                                        if i not in axes]))


amax = max
__all__.append("amax")


@_keras_op(lambda x, axis=None, keepdims=False, initial=None: np.min(
    x, axis=_np_axis(axis), keepdims=keepdims, initial=initial))
def min(x, axis=None, keepdims=False, initial=None):  # noqa: A001
    return negative(max(negative(x), axis, keepdims,
                        None if initial is None else -initial))


amin = min
__all__.append("amin")


@_keras_op(lambda x, axis=None, keepdims=False: np.var(x, axis=_np_axis(axis),
                                                      keepdims=keepdims))
def var(x, axis=None, keepdims=False):
    centered = subtract(x, mean(x, axis, True))
    return mean(square(centered), axis, keepdims)


@_keras_op(lambda x, axis=None, keepdims=False: np.std(x, axis=_np_axis(axis),
                                                      keepdims=keepdims))
def std(x, axis=None, keepdims=False):
    return sqrt(var(x, axis, keepdims))


def _np_arg(fn):
    return lambda x, axis=None, keepdims=False: np.asarray(
        fn(x, axis=axis, keepdims=keepdims), np.int32)


@_keras_op(_np_arg(np.argmax))
def argmax(x, axis=None, keepdims=False):
    # The first index of the maximum, as float32 (the engine's integers are
    # ids only; docs/python.md).
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    rank = len(_shape(x))
    a = _axis(axis, rank)
    n = _shape(x)[a]
    hit = equal(x, max(x, a, True))
    index = _positions(n, a, rank)
    return min(add(multiply(hit, index), multiply(subtract(1.0, hit), float(n))), a, keepdims)


@_keras_op(_np_arg(np.argmin))
def argmin(x, axis=None, keepdims=False):
    return argmax(negative(x), axis, keepdims)


# --- products -------------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _two_operand_einsum(equation, a, b):
    return _w(_t.einsum(equation, _v(a), _v(b)))


def _np_einsum(subscripts, *operands, **kwargs):
    return np.einsum(subscripts, *operands, **kwargs)


@_keras_op(_np_einsum)
def einsum(subscripts, *operands, **kwargs):
    eq = subscripts.replace(" ", "")
    if "..." in eq:
        raise ValueError("ops.einsum: ellipses ('...') are not supported inside a layer's "
                         "call; name every axis")
    if "->" not in eq:  # numpy's implicit output: the letters seen once, sorted
        ins = eq.split(",")
        seen = "".join(ins)
        eq += "->" + "".join(sorted(c for c in set(seen) if seen.count(c) == 1))
    lhs, out = eq.split("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"ops.einsum: '{subscripts}' names {len(ins)} operands, got "
                         f"{len(operands)}")
    if len(ins) == 1:
        return _one_operand_einsum(ins[0], out, operands[0])
    acc, acc_letters = operands[0], ins[0]
    for k in range(1, len(ins)):
        later = "".join(ins[k + 1:]) + out
        keep = "".join(dict.fromkeys(c for c in acc_letters + ins[k]
                                     if c in later)) if k < len(ins) - 1 else out
        acc = _two_operand_einsum(f"{acc_letters},{ins[k]}->{keep}", acc, operands[k])
        acc_letters = keep
    return acc


def _one_operand_einsum(letters, out, x):
    summed = [i for i, c in enumerate(letters) if c not in out]
    y = sum(x, summed) if summed else x
    rest = [c for c in letters if c in out]
    return transpose(y, [rest.index(c) for c in out]) if rest != list(out) else y


def _np_matmul(x1, x2):
    return np.matmul(x1, x2)


@_keras_op(_np_matmul)
def matmul(x1, x2):
    ra, rb = len(_shape(x1)), len(_shape(x2))
    if ra == 1 or rb == 1:
        if rb == 1:
            return einsum(f"{_LETTERS[:ra - 1]}k,k->{_LETTERS[:ra - 1]}", x1, x2)
        return einsum(f"k,{_LETTERS[:rb - 2]}kn->{_LETTERS[:rb - 2]}n", x1, x2)
    batch = builtins.max(ra, rb) - 2
    bshape = np.broadcast_shapes(_shape(x1)[:-2], _shape(x2)[:-2])
    if ra - 2 != batch or _shape(x1)[:-2] != bshape:
        x1 = broadcast_to(x1, bshape + _shape(x1)[-2:])
    if rb - 2 != batch or _shape(x2)[:-2] != bshape:
        x2 = broadcast_to(x2, bshape + _shape(x2)[-2:])
    b = _LETTERS[:batch]
    return einsum(f"{b}xy,{b}yz->{b}xz", x1, x2)


@_keras_op(np.dot)
def dot(x1, x2):
    ra, rb = len(_shape(x1)), len(_shape(x2))
    if ra == 0 or rb == 0:
        return multiply(x1, x2)
    if rb == 1:
        return matmul(x1, x2)
    a = _LETTERS[:ra - 1]
    b = _LETTERS[ra - 1:ra + rb - 3]
    return einsum(f"{a}z,{b}z{_LETTERS[ra + rb - 3]}->{a}{b}{_LETTERS[ra + rb - 3]}", x1, x2)


@_keras_op(lambda x1, x2, axes=2: np.tensordot(x1, x2, axes))
def tensordot(x1, x2, axes=2):
    ra, rb = len(_shape(x1)), len(_shape(x2))
    if isinstance(axes, int):
        axes = (list(range(ra - axes, ra)), list(range(axes)))
    ax1 = [_axis(a, ra) for a in _as_list(axes[0])]
    ax2 = [_axis(a, rb) for a in _as_list(axes[1])]
    la = list(_LETTERS[:ra])
    lb = list(_LETTERS[ra:ra + rb])
    for i, j in zip(ax1, ax2):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in ax1] + [c for j, c in enumerate(lb)
                                                           if j not in ax2]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", x1, x2)


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


# --- shapes ---------------------------------------------------------------------------

def _np_reshape(x, newshape):
    return np.reshape(x, newshape)


@_keras_op(_np_reshape)
def reshape(x, newshape):
    shape = _shape(x)
    new = [int(d) for d in (newshape if isinstance(newshape, (list, tuple)) else [newshape])]
    if new.count(-1) > 1:
        raise ValueError(f"ops.reshape: at most one -1 in newshape, got {tuple(newshape)}")
    if -1 in new:
        known = math.prod(d for d in new if d != -1)
        new[new.index(-1)] = math.prod(shape) // known if known else 0
    if math.prod(new) != math.prod(shape):
        raise ValueError(f"ops.reshape: cannot reshape {shape} to {tuple(newshape)}")
    return _w(_t.reshape(_v(x), new))


@_keras_op(lambda x, axes=None: np.transpose(x, axes))
def transpose(x, axes=None):
    rank = len(_shape(x))
    perm = list(range(rank))[::-1] if axes is None else [_axis(a, rank) for a in axes]
    if perm == list(range(rank)):
        return x if isinstance(x, TracedTensor) else _w(_v(x))
    return _w(_t.transpose(_v(x), perm))


@_keras_op(np.expand_dims)
def expand_dims(x, axis):
    shape = list(_shape(x))
    for a in sorted(_axis(a, len(shape) + len(_as_list(axis))) for a in _as_list(axis)):
        shape.insert(a, 1)
    return reshape(x, shape)


@_keras_op(lambda x, axis=None: np.squeeze(x, axis=_np_axis(axis)))
def squeeze(x, axis=None):
    shape = _shape(x)
    axes = [i for i, d in enumerate(shape) if d == 1] if axis is None else \
        _axes(axis, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"ops.squeeze: axis {a} of a tensor of shape {shape} is not 1")
    return reshape(x, [d for i, d in enumerate(shape) if i not in axes])


def _slice(x, axis, begin, end):
    """Positions [begin, end) of ``axis`` (pad with negative amounts crops)."""
    shape = _shape(x)
    if dtype_name(_v(x)) != "float32":
        raise ValueError("slicing and splitting int32 tensors inside a layer's call is not "
                         "supported (int32 tensors are ids: give them whole to Embedding, "
                         "take or one_hot)")
    if begin == 0 and end == shape[axis]:
        return x if isinstance(x, TracedTensor) else _w(_v(x))
    lo = [0] * len(shape)
    hi = [0] * len(shape)
    lo[axis], hi[axis] = -begin, end - shape[axis]
    return _w(_t.pad(_v(x), lo, hi))


@_keras_op(lambda xs, axis=0: np.concatenate(xs, axis=axis))
def concatenate(xs, axis=0):
    xs = [x if _is_traced(x) else _w(_v(x)) for x in xs]
    a = _axis(axis, len(_shape(xs[0])))
    first = tuple(_shape(xs[0]))
    for i, x in enumerate(xs[1:], 1):
        shape = tuple(_shape(x))
        if len(shape) != len(first) or shape[:a] + shape[a + 1:] != first[:a] + first[a + 1:]:
            raise ValueError(f"ops.concatenate: input {i} of shape {shape} does not match input 0 "
                             f"of shape {first} off axis {a}; every dimension but the joined "
                             "one must be equal")
    return _w(_t.concat([_v(x) for x in xs], a))


@_keras_op(lambda xs, axis=0: np.stack(xs, axis=axis))
def stack(xs, axis=0):
    return concatenate([expand_dims(x, axis) for x in xs], axis)


def _split_points(n, indices_or_sections, even):
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if even and n % k:
            raise ValueError(f"ops.split: {n} positions do not split into {k} equal parts "
                             "(use array_split)")
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        return list(np.cumsum([0] + sizes))
    return [0] + [int(i) for i in indices_or_sections] + [n]


@_keras_op(lambda x, indices_or_sections, axis=0: np.split(x, indices_or_sections, axis))
def split(x, indices_or_sections, axis=0):
    a = _axis(axis, len(_shape(x)))
    pts = _split_points(_shape(x)[a], indices_or_sections, True)
    return [_slice(x, a, b, e) for b, e in zip(pts[:-1], pts[1:])]


@_keras_op(lambda x, indices_or_sections, axis=0: np.array_split(x, indices_or_sections, axis))
def array_split(x, indices_or_sections, axis=0):
    a = _axis(axis, len(_shape(x)))
    pts = _split_points(_shape(x)[a], indices_or_sections, False)
    return [_slice(x, a, b, e) for b, e in zip(pts[:-1], pts[1:])]


@_keras_op(lambda x, axis=0: list(np.moveaxis(np.asarray(x), axis, 0)))
def unstack(x, num=None, axis=0):
    a = _axis(axis, len(_shape(x)))
    return [squeeze(p, a) for p in split(x, _shape(x)[a], a)]


@_keras_op(np.broadcast_to)
def broadcast_to(x, shape):
    shape = [int(d) for d in shape]
    have = list(_shape(x))
    v = _v(x)
    if len(have) < len(shape):
        v = _t.reshape(v, [1] * (len(shape) - len(have)) + have)
    return _w(_t.broadcast_to(v, shape))


@_keras_op(np.tile)
def tile(x, repeats):
    shape = list(_shape(x))
    reps = _as_list(repeats)
    shape = [1] * (len(reps) - len(shape)) + shape
    reps = [1] * (len(shape) - len(reps)) + [int(r) for r in reps]
    y = reshape(x, [d for s in shape for d in (1, s)])
    y = broadcast_to(y, [d for r, s in zip(reps, shape) for d in (r, s)])
    return reshape(y, [r * s for r, s in zip(reps, shape)])


@_keras_op(lambda x, repeats, axis=None: np.repeat(x, repeats, axis))
def repeat(x, repeats, axis=None):
    if not isinstance(repeats, int):
        raise ValueError("ops.repeat: repeats must be one integer inside a layer's call")
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    shape = list(_shape(x))
    a = _axis(axis, len(shape))
    y = expand_dims(x, a + 1)
    y = broadcast_to(y, shape[:a + 1] + [repeats] + shape[a + 1:])
    return reshape(y, shape[:a] + [shape[a] * repeats] + shape[a + 1:])


def _getitem(x, key):
    """x[key] for ints, slices of step 1, Ellipsis and None (numpy's basic indexing)."""
    if not isinstance(x, TracedTensor) and not isinstance(x, Variable):
        return _symbolic(_getitem, (x, key), {})
    key = key if isinstance(key, tuple) else (key,)
    shape = _shape(x)
    used = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if builtins.sum(1 for k in key if k is Ellipsis) > 1 or used > len(shape):
        raise IndexError(f"too many indices for a tensor of shape {shape}: {key}")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded += [slice(None)] * (len(shape) - used)
        else:
            expanded.append(k)
    expanded += [slice(None)] * (len(shape) - builtins.sum(1 for k in expanded if k is not None))
    out, axis, final = x, 0, []
    for k in expanded:
        if k is None:
            final.append(1)
            continue
        n = shape[axis]
        if isinstance(k, (int, np.integer)):
            i = int(k) + n if k < 0 else int(k)
            if not 0 <= i < n:
                raise IndexError(f"index {k} is out of range for axis {axis} of size {n}")
            out = _slice(out, axis, i, i + 1)
        elif isinstance(k, slice):
            begin, end, step = k.indices(n)
            if step != 1:
                raise ValueError("tensor slicing inside a layer's call takes steps of 1 only")
            end = builtins.max(begin, end)
            out = _slice(out, axis, begin, end)
            final.append(end - begin)
        else:
            raise TypeError(f"tensor indices inside a layer's call are ints, slices, None and "
                            f"..., not {type(k).__name__} (use ops.take for gathers)")
        axis += 1
    return reshape(out, final)


# --- gathers and constants ----------------------------------------------------------------

def _eye(n):
    """The identity [n, n] from constants: ones [n, 1] padded to rows of n + 1
    (a one, then zeros), flattened, cut to n * n and folded into rows of n."""
    trace = _trace()
    ones = _t.constant(trace, [n, 1], 1.0)
    flat = _t.reshape(_t.pad(ones, [0, 0], [0, n]), [n * (n + 1)])
    return _t.reshape(_t.pad(flat, [0], [-n]), [n, n])


def _upper(n):
    """U [n, n], U[i, j] = 1 where j >= i: rows of n ones then n zeros,
    read with a stride of 2n - 1 (row i starts i places earlier)."""
    trace = _trace()
    rows = _t.pad(_t.constant(trace, [n, n], 1.0), [0, 0], [0, n])
    flat = _t.pad(_t.reshape(rows, [2 * n * n]), [0], [-n])  # n (2n - 1) elements
    shifted = _t.reshape(_t.pad(flat, [0], [0]), [n, 2 * n - 1])
    return _t.pad(shifted, [0, 0], [0, -(n - 1)])


def _positions(n, axis, rank):
    """0, 1, ..., n - 1 (float32) along ``axis`` of a rank-``rank`` tensor."""
    counts = _t.reduce_sum(_upper(n), [0])  # 1 .. n
    shape = [1] * rank
    shape[axis] = n
    return _w(_t.reshape(_t.add(counts, _t.constant(_trace(), [], -1.0)), shape))


def _np_one_hot(x, num_classes, axis=-1, dtype=None, sparse=False):
    x = np.asarray(x)
    out = (x[..., None] == np.arange(num_classes)).astype(dtype or np.float32)
    return np.moveaxis(out, -1, axis) if axis != -1 else out


@_keras_op(_np_one_hot)
def one_hot(x, num_classes, axis=-1, dtype=None, sparse=False):
    v = _v(x)
    if dtype_name(v) != "int32":
        raise ValueError("ops.one_hot inside a layer's call takes int32 ids (an int32 input "
                         "or ops.arange); float class ids cannot be converted there")
    out = _w(_t.gather(_eye(int(num_classes)), v))
    rank = len(v.shape) + 1
    return out if _axis(axis, rank) == rank - 1 else \
        transpose(out, _moved_last(rank, _axis(axis, rank)))


def _moved_last(rank, axis):
    perm = list(range(rank - 1))
    perm.insert(axis, rank - 1)
    return perm


def _np_take(x, indices, axis=None):
    return np.take(x, np.asarray(indices).astype(np.int64), axis=axis)


@_keras_op(_np_take)
def take(x, indices, axis=None):
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    shape = _shape(x)
    a = _axis(axis, len(shape))
    if _is_traced(indices):
        ids = _v(indices)
        front = x if a == 0 else transpose(x, [a] + [i for i in range(len(shape)) if i != a])
        out = _w(_t.gather(_v(front), ids))
        k = len(ids.shape)
        if a == 0:
            return out
        # [ids..., a's neighbours...] back to x's order with ids in place of a.
        perm = list(range(k, k + a)) + list(range(k)) + list(range(k + a, len(shape) - 1 + k))
        return transpose(out, perm)
    idx = np.asarray(indices)
    parts = [_slice(x, a, int(i) % shape[a], int(i) % shape[a] + 1) for i in idx.reshape(-1)]
    out = concatenate(parts, a)
    return reshape(out, list(shape[:a]) + list(idx.shape) + list(shape[a + 1:]))


def _np_arange(start, stop=None, step=1, dtype=None):
    return np.arange(start, stop, step, dtype=dtype)


@_keras_op(_np_arange)
def arange(start, stop=None, step=1, dtype=None):
    if current_trace() is None:
        return _np_arange(start, stop, step, dtype)
    if stop is None:
        start, stop = 0, start
    n = builtins.max(0, math.ceil((stop - start) / step))
    ints = all(isinstance(v, int) for v in (start, stop, step))
    if (dtype is None and ints) or (dtype is not None and "int" in str(np.dtype(dtype))):
        if start != 0 or step != 1:
            raise ValueError("ops.arange of integers inside a layer's call starts at 0 with "
                             "step 1 (the engine's integers are ids)")
        return _w(_t.iota(_trace(), [n]))
    pos = _positions(n, 0, 1)
    return add(multiply(pos, float(step)), float(start))


@_keras_op(lambda x, axis=None: np.cumsum(x, axis=axis))
def cumsum(x, axis=None, dtype=None):
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    rank = len(_shape(x))
    a = _axis(axis, rank)
    n = _shape(x)[a]
    letters = list(_LETTERS[:rank])
    out = letters.copy()
    out[a] = "z"
    return _two_operand_einsum(f"{''.join(letters)},{letters[a]}z->{''.join(out)}", x,
                               _w(_upper(n)))


@_keras_op(lambda x, dtype=None: np.zeros_like(x, dtype=dtype))
def zeros_like(x, dtype=None):
    return _w(_const(x, 0.0))


@_keras_op(lambda x, dtype=None: np.ones_like(x, dtype=dtype))
def ones_like(x, dtype=None):
    return _w(_const(x, 1.0))


@_keras_op(lambda x, fill_value, dtype=None: np.full_like(x, fill_value, dtype=dtype))
def full_like(x, fill_value, dtype=None):
    return _w(_const(x, fill_value))


def _np_fill(value):
    return lambda shape, dtype=None: np.full(shape, value, dtype=dtype or np.float32)


@_keras_op(_np_fill(0.0))
def zeros(shape, dtype=None):
    return _w(_t.constant(_trace(), [int(d) for d in _as_list(shape)], 0.0))


@_keras_op(_np_fill(1.0))
def ones(shape, dtype=None):
    return _w(_t.constant(_trace(), [int(d) for d in _as_list(shape)], 1.0))


@_keras_op(lambda shape, fill_value, dtype=None: np.full(shape, fill_value,
                                                         dtype=dtype or np.float32))
def full(shape, fill_value, dtype=None):
    return _w(_t.constant(_trace(), [int(d) for d in _as_list(shape)], float(fill_value)))


@_keras_op(lambda N, M=None, k=0, dtype=None: np.eye(N, M, k, dtype=dtype or np.float32))
def eye(N, M=None, k=0, dtype=None):
    if (M is not None and M != N) or k:
        raise ValueError("ops.eye inside a layer's call makes square identities only")
    return _w(_eye(int(N)))


def _np_cast(x, dtype):
    return np.asarray(x).astype(np.dtype(dtype))


@_keras_op(_np_cast)
def cast(x, dtype):
    want = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    have = dtype_name(_v(x))
    floats = ("float16", "bfloat16", "float32", "float64", "bool")
    if (have == "float32" and want in floats) or (have == "int32" and "int" in want):
        return x if isinstance(x, TracedTensor) else _w(_v(x))
    raise ValueError(f"ops.cast from {have} to {want} is not supported inside a layer's call "
                     "(the engine computes in float32; int32 tensors are ids for Embedding, "
                     "take and one_hot)")


@_keras_op(lambda x: np.asarray(x))
def stop_gradient(variable):
    return _stop(variable)


@_keras_op(lambda x, axis=-1, order=2, epsilon=None: _np_normalize(x, axis, order, epsilon))
def normalize(x, axis=-1, order=2, epsilon=None):
    if order != 2:
        raise ValueError("ops.normalize inside a layer's call supports order=2 only")
    eps = 1e-12 if epsilon is None else epsilon
    return multiply(x, rsqrt(maximum(sum(square(x), axis, True), eps)))


def _np_normalize(x, axis, order, epsilon):
    x = np.asarray(x, np.float32)
    n = np.sum(np.abs(x) ** order, axis=axis, keepdims=True)
    return x / np.maximum(n, 1e-12 if epsilon is None else epsilon) ** (1.0 / order)


# --- conversion -----------------------------------------------------------------------------

def convert_to_tensor(x, dtype=None, sparse=None, ragged=None):
    """A tensor of ``x``: inside a call, a traced one (numbers and one-valued
    arrays become constants); elsewhere a NumPy array."""
    if _is_traced(x) or isinstance(x, KerasTensor):
        return x.value() if isinstance(x, Variable) else x
    if current_trace() is not None:
        return _w(_v(x))
    a = np.asarray(x)
    if dtype is not None:
        return a.astype(np.dtype(dtype))
    return a.astype(np.float32) if a.dtype == np.float64 else a


def convert_to_numpy(x):
    if isinstance(x, (TracedTensor, KerasTensor)):
        raise ValueError("ops.convert_to_numpy: a symbolic tensor has no values (use "
                         "model.predict to compute them)")
    return np.asarray(x)


def shape(x):
    """The tensor's shape as a tuple of ints (inside a call: the traced one,
    batch dimension included)."""
    if isinstance(x, (TracedTensor, Variable)):
        return tuple(x.shape)
    if isinstance(x, KerasTensor):
        return x.shape
    return np.shape(x)


def size(x):
    return math.prod(shape(x))


def is_tensor(x):
    return isinstance(x, (TracedTensor, Variable, KerasTensor, np.ndarray))


# --- products, sorting, scatters and branches -----------------------------------------

def _np_prod(x, axis=None, keepdims=False, dtype=None):
    return np.prod(x, axis=_np_axis(axis), keepdims=keepdims, dtype=dtype)


def _prod_axis(x, a):
    """The product along axis ``a`` (kept, as one): halves multiplied
    pairwise, log2(n) products, each with its gradient and split like any
    elementwise product."""
    n = _shape(x)[a]
    if n == 0:
        shape = list(_shape(x))
        shape[a] = 1
        return _w(_t.constant(_trace(), shape, 1.0))
    while n > 1:
        half = n // 2
        y = multiply(_slice(x, a, 0, half), _slice(x, a, half, 2 * half))
        x = concatenate([y, _slice(x, a, 2 * half, n)], a) if n % 2 else y
        n = _shape(x)[a]
    return x


@_keras_op(_np_prod)
def prod(x, axis=None, keepdims=False, dtype=None):
    x = x if _is_traced(x) else _w(_v(x))
    shape = _shape(x)
    axes = _axes(axis, len(shape))
    for a in axes:
        x = _prod_axis(x, a)
    return x if keepdims else reshape(x, [d for i, d in enumerate(shape) if i not in axes])


def _to_last(x, axis):
    """(x with ``axis`` moved last, the permutation that moves it back)."""
    rank = len(_shape(x))
    a = _axis(axis, rank)
    perm = [i for i in range(rank) if i != a] + [a]
    back = list(range(rank - 1))
    back.insert(a, rank - 1)
    return transpose(x, perm), back


def _sorted_places(x):
    """P [..., n, n]: P[..., i, k] = 1 where element i of the last axis is
    the k-th smallest (ties in index order, a stable sort). The rank of i is
    the count of elements below it, and of equal ones before it: n^2
    comparisons, composed of elementwise ops that split over every other
    axis (no primitive sort)."""
    n = _shape(x)[-1]
    xi, xj = expand_dims(x, -1), expand_dims(x, -2)  # [..., i, 1], [..., 1, j]
    before = subtract(1.0, _w(_upper(n)))  # [i, j]: 1 where j < i
    rank = sum(add(less(xj, xi), multiply(equal(xj, xi), before)), -1)  # [..., i]
    return equal(expand_dims(rank, -1), _positions(n, 0, 1))  # [..., i, k]


def _np_sort(x, axis=-1):
    return np.sort(x, axis=axis, kind="stable")


@_keras_op(_np_sort)
def sort(x, axis=-1):
    moved, back = _to_last(x, axis)
    places = _sorted_places(moved)
    out = sum(_select(places, expand_dims(moved, -1)), -2)  # [..., k]
    return transpose(out, back)


@_keras_op(lambda x, axis=-1: np.argsort(x, axis=axis, kind="stable").astype(np.int32))
def argsort(x, axis=-1):
    # Float32 positions inside a call (the engine's integers are ids only),
    # as argmax's; int32 eagerly, as Keras.
    moved, back = _to_last(x, axis)
    places = _sorted_places(moved)
    n = _shape(moved)[-1]
    out = sum(multiply(places, reshape(_positions(n, 0, 1), (n, 1))), -2)
    return transpose(out, back)


def _np_top_k(x, k, sorted=True):  # noqa: A002
    x = np.asarray(x)
    idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, idx, -1), idx.astype(np.int32)


@_keras_op(_np_top_k)
def top_k(x, k, sorted=True):  # noqa: A002
    """(values, indices) of the k largest along the last axis, largest
    first (ties: the lower index first, as TensorFlow's); the indices are
    float32 inside a call (docs/python.md)."""
    n = _shape(x)[-1]
    if not 1 <= int(k) <= n:
        raise ValueError(f"ops.top_k: k={k} must be in [1, {n}] (the last axis)")
    places = _slice(_sorted_places(negative(x)), len(_shape(x)), 0, int(k))
    values = sum(_select(places, expand_dims(x, -1)), -2)
    indices = sum(multiply(places, reshape(_positions(n, 0, 1), (n, 1))), -2)
    return values, indices


def _np_take_along_axis(x, indices, axis=None):
    return np.take_along_axis(np.asarray(x), np.asarray(indices).astype(np.int64), axis)


@_keras_op(_np_take_along_axis)
def take_along_axis(x, indices, axis=None):
    """x's elements at ``indices`` along ``axis`` (NumPy's broadcasting of
    the other axes): each index picks its element by a comparison with the
    positions and a select, so x's gradient reaches the elements picked.
    Indices are float32 (argsort's, top_k's) or int32 ids."""
    if axis is None:
        x, indices, axis = reshape(x, (-1,)), reshape(indices, (-1,)), 0
    x = x if _is_traced(x) else _w(_v(x))
    moved, back = _to_last(x, axis)
    n = _shape(moved)[-1]
    if _is_traced(indices):
        idx, _ = _to_last(indices, axis)
        if dtype_name(_v(idx)) == "int32":
            picks = _w(_t.gather(_eye(n), _v(idx)))  # [..., m, n]
        else:
            picks = equal(expand_dims(idx, -1), _positions(n, 0, 1))
    else:  # a NumPy array of indices: their one-hot rows, made here
        idx = np.moveaxis(np.asarray(indices, np.int64) % builtins.max(n, 1), axis, -1)
        picks = _constant_one_hot(idx, n)
    out = sum(_select(picks, expand_dims(moved, -2)), -1)
    return transpose(out, back)


def _constant_one_hot(idx, n):
    """The one-hot rows [*idx.shape, n] of constant indices: rows of the
    identity taken by slicing (constants with differing values cannot enter
    a traced call)."""
    rows = take(_w(_eye(n)), idx.reshape(-1), axis=0)  # [len, n]
    return reshape(rows, list(idx.shape) + [n])


def cond(pred, true_fn, false_fn):
    """Keras's ops.cond: ``true_fn()`` if ``pred`` else ``false_fn()``. The
    predicate must be known while tracing (a Python bool, a number, a NumPy
    value): the step graph is one static program, so a branch taken on a
    traced tensor's value is refused; compute both and pick with ops.where."""
    if _is_traced(pred) or isinstance(pred, KerasTensor):
        raise ValueError(
            "ops.cond: the predicate is a tensor computed by the model (a branch on data), "
            "which autoshard's one static step graph cannot take; compute both branches and "
            "pick with ops.where(pred, true_value, false_value), or give a Python bool")
    p = np.asarray(pred)
    if p.size != 1:
        raise ValueError(f"ops.cond: the predicate must be one value, got shape {p.shape}")
    return true_fn() if bool(p.reshape(-1)[0]) else false_fn()


__all__.append("cond")


def _np_scatter(indices, values, shape):
    out = np.zeros(tuple(shape), np.float32)
    idx = np.asarray(indices).astype(np.int64)
    np.add.at(out, tuple(np.moveaxis(idx, -1, 0)), np.asarray(values, np.float32))
    return out


def _np_scatter_update(inputs, indices, updates):
    out = np.array(inputs, copy=True)
    idx = np.asarray(indices).astype(np.int64)
    out[tuple(np.moveaxis(idx, -1, 0))] = updates
    return out


@_keras_op(_np_scatter)
def scatter(indices, values, shape):
    """A tensor of ``shape``, zeros but for ``values`` at ``indices`` [...,
    depth] (the coordinates of the first ``depth`` axes; repeated indices
    add, as TensorFlow's scatter_nd). Traced int32 indices of depth 1 are
    one ScatterAdd (split over the table's rows like an embedding's
    gradient); NumPy indices of any depth a one-hot product."""
    shape = [int(d) for d in _as_list(shape)]
    values = values if _is_traced(values) else _w(_v(values))
    if _is_traced(indices):
        idx = _v(indices)
        if dtype_name(idx) != "int32" or idx.shape[-1] != 1:
            raise ValueError("ops.scatter inside a layer's call takes traced indices as int32 "
                             "of depth 1 ([..., 1], rows of the first axis); give indices of "
                             "more axes as a NumPy array")
        ids = _t.reshape(idx, list(idx.shape[:-1]))
        return _w(_t.scatter_add(ids, _v(values), shape))
    idx = np.asarray(indices).astype(np.int64)
    depth = idx.shape[-1]
    rows = math.prod(shape[:depth])
    flat = np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), shape[:depth], mode="wrap")
    picks = _constant_one_hot(flat, rows)  # [..., rows]
    lead = len(flat.shape)
    letters = _LETTERS[:lead]
    rest = _LETTERS[lead:lead + len(shape) - depth]
    out = einsum(f"{letters}z,{letters}{rest}->z{rest}", picks, values)
    return reshape(out, shape)


@_keras_op(_np_scatter_update)
def scatter_update(inputs, indices, updates):
    """``inputs`` with the elements (or slices) at ``indices`` replaced by
    ``updates``: a select between the scattered updates and the inputs, so
    each takes its own gradient."""
    shape = list(_shape(inputs))
    hit = scatter(indices, ones_like(updates), shape)
    return add(_select(hit, scatter(indices, updates, shape)),
               _select(subtract(1.0, hit), inputs))


__all__ += ["convert_to_tensor", "convert_to_numpy", "shape", "size", "is_tensor"]


def __getattr__(name):
    # A Keras op not implemented here: a clear error naming it, not an
    # AttributeError from deep inside a model.
    if name.startswith("__"):
        raise AttributeError(name)
    return _not_implemented(name)
