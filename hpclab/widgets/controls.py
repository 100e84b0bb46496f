"""Controls built from a config field's metadata (chapter 00; every panel uses them).

- choices -> a dropdown; bool -> a checkbox;
- a field whose help says ``(0 = something)`` -> an explicit **auto** choice, never a slider
  whose 0 secretly means "default": counts (cores, threads) become a dropdown ``auto (...), 1, 2,
  4, ...``; rates (a learning rate) become an "auto" checkbox beside a log slider;
- a range spanning three decades or more (or ``log=True``) -> a log slider (counts read back as
  integers);
- a panel offers only the dropdown choices its config accepts (:mod:`hpclab.widgets.panel`);
- tuples -> comma-separated text (``auto`` accepted where 0 means it);
- chapter 01's ``compare_devices`` checkbox switches its ``device`` dropdown off (:func:`link_compare`).

Every control carries the CSS class :data:`CONTROL_CLASS` and ``continuous_update=False``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from hpclab.config import ConfigError, element_type

CONTROL_CLASS = "hpclab-control"  # the browser test finds controls by this class
_AUTO_RE = re.compile(r"\(0 = ([^)]+)\)")


def auto_label(field: dict[str, Any]) -> str | None:
    """What 0 means for this field ("usable cores", "the model's default"), or None."""
    m = _AUTO_RE.search(field.get("help", ""))
    return m.group(1) if m and (field.get("min") in (0, 0.0)) else None


def _count_options(lo: int, hi: int, extra: int) -> list[int]:
    out = {extra} if lo <= extra <= hi else set()
    v = max(1, lo)
    while v <= hi:
        out.add(v)
        v *= 2
    return sorted(x for x in out if x >= 1)


class AutoRate:
    """An "auto" checkbox beside a log slider; ``value`` is 0.0 when auto is ticked."""

    def __init__(self, field: dict[str, Any], value: float, label: str, what: str) -> None:
        import ipywidgets as w

        lo = max(float(field["max"]) * 1e-5, 1e-6)
        self.auto = w.Checkbox(value=value == 0, description=f"auto ({what})", indent=False)
        self.slider = w.FloatLogSlider(
            value=value or math.sqrt(lo * float(field["max"])) / 10,
            base=10,
            min=math.log10(lo),
            max=math.log10(float(field["max"])),
            step=0.1,
            readout_format=".2g",
            description=label,
            disabled=value == 0,
            continuous_update=False,
            style={"description_width": "initial"},
        )
        self.auto.observe(lambda ch: setattr(self.slider, "disabled", ch["new"]), names="value")
        self.description = label
        self.widget = w.HBox([self.slider, self.auto])

    @property
    def value(self) -> float:
        return 0.0 if self.auto.value else float(self.slider.value)

    @value.setter
    def value(self, v: float) -> None:
        self.auto.value = v == 0
        if v:
            self.slider.value = v

    def observe(self, fn: Any, names: str = "value") -> None:
        self.auto.observe(fn, names=names)
        self.slider.observe(fn, names=names)

    def add_class(self, cls: str) -> None:
        self.widget.add_class(cls)

    @property
    def _dom_classes(self) -> tuple:
        return self.widget._dom_classes


def _log_range(field: dict[str, Any]) -> bool:
    """A positive range over three decades or more (or ``log=True``): a log slider's."""
    lo, hi = field["min"], field["max"]
    return lo is not None and hi is not None and lo > 0 and (field.get("log") or hi / lo >= 1e3)


def set_max(ctl: Any, top: float) -> None:
    """Cap a slider at ``top`` (a log slider's bounds are exponents)."""
    ctl.max = math.log(top, ctl.base) if hasattr(ctl, "base") else top


def make_control(field: dict[str, Any], value: Any) -> Any:
    """The control for one config field, showing ``value``."""
    import ipywidgets as w

    label = field["name"].replace("_", " ")
    common = {"description": label, "style": {"description_width": "initial"}}
    auto = auto_label(field)
    lo, hi = field["min"], field["max"]
    if field["choices"] is not None and not isinstance(value, tuple):
        ctl = w.Dropdown(options=list(field["choices"]), value=value, **common)
    elif isinstance(value, bool):
        ctl = w.Checkbox(value=value, indent=False, **common)
    elif isinstance(value, int) and auto and hi is not None:
        from hpclab.measure.sysinfo import system_info

        cores = system_info()["cores_usable"]
        first = auto if auto.split()[0] in ("none", "all", "no") else f"auto ({auto})"
        options = [(first, 0)] + [
            (str(v), v) for v in _count_options(1, int(hi), value if value else cores)
        ]
        ctl = w.Dropdown(options=options, value=value, **common)
    elif isinstance(value, float) and auto and hi is not None:
        ctl = AutoRate(field, value, label, auto)
    elif isinstance(value, int) and _log_range(field):
        # counts over three decades (samples 10..2M): a log slider, read back as an int and
        # shown as one (32, 1,024, 2,000,000; ".3s" showed 32.0)
        ctl = w.FloatLogSlider(
            value=value, base=10, min=math.log10(lo), max=math.log10(hi), step=0.05,
            readout_format=",.0f", continuous_update=False, **common,
        )  # fmt: skip
    elif isinstance(value, int) and lo is not None and hi is not None:
        ctl = w.IntSlider(value=value, min=int(lo), max=int(hi), continuous_update=False, **common)
    elif isinstance(value, float) and lo is not None and hi is not None:
        if _log_range(field):
            ctl = w.FloatLogSlider(
                value=value, base=10, min=math.log10(lo), max=math.log10(hi), step=0.1,
                readout_format=".2g", continuous_update=False, **common,
            )  # fmt: skip
        else:
            ctl = w.FloatSlider(
                value=value, min=lo, max=hi, step=(hi - lo) / 100, continuous_update=False,
                **common,
            )  # fmt: skip
    elif isinstance(value, int):
        ctl = w.IntText(value=value, **common)
    elif isinstance(value, float):
        ctl = w.FloatText(value=value, **common)
    else:
        shown = value
        if isinstance(value, tuple):
            shown = ",".join("auto" if (auto and v == 0) else str(v) for v in value)
        ctl = w.Text(value=str(shown), **common)
    if hasattr(ctl, "tooltip"):
        ctl.tooltip = field["help"]
    ctl.add_class(CONTROL_CLASS)
    return ctl


def link_compare(controls: dict[str, Any]) -> None:
    """While the "compare devices" checkbox is ticked (the CPU and every GPU side by side), the
    ``device`` dropdown beside it is greyed out and reads ``auto``: one device is chosen only with
    comparing off (:class:`hpclab.compute.device.DevicesConfig`)."""
    compare, device = controls.get("compare_devices"), controls.get("device")
    if compare is None or device is None:
        return

    def sync(_change: Any = None) -> None:
        if compare.value:
            device.value = "auto"
        device.disabled = compare.value

    sync()
    compare.observe(sync, names="value")


def read_control(ctl: Any, default: Any, lo: float | None = None, hi: float | None = None) -> Any:
    """The control's value as the config field wants it (tuples parsed from text; ``lo``/``hi``:
    the field's range, which gives an empty default's item type)."""
    value = ctl.value
    if isinstance(default, int) and not isinstance(default, bool) and isinstance(value, float):
        return round(value)  # a log slider over counts
    if isinstance(default, tuple) and isinstance(value, str):
        elem = element_type(default, lo, hi)
        try:
            return tuple(
                elem(0) if x.strip().lower() == "auto" else elem(x.strip())
                for x in value.split(",")
                if x.strip()
            )
        except ValueError:
            raise ConfigError(
                f"{ctl.description}={value!r} must be comma-separated {elem.__name__} values"
            ) from None
    return value
