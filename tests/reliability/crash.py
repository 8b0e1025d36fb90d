"""The crash driver: stream a workload through real ``volunteer worker`` processes while SIGKILLing
them at seeded moments, then let the verifier judge the result.

Modelled on how Kafka Streams and Faust test themselves: the input is produced concurrently (at a
steady rate, from a background thread), workers die by SIGKILL in the middle of batches (and some
again during their own table recovery), are restarted, and at the end an independent replay of the
same input says what the table and the topic must hold. Kill moments are drawn from a seeded RNG
as fractions of the expected rows (so each kill lands mid-stream however fast the machine is), plus
a seeded sub-second delay so it lands at an arbitrary point of a batch.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from pipeline.core.brain import BrainIndex
from pipeline.settings import Settings
from tests.integration.stream.harness import WorkerProc
from tests.reliability.verify import (
    ExpectedEvent,
    Verdict,
    expected_events,
    row_count,
    verify,
    wait_until_quiet,
)
from tests.reliability.workload import Workload, build_workload
from topics.clients import make_producer
from topics.io import send_records, turn_items

WorkerStarter = Callable[[], WorkerProc]


class BackgroundProducer(threading.Thread):
    """Produces the workload's turns in order, in bursts around ``rate`` turns/s; ``error`` holds a failure."""

    def __init__(self, settings: Settings, workload: Workload, rate: float, *, seed: int = 0,
                 chunk: int = 250) -> None:
        super().__init__(name="workload-producer", daemon=True)
        self.settings = settings
        self.items = list(turn_items(workload.turns))
        self.rate = rate
        self.rng = random.Random(seed)
        self.chunk = chunk
        self.sent = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()  # set: stop after the current chunk (``sent`` says how far)

    def run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:
            self.error = exc

    async def _produce(self) -> None:
        producer = make_producer(self.settings)
        await producer.start()
        try:
            for start in range(0, len(self.items), self.chunk):
                if self.stopping.is_set():
                    break
                began = time.monotonic()
                part = self.items[start:start + self.chunk]
                await send_records(producer, self.settings.topic_turns, part)
                self.sent += len(part)
                # bursty: each chunk at between a third of and three times the mean rate
                pace = self.rate * self.rng.choice((0.33, 0.5, 1.0, 1.0, 2.0, 3.0))
                ahead = len(part) / pace - (time.monotonic() - began)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        finally:
            await producer.stop()

    def finish(self, timeout: float = 300) -> None:
        self.join(timeout)
        if self.is_alive():
            raise AssertionError("the workload producer did not finish")
        if self.error is not None:
            raise AssertionError(f"the workload producer failed: {self.error!r}")


class LiveRun(NamedTuple):
    """What replay expects of a seeded workload, a ready worker, and the workload being produced."""

    expected: dict[str, ExpectedEvent]
    worker: WorkerProc
    producer: BackgroundProducer


def start_live_run(settings: Settings, brain: BrainIndex, start: WorkerStarter, *, turns: int, seed: int,
                   rate: float) -> LiveRun:
    """Build ``turns`` turns (seeded), start a worker with ``start`` and wait until it is ready, then
    produce the turns at ``rate`` per second from a background thread."""
    workload = build_workload(turns, seed=seed)
    expected = expected_events(workload, brain)
    worker = start()
    worker.wait_ready()
    producer = BackgroundProducer(settings, workload, rate=rate, seed=seed)
    producer.start()
    return LiveRun(expected, worker, producer)


@dataclass
class CrashPlan:
    workers: int
    kills: int
    seed: int
    rate: float = 1500.0  # turns/s produced
    recovery_kill_share: float = 0.3  # share of restarts killed again before they are ready


@dataclass
class CrashFigures:
    turns: int
    sessions: int
    numbered_sessions: int
    unnumbered_sessions: int
    workers: int
    kills: int = 0
    kills_in_recovery: int = 0
    wall_s: float = 0.0
    verdict: Verdict | None = None
    logs: list[str] = field(default_factory=list, repr=False)

    def render(self) -> str:
        head = (f"crash run: {self.turns} turns, {self.sessions} sessions ({self.numbered_sessions} numbered, "
                f"{self.unnumbered_sessions} unnumbered), {self.workers} worker(s), {self.kills} SIGKILLs "
                f"({self.kills_in_recovery} during recovery), wall time {self.wall_s:.1f} s")
        return head + ("\n  " + self.verdict.figures() if self.verdict is not None else "")


def wait_for_rows(settings: Settings, at_least: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        count = row_count(settings.database_url)
        if count >= at_least or time.monotonic() > deadline:
            return count
        time.sleep(0.02)


def run_crash(settings: Settings, workload: Workload, expected: dict[str, ExpectedEvent], plan: CrashPlan,
              start: WorkerStarter) -> CrashFigures:
    """Produce ``workload`` while killing workers per ``plan``; verify; return the figures."""
    rng = random.Random(plan.seed)
    figures = CrashFigures(len(workload.turns), workload.sessions, workload.numbered_sessions,
                           workload.unnumbered_sessions, plan.workers)
    began = time.monotonic()
    workers = [start() for _ in range(plan.workers)]
    everyone = list(workers)
    producer = BackgroundProducer(settings, workload, plan.rate, seed=plan.seed)
    producer.start()
    total = len(expected)
    targets = sorted(rng.uniform(0.1, 0.85) for _ in range(plan.kills))
    try:
        for target in targets:
            reached = wait_for_rows(settings, int(target * total), timeout=180)
            assert reached >= int(target * total), (
                f"no progress: {reached} of {total} rows before kill {figures.kills + 1}\n"
                + "\n".join(w.log()[-2000:] for w in workers))
            time.sleep(rng.uniform(0.0, 0.3))
            victim = rng.randrange(len(workers))
            workers[victim].kill()
            figures.kills += 1
            time.sleep(rng.uniform(0.0, 1.0))
            if rng.random() < plan.recovery_kill_share:
                again = start()
                everyone.append(again)
                time.sleep(rng.uniform(0.3, 2.0))  # imports, join, table recovery: usually not ready yet
                again.kill()
                figures.kills += 1
                figures.kills_in_recovery += int(again.ready_count() == 0)
            workers[victim] = start()
            everyone.append(workers[victim])
        producer.finish()
        wait_until_quiet(settings, total, timeout=300)
        figures.wall_s = time.monotonic() - began
        for worker in workers:
            assert worker.proc is not None and worker.proc.poll() is None, (
                "a worker exited by itself:\n" + worker.log()[-3000:])
        figures.verdict = verify(settings, expected)
    finally:
        figures.logs = [w.log() for w in everyone]
        for worker in workers:
            if worker.proc is not None and worker.proc.poll() is None:
                worker.stop()
    return figures
