"""A million sessions through the real pipeline on one worker: memory, changelog, recovery, first turn.

Issue 28 part 1. Every figure comes from real services (the embedded broker and PostgreSQL) and a
real worker process; nothing is filled in behind the pipeline's back.

1. One worker on an empty table; its time to ready is the baseline.
2. ``--sessions`` sessions, ``--turns`` turns each, produced round-robin (turn 1 of every session,
   then turn 2 of every session...), so that each session's state is written again on every turn,
   as in live traffic. Texts are the conformance watch sessions' turns, so pages are volunteered
   and deduped as in real conversations. The worker's own ``volunteer_turns`` counter (its
   ``/metrics``) says when every turn is decided; then its resident memory is read.
3. The changelog is read back: records and bytes written, and the bytes a compacted changelog
   keeps (the last value of each key), which is what a Kafka broker holds after compaction.
4. A fresh worker (its own empty data folder: nothing local to start from) recovers the table;
   its time to ready minus the baseline is the recovery of the whole table; its resident memory is
   the table's cost on a worker that holds it. Then one more turn of an existing session is
   produced and timed until that worker has decided it (first turn served after recovery).

    .venv/bin/python -m bench.sessions_scale                     # 1,000,000 sessions x 2 turns
    .venv/bin/python -m bench.sessions_scale --sessions 50000    # a quick look

The memory engine of the embedded broker does not compact, so the fresh worker reads every record
ever written (sessions x turns); against Kafka with compaction it reads about one per session.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bench.pipeline_bench as pb
from bench.common import cpu_seconds, load_note, loadavg, read_topic, rss_bytes
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.embedded.tansu import EmbeddedBroker, free_port
from pipeline.settings import Settings
from sinks.schema import migrate
from topics.clients import make_producer
from topics.definitions import ensure_topics
from topics.records import Turn

PARTITIONS = 8
SEND_CHUNK = 20_000


def session_turns(sessions: int, turns: int) -> Iterator[Turn]:
    """Round-robin turns: depth by depth, every session once per depth; texts from the conformance sessions."""
    base = [s for s in pb.sessions() if s]
    for depth in range(turns):
        for i in range(sessions):
            script = base[i % len(base)]
            role, text = script[depth % len(script)]
            yield Turn(f"scale-{i:07d}", role, text, turn=depth + 1)


async def produce(settings: Settings, turns: Iterator[Turn], total: int) -> None:
    producer = make_producer(settings, linger_ms=20)
    await producer.start()
    try:
        pending = []
        for sent, turn in enumerate(turns, 1):
            pending.append(await producer.send(settings.topic_turns, turn.to_json(), key=turn.session_id.encode()))
            if len(pending) >= SEND_CHUNK:
                await asyncio.gather(*pending)
                pending.clear()
                if sent % 200_000 == 0:
                    print(f"  produced {sent:,} of {total:,} turns", flush=True)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def turns_decided(port: int) -> float:
    """``volunteer_turns`` + ``volunteer_turns_skipped`` from the worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("volunteer_turns_total ", "volunteer_turns_skipped_total ")):
            total += float(line.split()[1])
    return total


def wait_decided(group: pb.Workers, port: int, expect: int, timeout: float, *, progress: bool) -> float:
    """Seconds until the worker has decided ``expect`` turns (raises after ``timeout``)."""
    started = time.monotonic()
    last_print = started
    while True:
        try:
            done = turns_decided(port)
        except OSError:
            done = 0.0
        if done >= expect:
            return time.monotonic() - started
        now = time.monotonic()
        if progress and now - last_print >= 20:
            print(f"  decided {done:,.0f} of {expect:,} turns  [{load_note()}]", flush=True)
            last_print = now
        if now - started > timeout:
            raise RuntimeError(f"only {done:,.0f} of {expect:,} turns decided after {timeout:.0f} s")
        if group.procs[0].poll() is not None:
            raise RuntimeError(f"worker died:\n{group.logs[0].read_text()[-2000:]}")
        time.sleep(0.02 if not progress else 0.5)


@dataclass(frozen=True)
class Changelog:
    records: int
    written_bytes: int
    keys: int
    compacted_bytes: int


async def read_changelog(settings: Settings) -> Changelog:
    """Sizes only (a dict of key -> last value length), so a multi-GB changelog never sits in memory."""
    topic = f"{settings.app_id}-sessions-changelog"
    last: dict[bytes, int] = {}
    records = written = 0
    async for rec in read_topic(settings, topic, max_partition_fetch_bytes=8 * 2**20, fetch_max_bytes=64 * 2**20):
        records += 1
        size = len(rec.key or b"") + len(rec.value or b"")
        written += size
        if rec.key is not None:
            last[rec.key] = 0 if rec.value is None else size
    live = [size for size in last.values() if size]
    return Changelog(records, written, len(live), sum(live))


def start_group(settings: Settings, workdir: Path, port: int,
                profile: Path | None = None) -> tuple[pb.Workers, float]:
    """One worker with its metrics on ``port``; (the group, seconds from start to ready). With
    ``profile``, py-spy samples the worker from its start to its ready line (a flame graph for
    ``.svg``, collapsed stacks otherwise)."""
    pb.WORKER_ENV["VOLUNTEER_METRICS_PORT"] = str(port)
    started = time.monotonic()
    group = pb.Workers(settings, 1, workdir)
    spy = None
    if profile is not None:
        fmt = "flamegraph" if profile.suffix == ".svg" else "raw"  # raw: collapsed stacks, one per line
        spy = subprocess.Popen(["py-spy", "record", "-r", "100", "-f", fmt, "-o", str(profile), "-p",
                                str(group.procs[0].pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    group.wait_ready(PARTITIONS, timeout=900)
    ready = time.monotonic() - started - 0.5  # wait_ready sleeps 0.5 s after the ready line
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its graph on an interrupt
        spy.wait(timeout=60)
    return group, ready


def recovered_sessions(group: pb.Workers) -> int:
    lines = [ln for ln in group.logs[0].read_text(errors="replace").splitlines() if "sessions in the table" in ln]
    return int(lines[-1].rsplit("(", 1)[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1_000_000, help="sessions to create (default 1,000,000)")
    parser.add_argument("--turns", type=int, default=2, help="turns per session (default 2)")
    parser.add_argument("--keep-logs", type=Path, help="copy the two workers' logs into this folder")
    parser.add_argument("--profile-recovery", type=Path, metavar="SVG",
                        help="sample the fresh worker's recovery with py-spy into this file (.svg: a flame graph, "
                             "else collapsed stacks); "
                             "(py-spy must be on PATH; it is not a dependency)")
    args = parser.parse_args()
    if args.profile_recovery is not None and shutil.which("py-spy") is None:
        parser.error("--profile-recovery needs py-spy on PATH (pip install py-spy); it is not a dependency")
    total = args.sessions * args.turns
    print(f"sessions scale: {args.sessions:,} sessions x {args.turns} turns, {PARTITIONS} partitions  "
          f"[{load_note()}]", flush=True)
    with tempfile.TemporaryDirectory(prefix="sessions-scale-") as tmp, EmbeddedBroker() as broker, \
            EmbeddedPostgres() as pg:
        migrate(pg.url)
        workdir = Path(tmp)
        settings = pb.settings_for(broker, pg.url, "scale", PARTITIONS)
        asyncio.run(ensure_topics(settings))

        port = free_port()
        (workdir / "first").mkdir()
        first, ready_empty = start_group(settings, workdir / "first", port)
        try:
            rss_empty = rss_bytes(first.procs[0].pid)
            cpu_empty = cpu_seconds(first.procs[0].pid)  # start-up to ready on an empty table
            load_before = loadavg()
            started = time.monotonic()
            asyncio.run(produce(settings, session_turns(args.sessions, args.turns), total))
            produced_s = time.monotonic() - started
            wait_decided(first, port, total, timeout=3600, progress=True)
            decided_s = time.monotonic() - started
            time.sleep(3.0)  # the last batch's state writes follow its decisions
            rss_full = rss_bytes(first.procs[0].pid)
        finally:
            first.stop()
        print(f"created: {total:,} turns produced in {produced_s:.0f} s, all decided after {decided_s:.0f} s "
              f"({total / decided_s:,.0f} turns/s); worker RSS {rss_empty / 2**20:.0f} MiB empty -> "
              f"{rss_full / 2**20:.0f} MiB  [load average {load_before:.2f} before]", flush=True)

        log = asyncio.run(read_changelog(settings))
        print(f"changelog: {log.records:,} records, {log.written_bytes / 2**20:,.0f} MiB written; "
              f"{log.keys:,} live sessions, {log.compacted_bytes / 2**20:,.0f} MiB after compaction "
              f"({log.compacted_bytes / max(1, log.keys):,.0f} B per session)", flush=True)

        port = free_port()
        (workdir / "fresh").mkdir()
        broker_cpu = cpu_seconds(broker.pid)
        fresh, ready_full = start_group(settings, workdir / "fresh", port, args.profile_recovery)
        try:
            recovery_cpu = cpu_seconds(fresh.procs[0].pid), cpu_seconds(broker.pid) - broker_cpu
            rss_recovered = rss_bytes(fresh.procs[0].pid)
            recovered = recovered_sessions(fresh)
            before = turns_decided(port)
            turn = Turn("scale-0000000", "user", "One more thing about the plan.", turn=args.turns + 1)
            sent = time.monotonic()
            asyncio.run(produce(settings, iter([turn]), 1))
            wait_decided(fresh, port, int(before) + 1, timeout=60, progress=False)
            served = time.monotonic() - sent  # from the produce call (a producer's start included)
        finally:
            fresh.stop()
        print(f"fresh worker: ready after {ready_full:.1f} s vs {ready_empty:.1f} s on an empty table = "
              f"{ready_full - ready_empty:.1f} s to recover {recovered:,} sessions ({log.records:,} changelog records "
              f"read); RSS {rss_recovered / 2**20:,.0f} MiB ({(rss_recovered - rss_empty) / max(1, recovered):,.0f} B "
              f"per session over an empty worker); first turn after recovery decided {served * 1000:.0f} ms "
              f"after it was produced; CPU from start to ready: worker {recovery_cpu[0]:.1f} s (empty: "
              f"{cpu_empty:.1f} s, so {(recovery_cpu[0] - cpu_empty) / max(1, log.records) * 1e6:.1f} µs per record "
              f"read), broker {recovery_cpu[1]:.1f} s  [{load_note()}]", flush=True)
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for worker_log in (*first.logs, *fresh.logs):
                shutil.copy(worker_log, args.keep_logs / f"{worker_log.parent.name}-{worker_log.name}")


if __name__ == "__main__":
    main()
