"""Argument checks of autoshard's Python API (docs/python.md, "Bad input and
what a save may touch").

Each check refuses a value with one ValueError or TypeError naming the call,
the argument and what it accepts, before the engine sees it: a value the
C++ extension cannot take would otherwise be a pybind11 TypeError that
prints every argument (the user's arrays among them). Messages show a short
form of the value given, never a whole array.
"""

import json
import math
import numbers
import os

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def shown(value):
    """A short description of ``value`` for a message."""
    if value is None or isinstance(value, (bool, numbers.Number, str, bytes)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    return f"a {type(value).__name__}"


def size_text(n):
    """A byte count as the engine prints it ("512.00 MiB", "4.00 TiB")."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.2f} {unit}"
        n /= 1024


def _bounds(minimum, maximum):
    if minimum is not None and maximum is not None:
        return f" from {minimum} to {maximum}"
    if minimum is not None:
        return f" >= {minimum}"
    return f" <= {maximum}" if maximum is not None else ""


def name(value, where):
    """A layer's or model's name: a string, or "" (the default) for None."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{where}: name must be a string, got {shown(value)}")
    return value or ""


def integer(value, name, where, minimum=None, maximum=INT64_MAX):
    """``value`` as an int: a Python or NumPy integer (not a bool, a float
    or a string) within [minimum, maximum]."""
    # The int64 limit is said only to a value past it.
    said = maximum if maximum != INT64_MAX else None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: {name} must be an integer{_bounds(minimum, said)}, got "
                        f"{shown(value)}")
    value = int(value)
    if maximum is not None and value > maximum:
        said = maximum
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{where}: {name} must be an integer{_bounds(minimum, said)}, got "
                         f"{shown(value)}")
    return value


def optional_integer(value, name, where, minimum=None, maximum=INT64_MAX):
    return None if value is None else integer(value, name, where, minimum, maximum)


def number(value, name, where, minimum=None, maximum=None, above=None, below=None):
    """``value`` as a finite float within the bounds (``above``/``below``:
    strict ones)."""
    parts = [f">= {minimum}" if minimum is not None else None,
             f"> {above}" if above is not None else None,
             f"<= {maximum}" if maximum is not None else None,
             f"< {below}" if below is not None else None]
    wanted = "a finite number" + "".join(f", {p}" for p in parts if p)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: {name} must be {wanted}, got {shown(value)}")
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if (not math.isfinite(f) or (minimum is not None and f < minimum)
            or (maximum is not None and f > maximum) or (above is not None and f <= above)
            or (below is not None and f >= below)):
        raise ValueError(f"{where}: {name} must be {wanted}, got {shown(value)}")
    return f


def shape(value, name, where, allow_none_first=False, allow_none=False):
    """A shape: a tuple or list of positive integers (the first may be None
    where ``allow_none_first``: a batch dimension; any where ``allow_none``:
    sizes known only when data arrives)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,)
    if type(value).__name__ == "ndarray" and getattr(value, "ndim", None) == 1:
        value = value.tolist()  # Keras takes any sequence of sizes (x.shape's too)
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{where}: {name} must be a tuple of positive integers, got "
                        f"{shown(value)}")
    out = []
    for i, d in enumerate(value):
        if d is None and (allow_none or (i == 0 and allow_none_first)):
            out.append(None)
            continue
        out.append(integer(d, f"{name}[{i}]", where, minimum=1))
    return tuple(out)


def _index(flat, dims):
    import numpy as np

    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, dims)) + "]"


def finite(array, name, where):
    """Refuses NaN or infinity in a float array: ValueError naming the
    argument and the first bad element. One pass over the array when it
    is finite (its sum is finite exactly when no element is NaN or inf,
    unless the sum overflows: then each element is looked at)."""
    import numpy as np

    if array.dtype.kind not in "fc" or array.size == 0:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        if not np.isfinite(array.sum()):
            bad = ~np.isfinite(array)
            if bad.any():  # else the sum overflowed
                flat = int(np.argmax(bad))
                value = array.reshape(-1)[flat]
                what = "NaN" if np.isnan(value) else ("inf" if value > 0 else "-inf")
                raise ValueError(f"{where}: {name} element {_index(flat, array.shape)} is "
                                 f"{what} (the engine takes finite numbers only: clean or drop "
                                 "those rows)")
    # Wider floats become float32 in the engine: past its range, infinity.
    if array.dtype.kind == "f" and array.dtype.itemsize > 4:
        limit = float(np.finfo(np.float32).max)
        if array.max() > limit or array.min() < -limit:
            flat = int(np.argmax(np.abs(array) > limit))
            raise ValueError(f"{where}: {name} element {_index(flat, array.shape)} is "
                             f"{array.reshape(-1)[flat]:g}, beyond float32's range (the engine "
                             "computes in float32)")


def read_json(path, what):
    """A JSON file's value; one ValueError naming the file when it is not
    JSON (or nested deeper than Python's reader goes), never a
    RecursionError."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{what} '{os.fspath(path)}' is nested too deeply to read (JSON "
                         "deeper than Python's recursion limit)") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} '{os.fspath(path)}' is not UTF-8 text (byte {e.start})") \
            from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} '{os.fspath(path)}' is not valid JSON ({e.msg} at line "
                         f"{e.lineno}, column {e.colno})") from None
