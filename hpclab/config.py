"""Experiment configs: small frozen dataclasses that validate themselves (chapter 00).

Every experiment's config subclasses :class:`Config` and declares its fields with :func:`param`,
which records the allowed range, the choices and a help line. The same metadata drives
validation, the CLI flags (``hpclab run NAME --batch-size 64``) and the widget controls, so the
three can never disagree about what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any


class ConfigError(ValueError):
    """Bad input: the message is one line naming the field, what was given and what is allowed."""


class RunError(RuntimeError):
    """A run that could not finish for a reason outside its arguments (a rank that died, a corrupt
    data file, a broker that would not start): the first line says what and where. The CLI prints
    it and exits 1; panels show it in one line. Subclassed by each topic's own failure."""


def quick_mode() -> bool:
    """True under CI (``CI=true``) or ``HPCLAB_QUICK=1``: notebooks and tests use small sizes."""
    flag = os.environ.get("HPCLAB_QUICK", "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def param(
    default: Any,
    *,
    help: str,
    min: float | None = None,
    max: float | None = None,
    choices: tuple | None = None,
    quick: Any = dataclasses.MISSING,
    log: bool = False,
) -> Any:
    """Declare a config field with its validation and UI metadata.

    ``quick`` is the value used in quick mode (CI, ``HPCLAB_QUICK=1``) when the caller did not
    set the field; ``log`` asks widgets for a log-scale slider.
    """
    meta = {"help": help, "min": min, "max": max, "choices": choices, "log": log, "quick": quick}
    if isinstance(default, (list, dict, set)):
        raise TypeError("config defaults must be immutable (use a tuple)")
    return dataclasses.field(default=default, metadata=meta)


def _describe_allowed(meta: dict) -> str:
    if meta.get("choices") is not None:
        return "one of " + ", ".join(str(c) for c in meta["choices"])
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:
        return f"{lo}..{hi}"
    if lo is not None:
        return f">= {lo}"
    if hi is not None:
        return f"<= {hi}"
    return "any value"


def element_type(default: tuple, lo: float | None = None, hi: float | None = None) -> type:
    """The type of a tuple field's items: its default's, else its range's (an empty default,
    "choose automatically", still holds numbers), else str. For the CLI and the widgets."""
    if default:
        return type(default[0])
    bound = lo if lo is not None else hi
    return type(bound) if bound is not None else str


def _check_value(name: str, value: Any, meta: dict) -> None:
    for item in value if isinstance(value, tuple) else (value,):
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(
                f"{name}={item!r} must be a finite number; allowed: {_describe_allowed(meta)}"
            )
    choices = meta.get("choices")
    if choices is not None:
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if item not in choices:
                raise ConfigError(
                    f"{name}={item!r} is not allowed; allowed: {_describe_allowed(meta)}"
                )
        return
    lo, hi = meta.get("min"), meta.get("max")
    if lo is None and hi is None:
        return
    items = value if isinstance(value, tuple) else (value,)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise ConfigError(f"{name}={item!r} must be a number in {_describe_allowed(meta)}")
        if (lo is not None and item < lo) or (hi is not None and item > hi):
            raise ConfigError(
                f"{name}={item!r} is out of range; allowed: {_describe_allowed(meta)}"
            )


def _coerce(name: str, value: Any, default: Any) -> Any:
    """Coerce a value to the type of the field's default (ints from floats, tuples from lists,
    a single value to a tuple of one)."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{name}={value!r} must be true or false")
        return value
    if isinstance(value, float) and not math.isfinite(value) and isinstance(default, (int, float)):
        raise ConfigError(f"{name}={value!r} must be a finite number")
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ConfigError(f"{name}={value!r} must be a whole number")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}={value!r} must be a number")
        return float(value)
    if isinstance(default, tuple):
        if isinstance(value, list):
            return tuple(value)
        if not isinstance(value, tuple):
            # one value for a list field is a list of one: cache="warm" means ("warm",), never the
            # characters of "warm" that iterating a string would give
            return (value,)
    return value


@dataclasses.dataclass(frozen=True)
class Config:
    """Base class. Subclasses are ``@dataclass(frozen=True)`` with fields declared by :func:`param`.

    Override :meth:`check` for rules that involve several fields; raise :class:`ConfigError`.
    """

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.default is not dataclasses.MISSING:
                coerced = _coerce(f.name, value, f.default)
                if coerced is not value:
                    object.__setattr__(self, f.name, coerced)
                    value = coerced
            _check_value(f.name, value, dict(f.metadata))
        self.check()

    def check(self) -> None:
        """Cross-field validation; the per-field ranges are already checked."""

    @classmethod
    def create(cls, **overrides: Any) -> Config:
        """Build a config, taking quick-mode defaults for fields the caller did not set.

        Unknown names are refused with the list of known ones.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ConfigError(
                f"unknown parameter {unknown[0]!r} for {cls.__name__}; known: {', '.join(sorted(names))}"
            )
        values = {}
        if quick_mode():
            for f in dataclasses.fields(cls):
                q = f.metadata.get("quick", dataclasses.MISSING)
                if q is not dataclasses.MISSING:
                    values[f.name] = q
        values.update(overrides)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """One dict per field: name, default, type, help and allowed values (for CLI and widgets)."""
        out = []
        for f in dataclasses.fields(cls):
            meta = dict(f.metadata)
            out.append(
                {
                    "name": f.name,
                    "default": f.default,
                    "type": type(f.default).__name__,
                    "help": meta.get("help", ""),
                    "min": meta.get("min"),
                    "max": meta.get("max"),
                    "choices": meta.get("choices"),
                    "log": meta.get("log", False),
                    "allowed": _describe_allowed(meta),
                }
            )
        return out
