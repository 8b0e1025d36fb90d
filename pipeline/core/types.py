"""Records the decision core hands out: resolver pointers and volunteered pages (reference-behaviour.md §5.5, §7.1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass, fields
from typing import Any, Final, NamedTuple

ARM_CONFIDENCE: Final[dict[str, float]] = {
    "alias": 0.9,
    "title": 0.8,
    "title-surname": 0.72,
    "cjk-title": 0.72,
    "slug-suffix": 0.6,
}
"""Base confidence per resolution arm; the gate adds the 0.05 salience boost on top."""

ARMS: Final = tuple(ARM_CONFIDENCE)


class Pointer(NamedTuple):
    """One resolved page, in resolver order, before the gate. ``matched_norm`` is the claiming candidate."""

    display: str
    slug: str
    source_id: str
    synopsis: str
    arm: str
    confidence: float
    matched_norm: str | None = None


@dataclass(frozen=True, slots=True)
class VolunteeredPage:
    """A page that cleared the gate. ``rationale`` holds only labels that matched a page, never free text.

    The field order is the reference's key order (slug, source_id, display, confidence, arm,
    rationale, synopsis): every serialisation of a page (the op's result, ``volunteer replay --json``,
    the hook's answer, the ``volunteered`` record, which wraps a page in
    :class:`topics.records.Volunteered`) is derived from these fields, through :data:`PAGE_FIELDS`.
    """

    slug: str
    source_id: str
    display: str
    confidence: float
    arm: str
    rationale: str
    synopsis: str

    def to_dict(self) -> dict[str, Any]:
        """The fields by name, in field order (the reference's key order). A dict display: in the
        compiled core its reads are slot reads and it is built in one step, where
        ``dict(zip(PAGE_FIELDS, ...))`` went through the iterator protocol per field (about 5,000
        instructions a page). ``tests/unit/core/test_properties.py`` checks it against the fields."""
        return {"slug": self.slug, "source_id": self.source_id, "display": self.display,
                "confidence": self.confidence, "arm": self.arm, "rationale": self.rationale,
                "synopsis": self.synopsis}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> VolunteeredPage:
        """The page of a mapping holding (at least) every field; raises ``KeyError``, ``TypeError``
        or ``ValueError`` for a missing field or a value of the wrong kind."""
        return cls(*[coerce(obj[name]) for name, coerce in _PAGE_COERCE])


PAGE_FIELDS: Final[tuple[str, ...]] = tuple(f.name for f in fields(VolunteeredPage))
"""The names of a page's fields, in the reference's key order."""

_PAGE_COERCE: Final[tuple[tuple[str, Callable[[Any], Any]], ...]] = tuple(
    (f.name, float if f.type in (float, "float") else str) for f in fields(VolunteeredPage))
"""Each field with how a decoded JSON value becomes its type (the confidence is the one number)."""


def _bare_fields_settable() -> bool:
    """Whether the fields of a bare page (``__new__`` without ``__init__``) can be set directly: in
    the compiled core they are C slots that the dataclass' frozen ``__setattr__`` does not guard; in
    pure Python it refuses (``FrozenInstanceError``), as it should."""
    page = VolunteeredPage.__new__(VolunteeredPage)
    try:
        page.slug = ""  # type: ignore[misc]
    except FrozenInstanceError:
        return False
    return True


BARE_FIELDS: Final = _bare_fields_settable()
"""True in the compiled core: there the dataclass' generated ``__init__`` runs as interpreted code
(3 µs a page, against a few hundred ns for the slots set here); see :func:`new_page`."""


def new_page(slug: str, source_id: str, display: str, confidence: float, arm: str, rationale: str,
             synopsis: str) -> VolunteeredPage:
    """``VolunteeredPage(...)``, the same object (equal, same hash and repr), built without the
    dataclass' ``__init__`` where :data:`BARE_FIELDS` allows it: the gate builds one per page it
    lets through, on nearly every turn that names something."""
    if not BARE_FIELDS:
        return VolunteeredPage(slug, source_id, display, confidence, arm, rationale, synopsis)
    page = VolunteeredPage.__new__(VolunteeredPage)
    page.slug = slug  # type: ignore[misc]
    page.source_id = source_id  # type: ignore[misc]
    page.display = display  # type: ignore[misc]
    page.confidence = confidence  # type: ignore[misc]
    page.arm = arm  # type: ignore[misc]
    page.rationale = rationale  # type: ignore[misc]
    page.synopsis = synopsis  # type: ignore[misc]
    return page


_new_tuple: Final = tuple.__new__


def new_pointer(display: str, slug: str, source_id: str, synopsis: str, arm: str, confidence: float,
                matched_norm: str | None) -> Pointer:
    """``Pointer(...)`` without the named tuple's generated ``__new__`` (interpreted code, called once
    per resolved page)."""
    return _new_tuple(Pointer, (display, slug, source_id, synopsis, arm, confidence, matched_norm))
