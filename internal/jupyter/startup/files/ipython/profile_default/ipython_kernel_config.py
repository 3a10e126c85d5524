# Installed by envd (internal/jupyter/startup); IPYTHONDIR points here.
c = get_config()  # noqa: F821

# Tracebacks without ANSI escapes (they reach the SDKs as plain text).
c.InteractiveShell.colors = "NoColor"
# Never truncate big lists/dicts/sets in text/plain.
c.PlainTextFormatter.max_seq_length = 0
# Many kernels share this IPYTHONDIR: keep history in memory instead of
# fighting over one SQLite file.
c.HistoryManager.hist_file = ":memory:"
# matplotlib: ipykernel makes the inline backend the default for IPython
# kernels (MPLBACKEND=module://matplotlib_inline.backend_inline, unless the
# environment chose another backend) and matplotlib is only imported by user
# code. This file is also read by envd's bash kernel (an IPKernelApp too), so
# it must not touch the environment itself. Figures are sent as PNG.
c.InlineBackend.figure_formats = {"png"}
