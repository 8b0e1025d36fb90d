"""Labels on Turn records: which pages *should* have been volunteered at that turn.

A Turn record may carry two extra fields, ignored by the worker's decoder:

- ``expected_slugs``: pages that should be volunteered at this turn (they count for recall);
- ``acceptable_slugs``: pages that are fine to volunteer here but not required.

A turn is *labelled* when it carries either field (``"expected_slugs": []`` labels a turn at which
nothing should be volunteered). Only labelled turns are scored; unlabelled turns still replay, so
the session state (window, dedupe) is exactly the worker's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

EXPECTED = "expected_slugs"
ACCEPTABLE = "acceptable_slugs"


class LabelError(ValueError):
    """A label field that is not a list of non-empty strings; the turn replays unlabelled."""

    code = "bad_label"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Labels:
    """One turn's labels. ``allowed`` = expected ∪ acceptable: what a volunteered page may be."""

    expected: frozenset[str]
    acceptable: frozenset[str] = frozenset()

    @property
    def allowed(self) -> frozenset[str]:
        return self.expected | self.acceptable


def _slug_list(obj: Mapping[str, Any], name: str) -> frozenset[str] | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise LabelError(f"field '{name}' must be a list of slugs (strings), got {type(value).__name__}")
    for position, item in enumerate(value):
        if not isinstance(item, str) or not item:
            what = "an empty string" if isinstance(item, str) else type(item).__name__
            raise LabelError(f"field '{name}' item {position} must be a non-empty slug string, got {what}")
    return frozenset(value)


def labels_from_object(obj: Mapping[str, Any]) -> Labels | None:
    """The labels of a decoded record; ``None`` for an unlabelled turn. Raises :class:`LabelError`."""
    expected = _slug_list(obj, EXPECTED)
    acceptable = _slug_list(obj, ACCEPTABLE)
    if expected is None and acceptable is None:
        return None
    return Labels(expected or frozenset(), acceptable or frozenset())


def labels_from_line(raw: bytes) -> Labels | None:
    """The labels of one JSON line; ``None`` when there are none or the line is not a JSON object
    (the Turn decoder reports that line's own error)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    return labels_from_object(obj)
