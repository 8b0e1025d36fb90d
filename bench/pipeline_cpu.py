"""CPU per turn of each pipeline process (worker, broker, PostgreSQL), idle, at steady rates, in a burst.

Figures are CPU seconds (utime + stime from /proc) over a fixed number of turns, so other load on
the machine moves them far less than it moves throughput; the load average is printed with each.
One group of workers runs through: an idle spell (CPU seconds per second), each steady rate of
``--rates`` (a step of :func:`bench.e2e_bench.step`, latency included) and a burst. ``--worker-env``
passes settings to the workers, for A/B runs of fetch and produce shaping (docs/performance.md).

    .venv/bin/python -m bench.pipeline_cpu --rates 500,3000 --burst 20000
    .venv/bin/python -m bench.pipeline_cpu --rates 500,2000 --burst 0 --worker-env VOLUNTEER_FETCH_PAUSE_MS=20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench import e2e_bench
from bench.pipeline_bench import WORKER_ENV, Workers, instrument, settings_for
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.embedded.tansu import EmbeddedBroker
from sinks.schema import migrate
from topics.definitions import ensure_topics

PIPELINE = ("workers", "broker", "postgres")
"""The processes whose CPU is the pipeline's; the load generator is printed apart."""


def _fmt(per_turn: dict[str, float]) -> str:
    total = sum(v for k, v in per_turn.items() if k in PIPELINE)
    return " ".join(f"{k} {v:.0f}" for k, v in per_turn.items()) + f"; pipeline {total:.0f} µs/turn"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rates", default="500,3000", help="steady turns/s steps (comma-separated, may be empty)")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per step")
    parser.add_argument("--burst", type=int, default=20_000, help="turns of the burst (0: none)")
    parser.add_argument("--idle", type=float, default=4.0, help="seconds of the idle spell (0: none)")
    parser.add_argument("--worker-env", action="append", default=[], metavar="VOLUNTEER_X=VALUE")
    args = parser.parse_args()
    # a SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the workers, broker and database stop too
    # instead of polling on as orphans (they run in sessions of their own)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for item in args.worker_env:
        name, _, value = item.partition("=")
        WORKER_ENV[name.strip()] = value.strip()
    print(f"pipeline CPU bench, {args.workers} worker(s), {WORKER_ENV or 'default settings'}; "
          f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="pipeline-cpu-") as tmp, EmbeddedBroker() as broker, \
            EmbeddedPostgres() as pg:
        migrate(pg.url)
        instrument(pg.url)
        settings = settings_for(broker, pg.url, "cpu", 8)
        asyncio.run(ensure_topics(settings))
        group = Workers(settings, args.workers, Path(tmp))
        try:
            group.wait_ready(8)
            if args.idle > 0:
                time.sleep(2)
                meter = e2e_bench._meter(group, broker, pg).start()
                time.sleep(args.idle)
                used = meter.stop()
                print("idle, CPU s/s: " + " ".join(f"{k} {v / meter.wall:.3f}" for k, v in used.items())
                      + f"  [load {os.getloadavg()[0]:.2f}]", flush=True)
            for rate in (float(x) for x in args.rates.split(",") if x.strip()):
                s = e2e_bench.step(settings, group, broker, pg, rate, args.seconds, 2.0)
                print(f"steady {rate:,.0f} turns/s: {'kept up' if s.kept_up else 'FELL BEHIND'}, median "
                      f"{s.latency.median_ms:.1f} ms, p99 {s.latency.p99_ms:.1f} ms; CPU µs/turn "
                      f"{_fmt(s.cpu_us_per_turn)}  [load {s.load:.2f}]", flush=True)
                if s.hops:
                    h = s.hops
                    print(f"    hops: decide {h['decide_median_ms']:.1f} / {h['decide_p99_ms']:.1f} ms, sink "
                          f"{h['sink_median_ms']:.1f} / {h['sink_p99_ms']:.1f} ms (median / p99, "
                          f"{h['matched']:,.0f} rows)", flush=True)
            if args.burst:
                result = e2e_bench.GroupResult(args.workers)
                e2e_bench.burst(settings, group, broker, pg, args.burst, result)
                print(f"burst of {result.burst_turns:,} turns: {result.burst_per_s:,.0f} turns/s; CPU µs/turn "
                      f"{_fmt(result.burst_cpu_us_per_turn)}  [load {result.burst_load:.2f}]", flush=True)
        finally:
            group.stop()


if __name__ == "__main__":
    main()
