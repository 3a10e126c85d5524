"""The user's variables in an IPython kernel, for envd's ListVariables.

envd evaluates `__envd_variables()` (in builtins, see envd_kernel.ipython) as a
user expression of a silent execute_request: no execution count, no history,
no output. The value displays as one MIME type,

    application/vnd.envd.variables+json  {"variables": [...], "total": N, "truncated": bool}

each variable {"name", "type", "repr", "len"?, "shape"?, "dtype"?}, sorted by
name. Left out: names starting with "_", modules, IPython's own names
(user_ns_hidden: In, Out, get_ipython, exit, quit...), and envd's helpers
(which live in builtins, not in the namespace).

Bounds: at most `limit` variables (the rest counted in "total"); a repr of at
most `repr_len` characters, built by reprlib for containers and strings (only
their first items are looked at: a 10-million-item list costs what a short one
does); any other object's repr is its own (numpy and pandas abbreviate
theirs) and is cut. Whatever the user's objects print while being looked at is
discarded; an object whose repr raises gets "<repr failed: ...>".
"""

import contextlib
import io
import reprlib
import types

MIME = "application/vnd.envd.variables+json"


class _Repr(reprlib.Repr):
    def __init__(self, limit):
        super().__init__()
        self.maxlevel = 2
        self.maxstring = limit
        self.maxlong = limit
        self.maxother = limit
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = self.maxarray = 12
        self.maxdict = 8

    def repr_bytes(self, x, level):
        return self._cut(builtins_repr(x[: self.maxstring]), len(x) > self.maxstring)

    repr_bytearray = repr_bytes

    def repr_instance(self, x, level):
        s = builtins_repr(x)
        return self._cut(s, False)

    def _cut(self, s, more):
        if len(s) > self.maxother:
            return s[: self.maxother - 3] + "..."
        return s + "..." if more else s


builtins_repr = repr


class Variables:
    """Displays as the MIME type above; its repr is cheap."""

    def __init__(self, data):
        self.data = data

    def __repr__(self):
        return "<envd variables: %d>" % len(self.data["variables"])

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {MIME: self.data}


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _describe(name, value, r, repr_len):
    out = {"name": name, "type": type(value).__name__}
    try:
        text = r.repr(value)
    except Exception as e:  # a user's __repr__ may raise anything
        text = "<repr failed: %s>" % type(e).__name__
    if len(text) > repr_len:
        text = text[: repr_len - 3] + "..."
    out["repr"] = text
    if isinstance(value, type):
        return out
    try:
        shape = getattr(value, "shape", None)
        if isinstance(shape, tuple) and all(_int(n) for n in shape):
            out["shape"] = list(shape)
            dtype = getattr(value, "dtype", None)
            if dtype is not None and not callable(dtype):
                out["dtype"] = str(dtype)[:100]
    except Exception:
        pass
    if "shape" not in out and hasattr(type(value), "__len__"):
        try:
            n = len(value)
            if _int(n):
                out["len"] = n
        except Exception:
            pass
    return out


def variables(ip, limit=1000, repr_len=200):
    ns = ip.user_ns
    hidden = getattr(ip, "user_ns_hidden", {})
    names = []
    for name in list(ns):
        if not isinstance(name, str) or name.startswith("_") or name in hidden:
            continue
        if isinstance(ns[name], types.ModuleType):
            continue
        names.append(name)
    names.sort()
    r = _Repr(repr_len)
    out = []
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        for name in names[:limit]:
            try:
                value = ns[name]
            except KeyError:  # gone meanwhile (a thread of the user's)
                continue
            out.append(_describe(name, value, r, repr_len))
    return Variables({"variables": out, "total": len(names), "truncated": len(names) > limit})

