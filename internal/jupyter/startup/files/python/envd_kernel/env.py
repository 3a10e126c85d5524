"""Per-execution environment variables for the Python kernel.

envd never pastes values into code as text. It sends one JSON string:

    __envd_setenv('{"FOO": "bar", "GONE": null}')          # per execution
    __envd_setenv('{"TEST_ENV_VAR": "supertest"}', True)   # global (persistent)
    __envd_restoreenv()                                    # after the execution

(the helpers live in builtins, see envd_kernel.ipython). A null value unsets
the variable. setenv returns the previous values as a JSON string (null =
was unset); restoreenv returns what it restored.

Restore semantics: the first per-execution set of a name remembers its
original value; restoreenv puts all remembered names back and forgets them.
A global (persistent) set of a remembered name changes what it will be
restored to, so "restore" lands on the sandbox-level value, like E2B's
revert-to-global.
"""

import json
import os

_saved = {}


def _decode(spec):
    if isinstance(spec, (bytes, bytearray)):
        spec = spec.decode("utf-8")
    if isinstance(spec, str):
        spec = json.loads(spec)
    if not isinstance(spec, dict):
        raise TypeError("envd: environment must be a JSON object")
    for name, value in spec.items():
        if not isinstance(name, str) or name == "" or "=" in name or "\0" in name:
            raise ValueError("envd: invalid environment variable name %r" % (name,))
        if value is not None and (not isinstance(value, str) or "\0" in value):
            raise ValueError("envd: invalid value for environment variable %r" % (name,))
    return spec


def _apply(name, value):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def setenv(spec, persist=False):
    """Apply {name: value|None}; returns the previous values as JSON."""
    spec = _decode(spec)
    previous = {}
    for name, value in spec.items():
        old = os.environ.get(name)
        previous[name] = old
        if persist:
            if name in _saved:
                _saved[name] = value
        elif name not in _saved:
            _saved[name] = old
        _apply(name, value)
    return json.dumps(previous)


def restoreenv():
    """Undo every per-execution set since the last restore; returns them as JSON."""
    restored = {}
    while _saved:
        name, value = _saved.popitem()
        _apply(name, value)
        restored[name] = value
    return json.dumps(restored)
