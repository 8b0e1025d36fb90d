"""Precision of volunteered pages per arm and channel: the reference ``--stats`` (reference-behaviour.md §11, §7.3).

"Used" means the page's ``last_retrieved_at`` is strictly later than the event: approximate by
design (a 5-minute retrieval throttle hides some uses, unrelated reads add some). Everything here
follows the reference exactly, including its rounding (JS ``toFixed``: ties round up) and its
habit of answering zeroed stats rather than an error when the query fails (e.g. no table yet).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import psycopg

from sinks.db import ConnOrInfo, borrowed

DEFAULT_DAYS = 30
STATS_NOTE = (
    'approximate: "used" = pages.last_retrieved_at > volunteered_at. The 5-min last-retrieved '
    "throttle causes false negatives; unrelated reads of the same page cause false positives."
)

STATS_SQL = """
SELECT e.match_arm, e.channel,
       count(*) AS volunteered,
       count(*) FILTER (WHERE p.last_retrieved_at > e.volunteered_at) AS used
  FROM context_volunteer_events e
  LEFT JOIN pages p
    ON p.source_id = e.source_id AND p.slug = e.slug AND p.deleted_at IS NULL
 WHERE e.source_id = ANY(%s::text[])
   AND e.volunteered_at > now() - make_interval(days => %s)
 GROUP BY e.match_arm, e.channel
 ORDER BY e.match_arm, e.channel
"""
# ORDER BY uses the database collation, as the reference's does.

CHANNELS_SQL = """
SELECT channel, count(*) AS n, max(volunteered_at) AS last_fired
  FROM context_volunteer_events
 WHERE volunteered_at > now() - make_interval(days => %(days)s)
   AND (%(scoped)s = false OR source_id = ANY(%(sources)s::text[]))
 GROUP BY channel
 ORDER BY channel
"""


@dataclass(frozen=True)
class ArmStats:
    match_arm: str
    channel: str
    volunteered: int
    used: int
    precision: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "match_arm": self.match_arm,
            "channel": self.channel,
            "volunteered": self.volunteered,
            "used": self.used,
            "precision": json_number(self.precision),
        }


@dataclass(frozen=True)
class UsageStats:
    days: int
    note: str = STATS_NOTE
    by_arm: list[ArmStats] = field(default_factory=list)
    approximate: bool = True

    @property
    def total_volunteered(self) -> int:
        return sum(a.volunteered for a in self.by_arm)

    @property
    def total_used(self) -> int:
        return sum(a.used for a in self.by_arm)

    def to_dict(self) -> dict[str, Any]:
        """The reference result object, key order included."""
        return {
            "days": self.days,
            "approximate": self.approximate,
            "note": self.note,
            "total_volunteered": self.total_volunteered,
            "total_used": self.total_used,
            "by_arm": [a.to_dict() for a in self.by_arm],
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> UsageStats:
        return cls(
            days=int(obj["days"]),
            note=str(obj.get("note", STATS_NOTE)),
            by_arm=[
                ArmStats(str(a["match_arm"]), str(a["channel"]), int(a["volunteered"]), int(a["used"]),
                         float(a["precision"]))
                for a in obj.get("by_arm", [])
            ],
        )


@dataclass(frozen=True)
class ChannelActivity:
    channel: str
    count: int
    last_fired: datetime | None


def normalize_days(days: Any) -> int:
    """A finite number > 0 is floored; anything else (0, negative, NaN, a string, a bool) is 30."""
    if isinstance(days, bool) or not isinstance(days, int | float):
        return DEFAULT_DAYS
    if not math.isfinite(days) or days <= 0:
        return DEFAULT_DAYS
    return math.floor(days)


def precision(used: int, volunteered: int) -> float:
    """``Number((used / volunteered).toFixed(3))``, 0 when nothing was volunteered.

    ``toFixed`` rounds the exact binary value half up, so 1/16 = 0.0625 gives 0.063 (Python's
    ``round`` gives 0.062); ``Decimal(float)`` is that exact value.
    """
    if volunteered <= 0:
        return 0.0
    exact = Decimal(used / volunteered)
    return float(exact.quantize(Decimal("0.001"), rounding=ROUND_HALF_UP))


def js_number(value: float) -> str:
    """How JavaScript prints a number: ``1``, ``0.5``, ``0.333``, ``0``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text and 1e-7 <= abs(value) < 1e21:
        text = format(Decimal(text), "f")
    return text


def json_number(value: float) -> int | float:
    """A float that JSON-encodes as JavaScript would (``1`` not ``1.0``)."""
    return int(value) if math.isfinite(value) and value == int(value) else value


def usage_stats(target: ConnOrInfo, source_ids: Sequence[str], days: Any = DEFAULT_DAYS) -> UsageStats:
    """Per arm and channel: volunteered, used, precision over the last ``days`` days, source-scoped.

    Any query error (missing table, missing column, a broken transaction) gives zeroed stats, as
    the reference does; only failing to connect at all raises.
    """
    safe_days = normalize_days(days)
    with borrowed(target) as conn:
        try:
            with conn.transaction():
                rows = conn.execute(STATS_SQL, (list(source_ids), safe_days)).fetchall()
        except psycopg.Error:
            if conn.closed or conn.broken:
                raise
            rows = []
    by_arm = [
        ArmStats(str(arm), str(channel), int(v), int(u), precision(int(u), int(v))) for arm, channel, v, u in rows
    ]
    return UsageStats(days=safe_days, by_arm=by_arm)


def channel_activity(
    target: ConnOrInfo, days: int = 7, source_ids: Sequence[str] | None = None
) -> list[ChannelActivity] | None:
    """Events (count, latest) per channel over the last ``days`` days: the ``volunteer_channels`` check.

    Brain-wide unless ``source_ids`` is non-empty. ``None`` when the events table does not exist.
    """
    scoped = bool(source_ids)
    params = {"days": int(days), "scoped": scoped, "sources": list(source_ids or [])}
    with borrowed(target) as conn:
        try:
            with conn.transaction():
                rows = conn.execute(CHANNELS_SQL, params).fetchall()
        except psycopg.errors.UndefinedTable:
            return None
    return [ChannelActivity(str(c), int(n), last) for c, n, last in rows]


def format_stats(result: UsageStats | dict[str, Any]) -> str:
    """The reference's human rendering (reference-behaviour.md §7.3), ending in a newline."""
    stats = UsageStats.from_dict(result) if isinstance(result, dict) else result
    lines = [
        f"volunteered-context precision — last {stats.days} day(s) ({stats.note})",
        f"total: {stats.total_volunteered} volunteered, {stats.total_used} used",
    ]
    for a in stats.by_arm:
        lines.append(f"  {a.match_arm}/{a.channel}: {a.used}/{a.volunteered} used (precision {js_number(a.precision)})")
    if not stats.by_arm:
        lines.append("  (no volunteer events in the window)")
    return "\n".join(lines) + "\n"


def stats_json(result: UsageStats) -> str:
    """``JSON.stringify(result, null, 2)`` plus a newline."""
    return json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n"


def run_stats_command(
    database_url: str, source_ids: Sequence[str] | None, days: Any = DEFAULT_DAYS, as_json: bool = False
) -> str:
    """What ``volunteer stats`` and ``volunteer context --stats`` print.

    ``source_ids`` empty or None means ``["default"]``. Connection failures raise
    ``psycopg.OperationalError``; query failures give zeroed stats (reference behaviour).
    """
    scope = [s for s in (source_ids or []) if s] or ["default"]
    result = usage_stats(database_url, scope, days)
    return stats_json(result) if as_json else format_stats(result)
