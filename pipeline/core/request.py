"""One op request as a JSON object: the ``volunteer context --batch`` line and the MCP tool's arguments.

Both channels read the same object the same way, so they cannot disagree: this module turns a
request (already parsed JSON) into the op's result, the ``invalid_params`` error object, and the
warnings the caller reports (on stderr for the CLI). Values are forwarded raw and clamped by the op
exactly as the reference's ``volunteer_context`` does (docs/reference-behaviour.md §8): a
``max_pages`` that is not a number means the default, it is not an error.

The attribution clamps of §8 live here too: they decide what the op channel logs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from pipeline.core.brain import BrainIndex
from pipeline.core.jscompat import is_js_number, utf16_prefix
from pipeline.core.op import InvalidParams, volunteer_context

MAX_WINDOW_BYTES = 5_000_000
"""The reference's stdin cap, applied to a window given inside a request as well."""

MAX_SESSION_ID_UNITS = 256
"""``session_id`` is logged truncated to 256 characters (JavaScript ``slice``: UTF-16 units)."""

MAX_TURN = 2_147_483_647
"""``turn`` is logged only when it is an integer with ``|turn|`` at most this (an INTEGER column)."""


@dataclass(frozen=True)
class RequestDefaults:
    """What a request gets for a key it leaves out (the command's flags and ``VOLUNTEER_*`` settings)."""

    source_ids: tuple[str, ...] = ("default",)
    prior_context: str | None = None
    max_pages: Any = None  # Any, not object: mypyc cannot compile a dataclass field typed object
    min_confidence: Any = None
    lexical_arms: bool = True
    exclude_slug_prefixes: tuple[str, ...] = ()


@dataclass
class Outcome:
    """The object to answer with, whether it is a result, and warnings worth telling the caller."""

    result: dict[str, Any]
    ok: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def pages(self) -> list[dict[str, Any]]:
        pages = self.result.get("pages") if self.ok else None
        return pages if isinstance(pages, list) else []


def _invalid(message: str, warnings: list[str]) -> Outcome:
    return Outcome({"error": InvalidParams.code, "message": message}, False, [*warnings, message])


def _string_list(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(s, str) for s in value)


def evaluate(request: Mapping[str, Any], defaults: RequestDefaults, brain: BrainIndex) -> Outcome:
    """Run one request. Never raises for bad values: they become an ``invalid_params`` outcome.

    - ``window``: required; not a string or blank is the reference's ``invalid_params`` error;
      longer than 5,000,000 UTF-8 bytes is refused the same way.
    - ``source_ids``: a list of non-empty strings (absent or null: the defaults), else ``invalid_params``.
    - ``exclude_slug_prefixes``: a list of strings, added to the configured ones (a caller can
      exclude more, never less), else ``invalid_params``.
    - ``max_pages`` / ``min_confidence`` / ``prior_context``: forwarded raw; a wrong type means the
      default (a warning says so), as in the reference.
    - ``lexical_arms``: true/false, else the default (with a warning).
    """
    warnings: list[str] = []
    window = request.get("window")
    # (4 bytes per character at most: the encode runs only for windows that might be too long)
    if (isinstance(window, str) and len(window) * 4 > MAX_WINDOW_BYTES
            and len(window.encode("utf-8", "surrogatepass")) > MAX_WINDOW_BYTES):
        return _invalid(f"window is over {MAX_WINDOW_BYTES:,} bytes", warnings)

    source_ids = request.get("source_ids")
    if source_ids is None:  # absent or null: the configured scope
        source_ids = list(defaults.source_ids)
    if not _string_list(source_ids) or not all(source_ids):
        return _invalid("source_ids must be a list of non-empty strings", warnings)
    prefixes = request.get("exclude_slug_prefixes")
    if prefixes is None:
        prefixes = []
    if not _string_list(prefixes):
        return _invalid("exclude_slug_prefixes must be a list of strings", warnings)
    exclude = tuple(dict.fromkeys([*defaults.exclude_slug_prefixes, *(p for p in prefixes if p)]))

    for name in ("max_pages", "min_confidence"):
        if name in request and request[name] is not None and not is_js_number(request[name]):
            warnings.append(f"warning: {name} is not a number; the default applies")
    if "prior_context" in request and request["prior_context"] is not None and not isinstance(
        request["prior_context"], str
    ):
        warnings.append("warning: prior_context is not a string; ignored")
    lexical = request.get("lexical_arms", defaults.lexical_arms)
    if not isinstance(lexical, bool):
        warnings.append("warning: lexical_arms is not true/false; the default applies")
        lexical = defaults.lexical_arms
    try:
        result = volunteer_context(
            window,
            brain,
            source_ids=source_ids,
            prior_context=request.get("prior_context", defaults.prior_context),
            max_pages=request.get("max_pages", defaults.max_pages),
            min_confidence=request.get("min_confidence", defaults.min_confidence),
            lexical_arms=lexical,
            exclude_slug_prefixes=exclude,
        )
    except InvalidParams as exc:
        return _invalid(exc.message, warnings)
    return Outcome(result, True, warnings)


# ---------------------------------------------------------------------------- attribution (§8)


def clamp_session_id(value: object) -> str | None:
    """A string session id, truncated to 256 characters; anything else is not logged (NULL)."""
    if not isinstance(value, str):
        return None
    return utf16_prefix(value, MAX_SESSION_ID_UNITS)


def clamp_turn(value: object) -> int | None:
    """An integer turn (``7`` or ``7.0``) with ``|turn| <= 2,147,483,647``; anything else is NULL.

    ``Number.isInteger``: a bool, a string, ``7.5``, NaN or infinity is not an integer.
    """
    if not is_js_number(value):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    turn = int(value)
    return turn if abs(turn) <= MAX_TURN else None


def attribution(request: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """``(session_id, turn)`` of a request, clamped as the op logs them."""
    return clamp_session_id(request.get("session_id")), clamp_turn(request.get("turn"))


def source_scope(value: object, default: Sequence[str]) -> list[str] | None:
    """A stats ``source``: one id or a list of ids; None when it is neither (the caller refuses it)."""
    if value is None:
        return list(default)
    if isinstance(value, str) and value:
        return [value]
    if _string_list(value) and value and all(value):
        return list(value)
    return None
