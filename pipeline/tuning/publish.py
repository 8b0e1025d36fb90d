"""``--to-topic``: a transcript's Turn records onto the ``turns`` topic, paced like the original or
at a fixed rate, under their own channel so live stats stay clean.

The schedule (when each record goes out) is a pure function of the records and the rate, so it is
tested without a broker; sending goes through :class:`pipeline.client.TurnPublisher`, which keys
records by session id, numbers turns that carry no number and validates every record with the
worker's own decoder.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.settings import Settings
from topics.records import Turn

DEFAULT_CHANNEL = "replay"


class RateError(ValueError):
    """A ``--rate`` that cannot be used with these records."""


@dataclass(frozen=True, slots=True)
class Rate:
    """Either a fixed number of turns per second, or a multiple of the original pace (``ts``)."""

    per_second: float | None = None
    speed: float | None = None

    def describe(self) -> str:
        if self.per_second is not None:
            return f"{self.per_second:g} turns/s"
        return "the original pace" if self.speed == 1 else f"{self.speed:g}x the original pace"


def parse_rate(text: str) -> Rate:
    """``original`` | ``Nx`` (N times the original pace) | ``N`` (turns per second)."""
    value = text.strip().lower()
    if value == "original":
        return Rate(speed=1.0)
    speedup = value.endswith("x")
    try:
        number = float(value[:-1] if speedup else value)
    except ValueError:
        raise RateError(f"--rate {text!r}: use 'original', a speed-up such as '10x', or turns per second "
                        "such as '500'") from None
    if not math.isfinite(number) or number <= 0:
        raise RateError(f"--rate {text!r}: must be greater than 0")
    return Rate(speed=number) if speedup else Rate(per_second=number)


def schedule(turns: Sequence[Turn], rate: Rate) -> list[float]:
    """Seconds after the start at which each record is sent, never decreasing (file order is kept).

    At the original pace, a record is due ``(ts - first ts) / speed`` after the start; a record
    without ``ts``, or one whose ``ts`` is earlier than the previous record's, goes right after the
    previous one.
    """
    if rate.per_second is not None:
        return [i / rate.per_second for i in range(len(turns))]
    speed = rate.speed or 1.0
    first = next((t.ts_ms for t in turns if t.ts_ms is not None), None)
    if first is None and turns:
        raise RateError("--rate original needs a 'ts' on the records, and none has one; "
                        "give a rate in turns per second instead, e.g. --rate 100")
    offsets: list[float] = []
    last = 0.0
    for turn in turns:
        if turn.ts_ms is not None and first is not None:
            last = max(last, (turn.ts_ms - first) / 1000.0 / speed)
        offsets.append(last)
    return offsets


@dataclass
class PublishSummary:
    sent: int
    sessions: int
    seconds: float


async def publish_turns(
    settings: Settings,
    turns: Sequence[Turn],
    offsets: Sequence[float],
    *,
    channel: str = DEFAULT_CHANNEL,
    keep_ts: bool = False,
    on_sent: Callable[[int], None] | None = None,
) -> PublishSummary:
    """Send ``turns`` at ``offsets`` (seconds after the start), keyed by session, under ``channel``.

    ``ts`` is the moment of sending unless ``keep_ts`` (then the record's own ``ts``), so the events
    land in today's stats window rather than the transcript's past.
    """
    from pipeline.client import TurnPublisher
    from topics.definitions import ensure_topics

    await ensure_topics(settings)
    loop = asyncio.get_running_loop()
    started = loop.time()
    sent = 0
    async with TurnPublisher(settings) as publisher:
        for turn, offset in zip(turns, offsets, strict=True):
            delay = started + offset - loop.time()
            if delay > 0.001:
                await asyncio.sleep(delay)
            ts = turn.ts_ms if keep_ts else int(time.time() * 1000)
            record = await publisher.publish(turn.session_id, turn.role, turn.text, turn=turn.turn,
                                             source_id=turn.source_id, channel=channel, ts=ts)
            if record is not None:
                sent += 1
                if on_sent is not None:
                    on_sent(1)
    return PublishSummary(sent=sent, sessions=len({t.session_id for t in turns}), seconds=loop.time() - started)
