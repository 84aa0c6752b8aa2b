"""``python -m autoshard``: a short report to paste into a bug report.

Prints the package's version and where it was loaded from, Python's and
NumPy's versions, the BLAS kernels that run and who chose them, the
in-process devices, and a self-check: one training step of a small model on
one device and on a 2x2 mesh of in-process devices, whose losses must agree.
Exits 1 when the self-check fails.
"""

import os
import platform
import sys
import time


def _self_check(keras, np):
    """The same step on one device and on a 2x2 mesh: (loss, loss, seconds)."""
    rng = np.random.default_rng(0)
    x = rng.random((16, 12), dtype="float32")
    y = rng.integers(0, 3, size=16)

    def one_step(distribution):
        keras.distribution.set_distribution(distribution)
        try:
            keras.utils.set_random_seed(0)
            # Named layers: a seed gives a weight of the same path the same values.
            model = keras.Sequential([keras.Input((12,)),
                                      keras.layers.Dense(8, activation="relu", name="hidden"),
                                      keras.layers.Dense(3, activation="softmax", name="out")])
            model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
            return model.train_on_batch(x, y)
        finally:
            keras.distribution.set_distribution(None)

    start = time.perf_counter()
    mesh = keras.distribution.DeviceMesh((2, 2), ("data", "model"))
    one = float(np.ravel(one_step(None))[0])
    sharded = float(np.ravel(one_step(keras.distribution.AutoShard(mesh)))[0])
    return one, sharded, time.perf_counter() - start


def main():
    import autoshard

    print(f"autoshard {autoshard.__version__} from {os.path.dirname(autoshard.__file__)}")
    import numpy as np

    print(f"python {platform.python_version()} ({sys.executable}), numpy {np.__version__}, "
          f"{platform.machine()} {platform.system()}")
    info = autoshard.blas_info()
    print(f"blas: {info['description']}")
    print(f"cpu: {info['cpu']}")
    print(f"devices: {len(autoshard.list_devices())} in-process by default "
          f"({os.cpu_count()} cores); any count can be asked for")

    import autoshard.keras as keras

    one, sharded, seconds = _self_check(keras, np)
    agree = abs(one - sharded) <= 1e-5 * max(1.0, abs(one))
    print(f"self-check: one training step, loss {one:.6f} on one device and {sharded:.6f} on a "
          f"2x2 mesh: {'equal' if agree else 'DIFFERENT'} ({seconds:.2f} s)")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
