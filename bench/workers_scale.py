"""Flat cost as workers are added: 1, 2 and 4 worker hosts sharing one broker and one database.

Issue 28 part 5. Each worker runs on its own host (a network namespace, as in the multi-host tests:
tests/reliability/multihost.py); the broker and PostgreSQL run on a database host, the producer on a
client host, so every record crosses the bridge as between machines. For each worker count the same
seeded workload (same sessions, same turns, same rate) goes through a fresh group and fresh topics,
and the bench reads:

- **balance**: each worker's ``volunteer_sessions`` and ``volunteer_turns_total`` from its own
  ``/metrics`` once the group has committed everything; the spread is the largest distance from the
  mean, in percent of the mean (the goal: within 15 %);
- **cost per turn**: the CPU seconds (user + system, from ``/proc``) that every worker, the broker
  and PostgreSQL used between the first turn produced and the last one committed, divided by the
  turns (the goal: 4 workers within 1.3 x one worker's).

On a machine with two cores total throughput cannot grow with workers; what can be measured is that
each added worker does not make a turn dearer (its own idle polling, heartbeats and rebalances) and
that partitions, hence sessions, spread evenly.

    .venv/bin/python -m bench.workers_scale                     # 1, 2, 4 workers; 12,000 turns at 500/s
    .venv/bin/python -m bench.workers_scale --workers 1,4 --turns 6000

Needs root (``ip netns``); every namespace it makes is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.common import load_note
from tests.reliability.multihost import ClientProducer, Cluster, start_services
from tests.reliability.netns import Network, call_in, sweep_stale, unavailable_reason
from tests.reliability.procstat import cpu_seconds
from tests.reliability.workload import Workload, build_workload
from tests.services.broker import new_names, settings_for
from topics.definitions import ensure_topics

PARTITIONS = 8
METRICS_PORT = 9464
BALANCE_GOAL = 0.15
COST_GOAL = 1.3


@dataclass(frozen=True)
class Share:
    """What one worker did in a run, from its own ``/metrics``."""

    host: str
    sessions: int
    turns: int


@dataclass(frozen=True)
class ScaleRun:
    workers: int
    turns: int
    seconds: float
    worker_cpu_s: float
    services_cpu_s: float
    shares: list[Share]
    load: str

    @property
    def us_per_turn(self) -> float:
        return (self.worker_cpu_s + self.services_cpu_s) / self.turns * 1e6

    @staticmethod
    def spread(values: list[int]) -> float:
        """Largest distance from the mean, as a fraction of the mean (0 for a single worker)."""
        mean = statistics.fmean(values)
        return max(abs(v - mean) for v in values) / mean if mean else 0.0

    def render(self, base: ScaleRun | None) -> str:
        sessions = [s.sessions for s in self.shares]
        turns = [s.turns for s in self.shares]
        ratio = "" if base is None else f", {self.us_per_turn / base.us_per_turn:.2f}x one worker's"
        return (f"{self.workers} worker(s): {self.turns} turns in {self.seconds:.1f} s; "
                f"sessions per worker {sessions} (spread {self.spread(sessions):.1%}), "
                f"turns per worker {turns} (spread {self.spread(turns):.1%}); "
                f"CPU {self.worker_cpu_s:.1f} s workers + {self.services_cpu_s:.1f} s broker and PostgreSQL "
                f"= {self.us_per_turn:.0f} us per turn{ratio}; load {self.load}")


def tree_pids(root: int) -> list[int]:
    """``root`` and every process below it (the broker and PostgreSQL under ``volunteer up``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def cpu_of(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        with contextlib.suppress(OSError):  # gone: its time is lost, which only makes the figure smaller
            out[pid] = cpu_seconds(pid)
    return out


def scrape(ns: str) -> tuple[int, int]:
    """(sessions in the table, turns decided) from the worker's /metrics inside its namespace."""
    def read() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as resp:
            return str(resp.read().decode())
    text = call_in(ns, read, timeout=30)
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name in ("volunteer_sessions", "volunteer_turns_total"):
            values[name] = int(float(rest.split()[0]))
    return values.get("volunteer_sessions", 0), values.get("volunteer_turns_total", 0)


def wait_committed(cluster: Cluster, timeout: float) -> None:
    """Until the group has committed every record and the workers' decided turns stopped growing."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        decided = sum(scrape(w.host.ns)[1] for w in cluster.workers.values() if w.host is not None)
        if decided == last and cluster.lag() == 0:
            return
        last = decided
        time.sleep(1.0)
    raise SystemExit(f"the group did not commit every turn within {timeout:.0f} s")


def one_run(cluster: Cluster, count: int, workload: Workload, rate: float, seed: int,
            profile: Path | None = None) -> ScaleRun:
    """A fresh group and fresh topics on the shared services, ``count`` workers, the workload once."""
    cluster.settings = settings_for(cluster.services.broker, new_names(), database_url=cluster.services.database_url,
                                    topic_partitions=PARTITIONS)
    cluster.in_client(lambda: asyncio.run(ensure_topics(cluster.settings)), timeout=120)
    names = [f"w{i}" for i in range(1, count + 1)]
    for name in names:
        cluster.start_worker(name)
    for worker in cluster.workers.values():
        worker.wait_ready(timeout=180)
    time.sleep(3)  # the group settles: no rebalance left inside the measured span
    worker_pids = [w.proc.pid for w in cluster.workers.values() if w.proc is not None]
    service_pids = tree_pids(cluster.services.proc.pid)
    before_w, before_s = cpu_of(worker_pids), cpu_of(service_pids)
    spies = [] if profile is None else [
        subprocess.Popen(["py-spy", "record", "-r", "100", "-f", "raw", "-p", str(pid),
                          "-o", str(profile / f"{count}-workers-{i}.txt")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i, pid in enumerate(worker_pids, 1)]
    began = time.monotonic()
    producer = ClientProducer(cluster.client.ns, cluster.settings, workload, rate, seed)
    producer.start()
    producer.finish(timeout=900)
    wait_committed(cluster, timeout=600)
    seconds = time.monotonic() - began
    after_w, after_s = cpu_of(worker_pids), cpu_of(service_pids)
    for spy in spies:
        spy.send_signal(signal.SIGINT)  # py-spy writes its samples on an interrupt
        spy.wait(60)
    shares = []
    for name, worker in cluster.workers.items():
        assert worker.host is not None
        sessions, turns = scrape(worker.host.ns)
        shares.append(Share(name, sessions, turns))
    for worker in list(cluster.workers.values()):
        worker.__exit__()
    cluster.retired.extend(cluster.workers.values())
    cluster.workers.clear()
    return ScaleRun(count, producer.sent, seconds,
                    sum(after_w[p] - before_w[p] for p in after_w if p in before_w),
                    sum(after_s[p] - before_s[p] for p in after_s if p in before_s), shares, load_note())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workers_scale", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2,4", help="worker counts to run, comma-separated (default 1,2,4)")
    parser.add_argument("--turns", type=int, default=12_000, help="turns of the workload (default 12,000)")
    parser.add_argument("--sessions", type=int, default=2_000, help="concurrent sessions (default 2,000)")
    parser.add_argument("--rate", type=float, default=500.0, help="mean turns/s produced (default 500)")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment setting for every worker (repeatable), e.g. VOLUNTEER_FETCH_PAUSE_MS=20")
    parser.add_argument("--profile", type=Path, default=None,
                        help="sample every worker with py-spy over the measured span into this directory (collapsed "
                             "stacks, one file a worker; py-spy must be on PATH, it is not a dependency)")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.workers.split(",")]
    if max(counts) > 4 or min(counts) < 1:
        parser.error("--workers: counts from 1 to 4")
    extra = dict(item.split("=", 1) for item in args.worker_env if "=" in item)
    if len(extra) != len(args.worker_env):
        parser.error("--worker-env takes NAME=VALUE")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    reason = unavailable_reason()
    if reason is not None:
        print(f"workers_scale: network namespaces unavailable: {reason}", file=sys.stderr)
        return 2
    workload = build_workload(args.turns, seed=args.seed, concurrent=args.sessions)
    print(f"workload: {len(workload.turns)} turns of {workload.sessions} sessions at {args.rate:.0f}/s, "
          f"{PARTITIONS} partitions", flush=True)
    sweep_stale()
    net = Network.create(["db", "client", "w1", "w2", "w3", "w4"])
    runs: list[ScaleRun] = []
    try:
        with tempfile.TemporaryDirectory(prefix="workers-scale-") as tmp:
            root = Path(tmp)
            services = start_services(net["db"], root)
            first = settings_for(services.broker, new_names(), database_url=services.database_url,
                                 topic_partitions=PARTITIONS)
            env = {"VOLUNTEER_METRICS_PORT": str(METRICS_PORT), **extra}
            cluster = Cluster(net, services, first, root, worker_env=env)
            try:
                for count in counts:
                    run = one_run(cluster, count, workload, args.rate, args.seed, args.profile)
                    runs.append(run)
                    print(run.render(runs[0] if runs[0] is not run and runs[0].workers == 1 else None), flush=True)
            finally:
                cluster.stop()
    finally:
        net.remove()
    multi = [r for r in runs if r.workers > 1]
    base = next((r for r in runs if r.workers == 1), None)
    for run in multi:
        balance = ScaleRun.spread([s.sessions for s in run.shares])
        verdict = [f"balance {'met' if balance <= BALANCE_GOAL else 'NOT met'} ({balance:.1%} vs 15 %)"]
        if base is not None:
            ratio = run.us_per_turn / base.us_per_turn
            verdict.append(f"cost {'met' if ratio <= COST_GOAL else 'NOT met'} ({ratio:.2f}x vs 1.3x)")
        print(f"{run.workers} workers: " + ", ".join(verdict))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
