"""What the suite's parts share: the machine's load, CPU time of other processes, steady-rate
producing, a group of worker processes, produce-to-row latencies."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.settings import Settings  # noqa: E402
from topics.clients import make_consumer, make_producer  # noqa: E402
from topics.records import Turn  # noqa: E402

_TICKS = os.sysconf("SC_CLK_TCK")


def loadavg() -> float:
    """The 1-minute load average (2 CPUs here: above 2, something else competes for them)."""
    return os.getloadavg()[0]


def load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds a process has used so far (0 if it is gone)."""
    if pid is None:
        return 0.0
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (PostgreSQL's backends are children of the postmaster)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        if int(text.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def tree_cpu_seconds(pid: int | None) -> float:
    """CPU seconds of a process and its live children (e.g. the postmaster and its backends)."""
    if pid is None:
        return 0.0
    return cpu_seconds(pid) + sum(cpu_seconds(c) for c in child_pids(pid))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def pipeline_us(cpu_us_per_turn: dict[str, float]) -> float:
    """Issue 15's goal 2 adds up the workers, the broker and PostgreSQL: every metered process but the
    load generator, which stands for the clients."""
    return sum(v for k, v in cpu_us_per_turn.items() if k != "load generator")


class CpuMeter:
    """CPU seconds used by named processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: dict[str, list[int]], trees: Sequence[str] = ()) -> None:
        self.pids = pids
        self.trees = set(trees)
        self._start: dict[str, float] = {}
        self.used: dict[str, float] = {}
        self._t0 = 0.0
        self.wall = 0.0

    def _read(self, name: str) -> float:
        read = tree_cpu_seconds if name in self.trees else cpu_seconds
        return sum(read(pid) for pid in self.pids[name])

    def start(self) -> CpuMeter:
        self._start = {name: self._read(name) for name in self.pids}
        self._start["load generator"] = time.process_time()
        self._t0 = time.monotonic()
        return self

    def stop(self) -> dict[str, float]:
        self.wall = time.monotonic() - self._t0
        self.used = {name: self._read(name) - self._start[name] for name in self.pids}
        self.used["load generator"] = time.process_time() - self._start["load generator"]
        return self.used


async def produce_at_rate(settings: Settings, turns: Sequence[Turn], rate: float, *, stamp: bool = True,
                          tick_s: float = 0.005) -> tuple[float, float]:
    """Send ``turns`` at ``rate`` per second (in ticks of ``tick_s``), each stamped with its send
    time as ``ts`` when ``stamp``. Returns (first send, last send) as epoch seconds. ``rate`` <= 0:
    as fast as possible."""
    producer = make_producer(settings, linger_ms=1 if rate > 0 else 5)
    await producer.start()
    try:
        pending = []
        started_wall = time.time()
        started = time.monotonic()
        i = 0
        n = len(turns)
        while i < n:
            if rate > 0:
                due = min(n, int((time.monotonic() - started) * rate) + 1)
                if due <= i:
                    await asyncio.sleep(tick_s)
                    continue
            else:
                due = min(n, i + 1000)
            now_ms = int(time.time() * 1000)
            for turn in turns[i:due]:
                record = Turn(turn.session_id, turn.role, turn.text, turn.turn, now_ms) if stamp else turn
                pending.append(await producer.send(settings.topic_turns, record.to_json(),
                                                   key=turn.session_id.encode()))
            i = due
            if len(pending) > 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        last = time.time()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return started_wall, last


@dataclass(frozen=True)
class Latency:
    count: int
    median_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, values_ms: Sequence[float]) -> Latency:
        if not values_ms:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan)
        ordered = sorted(values_ms)
        last = len(ordered) - 1
        return cls(len(ordered), statistics.median(ordered), ordered[int(0.90 * last)],
                   ordered[int(0.99 * last)], ordered[-1])


async def read_topic(settings: Settings, topic: str, **consumer_kwargs: int) -> AsyncIterator[Any]:
    """Every record of ``topic`` up to its end when the read began (all partitions, no group)."""
    consumer = make_consumer(settings, topic, **consumer_kwargs)
    await consumer.start()  # no group: every partition, nothing to leave
    try:
        parts = consumer.assignment()
        while not parts:
            await asyncio.sleep(0.1)
            parts = consumer.assignment()
        ends = await consumer.end_offsets(list(parts))
        remaining = {tp for tp, end in ends.items() if end > 0}
        while remaining:
            batch = await consumer.getmany(timeout_ms=500, max_records=50_000)
            for tp, recs in batch.items():
                for rec in recs:
                    yield rec
                if recs and recs[-1].offset + 1 >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
