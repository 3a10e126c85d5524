# Installed by envd (internal/jupyter/startup). Loads envd_kernel from
# <install dir>/python: display formatters for e2b/data, e2b/chart and
# application/json, PIL display patches, and the __envd_setenv /
# __envd_restoreenv helpers envd uses for per-execution env vars.
# Nothing is left in the user namespace.


def __envd_load():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    base = os.path.normpath(os.path.join(here, "..", "..", "..", "python"))
    added = base not in sys.path
    if added:
        sys.path.insert(0, base)
    try:
        import envd_kernel.ipython
    finally:
        if added:
            try:
                sys.path.remove(base)
            except ValueError:
                pass
    envd_kernel.ipython.load(get_ipython())  # noqa: F821


try:
    __envd_load()
finally:
    del __envd_load
