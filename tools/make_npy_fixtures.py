#!/usr/bin/python3
"""Writes tests/data/npy/: small .npy and .npz files saved by NumPy itself,
for tests/npy_test.cc (which knows their values: every array is
arange(n).reshape(shape) in its dtype, minus 3 for the signed ones, unless
named otherwise below).

Run from the repository root with Debian's python3-numpy (/usr/bin/python3):
    /usr/bin/python3 tools/make_npy_fixtures.py
"""
import os

import numpy as np

OUT = os.path.join("tests", "data", "npy")


def ramp(dtype, shape=(2, 3)):
    n = int(np.prod(shape))
    values = np.arange(n) - (3 if np.issubdtype(dtype, np.signedinteger) or
                             np.issubdtype(dtype, np.floating) else 0)
    return values.reshape(shape).astype(dtype)


def main():
    os.makedirs(OUT, exist_ok=True)
    save = lambda name, a: np.save(os.path.join(OUT, name), a)
    for dtype in ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8"]:
        save(f"{dtype}.npy", ramp(dtype))
    save("bool.npy", np.array([[True, False, True], [False, False, True]]))
    save("big_endian_f4.npy", ramp(">f4"))
    save("big_endian_i8.npy", ramp(">i8"))
    save("fortran.npy", np.asfortranarray(ramp("float32")))
    save("scalar.npy", np.array(2.5, dtype=np.float32))
    save("empty.npy", np.zeros((0, 4), dtype=np.float32))
    save("labels_n1.npy", np.array([[1], [0], [2]], dtype=np.int64))
    save("int64_overflow.npy", np.array([1, 2**40], dtype=np.int64))
    save("nan.npy", np.array([1.0, np.nan], dtype=np.float32))
    save("float64_overflow.npy", np.array([1.0, 1e300]))
    save("complex.npy", np.array([1 + 2j], dtype=np.complex64))
    save("object.npy", np.array([{"a": 1}], dtype=object))
    save("uint16.npy", np.array([1, 2], dtype=np.uint16))
    # A version 2.0 header (np.save picks 2.0 only for huge headers).
    with open(os.path.join(OUT, "version2.npy"), "wb") as f:
        np.lib.format.write_array(f, ramp("float32"), version=(2, 0))
    np.savez(os.path.join(OUT, "two.npz"), image=ramp("float32", (3, 2, 2)),
             label=np.array([0, 2, 1], dtype=np.int64))
    np.savez_compressed(os.path.join(OUT, "two_compressed.npz"),
                        image=ramp("float32", (3, 2, 2)),
                        label=np.array([0, 2, 1], dtype=np.int64))


if __name__ == "__main__":
    main()
