"""Chart extraction: a matplotlib Figure -> the e2b/chart dict.

This is our own implementation of the format produced by E2B's e2b_charts
package (docs/wire.md, "Charts and DataFrames"). The output is plain
dicts, lists, str, float and None, ready for JSON:

    every chart  type, title (None if empty), elements
    2-D charts   x_label, y_label, x_unit, y_unit        (line, scatter, bar, box)
    point charts x_ticks, x_tick_labels, x_scale,         (line, scatter)
                 y_ticks, y_tick_labels, y_scale
    superchart   title = the figure's suptitle ("" if none), one chart per axes

Numbers are always Python floats (so JSON shows 0.0, not 0); NaN and
infinities become None. Dates become ISO 8601 strings.

matplotlib is imported lazily: importing this module does not import it.
"""

import datetime
import re
from decimal import ROUND_HALF_UP, Decimal

from . import jsonsafe

_UNIT_RE = re.compile(r"\s\((.*?)\)|\[(.*?)\]")
_NON_LINEAR_SCALES = {"log", "symlog", "logit", "function", "functionlog", "asinh"}


# --------------------------------------------------------------------------
# small helpers


def dynamic_round(number, digits=8):
    """Round like E2B's utils/rounding.py: `digits - exponent` decimal places.

    digits=8 keeps 9 significant digits. Pie angles use digits=6 because
    matplotlib < 3.8 computes wedge fractions in float32 ("historical"), so
    anything past the 7th significant digit is noise: 90% of a pie must be
    324.0 degrees, not 323.99999142.
    """
    try:
        value = float(number)
    except (TypeError, ValueError):
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    try:
        d = Decimal(str(value))
        precision = max(1, digits - d.adjusted())
        return float(d.quantize(Decimal(10) ** -precision, rounding=ROUND_HALF_UP))
    except Exception:  # decimal context overflow for huge/tiny magnitudes
        return value


def _num(value):
    """A JSON float (or None for NaN/inf/non-numbers)."""
    try:
        return jsonsafe._float(value)
    except (TypeError, ValueError):
        return None


def _text_or_none(text):
    if text is None:
        return None
    text = str(text)
    return text if text != "" else None


def _extract_unit(label):
    if not label:
        return None
    match = _UNIT_RE.search(label)
    if match:
        unit = match.group(1) if match.group(1) is not None else match.group(2)
        return unit
    return None


def _converter(axis):
    get = getattr(axis, "get_converter", None)
    if callable(get):
        try:
            return get()
        except Exception:
            pass
    return getattr(axis, "converter", None)


def _is_date_axis(axis):
    import matplotlib.dates as mdates

    classes = tuple(
        c
        for c in (
            getattr(mdates, "_SwitchableDateConverter", None),
            getattr(mdates, "DateConverter", None),
            getattr(mdates, "ConciseDateConverter", None),
        )
        if isinstance(c, type)
    )
    conv = _converter(axis)
    return bool(classes) and isinstance(conv, classes)


def _date_string(value):
    """ISO string for datetime-like values, else None."""
    if jsonsafe._is_nat(value):
        return None
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day).isoformat()
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return None
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            return None
        return str(value.astype("datetime64[s]").astype(str))
    return None


def _point_value(value, date_axis):
    """One coordinate of a point: str for dates/categories, float for numbers."""
    if isinstance(value, str):
        return value
    if isinstance(value, (datetime.date, datetime.datetime)) or type(value).__name__ in (
        "datetime64",
        "NaTType",
    ):
        return _date_string(value)
    if isinstance(value, datetime.timedelta):
        return _num(value.total_seconds())
    try:
        import numpy as np

        if isinstance(value, np.timedelta64):
            return _num(value / np.timedelta64(1, "s"))
        if isinstance(value, np.str_):
            return str(value)
    except ImportError:  # pragma: no cover
        pass
    number = _num(value)
    if number is not None and date_axis:
        import matplotlib.dates as mdates

        try:
            return mdates.num2date(number).isoformat()
        except Exception:
            return number
    if number is None and not _is_number_like(value):
        return str(value)
    return number


def _is_number_like(value):
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def _all_equal(values, rel=1e-9):
    if not values:
        return True
    first = values[0]
    for v in values[1:]:
        if abs(v - first) > rel * max(1.0, abs(first), abs(v)):
            return False
    return True


def _children(ax):
    children = getattr(ax, "_children", None)
    if children is None:  # matplotlib < 3.5
        children = (
            list(ax.lines)
            + list(ax.patches)
            + list(ax.collections)
            + list(ax.texts)
            + list(ax.images)
            + list(ax.artists)
            + list(getattr(ax, "tables", []))
        )
    return list(children)


def is_grid_line(line):
    """A 2-point horizontal or vertical line (what axhline/axvline/grids draw)."""
    try:
        x_data = line.get_xdata()
        y_data = line.get_ydata()
        if len(x_data) != 2 or len(y_data) != 2:
            return False
        return x_data[0] == x_data[1] or y_data[0] == y_data[1]
    except Exception:
        return False


# --------------------------------------------------------------------------
# chart builders


def _base(chart_type, ax):
    title = ax.get_title() or ax.get_title("left") or ax.get_title("right")
    return {"type": chart_type, "title": _text_or_none(title), "elements": []}


def _add_2d(chart, ax):
    x_label = _text_or_none(ax.get_xlabel())
    y_label = _text_or_none(ax.get_ylabel())
    chart["x_label"] = x_label
    chart["y_label"] = y_label
    chart["x_unit"] = _extract_unit(x_label)
    chart["y_unit"] = _extract_unit(y_label)


def _swap_2d(chart):
    chart["x_label"], chart["y_label"] = chart["y_label"], chart["x_label"]
    chart["x_unit"], chart["y_unit"] = chart["y_unit"], chart["x_unit"]


def _tick_labels(axis):
    return [str(t.get_text()) for t in axis.get_ticklabels()]


def _ticks(axis, locations, date_axis):
    out = []
    if date_axis:
        import matplotlib.dates as mdates

        for tick in locations:
            try:
                out.append(mdates.num2date(float(tick)).isoformat())
            except Exception:
                out.append(_num(tick))
        return out
    for tick in locations:
        if isinstance(tick, str):
            out.append(tick)
        else:
            out.append(_num(tick))
    return out


def detect_scale(date_axis, scale, ticks, labels):
    if date_axis:
        return "datetime"
    if scale != "linear":
        return scale
    if not ticks:
        return "linear"
    # Categorical: ticks are exactly 0..n-1 and the labels are not the numbers.
    for i, (tick, label) in enumerate(zip(ticks, labels)):
        if isinstance(tick, float) and tick == i and str(i) != label:
            continue
        return "linear"
    return "categorical"


def _add_point_axes(chart, ax):
    for name, axis, get_ticks, get_scale in (
        ("x", ax.xaxis, ax.get_xticks, ax.get_xscale),
        ("y", ax.yaxis, ax.get_yticks, ax.get_yscale),
    ):
        date_axis = _is_date_axis(axis)
        labels = _tick_labels(axis)
        ticks = _ticks(axis, list(get_ticks()), date_axis)
        chart[name + "_ticks"] = ticks
        chart[name + "_tick_labels"] = labels
        chart[name + "_scale"] = detect_scale(date_axis, get_scale(), ticks, labels)


def _points(xs, ys, x_date, y_date):
    return [[_point_value(x, x_date), _point_value(y, y_date)] for x, y in zip(xs, ys)]


def line_chart(ax):
    chart = _base("line", ax)
    _add_2d(chart, ax)
    _add_point_axes(chart, ax)
    x_date = _is_date_axis(ax.xaxis)
    y_date = _is_date_axis(ax.yaxis)
    for line in ax.get_lines():
        label = str(line.get_label())
        if label.startswith("_child"):
            try:
                label = "Line %d" % int(label[6:])
            except ValueError:
                pass
        points = _points(line.get_xdata(), line.get_ydata(), x_date, y_date)
        chart["elements"].append({"label": label, "points": points})
    return chart


def scatter_chart(ax):
    chart = _base("scatter", ax)
    _add_2d(chart, ax)
    _add_point_axes(chart, ax)
    x_date = _is_date_axis(ax.xaxis)
    y_date = _is_date_axis(ax.yaxis)
    for collection in ax.collections:
        offsets = collection.get_offsets()
        xs = [row[0] for row in offsets]
        ys = [row[1] for row in offsets]
        chart["elements"].append(
            {
                "label": str(collection.get_label()),
                "points": _points(xs, ys, x_date, y_date),
            }
        )
    return chart


def _nearest_labels(centers, axis):
    """Label per bar center: the tick label at that position if there is one."""
    ticks = [float(t) for t in axis.get_ticklocs()]
    labels = _tick_labels(axis)
    pairs = [(t, l) for t, l in zip(ticks, labels)]
    if len(pairs) > 1:
        gaps = sorted(b[0] - a[0] for a, b in zip(pairs, pairs[1:]) if b[0] > a[0])
        tolerance = gaps[0] / 2 if gaps else 0.5
    else:
        tolerance = 0.5
    out = []
    formatter = axis.get_major_formatter()
    for center in centers:
        best = None
        for tick, label in pairs:
            distance = abs(tick - center)
            if distance < tolerance and (best is None or distance < best[0]):
                best = (distance, label)
        if best is not None and best[1] != "":
            out.append(best[1])
            continue
        try:
            out.append(str(formatter.format_data_short(center)).strip())
        except Exception:
            out.append(str(center))
    return out


def bar_chart(ax):
    chart = _base("bar", ax)
    _add_2d(chart, ax)
    swapped = False
    containers = [c for c in getattr(ax, "containers", []) if _is_bar_container(c)]
    for container in containers:
        group = str(container.get_label())
        if group.startswith("_container"):
            try:
                group = "Group %d" % int(group[10:])
            except ValueError:
                pass
        rects = list(container)
        if not rects:
            continue
        heights = [float(r.get_height()) for r in rects]
        widths = [float(r.get_width()) for r in rects]
        if _is_horizontal(rects, heights, widths):
            if not swapped:
                _swap_2d(chart)
                swapped = True
            centers = [float(r.get_y()) + float(r.get_height()) / 2 for r in rects]
            labels = _nearest_labels(centers, ax.yaxis)
            values = widths
        else:
            centers = [float(r.get_x()) + float(r.get_width()) / 2 for r in rects]
            labels = _nearest_labels(centers, ax.xaxis)
            values = heights
        for label, value in zip(labels, values):
            chart["elements"].append({"label": label, "group": group, "value": _num(value)})
    return chart


def _is_bar_container(container):
    try:
        from matplotlib.container import BarContainer

        return isinstance(container, BarContainer)
    except ImportError:  # pragma: no cover
        return True


def _is_horizontal(rects, heights, widths):
    heights_equal = _all_equal(heights)
    widths_equal = _all_equal(widths)
    if heights_equal and not widths_equal:
        return True
    if widths_equal and not heights_equal:
        return False
    xs = [float(r.get_x()) for r in rects]
    ys = [float(r.get_y()) for r in rects]
    return len(rects) > 1 and _all_equal(xs) and not _all_equal(ys)


def pie_chart(ax):
    chart = _base("pie", ax)
    from matplotlib.patches import Wedge

    for wedge in ax.patches:
        if not isinstance(wedge, Wedge):
            continue
        angle = dynamic_round(
            Decimal(str(float(wedge.theta2))) - Decimal(str(float(wedge.theta1))), 6
        )
        chart["elements"].append(
            {
                "label": str(wedge.get_label()),
                "angle": abs(angle) if angle is not None else None,
                "radius": _num(wedge.r),
            }
        )
    return chart


def box_chart(ax):
    chart = _base("box_and_whisker", ax)
    _add_2d(chart, ax)
    from matplotlib.patches import PathPatch

    boxes = []
    for patch in ax.patches:
        if not isinstance(patch, PathPatch):
            continue
        vertices = patch.get_path().vertices
        if len(vertices) == 0:
            continue
        xs = [float(v) for v in vertices[:, 0]]
        ys = [float(v) for v in vertices[:, 1]]
        boxes.append({"x0": min(xs), "x1": max(xs), "y0": min(ys), "y1": max(ys)})
    if not boxes:
        return chart

    widths = [b["x1"] - b["x0"] for b in boxes]
    heights = [b["y1"] - b["y0"] for b in boxes]
    # Vertical boxes (the default) share their width; horizontal ones
    # (vert=False) share their height.
    horizontal = _all_equal(heights) and not _all_equal(widths)
    if horizontal:
        _swap_2d(chart)
        category_axis = ax.yaxis
        boxes = [
            {"p0": b["y0"], "p1": b["y1"], "q1": b["x0"], "q3": b["x1"]} for b in boxes
        ]
    else:
        category_axis = ax.xaxis
        boxes = [
            {"p0": b["x0"], "p1": b["x1"], "q1": b["y0"], "q3": b["y1"]} for b in boxes
        ]

    lines = []
    for line in ax.lines:
        try:
            xs = [float(v) for v in line.get_xdata()]
            ys = [float(v) for v in line.get_ydata()]
        except (TypeError, ValueError):
            continue
        pos, val = (ys, xs) if horizontal else (xs, ys)
        style = str(line.get_linestyle()).lower()
        lines.append({"pos": pos, "val": val, "markers_only": style in ("none", "", " ")})

    centers = [(b["p0"] + b["p1"]) / 2 for b in boxes]
    labels = _nearest_labels(centers, category_axis)
    eps = 1e-9
    for box, label in zip(boxes, labels):
        p0, p1 = box["p0"] - eps, box["p1"] + eps
        q1, q3 = box["q1"], box["q3"]
        width = box["p1"] - box["p0"]
        whisker_values = []
        medians = []
        outliers = []
        for line in lines:
            pos, val = line["pos"], line["val"]
            if not pos:
                continue
            inside = [p0 <= p <= p1 for p in pos]
            if line["markers_only"] or len(pos) == 1:
                outliers.extend(v for v, ok in zip(val, inside) if ok)
                continue
            if len(pos) != 2 or not all(inside):
                continue
            if pos[0] == pos[1]:  # along the value axis: a whisker
                whisker_values.extend(val)
            elif val[0] == val[1]:  # across the box: the median or a cap
                medians.append((abs(abs(pos[1] - pos[0]) - width), val[0]))
        inner = [m for m in medians if q1 - eps <= m[1] <= q3 + eps]
        if inner:
            median = min(inner)[1]
        elif medians:
            median = min(medians)[1]
        else:
            median = (q1 + q3) / 2
        low = min(whisker_values) if whisker_values else q1
        high = max(whisker_values) if whisker_values else q3
        chart["elements"].append(
            {
                "label": label,
                "min": dynamic_round(min(low, q1)),
                "first_quartile": dynamic_round(q1),
                "median": dynamic_round(median),
                "third_quartile": dynamic_round(q3),
                "max": dynamic_round(max(high, q3)),
                "outliers": [dynamic_round(v) for v in outliers],
            }
        )
    return chart


def unknown_chart(ax):
    return _base("unknown", ax)


# --------------------------------------------------------------------------
# classification


def chart_type(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text

    objects = [o for o in _children(ax) if not isinstance(o, Text)]
    if all(isinstance(o, Line2D) for o in objects):
        return "line"
    if all(isinstance(o, (PathPatch, Line2D)) for o in objects):
        return "box_and_whisker"
    objects = [o for o in objects if not (isinstance(o, Line2D) and is_grid_line(o))]
    if all(isinstance(o, PathCollection) for o in objects):
        return "scatter"
    if all(isinstance(o, Wedge) for o in objects):
        return "pie"
    if all(isinstance(o, Rectangle) for o in objects):
        return "bar"
    return "unknown"


_BUILDERS = {
    "line": line_chart,
    "scatter": scatter_chart,
    "bar": bar_chart,
    "pie": pie_chart,
    "box_and_whisker": box_chart,
    "unknown": unknown_chart,
}


def axes_to_chart(ax):
    return _BUILDERS[chart_type(ax)](ax)


def _has_data(ax):
    try:
        return bool(ax.has_data())
    except Exception:
        return True


def figure_to_chart(figure):
    """The chart dict for figure, or None if it has no axes with data."""
    axes = [ax for ax in figure.get_axes() if _has_data(ax)]
    if not axes:
        return None
    if len(axes) > 1:
        suptitle = getattr(figure, "_suptitle", None)
        title = suptitle.get_text() if suptitle is not None else ""
        return {
            "type": "superchart",
            "title": title,
            "elements": [axes_to_chart(ax) for ax in axes],
        }
    return axes_to_chart(axes[0])


def figure_to_dict(figure):
    """What the e2b/chart formatter returns: the chart, or {} if there is none."""
    chart = figure_to_chart(figure)
    return chart if chart is not None else {}
