"""`pip install --no-build-isolation ./python`: builds autoshard._native with the
project's CMake (offline, with Debian's setuptools, pybind11 and NumPy) and
installs the package. See docs/python.md."""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        prebuilt = os.environ.get("AUTOSHARD_PIP_PREBUILT")
        if prebuilt:
            # An extension this checkout's CMake build already made (CI's test
            # of the install itself, which should not rebuild the library).
            os.makedirs(out_dir, exist_ok=True)
            shutil.copy2(prebuilt, self.get_ext_fullpath(ext.name))
            return
        build_dir = os.path.join(ROOT, "build-pip")
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            "-DAUTOSHARD_PYTHON=ON", "-DAUTOSHARD_BENCH=OFF", "-DAUTOSHARD_PYTHON_PTH=OFF",
            f"-DAUTOSHARD_PYTHON_OUTPUT_DIR={out_dir}", f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs, "--target",
                               "autoshard_native"])


setup(
    name="autoshard",
    version="0.1.0",
    description="Automatic tensor parallelism: Keras 3's API on autoshard's C++ engine",
    packages=find_packages(include=["autoshard", "autoshard.*"]),
    package_data={"autoshard": ["py.typed", "*.pyi"]},
    ext_modules=[Extension("autoshard._native", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=["numpy"],
    python_requires=">=3.9",
    zip_safe=False,
)
