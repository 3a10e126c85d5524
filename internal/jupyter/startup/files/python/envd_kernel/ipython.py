"""Hooks envd installs into every IPython kernel (called from the startup script).

load(ip) registers:
  e2b/data          pandas DataFrame -> {column: [values]} (JSON-safe)
  e2b/chart         matplotlib Figure -> chart dict (envd_kernel.charts), {} on failure
  application/json  dict/list -> JSON value (numpy-aware), stock formatter otherwise
  PIL patches       image.show() and image.save("path") display the image
  builtins          __envd_setenv / __envd_restoreenv (see envd_kernel.env),
                    __envd_variables (see envd_kernel.variables)
  stream close      sys.stdout/sys.stderr.close() do nothing (see _guard_streams)

Formatters only look at pandas/matplotlib when the user already imported them
(sys.modules), so kernel start stays fast.
"""

import builtins
import sys
import warnings

from IPython.core.formatters import BaseFormatter, JSONFormatter, catch_format_error
from traitlets import ObjectName, Unicode

from . import charts, env, jsonsafe, variables


class E2BDataFormatter(BaseFormatter):
    """e2b/data: the DataFrame's columns as lists."""

    format_type = Unicode("e2b/data")
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = (dict, list)

    @catch_format_error
    def __call__(self, obj):
        pd = sys.modules.get("pandas")
        if pd is not None:
            frame_type = getattr(pd, "DataFrame", None)
            if isinstance(frame_type, type) and isinstance(obj, frame_type):
                try:
                    return dataframe_to_dict(obj)
                except Exception:
                    return None
        return super().__call__(obj)


def dataframe_to_dict(frame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if frame.columns.is_unique:
            columns = frame.to_dict(orient="list")
        else:
            columns = {}
            for i, name in enumerate(frame.columns):
                columns.setdefault(name, frame.iloc[:, i].tolist())
    return {jsonsafe._key(k, False): jsonsafe.lenient(v) for k, v in columns.items()}


class E2BChartFormatter(BaseFormatter):
    """e2b/chart: structured data extracted from a matplotlib Figure."""

    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = (dict, list)

    @catch_format_error
    def __call__(self, obj):
        if "matplotlib" in sys.modules:
            figure_module = sys.modules.get("matplotlib.figure")
            figure_type = getattr(figure_module, "Figure", None)
            if isinstance(figure_type, type) and isinstance(obj, figure_type):
                try:
                    return charts.figure_to_dict(obj)
                except Exception:
                    return {}
        return super().__call__(obj)


class E2BJSONFormatter(JSONFormatter):
    """application/json for plain dicts and lists, falling back to IPython's."""

    @catch_format_error
    def __call__(self, obj):
        if isinstance(obj, (list, dict)):
            try:
                return jsonsafe.strict(obj), {"expanded": True}
            except TypeError:
                pass
        return super().__call__(obj)


def _patch_pil(ip):
    try:
        from PIL import Image, ImageShow
    except Exception:
        return
    from IPython.display import display

    if getattr(Image.Image, "_envd_patched", False):
        return

    def show_file(self, path=None, **options):
        return 0

    unix_viewer = getattr(ImageShow, "UnixViewer", None)
    if unix_viewer is not None:
        unix_viewer.show_file = show_file

    original_save = Image.Image.save

    def save(self, fp, format=None, **params):
        if isinstance(fp, str):
            display(self)
        return original_save(self, fp, format, **params)

    def show(self, title=None, **options):
        display(self)

    save.__doc__ = original_save.__doc__
    Image.Image.save = save
    Image.Image.show = show
    Image.Image._envd_patched = True


def _setenv(spec, persist=False):
    return env.setenv(spec, persist)


def _restoreenv():
    return env.restoreenv()


def _guard_streams():
    """Make closing the kernel's sys.stdout/sys.stderr harmless.

    ipykernel 6.17's OutStream.close() joins the thread that watches the
    process's fd 1 or 2, and that thread sits in a read until something
    writes there: `sys.stdout.close()` hangs the kernel for good (no
    execute_reply, no idle, a shell that never answers again). The kernel
    needs both streams anyway, so closing them does nothing.
    """
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if type(stream).__module__ == "ipykernel.iostream" and hasattr(stream, "watch_fd_thread"):
            stream.close = lambda: None


def load(ip):
    if ip is None:
        return
    formatters = ip.display_formatter.formatters
    parent = ip.display_formatter
    formatters["e2b/data"] = E2BDataFormatter(parent=parent)
    formatters["e2b/chart"] = E2BChartFormatter(parent=parent)
    formatters["application/json"] = E2BJSONFormatter(parent=parent)
    _patch_pil(ip)
    builtins.__dict__["__envd_setenv"] = _setenv
    builtins.__dict__["__envd_restoreenv"] = _restoreenv
    builtins.__dict__["__envd_variables"] = lambda limit=1000, repr_len=200: variables.variables(ip, limit, repr_len)
    _guard_streams()
