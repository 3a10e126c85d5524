"""envd's Java Jupyter kernel (see kernel.py). Run: python3 -m envd_java_kernel -f CONNECTION_FILE"""

from .kernel import JavaKernel, __version__  # noqa: F401
