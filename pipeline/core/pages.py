"""Brain rows as the core sees them: gbrain ``pages`` and ``page_aliases`` (reference-behaviour.md §1.2, §1.3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Page:
    """One brain page. ``id`` is the insertion order (``pages.id``), which fixes arm-2 output order."""

    id: int
    slug: str
    title: str
    source_id: str = "default"
    type: str = "person"
    compiled_truth: str = ""
    frontmatter: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class AliasRow:
    """One ``page_aliases`` row. No foreign key: it may point at a deleted or missing page."""

    source_id: str
    alias_norm: str
    slug: str
