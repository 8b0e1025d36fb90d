"""The ``--sweep`` grammar and the grid of settings it spans.

``--sweep NAME=VALUES`` (repeatable, one per parameter), where NAME is ``min_confidence``,
``max_pages`` or ``window_turns`` (dashes work too) and VALUES is a comma-separated list of numbers
and/or inclusive ranges ``START:STOP:STEP``::

    --sweep min_confidence=0.6,0.65,0.7,0.75,0.8
    --sweep min_confidence=0.6:0.8:0.05 --sweep window_turns=1:8:1 --sweep max_pages=3,5

Ranges are computed in decimal, so ``0.6:0.8:0.05`` is exactly 0.6, 0.65, 0.7, 0.75, 0.8. Unlike the
single-value flags (which the core clamps like the reference), sweep values must lie in the range
the core honours, so a grid never silently contains two copies of the default. A parameter that is
not swept keeps the value of its flag / ``VOLUNTEER_*`` setting.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from pipeline.core.gate import MAX_PAGES_CAP, MAX_WINDOW_TURNS, clamp_max_pages, clamp_min_confidence
from pipeline.core.session import DecisionOptions

PARAMETERS = ("min_confidence", "max_pages", "window_turns")
MAX_VALUES = 1000
"""Most values one parameter may take (a typo such as ``0:1:0.0001`` is an error, not a long run)."""

_BOUNDS: dict[str, tuple[Decimal, Decimal, bool]] = {
    # name: (lowest, highest, must be a whole number)
    "min_confidence": (Decimal(0), Decimal(1), False),
    "max_pages": (Decimal(1), Decimal(MAX_PAGES_CAP), True),
    "window_turns": (Decimal(1), Decimal(MAX_WINDOW_TURNS), True),
}


class GridError(ValueError):
    """A ``--sweep`` value that cannot be used; the message names the spec and the problem."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One point of the grid: the three knobs as the core will use them (already clamped)."""

    min_confidence: float
    max_pages: int
    window_turns: int

    def options(self, base: DecisionOptions) -> DecisionOptions:
        """``base`` (lexical arms, excluded prefixes...) with this point's three knobs."""
        return replace(
            base, min_confidence=self.min_confidence, max_pages=self.max_pages, window_turns=self.window_turns
        )

    def to_dict(self) -> dict[str, Any]:
        return {"min_confidence": self.min_confidence, "max_pages": self.max_pages, "window_turns": self.window_turns}

    def label(self, *, without: str | None = None) -> str:
        """``min_confidence=0.7 max_pages=3 window_turns=4`` (optionally leaving one out)."""
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.to_dict().items() if k != without)


def _fmt(value: float | int) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def base_setting(options: DecisionOptions) -> Setting:
    """The effective knobs of ``options`` (the reference's clamping applied)."""
    return Setting(
        min_confidence=clamp_min_confidence(options.min_confidence),
        max_pages=clamp_max_pages(options.max_pages),
        window_turns=options.effective_window_turns,
    )


def _number(spec: str, text: str) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise GridError(f"--sweep {spec}: {text.strip()!r} is not a number") from None
    if not value.is_finite():
        raise GridError(f"--sweep {spec}: {text.strip()!r} is not a finite number")
    return value


def _range(spec: str, part: str) -> list[Decimal]:
    pieces = part.split(":")
    if len(pieces) != 3:
        raise GridError(f"--sweep {spec}: a range is START:STOP:STEP (inclusive), got {part!r}")
    start, stop, step = (_number(spec, p) for p in pieces)
    if step <= 0:
        raise GridError(f"--sweep {spec}: the step of {part!r} must be greater than 0")
    if stop < start:
        raise GridError(f"--sweep {spec}: the range {part!r} ends before it starts")
    count = int((stop - start) / step) + 1
    if count > MAX_VALUES:
        raise GridError(f"--sweep {spec}: the range {part!r} has {count} values, more than {MAX_VALUES}")
    return [start + step * i for i in range(count)]


def parse_values(name: str, text: str, spec: str | None = None) -> list[float] | list[int]:
    """The sorted, de-duplicated values of one parameter; raises :class:`GridError`."""
    spec = spec or f"{name}={text}"
    if name not in _BOUNDS:
        raise GridError(f"--sweep {spec}: unknown parameter {name!r}; choose from {', '.join(PARAMETERS)}")
    low, high, whole = _BOUNDS[name]
    values: set[Decimal] = set()
    for part in text.split(","):
        if not part.strip():
            raise GridError(f"--sweep {spec}: empty value in the list")
        values.update(_range(spec, part) if ":" in part else [_number(spec, part)])
    if len(values) > MAX_VALUES:
        raise GridError(f"--sweep {spec}: {len(values)} values, more than {MAX_VALUES}")
    for value in sorted(values):
        if not low <= value <= high:
            raise GridError(f"--sweep {spec}: {value} is outside {low}..{high}")
        if whole and value != value.to_integral_value():
            raise GridError(f"--sweep {spec}: {name} takes whole numbers, got {value}")
    if whole:
        return sorted(int(v) for v in values)
    return sorted(float(v) for v in values)


def parse_sweeps(specs: Sequence[str]) -> dict[str, list[float] | list[int]]:
    """``["min_confidence=0.6,0.7", "window_turns=1:4:1"]`` -> ``{name: values}``."""
    swept: dict[str, list[float] | list[int]] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise GridError(f"--sweep {spec}: expected NAME=VALUES, e.g. min_confidence=0.6,0.7,0.8")
        if name in swept:
            raise GridError(f"--sweep {spec}: {name} is swept twice; give all its values in one --sweep")
        swept[name] = parse_values(name, text, spec)
    return swept


def build_grid(base: Setting, swept: Mapping[str, Sequence[float | int]]) -> list[Setting]:
    """The cartesian product, ordered so ``min_confidence`` varies fastest (rows read as curves)."""
    windows = list(swept.get("window_turns", [base.window_turns]))
    pages = list(swept.get("max_pages", [base.max_pages]))
    thresholds = list(swept.get("min_confidence", [base.min_confidence]))
    return [
        Setting(min_confidence=float(c), max_pages=int(p), window_turns=int(w))
        for w, p, c in itertools.product(windows, pages, thresholds)
    ]
