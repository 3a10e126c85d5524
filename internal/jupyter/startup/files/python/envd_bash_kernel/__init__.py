"""envd's bash Jupyter kernel (see kernel.py). Run: python3 -m envd_bash_kernel -f CONNECTION_FILE"""

from .kernel import BashKernel, __version__  # noqa: F401
