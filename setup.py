"""Package list for setuptools (everything else is in pyproject.toml).

The ``kernels/`` folder stays at the top of the repository (a family folder can be vendored alone)
but installs under the import name ``polytrace_kernels``: the name ``kernels`` belongs to the kernel
hub distribution that transformers users install, and two distributions providing one top-level
package overwrite each other. ``pyproject.toml`` cannot map a folder to another name and still
discover its subpackages, so the list is computed here.
"""

from setuptools import find_packages, setup

KERNELS_IMPORT_NAME = "polytrace_kernels"

kernel_packages = [KERNELS_IMPORT_NAME + name[len("kernels"):]
                   for name in find_packages(include=["kernels", "kernels.*"])]

setup(
    packages=find_packages(include=["polytrace", "polytrace.*"]) + kernel_packages,
    package_dir={KERNELS_IMPORT_NAME: "kernels"},
)
