"""The best OpenBLAS kernels for this CPU, chosen before OpenBLAS loads.

OpenBLAS picks its kernels ("core type") from the CPU's model when it loads,
and a CPU newer than the library gets its slow SSE3 kernels (docs/performance.md).
The ``autoshard`` command restarts itself with ``OPENBLAS_CORETYPE`` set; a
Python process cannot, so before the package loads its extension (and with it
OpenBLAS) a forked child loads it, answers which core type to ask for, and
exits; this process then sets ``OPENBLAS_CORETYPE`` so that its own OpenBLAS
loads with those kernels. Nothing is done when ``OPENBLAS_CORETYPE`` or
``AUTOSHARD_KEEP_BLAS_CORE`` is set. When OpenBLAS is already loaded (NumPy
imported first shares the same library) its kernels can no longer change:
autoshard then loads a private copy of the library with the right kernels
for its own products (ir/blas_core.h ``use_private_openblas``), and warns
only if that fails.
"""

import os
import sys
import warnings

# The variable autoshard sets beside OPENBLAS_CORETYPE, naming the core type
# OpenBLAS had chosen itself (ir/blas_core.cc reads it to report "set by
# autoshard").
_LIBRARY_CHOICE = "AUTOSHARD_OPENBLAS_OWN_CORE"


def _openblas_loaded():
    try:
        with open("/proc/self/maps") as maps:
            return any("libopenblas" in line for line in maps)
    except OSError:
        return False


def _ask_a_child():
    """(wanted core type or "", OpenBLAS's own choice) from a forked child, or None."""
    if not hasattr(os, "fork"):
        return None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: load the library, answer, leave without cleanup
        try:
            os.close(read_end)
            from . import _native
            wanted = _native.wanted_openblas_coretype() or ""
            os.write(write_end, f"{wanted}\n{_native.blas_info()['core']}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        text = answer.read().decode()
    os.waitpid(pid, 0)
    lines = text.split("\n")
    return (lines[0], lines[1]) if len(lines) == 2 else None


def use_best_blas_kernels():
    """Sets OPENBLAS_CORETYPE for this process when OpenBLAS would run kernels below the CPU.

    The decision (the user's OPENBLAS_CORETYPE and AUTOSHARD_KEEP_BLAS_CORE
    included) is the native wanted_openblas_coretype's; only the fork is
    spared when the user already chose the kernels.
    """
    if os.environ.get("OPENBLAS_CORETYPE"):
        return
    if "autoshard._native" in sys.modules or _openblas_loaded():
        return  # too late to choose: use_a_private_copy_if_below_the_cpu steps in once loaded
    answer = _ask_a_child()
    if answer and answer[0]:
        os.environ["OPENBLAS_CORETYPE"] = answer[0]
        os.environ[_LIBRARY_CHOICE] = answer[1]


def use_a_private_copy_if_below_the_cpu(native):
    """After loading: OpenBLAS loaded first (by NumPy) with kernels below the CPU gets a private copy.

    Warns when the copy cannot be made. A malformed AUTOSHARD_KEEP_BLAS_CORE
    raises ValueError here, as the command stops on it.
    """
    wanted = native.wanted_openblas_coretype()
    if not wanted:
        return
    shared_core = native.blas_info()["core"]
    why_not = native.use_private_openblas()
    if why_not:
        info = native.blas_info()
        warnings.warn(
            f"OpenBLAS was loaded before autoshard (by NumPy or another module) and runs its "
            f"{shared_core} kernels on a CPU with {info['cpu']}, and {why_not}: matrix products "
            f"run several times slower. Import autoshard before NumPy, or set "
            f"OPENBLAS_CORETYPE={wanted} before starting Python.", RuntimeWarning, stacklevel=3)
