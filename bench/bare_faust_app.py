"""The bare Faust pipeline that issue 15's figures are set against: stock Faust, no decision logic.

Why it exists: a figure of the real pipeline ("so many turns/s, so many µs of CPU per turn") says
little on its own on a shared 2-core machine whose speed changes from one session to the next. The
same framework doing the least a pipeline of this shape can do, on the same broker and database in
the same run, is the anchor it is read against (``python -m bench``, section e2e).

What it does per turn, as ``docs/embedded-services.md`` describes the bare pipeline: consume the
Turn record from the turns topic, count it in a per-session table (one changelog record), produce
the record to an output topic, consume it there and insert one row per turn into PostgreSQL in
batches (``stream.take``, one transaction each, ``ON CONFLICT DO NOTHING`` as any idempotent sink).
Everything is Faust's stock path: one event per record through its conductor and streams, its own
consumer thread, its producer. None of the project's compatibility patches is applied: only the
broker settings the embedded broker cannot work without (session timeout and heartbeat, quirk 1;
at-least-once, quirk 5, from ``topics.tansu_client.faust_settings``), with the stock ``kafka://``
transport. Stock Faust's 1.5 s fetch wait (quirk 4) does not slow a burst, whose partitions all
have records, and CPU per turn does not count waits.

Run by :mod:`bench.bare_faust_bench`::

    python -m bench.bare_faust_app BROKER_URL DATABASE_URL PREFIX PARTITIONS
"""

from __future__ import annotations

import sys
from typing import Any

import faust
import orjson
import psycopg

from pipeline.settings import load_settings
from topics.tansu_client import faust_settings

TABLE = "bare_faust_events"
"""The rows of the bare sink (its own table: the pipeline's schema is not touched)."""

SINK_BATCH = 500
SINK_WITHIN_S = 0.02
"""The same batch size and flush time as the real sink's defaults (sink_batch_size, sink_flush_seconds)."""


def create_table(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (session_id text NOT NULL, turn integer NOT NULL, "
                     "PRIMARY KEY (session_id, turn))")


def count_rows(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
        return int(row[0]) if row else 0


def build(broker_url: str, database_url: str, prefix: str, partitions: int) -> faust.App:
    """The bare app on ``broker_url`` (a ``tansu://`` URL is given to stock Faust as ``kafka://``)."""
    host = broker_url.split("://", 1)[-1]
    quirks = faust_settings(load_settings(broker=broker_url))
    app = faust.App(f"{prefix}-app", broker=f"kafka://{host}", store="memory://", web_enabled=False,
                    topic_partitions=partitions, **quirks)
    turns = app.topic(f"{prefix}-turns", key_serializer="raw", value_serializer="raw", partitions=partitions)
    out = app.topic(f"{prefix}-out", key_serializer="raw", value_serializer="raw", partitions=partitions)
    counts = app.Table(f"{prefix}-sessions", default=int, partitions=partitions)

    @app.agent(turns)
    async def window(stream: Any) -> None:
        async for key, value in stream.items():
            session = key.decode()
            counts[session] += 1
            await out.send(key=key, value=value)

    @app.agent(out)
    async def sink(stream: Any) -> None:
        conn = await psycopg.AsyncConnection.connect(database_url)
        try:
            async for batch in stream.take(SINK_BATCH, within=SINK_WITHIN_S):
                rows = []
                for value in batch:
                    turn = orjson.loads(value)
                    rows.append((turn["session_id"], int(turn.get("turn") or 0)))
                async with conn.cursor() as cur:
                    await cur.executemany(f"INSERT INTO {TABLE} (session_id, turn) VALUES (%s, %s) "
                                          "ON CONFLICT DO NOTHING", rows)
                await conn.commit()
        finally:
            await conn.close()

    return app


def main() -> None:
    broker_url, database_url, prefix, partitions = sys.argv[1:5]
    create_table(database_url)
    app = build(broker_url, database_url, prefix, int(partitions))
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn"]
    app.main()


if __name__ == "__main__":
    main()
