"""End-to-end pipeline figures on embedded services: broker -> worker(s) -> sink -> PostgreSQL.

Prints, does not assert. Two measurements:

1. throughput: with N workers running and ready, produce T turns as fast as possible (copies of
   the conformance watch sessions, 3,121-page brain) and time until the last expected row is in
   ``context_volunteer_events``. Turns/s = T / (last row - first send).
2. latency: one worker, turns produced at a steady rate (default 500/s) with ``ts`` = send time;
   produce-to-row latency of every volunteered event = row insert time (``clock_timestamp()``, a
   column added to this throwaway database only) - send time. Median and p99, over the events of
   turns sent after a warm-up (default 2 s: the first batches meet cold caches and connections).

    .venv/bin/python bench/pipeline_bench.py                      # about 2 minutes
    .venv/bin/python bench/pipeline_bench.py --turns 40000 --workers 1,2 --rate 500 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.agents.wiring import READY_MARK  # noqa: E402
from pipeline.braindir import load_brain_dir  # noqa: E402
from pipeline.core.session import DecisionOptions  # noqa: E402
from pipeline.core.window import parse_watch_line  # noqa: E402
from pipeline.embedded.postgres import EmbeddedPostgres  # noqa: E402
from pipeline.embedded.tansu import EmbeddedBroker  # noqa: E402
from pipeline.replay import replay_lines  # noqa: E402
from pipeline.settings import Settings, load_settings  # noqa: E402
from sinks.schema import migrate  # noqa: E402
from topics.clients import make_producer  # noqa: E402
from topics.definitions import ensure_topics  # noqa: E402
from topics.records import Turn  # noqa: E402

CONFORMANCE = ROOT / "tests" / "fixtures" / "conformance"
BRAIN = CONFORMANCE / "brain"


def sessions() -> list[list[tuple[str, str]]]:
    out = []
    for line in (CONFORMANCE / "cases-watch.jsonl").read_bytes().splitlines():
        case = orjson.loads(line)
        if case["flags"]:
            continue
        turns = [p for p in (parse_watch_line(raw) for raw in case["lines"]) if p is not None]
        out.append(turns)
    return out


def make_turns(total: int, tag: str) -> list[Turn]:
    """At least ``total`` turns: renamed copies of the sessions, interleaved round-robin."""
    base = sessions()
    per_copy = sum(len(s) for s in base)
    copies = max(1, -(-total // per_copy))
    lists = [[Turn(f"{tag}-{k}-{i}", role, text, turn=n + 1) for n, (role, text) in enumerate(s)]
             for k in range(copies) for i, s in enumerate(base)]
    turns: list[Turn] = []
    for depth in range(max(len(x) for x in lists)):
        turns.extend(x[depth] for x in lists if depth < len(x))
    return turns


def expected_pages(turns: list[Turn]) -> int:
    summary = replay_lines((t.to_json() for t in turns), load_brain_dir(BRAIN), options=DecisionOptions())
    return summary.pages


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


WORKER_ENV: dict[str, str] = {}
"""Extra VOLUNTEER_* settings for the workers (--worker-env)."""


class Workers:
    def __init__(self, settings: Settings, count: int, workdir: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
        env.update({"VOLUNTEER_BROKER": settings.broker, "VOLUNTEER_DATABASE_URL": settings.database_url,
                    "VOLUNTEER_TOPIC_TURNS": settings.topic_turns,
                    "VOLUNTEER_TOPIC_VOLUNTEERED": settings.topic_volunteered,
                    "VOLUNTEER_TOPIC_DLQ": settings.topic_dlq, "VOLUNTEER_APP_ID": settings.app_id,
                    "VOLUNTEER_TOPIC_PARTITIONS": str(settings.topic_partitions)})
        env.update(WORKER_ENV)
        for i in range(count):
            log = workdir / f"{settings.app_id}-{i}.log"
            env_i = dict(env, VOLUNTEER_DATA_DIR=str(workdir / f"data-{settings.app_id}-{i}"))
            with log.open("wb") as out:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "pipeline", "worker", "--without-web", "--brain", str(BRAIN),
                     "--loglevel", "info"],
                    env=env_i, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            self.logs.append(log)

    def owned(self) -> list[set[int] | None]:
        """Partitions of each worker's newest ready line (None before its first)."""
        out: list[set[int] | None] = []
        for log in self.logs:
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if READY_MARK in ln]
            if not lines:
                out.append(None)
                continue
            inside = lines[-1].split(READY_MARK, 1)[1].split("]", 1)[0].strip(" [")
            out.append({int(p) for p in inside.split(",") if p.strip()})
        return out

    def wait_ready(self, partitions: int, timeout: float = 90) -> None:
        """Every worker is ready and together they own each partition exactly once."""
        deadline = time.monotonic() + timeout
        while True:
            owned = self.owned()
            if all(o for o in owned):
                sets = [o for o in owned if o is not None]
                if sum(len(o) for o in sets) == partitions and set().union(*sets) == set(range(partitions)):
                    time.sleep(0.5)
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers not ready: {owned}")
            for proc, log in zip(self.procs, self.logs, strict=True):
                if proc.poll() is not None:
                    raise RuntimeError(f"worker died:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_rows(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM context_volunteer_events").fetchone()
        return int(row[0]) if row else 0


def instrument(url: str) -> None:
    """Benchmark database only: remember when each row was inserted."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE context_volunteer_events "
                     "ADD COLUMN IF NOT EXISTS inserted_at timestamptz NOT NULL DEFAULT clock_timestamp()")
        conn.execute("TRUNCATE context_volunteer_events")


async def produce_fast(settings: Settings, turns: list[Turn]) -> float:
    producer = make_producer(settings, linger_ms=5)
    await producer.start()
    started = time.time()
    try:
        pending = []
        for turn in turns:
            pending.append(await producer.send(settings.topic_turns, turn.to_json(),
                                               key=turn.session_id.encode()))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return started


async def produce_steady(settings: Settings, turns: list[Turn], rate: float) -> None:
    producer = make_producer(settings, linger_ms=0)
    await producer.start()
    try:
        started = time.monotonic()
        pending = []
        for i, turn in enumerate(turns):
            due = started + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            stamped = Turn(turn.session_id, turn.role, turn.text, turn.turn, int(time.time() * 1000))
            pending.append(await producer.send(settings.topic_turns, stamped.to_json(),
                                               key=turn.session_id.encode()))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def settings_for(broker: EmbeddedBroker, url: str, name: str, partitions: int) -> Settings:
    return load_settings(broker=broker.url, database_url=url, topic_turns=f"{name}-turns",
                         topic_volunteered=f"{name}-volunteered", topic_dlq=f"{name}-dlq", app_id=f"{name}-app",
                         topic_partitions=partitions)


def throughput(broker: EmbeddedBroker, pg: EmbeddedPostgres, workdir: Path, workers: int, total: int,
               partitions: int) -> dict[str, Any]:
    instrument(pg.url)
    settings = settings_for(broker, pg.url, f"tp{workers}", partitions)
    asyncio.run(ensure_topics(settings))
    turns = make_turns(total, f"tp{workers}")
    expect = expected_pages(turns)
    group = Workers(settings, workers, workdir)
    try:
        group.wait_ready(partitions)
        cpu_before = [cpu_seconds(p.pid) for p in group.procs] + [cpu_seconds(broker.pid)]
        started = asyncio.run(produce_fast(settings, turns))
        produced = time.time()
        deadline = time.monotonic() + 600
        while count_rows(pg.url) < expect and time.monotonic() < deadline:
            time.sleep(0.05)
        with psycopg.connect(pg.url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*), extract(epoch FROM max(inserted_at)) "
                               "FROM context_volunteer_events").fetchone()
        assert row is not None
        rows, last = int(row[0]), float(row[1])
        cpu_after = [cpu_seconds(p.pid) for p in group.procs] + [cpu_seconds(broker.pid)]
    finally:
        group.stop()
    seconds = last - started
    used = [after - before for before, after in zip(cpu_before, cpu_after, strict=True)]
    return {"workers": workers, "turns": len(turns), "events": expect, "rows": rows,
            "produce_s": produced - started, "seconds": seconds, "turns_per_s": len(turns) / seconds,
            "worker_cpu_us_per_turn": sum(used[:-1]) / len(turns) * 1e6,
            "broker_cpu_us_per_turn": used[-1] / len(turns) * 1e6}


def latency(broker: EmbeddedBroker, pg: EmbeddedPostgres, workdir: Path, rate: float, seconds: float,
            partitions: int, warmup: float) -> dict[str, Any]:
    instrument(pg.url)
    settings = settings_for(broker, pg.url, "lat", partitions)
    asyncio.run(ensure_topics(settings))
    count = int(rate * (seconds + warmup))
    turns = make_turns(count, "lat")[:count]
    expect = expected_pages(turns)
    group = Workers(settings, 1, workdir)
    try:
        group.wait_ready(partitions)
        started = time.time()
        asyncio.run(produce_steady(settings, turns, rate))
        deadline = time.monotonic() + 120
        while count_rows(pg.url) < expect and time.monotonic() < deadline:
            time.sleep(0.05)
        with psycopg.connect(pg.url, autocommit=True) as conn:
            lat = [float(r[0]) for r in conn.execute(
                "SELECT extract(epoch FROM inserted_at - volunteered_at) * 1000 FROM context_volunteer_events "
                "WHERE volunteered_at >= to_timestamp(%s)", (started + warmup,))]
            rows = count_rows(pg.url)
    finally:
        group.stop()
    lat.sort()
    return {"rate": rate, "turns": len(turns), "events": expect, "rows": rows, "measured": len(lat),
            "median_ms": statistics.median(lat), "p90_ms": lat[int(0.90 * (len(lat) - 1))],
            "p99_ms": lat[int(0.99 * (len(lat) - 1))], "max_ms": lat[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20_000, help="turns per throughput run")
    parser.add_argument("--workers", default="1,2", help="worker counts for the throughput runs")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rate", type=float, default=500.0, help="turns/s of the latency run")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured length of the latency run")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="seconds at the start of the latency run that are not measured (cold caches)")
    parser.add_argument("--worker-env", action="append", default=[], metavar="VOLUNTEER_X=VALUE",
                        help="a setting for the workers, e.g. VOLUNTEER_SINK_FLUSH_SECONDS=0.005 (repeatable)")
    parser.add_argument("--skip-throughput", action="store_true", help="only the latency run")
    args = parser.parse_args()
    for item in args.worker_env:
        name, _, value = item.partition("=")
        WORKER_ENV[name.strip()] = value.strip()

    print(f"pipeline bench: {load()}" + (f"; workers with {WORKER_ENV}" if WORKER_ENV else ""))
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp, EmbeddedBroker() as broker, \
            EmbeddedPostgres() as pg:
        migrate(pg.url)
        counts = [] if args.skip_throughput else [int(x) for x in args.workers.split(",") if x.strip()]
        for count in counts:
            r = throughput(broker, pg, Path(tmp), count, args.turns, args.partitions)
            print(f"throughput, {r['workers']} worker(s): {r['turns']} turns, {r['events']} events -> "
                  f"{r['rows']} rows in {r['seconds']:.2f}s = {r['turns_per_s']:,.0f} turns/s "
                  f"(producing took {r['produce_s']:.2f}s); CPU per turn: workers "
                  f"{r['worker_cpu_us_per_turn']:.0f} µs, broker {r['broker_cpu_us_per_turn']:.0f} µs  [{load()}]")
        r = latency(broker, pg, Path(tmp), args.rate, args.seconds, args.partitions, args.warmup)
        print(f"latency at {r['rate']:.0f} turns/s, 1 worker: {r['turns']} turns, {r['rows']}/{r['events']} rows, "
              f"{r['measured']} after a {args.warmup:g}s warm-up; "
              f"produce-to-row median {r['median_ms']:.1f} ms, p90 {r['p90_ms']:.1f} ms, "
              f"p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms  [{load()}]")


if __name__ == "__main__":
    main()
