"""A week of churning sessions on one worker: memory and the table stay bounded because idle ones expire.

Issue 28 part 2. Sessions come and go: every simulated hour ``--sessions-per-hour`` new sessions
start, each sends ``--turns`` turns spread over that hour and then never comes back, as a team's
agents open and drop sessions all day. Time is compressed: the worker's idle limit
(``VOLUNTEER_SESSION_IDLE_SECONDS``) is ``--idle-seconds`` and stands for the default 4 hours, so one
simulated hour is a quarter of it. Every simulated 12 hours the bench reads, from the worker's own
``/metrics`` and ``/proc``, the sessions in its table, the sessions expired so far and its resident
memory. At the end it reads the changelog back: records written (the embedded broker keeps every
one; it does not compact) and what a compacted changelog keeps (the last value of each live key;
an expired session's tombstone removes it), which is what a Kafka broker holds.

Without expiry the table would hold every session of the week. With it, the table holds about
``sessions-per-hour x (4 + 1)`` sessions (those active within the idle limit, and those the next
sweep removes), whatever the week's length.

    .venv/bin/python -m bench.expiry_churn                          # 7 days, 500 sessions an hour (750 turns/s)
    .venv/bin/python -m bench.expiry_churn --days 1 --sessions-per-hour 200   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import bench.pipeline_bench as pb
from bench.common import load_note, rss_bytes
from bench.sessions_scale import PARTITIONS, read_changelog, wait_decided
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.embedded.tansu import EmbeddedBroker, free_port
from pipeline.settings import Settings
from sinks.schema import migrate
from topics.clients import make_producer
from topics.definitions import ensure_topics
from topics.records import Turn

DEFAULT_IDLE_HOURS = 4
"""The idle limit ``--idle-seconds`` stands for (settings' default, 4 h)."""


def metric(port: int, name: str) -> float:
    """One unlabelled sample of the worker's /metrics (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def hour_turns(hour: int, per_hour: int, turns: int) -> Iterator[tuple[float, Turn]]:
    """(fraction of the hour, turn): every new session of ``hour`` sends ``turns`` turns spread over it."""
    base = [s for s in pb.sessions() if s]
    for depth in range(turns):
        for i in range(per_hour):
            script = base[(hour * per_hour + i) % len(base)]
            role, text = script[depth % len(script)]
            yield (depth + i / per_hour) / turns, Turn(f"churn-{hour:04d}-{i:06d}", role, text, turn=depth + 1)


async def produce_week(settings: Settings, hours: int, per_hour: int, turns: int, hour_s: float,
                       sample: Callable[[int, int], None]) -> int:
    producer = make_producer(settings, linger_ms=5)
    await producer.start()
    sent = 0
    try:
        started = time.monotonic()
        for hour in range(hours):
            hour_start = started + hour * hour_s
            for fraction, turn in hour_turns(hour, per_hour, turns):
                delay = hour_start + fraction * hour_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await producer.send(settings.topic_turns, turn.to_json(), key=turn.session_id.encode())
                sent += 1
            if (hour + 1) % 12 == 0:
                sample(hour + 1, sent)
        await producer.flush()
    finally:
        await producer.stop()
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=float, default=7, help="simulated days (default 7)")
    parser.add_argument("--sessions-per-hour", type=int, default=500, help="new sessions per simulated hour")
    parser.add_argument("--turns", type=int, default=3, help="turns per session (default 3)")
    parser.add_argument("--idle-seconds", type=float, default=8.0,
                        help="the worker's idle limit, standing for 4 hours (default 8 s: an hour is 2 s)")
    args = parser.parse_args()
    hours = int(args.days * 24)
    hour_s = args.idle_seconds / DEFAULT_IDLE_HOURS
    total_sessions = hours * args.sessions_per_hour
    print(f"expiry churn: {args.days:g} simulated days ({hours} hours of {hour_s:.2f} s), "
          f"{args.sessions_per_hour:,} new sessions an hour x {args.turns} turns, idle limit {args.idle_seconds:g} s "
          f"for 4 h  [{load_note()}]", flush=True)
    with tempfile.TemporaryDirectory(prefix="expiry-churn-") as tmp, EmbeddedBroker() as broker, \
            EmbeddedPostgres() as pg:
        migrate(pg.url)
        settings = pb.settings_for(broker, pg.url, "churn", PARTITIONS)
        asyncio.run(ensure_topics(settings))
        port = free_port()
        pb.WORKER_ENV.update({"VOLUNTEER_METRICS_PORT": str(port),
                              "VOLUNTEER_SESSION_IDLE_SECONDS": str(args.idle_seconds)})
        group = pb.Workers(settings, 1, Path(tmp))
        group.wait_ready(PARTITIONS, timeout=120)
        pid = group.procs[0].pid
        peaks: list[tuple[int, float, float]] = []  # (hour, sessions, RSS MiB)
        try:
            def sample(hour: int, sent: int) -> None:
                sessions = metric(port, "volunteer_sessions")
                expired = metric(port, "volunteer_sessions_expired_total")
                rss = rss_bytes(pid) / 2**20
                peaks.append((hour, sessions, rss))
                print(f"  day {hour / 24:4.1f}: {sent:,} turns sent, {hour * args.sessions_per_hour:,} sessions so far; "
                      f"table {sessions:,.0f}, expired {expired:,.0f}, worker RSS {rss:,.0f} MiB  [{load_note()}]",
                      flush=True)

            sent = asyncio.run(produce_week(settings, hours, args.sessions_per_hour, args.turns, hour_s, sample))
            wait_decided(group, port, sent, timeout=600, progress=False)
            time.sleep(args.idle_seconds * 1.5)  # the last sessions go idle and the sweep takes them
            final = metric(port, "volunteer_sessions"), rss_bytes(pid) / 2**20
        finally:
            group.stop()
        log = asyncio.run(read_changelog(settings))
    first_day = [p for p in peaks if p[0] <= 24]
    print(f"table: at most {max(p[1] for p in first_day):,.0f} sessions on day 1, "
          f"{max(p[1] for p in peaks):,.0f} over the week, {final[0]:,.0f} after the last went idle "
          f"({total_sessions:,} sessions in all)")
    print(f"worker RSS: at most {max(p[2] for p in first_day):,.0f} MiB on day 1, {max(p[2] for p in peaks):,.0f} MiB "
          f"over the week, {final[1]:,.0f} MiB at the end")
    print(f"changelog: {log.records:,} records, {log.written_bytes / 2**20:,.0f} MiB written (kept whole by the "
          f"embedded broker); compacted: {log.keys:,} live sessions, {log.compacted_bytes / 2**20:,.1f} MiB  "
          f"[{load_note()}]")


if __name__ == "__main__":
    main()
