"""Data given as batches: ``keras.utils.PyDataset`` (Keras 2's
``Sequence``) and Python generators or iterators of ``(x, y)`` batches, as
fit, evaluate and predict take them.

The engine runs an epoch over arrays, cutting them into batches itself; a
pass over a dataset is therefore drawn whole (its batches joined into
arrays) and given to the engine with the dataset's batch size. The batches
are the dataset's own when they share one size (a last smaller one
allowed), which is checked.
"""

import inspect

import numpy as np

from .. import _checks


class PyDataset:
    """keras.utils.PyDataset: a dataset of batches by index. Subclasses
    define ``__len__`` (the number of batches) and ``__getitem__(index)``
    (a batch: ``(x, y)``, or ``x`` for predict); ``on_epoch_end`` runs after
    each epoch. ``workers``, ``use_multiprocessing`` and ``max_queue_size``
    are accepted; batches are drawn in order on the calling thread."""

    def __init__(self, workers=1, use_multiprocessing=False, max_queue_size=10):
        self._workers = workers
        self._use_multiprocessing = use_multiprocessing
        self._max_queue_size = max_queue_size

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def on_epoch_end(self):
        pass

    @property
    def num_batches(self):
        return len(self)


def is_dataset(x):
    """Whether ``x`` is batches (a PyDataset, a generator or an iterator)
    rather than arrays."""
    return isinstance(x, PyDataset) or inspect.isgenerator(x) or (
        hasattr(x, "__next__") and hasattr(x, "__iter__"))


def _batches(data, steps, what):
    if isinstance(data, PyDataset):
        count = len(data) if steps is None else min(steps, len(data))
        return [data[i] for i in range(count)]
    out = []
    while steps is None or len(out) < steps:
        try:
            out.append(next(data))
        except StopIteration:
            break
    return out


def _split(batch, what, with_targets):
    if not isinstance(batch, tuple):
        if with_targets:
            raise ValueError(f"{what}: each batch must be a tuple (x, y), got "
                             f"{_checks.shown(batch)}")
        return batch, None
    if len(batch) == 3 and batch[2] is not None:
        raise ValueError(f"{what}: batches of (x, y, sample_weight) are not supported")
    if not 1 <= len(batch) <= 3:
        raise ValueError(f"{what}: a batch must be (x,), (x, y) or (x, y, sample_weight), got "
                         f"a tuple of {len(batch)}")
    x, y = batch[0], batch[1] if len(batch) > 1 else None
    if with_targets and y is None:
        raise ValueError(f"{what}: each batch needs targets: (x, y)")
    return x, y


def _join(parts, what):
    """Batches of one structure (an array, a list or a dict of them) joined
    along the examples."""
    first = parts[0]
    if isinstance(first, dict):
        return {k: _join([p[k] for p in parts], what) for k in first}
    if isinstance(first, (list, tuple)) and first and hasattr(first[0], "shape"):
        return [_join([p[i] for p in parts], what) for i in range(len(first))]
    arrays = [np.asarray(p) for p in parts]
    rest = {a.shape[1:] for a in arrays if a.ndim}
    if len(rest) > 1:
        raise ValueError(f"{what}: the batches differ in shape after the batch dimension "
                         f"({sorted(rest)}); give batches of one shape per pass")
    return np.concatenate(arrays)


def _rows(x):
    if isinstance(x, dict):
        return _rows(next(iter(x.values())))
    if isinstance(x, (list, tuple)) and x and hasattr(x[0], "shape"):
        return _rows(x[0])
    return len(np.asarray(x))


def draw(data, steps, what, with_targets=True):
    """One pass over ``data``: (x, y, batch_size) with the batches joined,
    or None when it has no batches left. Batch sizes must be one size, a
    last smaller one allowed, so that the engine's batches are the
    dataset's."""
    batches = _batches(data, steps, what)
    if not batches:
        return None
    xs, ys = zip(*(_split(b, what, with_targets) for b in batches))
    sizes = [_rows(x) for x in xs]
    size = sizes[0]
    if any(s != size for s in sizes[:-1]) or sizes[-1] > size:
        raise ValueError(f"{what}: the batches have {sizes[:8]} examples; give batches of one "
                         "size (a last smaller one allowed)")
    y = _join(list(ys), what) if with_targets or ys[0] is not None else None
    return _join(list(xs), what), y, size


def end_epoch(data):
    if isinstance(data, PyDataset):
        data.on_epoch_end()
