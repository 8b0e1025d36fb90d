"""The bare Faust anchor: stock Faust's burst rate and CPU per turn on the same broker and database.

The pipeline's figures (``bench.e2e_bench``) are read against this one, measured in the same run
(issue 15: "each figure as a ratio next to its anchor, measured in the same run: the reference
constant, bare Faust, and the raw transport"). The app is :mod:`bench.bare_faust_app`: consume a
turn, count it in a per-session table, produce it, consume it, insert a row, with stock Faust.

The worker starts, a probe turn goes through it (both agents assigned, the table's changelog
there), then a burst of Turn records (renamed copies of the conformance sessions, as the pipeline's
burst) is sent as fast as possible, and the figure is turns per second from the first send to the
last row, with the CPU seconds per turn of the worker, the broker and PostgreSQL from ``/proc``.

    .venv/bin/python -m bench.bare_faust_bench                 # about 30 s
    .venv/bin/python -m bench.bare_faust_bench --turns 40000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench.bare_faust_app import TABLE, count_rows, create_table
from bench.common import ROOT, CpuMeter, load_note, loadavg, pipeline_us, produce_at_rate
from bench.pipeline_bench import make_turns
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.embedded.tansu import EmbeddedBroker
from pipeline.settings import load_settings
from topics.definitions import ensure_topics
from topics.records import Turn

READY_TIMEOUT_S = 90.0
PREFIX = "bare"


@dataclass
class BareResult:
    turns: int = 0
    per_s: float = 0.0
    cpu_us_per_turn: dict[str, float] = field(default_factory=dict)
    load: float = 0.0

    @property
    def pipeline_us(self) -> float:
        """Worker, broker and PostgreSQL: what issue 15's goal 2 adds up for the real pipeline."""
        return pipeline_us(self.cpu_us_per_turn)


def _wait_rows(url: str, target: int, timeout: float, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + timeout
    rows = count_rows(url)
    while rows < target and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the bare Faust worker exited with status {proc.returncode}")
        time.sleep(0.05)
        rows = count_rows(url)
    if rows < target:
        raise RuntimeError(f"the bare Faust worker stored {rows} of {target} rows in {timeout:.0f} s")
    return rows


def measure(broker: EmbeddedBroker, pg: EmbeddedPostgres, workdir: Path, turns_n: int = 20_000,
            partitions: int = 8) -> BareResult:
    """The anchor on the bench's embedded services, with the broker's and PostgreSQL's CPU metered."""
    pids = {"broker": [broker.pid or 0], "postgres": [pg.server_pid() or 0]}
    return run_burst(broker.url, pg.url, workdir, turns_n, partitions, pids)


def run_burst(broker_url: str, database_url: str, workdir: Path, turns_n: int, partitions: int = 8,
              pids: dict[str, list[int]] | None = None, prefix: str = PREFIX) -> BareResult:
    """Start the bare worker on ``broker_url``, send a probe then a burst of ``turns_n`` (or a few more)
    turns, wait for every row; ``pids`` names the other processes to meter (PostgreSQL's as a tree)."""
    create_table(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS inserted_at timestamptz NOT NULL "
                     "DEFAULT clock_timestamp()")
        conn.execute(f"TRUNCATE {TABLE}")
    settings = load_settings(broker=broker_url, database_url=database_url, topic_turns=f"{prefix}-turns",
                             topic_volunteered=f"{prefix}-out", topic_dlq=f"{prefix}-dlq",
                             app_id=f"{prefix}-app", topic_partitions=partitions)
    asyncio.run(ensure_topics(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    log = workdir / f"{prefix}-faust.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bench.bare_faust_app", broker_url, database_url, prefix,
                                 str(partitions)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        probe = [Turn(f"{prefix}-probe", "user", "ready?", turn=1)]
        asyncio.run(produce_at_rate(settings, probe, 0, stamp=False))
        _wait_rows(database_url, 1, READY_TIMEOUT_S, proc)
        turns = make_turns(turns_n, f"{prefix}-burst")
        result = BareResult(turns=len(turns), load=loadavg())
        meter = CpuMeter({"worker": [proc.pid], **(pids or {})}, trees=["postgres"]).start()
        first, _ = asyncio.run(produce_at_rate(settings, turns, 0, stamp=False))
        _wait_rows(database_url, 1 + len(turns), 600, proc)
        used = meter.stop()
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute(f"SELECT extract(epoch FROM max(inserted_at)) FROM {TABLE}").fetchone()
        last = float(row[0]) if row and row[0] is not None else time.time()
        result.per_s = len(turns) / (last - first)
        result.cpu_us_per_turn = {name: seconds / len(turns) * 1e6 for name, seconds in used.items()}
        return result
    except RuntimeError as exc:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{exc}; the end of its log:\n  " + "\n  ".join(tail)) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def describe(r: BareResult) -> str:
    cpu = ", ".join(f"{k} {v:.0f}" for k, v in r.cpu_us_per_turn.items())
    return f"{r.per_s:,.0f} turns/s; CPU µs per turn {cpu}; pipeline {r.pipeline_us:.0f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20_000, help="turns of the burst (default 20000)")
    args = parser.parse_args()
    print(f"bare Faust bench: {load_note()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bare-faust-") as tmp, EmbeddedBroker() as broker, \
            EmbeddedPostgres() as pg:
        r = measure(broker, pg, Path(tmp), args.turns)
    print(f"bare Faust, burst of {r.turns:,} turns: {describe(r)}  [load {r.load:.2f}]")


if __name__ == "__main__":
    main()
