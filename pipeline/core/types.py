"""Records the decision core hands out: resolver pointers and volunteered pages (reference-behaviour.md §5.5, §7.1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

ARM_CONFIDENCE: dict[str, float] = {
    "alias": 0.9,
    "title": 0.8,
    "title-surname": 0.72,
    "cjk-title": 0.72,
    "slug-suffix": 0.6,
}
"""Base confidence per resolution arm; the gate adds the 0.05 salience boost on top."""

ARMS = tuple(ARM_CONFIDENCE)


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
    """A page that cleared the gate. ``rationale`` holds only labels that matched a page, never free text."""

    slug: str
    source_id: str
    display: str
    confidence: float
    arm: str
    rationale: str
    synopsis: str

    def to_dict(self) -> dict[str, Any]:
        """The reference's key order: slug, source_id, display, confidence, arm, rationale, synopsis."""
        return {
            "slug": self.slug,
            "source_id": self.source_id,
            "display": self.display,
            "confidence": self.confidence,
            "arm": self.arm,
            "rationale": self.rationale,
            "synopsis": self.synopsis,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> VolunteeredPage:
        return cls(
            slug=str(obj["slug"]),
            source_id=str(obj["source_id"]),
            display=str(obj["display"]),
            confidence=float(obj["confidence"]),
            arm=str(obj["arm"]),
            rationale=str(obj["rationale"]),
            synopsis=str(obj["synopsis"]),
        )
