"""End to end through broker, worker(s) and sink: the sustained rate, latency against load, catch-up.

With N workers running and ready (embedded broker and PostgreSQL, conformance brain), a ladder of
steady rates is produced, each step with fresh sessions (copies of the conformance watch sessions)
and every Turn stamped with its send time (``ts``). A row's produce-to-row latency is its insert
time (``clock_timestamp()``, a column added to this throwaway database only) minus that send
time. For each step:

- median / p90 / p99 latency of the rows of turns sent after the step's warm-up;
- whether the pipeline kept up: every expected row arrived, p99 <= 1 s, the last row landed
  within 1 s of the last send, and latency did not grow through the step (the last third's median
  at most twice the first third's + 50 ms): a pipeline that falls behind shows a growing latency;
- CPU seconds per turn of the workers, the broker, PostgreSQL and the load generator (from /proc;
  other load on the machine barely moves these).

The sustained rate is the highest step that kept up; the ladder stops after the first one that
did not. Then a burst: N turns sent as fast as possible, turns/s until the last row (catch-up).

    .venv/bin/python -m bench.e2e_bench                       # 1 and 2 workers, about 5 minutes
    .venv/bin/python -m bench.e2e_bench --workers 1 --rates 500,2000 --seconds 6
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg

from bench.common import CpuMeter, Latency, load_note, loadavg, produce_at_rate, read_topic
from bench.pipeline_bench import Workers, count_rows, expected_pages, instrument, make_turns, settings_for
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.embedded.tansu import EmbeddedBroker
from sinks.schema import migrate
from topics.definitions import ensure_topics

DEFAULT_RATES = (250, 500, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 10000, 12000)
KEEP_UP_P99_MS = 1000.0
KEEP_UP_DRAIN_S = 1.0


@dataclass
class Step:
    rate: float
    turns: int
    events: int
    rows: int
    achieved_rate: float
    latency: Latency
    drain_s: float
    kept_up: bool
    cpu_us_per_turn: dict[str, float]
    load: float
    hops: dict[str, float] = field(default_factory=dict)
    """Medians and p99s (ms) of a row's two hops through the broker (:func:`hop_split`)."""


@dataclass
class GroupResult:
    workers: int
    steps: list[Step] = field(default_factory=list)
    burst_turns: int = 0
    burst_per_s: float = 0.0
    burst_cpu_us_per_turn: dict[str, float] = field(default_factory=dict)
    burst_load: float = 0.0

    @property
    def sustained(self) -> float:
        kept = [s.rate for s in self.steps if s.kept_up]
        return max(kept) if kept else 0.0

    def at(self, rate: float) -> Step | None:
        return next((s for s in self.steps if s.rate == rate), None)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["sustained"] = self.sustained
        return out


def growing(latencies_by_send: list[float]) -> bool:
    """True when latency rose through the step: the last third's median is more than twice the
    first third's plus 50 ms (a queue that does not drain)."""
    third = len(latencies_by_send) // 3
    if third < 10:
        return False
    first = sorted(latencies_by_send[:third])[third // 2]
    last = sorted(latencies_by_send[-third:])[third // 2]
    return last > 2 * first + 50


async def _volunteered_stamps(settings: Any, tag: str) -> dict[tuple[str, int, str], float]:
    """(session, turn, slug) -> the broker timestamp (s) of each ``volunteered`` record of ``tag``'s
    sessions: the worker's create time, set when it appended the record to a batch."""
    stamps: dict[tuple[str, int, str], float] = {}
    async for rec in read_topic(settings, settings.topic_volunteered, max_partition_fetch_bytes=8 * 2**20):
        value = orjson.loads(rec.value or b"{}")
        if str(value.get("session_id", "")).startswith(tag + "-"):
            stamps[(value["session_id"], int(value["turn"]), value["slug"])] = rec.timestamp / 1000
    return stamps


def hop_split(settings: Any, tag: str, since: float) -> dict[str, float]:
    """Each row's produce-to-row latency in its two hops through the broker: *decide* (the turn's
    send to the worker appending its ``volunteered`` record: the turns fetch and its hold, the
    decision batch, the state save) and *sink* (that append to the INSERT: the produce, the
    sink's fetch and its hold, the write). Medians and p99s in ms, of the rows sent after ``since``."""
    stamps = asyncio.run(_volunteered_stamps(settings, tag))
    decide: list[float] = []
    sink: list[float] = []
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        for session, turn, slug, sent, inserted in conn.execute(
                "SELECT session_id, turn, slug, extract(epoch FROM volunteered_at), extract(epoch FROM inserted_at) "
                "FROM context_volunteer_events WHERE session_id LIKE %s AND volunteered_at >= to_timestamp(%s)",
                (tag + "-%", since)):
            stamp = stamps.get((session, int(turn), slug))
            if stamp is not None:
                decide.append((stamp - float(sent)) * 1000)
                sink.append((float(inserted) - stamp) * 1000)
    if not decide:
        return {}
    first, second = Latency.of(decide), Latency.of(sink)
    return {"decide_median_ms": first.median_ms, "decide_p99_ms": first.p99_ms,
            "sink_median_ms": second.median_ms, "sink_p99_ms": second.p99_ms, "matched": float(len(decide))}


def _wait_rows(url: str, target: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    rows = count_rows(url)
    while rows < target and time.monotonic() < deadline:
        time.sleep(0.05)
        rows = count_rows(url)
    return rows


def _meter(group: Workers, broker: EmbeddedBroker, pg: EmbeddedPostgres) -> CpuMeter:
    pids = {"workers": [p.pid for p in group.procs], "broker": [broker.pid or 0],
            "postgres": [pg.server_pid() or 0]}
    return CpuMeter(pids, trees=["postgres"])


def _per_turn(used: dict[str, float], turns: int) -> dict[str, float]:
    return {name: seconds / turns * 1e6 for name, seconds in used.items()}


def step(settings: Any, group: Workers, broker: EmbeddedBroker, pg: EmbeddedPostgres, rate: float,
         seconds: float, warmup: float) -> Step:
    tag = f"{settings.app_id}-r{int(rate)}"
    count = int(rate * (seconds + warmup))
    turns = make_turns(count, tag)[:count]
    expect = expected_pages(turns)
    before = count_rows(settings.database_url)
    load = loadavg()
    meter = _meter(group, broker, pg).start()
    first, last = asyncio.run(produce_at_rate(settings, turns, rate))
    rows = _wait_rows(settings.database_url, before + expect, timeout=max(30.0, 3 * seconds))
    used = meter.stop()
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        lat_by_send = [float(r[0]) for r in conn.execute(
            "SELECT extract(epoch FROM inserted_at - volunteered_at) * 1000 FROM context_volunteer_events "
            "WHERE session_id LIKE %s AND volunteered_at >= to_timestamp(%s) ORDER BY volunteered_at",
            (tag + "-%", first + warmup))]
        lat = lat_by_send
        row = conn.execute("SELECT extract(epoch FROM max(inserted_at)) FROM context_volunteer_events "
                           "WHERE session_id LIKE %s", (tag + "-%",)).fetchone()
    last_row = float(row[0]) if row and row[0] is not None else float("nan")
    latency = Latency.of(lat)
    arrived = rows - before
    drain = last_row - last
    kept = (arrived >= expect and latency.p99_ms <= KEEP_UP_P99_MS and drain <= KEEP_UP_DRAIN_S
            and not growing(lat_by_send))
    return Step(rate, len(turns), expect, arrived, len(turns) / (last - first), latency, drain, kept,
                _per_turn(used, len(turns)), load, hop_split(settings, tag, first + warmup))


def burst(settings: Any, group: Workers, broker: EmbeddedBroker, pg: EmbeddedPostgres, total: int,
          result: GroupResult) -> None:
    turns = make_turns(total, f"{settings.app_id}-burst")
    expect = expected_pages(turns)
    before = count_rows(settings.database_url)
    result.burst_load = loadavg()
    meter = _meter(group, broker, pg).start()
    first, _ = asyncio.run(produce_at_rate(settings, turns, 0, stamp=False))
    _wait_rows(settings.database_url, before + expect, timeout=600)
    used = meter.stop()
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        row = conn.execute("SELECT extract(epoch FROM max(inserted_at)) FROM context_volunteer_events "
                           "WHERE session_id LIKE %s", (f"{settings.app_id}-burst-%",)).fetchone()
    last = float(row[0]) if row and row[0] is not None else time.time()
    result.burst_turns = len(turns)
    result.burst_per_s = len(turns) / (last - first)
    result.burst_cpu_us_per_turn = _per_turn(used, len(turns))


def measure(broker: EmbeddedBroker, pg: EmbeddedPostgres, workdir: Path, workers: int,
            rates: tuple[float, ...] = DEFAULT_RATES, seconds: float = 6.0, warmup: float = 2.0,
            burst_turns: int = 40_000, partitions: int = 8, progress: bool = True) -> GroupResult:
    instrument(pg.url)
    settings = settings_for(broker, pg.url, f"e2e{workers}", partitions)
    asyncio.run(ensure_topics(settings))
    group = Workers(settings, workers, workdir)
    result = GroupResult(workers)
    try:
        group.wait_ready(partitions)
        for rate in rates:
            s = step(settings, group, broker, pg, rate, seconds, warmup)
            result.steps.append(s)
            if progress:
                print(f"  {workers} worker(s) at {rate:,.0f} turns/s (sent {s.achieved_rate:,.0f}/s): "
                      f"{s.rows}/{s.events} rows, median {s.latency.median_ms:.1f} ms, p99 "
                      f"{s.latency.p99_ms:.1f} ms, last row {s.drain_s * 1000:.0f} ms after the last send, "
                      f"{'kept up' if s.kept_up else 'FELL BEHIND'}; CPU µs/turn "
                      + ", ".join(f"{k} {v:.0f}" for k, v in s.cpu_us_per_turn.items())
                      + f"  [load {s.load:.2f}]", flush=True)
            if not s.kept_up:
                break
        if burst_turns:
            burst(settings, group, broker, pg, burst_turns, result)
            if progress:
                print(f"  {workers} worker(s), burst of {result.burst_turns:,} turns: "
                      f"{result.burst_per_s:,.0f} turns/s to the last row; CPU µs/turn "
                      + ", ".join(f"{k} {v:.0f}" for k, v in result.burst_cpu_us_per_turn.items())
                      + f"  [load {result.burst_load:.2f}]", flush=True)
    finally:
        group.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="worker counts (comma-separated)")
    parser.add_argument("--rates", default=",".join(str(r) for r in DEFAULT_RATES), help="turns/s ladder")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per step")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds at the start of a step")
    parser.add_argument("--burst", type=int, default=40_000, help="turns of the catch-up burst (0: none)")
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    rates = tuple(float(x) for x in args.rates.split(",") if x.strip())
    print(f"end-to-end bench: {load_note()}")
    with tempfile.TemporaryDirectory(prefix="e2e-bench-") as tmp, EmbeddedBroker() as broker, \
            EmbeddedPostgres() as pg:
        migrate(pg.url)
        for count in (int(x) for x in args.workers.split(",") if x.strip()):
            r = measure(broker, pg, Path(tmp), count, rates, args.seconds, args.warmup, args.burst, args.partitions)
            print(f"{count} worker(s): sustained {r.sustained:,.0f} turns/s, burst {r.burst_per_s:,.0f} turns/s")


if __name__ == "__main__":
    main()
