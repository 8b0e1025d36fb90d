"""The context-pressure notice: one line asking the agent to save what matters before compaction.

Later gbrain hooks (after the 0.46.28 reference) measure how full a Claude Code session's context
window is from the transcript, and when it is about 80 % full, or growing fast enough that two
more turns like the last one would reach the point where the harness compacts by itself, the
next prompt carries one notice: save the decisions, preferences, commitments and open threads
now, with the brain's memory tool, because compaction will drop them. It fires at most once per
compaction segment (a ``compact_boundary`` line in the transcript starts a new one).

Here it is **off** unless ``VOLUNTEER_HOOK_PRESSURE=on`` (this service has no memory store of its
own; the notice is only useful where the agent also has a brain it can write to, such as gbrain's
``remember``). Everything in this module is pure but :func:`read_tail`; the state that makes it
once-per-segment lives in the session's hook state file (under its lock).

How fill is measured: the newest assistant line's ``usage`` (input, cache-creation and cache-read
tokens: what the model was sent for that turn) over the context window. The window is the one set
(``VOLUNTEER_HOOK_PRESSURE_WINDOW``), else 1,000,000 when the model id carries a 1M marker or a
turn already used more than 200,000 tokens (only a large window holds that), else 200,000. When
the newest line is a compaction boundary, nothing has been measured since it and nothing fires.
"""

from __future__ import annotations

from pipeline import jsonlite

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_WARN_RATIO = 0.8
MIN_WARN_RATIO, MAX_WARN_RATIO = 0.5, 0.95
DEFAULT_WINDOW = 200_000
LARGE_WINDOW = 1_000_000
MIN_WINDOW, MAX_WINDOW = 8_000, 10_000_000
AUTO_COMPACT_RATIO = 0.92
"""Fill at which Claude Code compacts on its own (a little before the window is full)."""
HEADROOM_TURNS = 2
"""Warn early when this many more turns of the last turn's growth would reach the compaction point."""
TAIL_BYTES = 256 * 1024
"""Only the end of the transcript is read: the newest usage is near it."""
START_SEGMENT = "start"
_LARGE_MARKERS = ("[1m]", "-1m", "1m-context")


class Measured:
    """What the transcript's tail says: tokens of the newest turn, its model, the newest boundary."""

    __slots__ = ("boundary", "model", "used")

    def __init__(self, used: int, model: str | None, boundary: str | None) -> None:
        self.used = used
        self.model = model
        self.boundary = boundary


def _used_tokens(usage: Any) -> int:
    if not isinstance(usage, dict):
        return 0
    total = 0
    for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total


def measure(text: str) -> Measured | None:
    """The newest usage and compaction boundary in Claude Code JSONL ``text`` (oldest line first).

    None when no assistant turn with usage is in view, or the newest of them is older than the
    newest boundary (the fill after a compaction is not known until the next turn)."""
    used = 0
    model: str | None = None
    boundary: str | None = None
    for line in reversed(text.split("\n")):
        if used and boundary is not None:
            break
        # cheap filters first: most lines are neither, and parsing every one would cost the hook
        has_boundary = boundary is None and "compact_boundary" in line
        has_usage = not used and '"usage"' in line
        if not has_boundary and not has_usage:
            continue
        try:
            row = jsonlite.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(row, dict):
            continue
        if (has_boundary and row.get("type") == "system" and row.get("subtype") == "compact_boundary"
                and isinstance(row.get("uuid"), str)):
            boundary = row["uuid"]
            if not used:
                return None
            continue
        message = row.get("message")
        if has_usage and row.get("type") == "assistant" and isinstance(message, dict):
            tokens = _used_tokens(message.get("usage"))
            if tokens > 0:
                used = tokens
                found = message.get("model")
                model = found if isinstance(found, str) else None
    return Measured(used, model, boundary) if used else None


def read_tail(path: str, limit: int = TAIL_BYTES) -> str | None:
    """The last ``limit`` bytes of ``path`` as text, without the partial first line; None if unreadable."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            start = max(0, size - limit)
            fh.seek(start)
            data = fh.read(limit)
    except OSError:
        return None
    text = data.decode("utf-8", "replace")
    if start > 0:
        cut = text.find("\n")
        text = text[cut + 1:] if cut >= 0 else ""
    return text


def context_window(configured: int | None, model: str | None, max_seen: int) -> int:
    """The session's window: the configured one; else large for a 1M model id or a fill only a
    large window holds; else the default."""
    if configured:
        return configured
    lowered = (model or "").lower()
    if any(marker in lowered for marker in _LARGE_MARKERS):
        return LARGE_WINDOW
    return LARGE_WINDOW if max_seen > DEFAULT_WINDOW else DEFAULT_WINDOW


def should_warn(used: int, window: int, warn_ratio: float, growth: int) -> bool:
    """At ``warn_ratio`` fill, or earlier when :data:`HEADROOM_TURNS` more turns of ``growth`` tokens
    would reach :data:`AUTO_COMPACT_RATIO`."""
    if window <= 0:
        return False
    if used / window >= warn_ratio:
        return True
    return growth > 0 and (used + HEADROOM_TURNS * growth) / window >= AUTO_COMPACT_RATIO


def notice(percent: int) -> str:
    """The notice (one line; the hook puts it before the block)."""
    return (f"[volunteer] This conversation's context is about {percent}% full and will be compacted soon; "
            "whatever exists only in this conversation will then be gone. Before going on, save the decisions, "
            "preferences, commitments and open threads worth keeping with your brain's memory tool (for gbrain: "
            "one remember call with items), each with a short note of where it came from. Leave out what is "
            "already saved, secrets, and anything the user asked not to keep. This notice comes once per compaction.")


class Decision:
    """``fire``: print the notice now; ``state``: the session's pressure state to keep (``warned``
    is set only once the notice was printed: :meth:`printed`)."""

    __slots__ = ("fire", "percent", "reason", "state", "window")

    def __init__(self, fire: bool, percent: int, window: int, state: dict[str, Any], reason: str) -> None:
        self.fire = fire
        self.percent = percent
        self.window = window
        self.state = state
        self.reason = reason

    def text(self) -> str:
        return notice(self.percent)

    def printed(self) -> dict[str, Any]:
        """The state to keep once the notice was printed."""
        return {**self.state, "warned": True}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def decide(previous: Any, measured: Measured, warn_ratio: float = DEFAULT_WARN_RATIO,
           configured_window: int | None = None) -> Decision:
    """Whether this prompt carries the notice, from the session's previous pressure state (any
    JSON value; anything but the expected object counts as none) and this turn's measurement."""
    prev = previous if isinstance(previous, dict) and isinstance(previous.get("segment"), str) else None
    segment = measured.boundary or (prev["segment"] if prev else START_SEGMENT)
    same = prev is not None and prev["segment"] == segment
    max_seen = max(measured.used, _int(prev.get("max_seen")) if same and prev else 0)
    window = context_window(configured_window, measured.model, max_seen)
    percent = min(99, int(measured.used * 100 / window + 0.5))  # half up, as gbrain's Math.round
    warned = same and prev is not None and prev.get("warned") is True
    growth = max(0, measured.used - _int(prev.get("last_used"))) if same and prev else 0
    state = {"segment": segment, "warned": warned, "max_seen": max_seen, "last_used": measured.used}
    if warned:
        return Decision(False, percent, window, state, "already_warned")
    if should_warn(measured.used, window, warn_ratio, growth):
        return Decision(True, percent, window, state, "fire")
    return Decision(False, percent, window, state, "below_threshold")


def parse_ratio(raw: str) -> float:
    """``VOLUNTEER_HOOK_PRESSURE_RATIO``: a number in 0.5..0.95, else the default 0.8."""
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_WARN_RATIO
    return value if MIN_WARN_RATIO <= value <= MAX_WARN_RATIO else DEFAULT_WARN_RATIO


def parse_window(raw: str) -> int | None:
    """``VOLUNTEER_HOOK_PRESSURE_WINDOW``: whole tokens in 8,000..10,000,000, else None (detect)."""
    try:
        value = int(raw.strip())
    except ValueError:
        return None
    return value if MIN_WINDOW <= value <= MAX_WINDOW else None
