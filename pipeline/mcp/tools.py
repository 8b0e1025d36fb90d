"""The tools' names, descriptions and JSON schemas, as ``tools/list`` shows them.

How strict the input schemas are is a choice (docs/mcp.md, "Schemas"): they state the type each
parameter has in the reference op (docs/reference-behaviour.md §8), so a model knows what to send,
but they carry no ``required`` list, no bounds and no ``additionalProperties: false``. The server
never validates arguments against them: every value is forwarded raw and clamped like the op does
(``max_pages: 10`` is capped at 5, ``min_confidence: 7`` means 0.7, ``max_pages: "3"`` means the
default, a missing window is the reference's ``invalid_params`` error). A bound or a ``required``
here would make a validating client refuse a request the reference answers.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from pipeline.core.types import PAGE_FIELDS, VolunteeredPage

CONTEXT_TOOL = "volunteer_context"
STATS_TOOL = "volunteer_stats"
OPENED_TOOL = "volunteer_opened"

_PAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {f.name: {"type": "number" if f.type in (float, "float") else "string"}
                   for f in fields(VolunteeredPage)},
    "required": list(PAGE_FIELDS),
}
"""A volunteered page of the result, from :class:`~pipeline.core.types.VolunteeredPage`'s fields."""

_CONTEXT_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pages": {"type": "array", "items": _PAGE_SCHEMA},
        "count": {"type": "integer"},
        "window_turns": {"type": "integer"},
    },
    "required": ["pages", "count", "window_turns"],
}

STATS_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "days": {"type": "integer"},
        "approximate": {"type": "boolean"},
        "note": {"type": "string"},
        "total_volunteered": {"type": "integer"},
        "total_used": {"type": "integer"},
        "by_arm": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "match_arm": {"type": "string"},
                    "channel": {"type": "string"},
                    "volunteered": {"type": "integer"},
                    "used": {"type": "integer"},
                    "precision": {"type": "number"},
                },
                "required": ["match_arm", "channel", "volunteered", "used", "precision"],
            },
        },
    },
    "required": ["days", "approximate", "note", "total_volunteered", "total_used", "by_arm"],
}

CONTEXT_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "window": {
            "type": "string",
            "description": "The recent turns, oldest first, as 'user: ...' / 'assistant: ...' lines (an "
            "unprefixed line continues the turn above it). Required unless stats is true; missing or blank "
            "is an invalid_params error. At most 5,000,000 UTF-8 bytes.",
        },
        "prior_context": {
            "type": "string",
            "description": "Context already shown to the model: a page whose slug appears in it "
            "(case-insensitive) is not volunteered again.",
        },
        "max_pages": {
            "type": "number",
            "description": "Pages to volunteer: default 3, fractions floor, below 1 means 3, above 5 means 5.",
        },
        "min_confidence": {
            "type": "number",
            "description": "Confidence gate: default 0.7; a value outside [0, 1] means 0.7.",
        },
        "source_ids": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Brain sources to resolve against, first one first (default: the server's source, "
            "normally ['default']).",
        },
        "lexical_arms": {
            "type": "boolean",
            "description": "false turns off the weak-alias, surname and CJK arms (gbrain's kill switch); "
            "default on.",
        },
        "exclude_slug_prefixes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Never volunteer slugs starting with any of these (added to the server's own).",
        },
        "session_id": {
            "type": "string",
            "description": "Your conversation's id, logged with the events (first 256 characters). With "
            "turn, it makes a retried call log nothing twice.",
        },
        "turn": {
            "type": "integer",
            "description": "The turn number within session_id, logged with the events when it is an integer "
            "of at most 2,147,483,647 in absolute value (else not logged).",
        },
        "stats": {
            "type": "boolean",
            "description": "true (the boolean) returns volunteered-vs-used precision instead, like "
            "volunteer_stats; window is then not needed.",
        },
        "days": {
            "type": "number",
            "description": "With stats: the look-back in days (default 30; anything not > 0 means 30).",
        },
    },
}

STATS_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "days": {
            "type": "number",
            "description": "Look-back window in days: default 30, fractions floor, anything not > 0 means 30.",
        },
        "source": {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
            "description": "Brain source (or list of sources) to report on; default: the server's source.",
        },
    },
}

OPENED_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "slugs": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Slugs of the pages you opened (read), e.g. the ones volunteer_context returned "
            "and that you actually used. At most 100.",
        },
        "source": {
            "type": "string",
            "description": "Brain source of those pages (default: the server's source).",
        },
    },
    "required": ["slugs"],
}

OPENED_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reported": {"type": "integer", "description": "Distinct pages reported."},
        "updated": {
            "type": "integer",
            "description": "Pages whose last_retrieved_at moved (unknown, deleted and recently opened pages "
            "do not move: a 5-minute throttle, as in gbrain).",
        },
    },
    "required": ["reported", "updated"],
}

CONTEXT_DESCRIPTION = (
    "Volunteer brain pages for the conversation so far, once per turn: pass the recent turns as window. "
    "Returns the pages the conversation is about (entities matched by alias, exact title, surname, CJK "
    "title or slug suffix, confidence-gated, at most max_pages), each with slug, display, confidence, arm, "
    "rationale and a short synopsis. Nothing is returned when nothing clears the gate. Give session_id "
    "and turn so that volunteer_stats can tell how often volunteered pages were used."
)
STATS_DESCRIPTION = (
    "Precision of volunteered context: per match arm and channel, how many volunteered pages were later "
    "opened (used). Approximate: 'used' means pages.last_retrieved_at is later than the event."
)
OPENED_DESCRIPTION = (
    "Report pages you opened (read in full or relied on), so that volunteer_stats counts them as used. "
    "Call it for pages volunteer_context gave you that you actually used."
)

TOOLS: tuple[tuple[str, str, dict[str, Any], dict[str, Any]], ...] = (
    (CONTEXT_TOOL, CONTEXT_DESCRIPTION, CONTEXT_INPUT_SCHEMA,
     {"type": "object", "anyOf": [_CONTEXT_RESULT_SCHEMA, STATS_RESULT_SCHEMA]}),
    (STATS_TOOL, STATS_DESCRIPTION, STATS_INPUT_SCHEMA, STATS_RESULT_SCHEMA),
    (OPENED_TOOL, OPENED_DESCRIPTION, OPENED_INPUT_SCHEMA, OPENED_RESULT_SCHEMA),
)
"""(name, description, input schema, output schema) of every tool, in listing order."""
