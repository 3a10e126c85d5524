"""Turn Python, numpy and pandas values into plain JSON values.

strict() mirrors what the E2B template does with orjson (OPT_SERIALIZE_NUMPY |
OPT_NON_STR_KEYS): it raises TypeError for anything orjson would refuse, so the
caller can fall back to IPython's stock behaviour.

lenient() never fails: unknown objects become str(obj). It is used for the
e2b/data payload of DataFrames, where every cell must end up as something.

In both, NaN and +-Infinity become None (JSON null), numpy scalars become
Python numbers, datetimes become ISO 8601 strings.
"""

import dataclasses
import datetime
import enum
import math
import sys
import uuid

_MAX_DEPTH = 200


def _float(value):
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return None
    return value


def _is_nat(value):
    return type(value).__name__ == "NaTType"


def _scalar(obj, strict):
    """Returns (True, json_value) for scalars it knows, else (False, None)."""
    if obj is None or isinstance(obj, (str, bool)):
        return True, obj
    if isinstance(obj, int):
        return True, int(obj)
    if isinstance(obj, float):
        return True, _float(obj)
    if _is_nat(obj):
        return True, None
    if isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
        return True, obj.isoformat()
    if isinstance(obj, uuid.UUID):
        return True, str(obj)
    if isinstance(obj, enum.Enum):
        return True, to_json(obj.value, strict)

    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(obj, np.bool_):
            return True, bool(obj)
        if isinstance(obj, np.integer):
            return True, int(obj)
        if isinstance(obj, np.floating):
            return True, _float(obj)
        if isinstance(obj, np.datetime64):
            if np.isnat(obj):
                return True, None
            return True, str(np.datetime_as_string(obj))
        if isinstance(obj, np.complexfloating):
            if strict:
                raise TypeError("complex numbers are not JSON serializable")
            return True, str(obj)
        if isinstance(obj, np.str_):
            return True, str(obj)
    if not strict:
        if isinstance(obj, datetime.timedelta):
            return True, str(obj)
        if isinstance(obj, bytes):
            return True, obj.decode("utf-8", "replace")
        try:
            import decimal

            if isinstance(obj, decimal.Decimal):
                return True, _float(obj)
        except Exception:  # pragma: no cover
            pass
    return False, None


def _key(key, strict):
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    ok, value = _scalar(key, strict)
    if ok and value is not None and not isinstance(value, (dict, list)):
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    if strict:
        raise TypeError("dict key %r is not JSON serializable" % (type(key).__name__,))
    return str(key)


def to_json(obj, strict=True, _depth=0):
    if _depth > _MAX_DEPTH:
        raise TypeError("object is nested too deeply (or recursive)")
    ok, value = _scalar(obj, strict)
    if ok:
        return value
    depth = _depth + 1
    if isinstance(obj, dict):
        return {_key(k, strict): to_json(v, strict, depth) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v, strict, depth) for v in obj]
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biuf":
            return to_json(obj.tolist(), strict, depth)
        return [to_json(v, strict, depth) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_json(getattr(obj, f.name), strict, depth)
            for f in dataclasses.fields(obj)
        }
    if strict:
        raise TypeError("%s is not JSON serializable" % (type(obj).__name__,))
    if isinstance(obj, (set, frozenset)):
        return [to_json(v, strict, depth) for v in obj]
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        try:
            return to_json(tolist(), strict, depth)
        except Exception:
            pass
    try:
        return str(obj)
    except Exception:
        return repr(obj)


def strict(obj):
    """JSON value for obj, or TypeError if orjson would have refused it."""
    try:
        return to_json(obj, True)
    except RecursionError:
        raise TypeError("object is nested too deeply (or recursive)")


def lenient(obj):
    """JSON value for obj; never raises for ordinary data."""
    try:
        return to_json(obj, False)
    except (TypeError, RecursionError):
        return None
