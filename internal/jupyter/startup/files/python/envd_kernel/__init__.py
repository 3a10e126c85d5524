"""Kernel-side support code installed by envd (internal/jupyter/startup).

envd_kernel.ipython  registers the display formatters (e2b/data, e2b/chart,
                     application/json), the PIL patches and the env helpers
envd_kernel.charts   matplotlib Figure -> e2b/chart dict
envd_kernel.jsonsafe conversion of Python/numpy/pandas values to JSON values
envd_kernel.env      per-execution environment variables (set / restore)
envd_kernel.variables the user's variables, for envd's ListVariables

Everything here uses only the standard library at import time; numpy, pandas,
matplotlib and PIL are touched only when the user has imported them.
"""
