"""autoshard: automatic tensor parallelism, from Python.

The C++ engine (the extension ``autoshard._native``) under Keras 3's names::

    import autoshard.keras as keras

    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(10)])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=2)

Set a distribution (``keras.distribution.set_distribution``) before building
a model to train it sharded over in-process devices. See docs/python.md.
"""

from ._blas import use_a_private_copy_if_below_the_cpu, use_best_blas_kernels

use_best_blas_kernels()  # before OpenBLAS loads with the extension (docs/performance.md)
from . import _native  # noqa: E402  (the engine; fails early when not built)

use_a_private_copy_if_below_the_cpu(_native)  # NumPy loaded OpenBLAS first

from .hf import EncoderModel, LanguageModel, from_pretrained  # noqa: E402  (Hugging Face)
from .hf import world_rank, world_size  # noqa: E402  (MPI ranks)
from .tokenizer import Tokenizer  # noqa: E402
from .plan import Plan, plan  # noqa: E402  (binds autoshard.plan to the function)
from .tensor_parallel import TensorParallel  # noqa: E402
from .layout_map import keras_layout_map  # noqa: E402  (a plan as a Keras LayoutMap)
# with autoshard.trace("steps.json", steps="2:3"): model.fit(...)  (docs/observability.md)
trace = _native.Trace

__version__ = "0.1.0"
__all__ = ["keras", "list_devices", "from_pretrained", "LanguageModel", "EncoderModel",
           "Tokenizer", "world_rank", "world_size"]
__all__ += ["plan", "Plan", "TensorParallel"]
__all__ += ["keras_layout_map", "trace", "blas_info"]


def blas_info(measure_peak=False):
    """The BLAS this process runs: library, core type, who chose it, the CPU's extensions.

    ``measure_peak=True`` adds ``sgemm_peak_gflops`` (a tenth of a second of
    n = 1024 products), as ``autoshard --version`` prints it.
    """
    return _native.blas_info(bool(measure_peak))


def list_devices(count=0):
    """The in-process CPU devices, ``["cpu:0", ...]`` (``count`` 0: one per core)."""
    from ._checks import INT32_MAX, integer

    return _native.list_devices(integer(count, "count", "list_devices", 0, INT32_MAX))


def __getattr__(name):
    # `autoshard.keras` imports NumPy; load it when first used.
    if name == "keras":
        import importlib

        return importlib.import_module(".keras", __name__)
    raise AttributeError(f"module 'autoshard' has no attribute '{name}'")
