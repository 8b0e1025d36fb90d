"""The seeded fault campaign: many short runs, each with its own services, workers, load and faults.

Modelled on Jepsen (a random fault schedule drawn from a seed, an independent checker, and a seed
that replays a failing run) and on Kafka Streams' system tests (kills, rebalances and broker
bounces under sustained load). One run (:func:`run_one`):

1. starts its own embedded broker (Tansu) and a throwaway PostgreSQL cluster, migrated;
2. starts a CPU load generator that keeps the run-queue at about twice the cores (busy processes);
3. starts 1-3 workers (web on, so the hook lane is live), draws a workload (sessions, rate, texts)
   from the run's seed, and produces it at that rate from a background thread, noting when each
   turn was sent;
4. while it is produced, applies the run's fault schedule (:data:`FAULT_KINDS`), and calls the real
   ``volunteer hook user-prompt`` every ~1.5 s for a fresh hook session;
5. waits until the group has committed everything, then the verifier (:mod:`tests.reliability.verify`)
   judges table and topic against replay of exactly the produced turns, and the stall checker judges
   every row's arrival (:func:`row_wait`): counted from its turn's produce time or from the latest
   fault that began before the row arrived (an outage's end: nothing can arrive during it), a row
   waits at most :data:`RECOVERY_BOUND_S`. The wait through every fault a row met in a row (only
   outages discounted, :func:`compound_wait`) is reported beside it.

A run's seed determines its plan (workers, workload, rate, faults and their moments); the moments
are seconds after production starts, so a failing seed replays the same schedule, though not the
same interleaving of threads (that is what many seeds are for).
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import orjson
import psycopg

from pipeline.braindir import load_brain_dir
from pipeline.compat import recovery_retry
from pipeline.core.brain import BrainIndex
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.embedded.tansu import EmbeddedBroker, free_port
from pipeline.settings import Settings
from sinks.db import with_database
from sinks.schema import migrate
from tests.integration.stream.harness import CONFORMANCE_BRAIN, ROOT, WorkerProc, run, worker_env
from tests.reliability.crash import BackgroundProducer
from tests.reliability.verify import Verdict, expected_events, verify, wait_until_quiet
from tests.reliability.workload import Workload, build_workload
from tests.services.broker import new_names, settings_for
from topics.definitions import ensure_topics
from topics.tansu_client import SESSION_TIMEOUT_S

RECOVERY_BOUND_S = SESSION_TIMEOUT_S + 10.0
READ_STALL_MARK = "table recovery: no changelog record for"  # compat/recovery_retry.py
LEFT_TO_ASSIGNMENT_MARK = "the new assignment starts the recovery"  # a retry during a rebalance (same module)
REJOIN_MARK = "asking to join the group again"  # a rebalance that did not finish in 30 s (same module)
"""The issue's bound: after its turn is produced, and after the latest fault it met, no row waits
longer than this (a fault of a worker is detected after the session timeout; 10 s to recover)."""

FAULT_KINDS = ("kill", "add", "pause", "broker-freeze", "pg-restart", "pg-slow")
"""``kill``: SIGKILL of a worker, restarted 0-2 s later; ``add``: a worker added while others run;
``pause``: SIGSTOP of a worker for longer than the session timeout, then SIGCONT (a zombie that
wakes with requests in flight); ``broker-freeze``: SIGSTOP of the broker for 2-8 s (to its clients,
a black-holed link: connections stay open, nothing answers); ``pg-restart``: PostgreSQL stopped for
1-5 s and started again; ``pg-slow``: every insert statement into the events table sleeps
0.1-0.5 s (a statement trigger) for 4-10 s."""

OUTAGE_KINDS = ("broker-freeze", "pg-restart")
"""Faults during which no row can arrive at all: their time is not counted against the bound, and the
recovery they need is counted from their end (every other fault's from its start)."""

HOOK_PROMPT = "Any news from Pinecrest Dynamics about the funding round?"
HOOK_PREFIX = "hook-"
HOOK_DEADLINE_MS = 1500
HOOK_SLACK_MS = 1500  # the hook's own start-up (a Python process) under a loaded machine
HOOK_RECOVERED_SLACK_S = 2.0  # after the recovery check passed: the first batches after it
MAX_WORKERS = 4


@dataclass(frozen=True)
class Fault:
    at_s: float  # seconds after production started
    kind: str
    hold_s: float  # how long the fault lasts (pause, freeze, outage, slowness); 0 for kill/add
    pick: float  # which worker, as a fraction of the live ones


@dataclass(frozen=True)
class RunPlan:
    seed: int
    workers: int
    turns: int
    rate: float
    concurrent: int
    faults: tuple[Fault, ...]
    short: bool = False  # drawn by short_plan

    @property
    def replay(self) -> str:
        return f"python -m bench.campaign --seed {self.seed} --runs 1" + (" --short" if self.short else "")

    def render(self) -> str:
        kinds = ", ".join(f"{f.kind}@{f.at_s:.1f}s" + (f"/{f.hold_s:.1f}s" if f.hold_s else "") for f in self.faults)
        return (f"seed {self.seed}: {self.workers} worker(s), {self.turns} turns at {self.rate:.0f}/s, "
                f"{self.concurrent} concurrent sessions; faults: {kinds}")


def plan_run(seed: int, *, duration_s: tuple[float, float] = (20.0, 35.0), faults: tuple[int, int] = (2, 4),
             kinds: tuple[str, ...] = FAULT_KINDS, forced: tuple[str, ...] = ()) -> RunPlan:
    """The run that ``seed`` stands for (module doc); ``forced`` names the kinds of its first faults
    (the short campaign uses it so that a few runs cover every kind)."""
    rng = random.Random(seed)
    workers = rng.choice((1, 2, 2, 3))
    rate = rng.uniform(150.0, 500.0)
    seconds = rng.uniform(*duration_s)
    count = rng.randint(*faults)
    # the faults spread over the middle of production, each starting after the previous one ended
    slots = sorted(rng.uniform(0.15, 0.8) * seconds for _ in range(count))
    chosen = [rng.choice(kinds) for _ in range(count)]
    chosen[:len(forced)] = forced[:count]
    out: list[Fault] = []
    for at, kind in zip(slots, chosen, strict=True):
        hold = {"pause": SESSION_TIMEOUT_S + rng.uniform(1.0, 4.0), "broker-freeze": rng.uniform(2.0, 8.0),
                "pg-restart": rng.uniform(1.0, 5.0), "pg-slow": rng.uniform(4.0, 10.0)}.get(kind, 0.0)
        out.append(Fault(round(at, 2), kind, round(hold, 2), rng.random()))
    return RunPlan(seed, workers, int(rate * seconds), rate, rng.choice((100, 300, 1000)), tuple(out))


# ----------------------------------------------------------------------------- the parts of a run


class LoadGenerator:
    """Busy processes that keep the run-queue at about ``2 x cores`` with the run's own work."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> LoadGenerator:
        for _ in range(self.processes):
            self._procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                                stdin=subprocess.DEVNULL, start_new_session=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


class TimedProducer(BackgroundProducer):
    """The background producer, noting when each chunk of turns was acknowledged by the broker."""

    def __init__(self, settings: Settings, workload: Workload, rate: float, seed: int) -> None:
        super().__init__(settings, workload, rate, seed=seed, chunk=50)
        self.sent_at: list[float] = []  # per produced turn, in order
        self.started_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        super().run()

    async def _produce(self) -> None:  # the parent's loop, with a timestamp per chunk
        from topics.clients import make_producer
        from topics.io import send_records

        producer = make_producer(self.settings)
        await producer.start()
        try:
            for start in range(0, len(self.items), self.chunk):
                began = time.monotonic()
                part = self.items[start:start + self.chunk]
                await send_records(producer, self.settings.topic_turns, part)
                now = time.monotonic()
                self.sent_at.extend([now] * len(part))
                self.sent += len(part)
                ahead = len(part) / self.rate - (now - began)
                if ahead > 0:
                    import asyncio

                    await asyncio.sleep(ahead)
        finally:
            await producer.stop()


class ArrivalWatcher(threading.Thread):
    """Polls the events table and notes when each row was first seen (the stall checker's input)."""

    def __init__(self, database_url: str, interval_s: float = 0.5) -> None:
        super().__init__(name="arrival-watcher", daemon=True)
        self.database_url = database_url
        self.interval_s = interval_s
        self.first_seen: dict[tuple[str, str, str, int, str], float] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(psycopg.Error), \
                    psycopg.connect(self.database_url, autocommit=True, connect_timeout=2) as conn:
                while not self.stopping.is_set():
                    now = time.monotonic()
                    for row in conn.execute("SELECT source_id, channel, session_id, turn, slug "
                                            "FROM context_volunteer_events"):
                        self.first_seen.setdefault((row[0], row[1], row[2], row[3], row[4]), now)
                    self.stopping.wait(self.interval_s)
            self.stopping.wait(self.interval_s)


class CampaignWorker(WorkerProc):
    """A worker with its web server (the hook lane) on a port of its own."""

    web_port: int = 0

    def command(self) -> list[str]:
        return [sys.executable, "-m", "pipeline", "worker", "--web-port", str(self.web_port), *self.args]


@dataclass
class HookOutcome:
    at_s: float
    pages: frozenset[str]
    wall_ms: float
    returncode: int
    stderr: bytes
    during_fault: bool
    began: float = 0.0
    ended: float = 0.0

    def problem(self, baseline: frozenset[str]) -> str | None:
        if self.returncode != 0:
            return f"exit status {self.returncode}"
        if self.stderr.strip():
            return f"stderr: {self.stderr[:200]!r}"
        if self.wall_ms > HOOK_DEADLINE_MS + HOOK_SLACK_MS:
            return f"took {self.wall_ms:.0f} ms"
        if self.pages and self.pages != baseline:
            return f"pages {sorted(self.pages)} instead of {sorted(baseline)}"
        return None


def slow_inserts(database_url: str, delay_s: float, hold_s: float) -> None:
    """Make every insert statement into the events table sleep ``delay_s`` for ``hold_s`` (pg-slow).

    The trigger's creation and removal are committed with ``synchronous_commit`` on: the throwaway
    cluster runs with it off, and a pg-restart (an immediate stop) right after the removal undid
    it, so the next pg-slow of the run found the trigger still there and the run ended in an error
    (eighth campaign, seed 1706292028). The sink commits its rows the same way (agents/dbwriter.py).
    """
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit TO on")
        conn.execute(f"CREATE OR REPLACE FUNCTION campaign_slow() RETURNS trigger LANGUAGE plpgsql AS "
                     f"$$ BEGIN PERFORM pg_sleep({delay_s:.3f}); RETURN NULL; END $$")
        conn.execute("CREATE TRIGGER campaign_slow BEFORE INSERT ON context_volunteer_events "
                     "FOR EACH STATEMENT EXECUTE FUNCTION campaign_slow()")
        try:
            time.sleep(hold_s)
        finally:
            conn.execute("DROP TRIGGER campaign_slow ON context_volunteer_events")


def in_windows(began: float, ended: float, windows: list[tuple[float, float]]) -> bool:
    """Whether a hook call from ``began`` to ``ended`` overlaps a fault's window (from a second before
    the fault until its recovery is over)."""
    return any(a - 1.0 <= ended and began <= b for a, b in windows)


def empty_without_fault(outcomes: list[HookOutcome], windows: list[tuple[float, float]]) -> list[HookOutcome]:
    """The calls that printed nothing with no fault near, judged against the *final* fault windows.

    A window grows when the campaign sees the fault's recovery end (``Run.recovered``), which can be
    after a call made during that recovery has returned; judged when it returned, such a call was
    counted as empty with no fault near (seed 259474980: a call 13.1 s after a worker was added, whose
    recovery took 15.5 s). Every call is therefore judged once all faults are over.
    """
    late = []
    for outcome in outcomes:
        outcome.during_fault = in_windows(outcome.began, outcome.ended, windows)
        if not outcome.pages and not outcome.during_fault:
            late.append(outcome)
    return late


def hook_pages(stdout: bytes) -> frozenset[str]:
    """The page lines of a hook answer (empty: the hook printed nothing)."""
    if not stdout.strip():
        return frozenset()
    block = str(orjson.loads(stdout)["hookSpecificOutput"]["additionalContext"])
    return frozenset(line for line in block.splitlines() if line.startswith("- "))


# ----------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    plan: RunPlan
    turns_sent: int = 0
    rows_checked: int = 0
    verdict: Verdict | None = None
    worst_wait_s: float = 0.0  # row_wait, the stall checker's measure
    worst_compound_s: float = 0.0  # compound_wait: through every fault a row met
    stalled: list[tuple[tuple[Any, ...], float, str]] = field(default_factory=list)  # (row, wait, when)
    timeline: list[str] = field(default_factory=list)  # faults, in the workers' log clock (UTC)
    recoveries_s: list[float] = field(default_factory=list)
    faults_done: Counter[str] = field(default_factory=Counter)
    hooks: list[HookOutcome] = field(default_factory=list)
    hook_problems: list[str] = field(default_factory=list)
    load_avg: float = 0.0
    wall_s: float = 0.0
    error: str | None = None
    warnings_late: int = 0
    recovery_restarts: int = 0  # recoveries started again after a step's timeout (compat/recovery_retry.py)
    read_stalls: int = 0  # changelog reads that received nothing and were set going again (same module)
    left_to_assignment: int = 0  # of the restarts, those left to the group's new assignment (same module)
    rejoins: int = 0  # rebalances that did not finish within 30 s, rejoined (same module)
    logs: list[str] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return (self.error is None and self.verdict is not None and self.verdict.exact and not self.stalled
                and not self.hook_problems)

    def render(self) -> str:
        hooks = Counter("pages" if h.pages else "empty" for h in self.hooks)
        head = (f"{'ok  ' if self.ok else 'FAIL'} {self.plan.render()}\n"
                f"     {self.turns_sent} turns, {self.rows_checked} rows checked, worst wait {self.worst_wait_s:.1f} s "
                f"(bound {RECOVERY_BOUND_S:.0f} s; through all faults {self.worst_compound_s:.1f} s), recoveries {[round(r, 1) for r in self.recoveries_s]}, hook calls "
                f"{len(self.hooks)} ({hooks['pages']} with pages, {hooks['empty']} empty), load avg "
                f"{self.load_avg:.1f}, {self.wall_s:.0f} s")
        if self.ok:
            return head
        lines = [head]
        if self.error:
            lines.append(f"     error: {self.error}")
        if self.verdict is not None and not self.verdict.exact:
            lines.append("     " + self.verdict.problems().replace("\n", "\n     "))
        for ident, wait, when in self.stalled[:5]:
            lines.append(f"     stalled: {ident} waited {wait:.1f} s ({when})")
        if self.stalled:
            lines.extend(f"     {line}" for line in self.timeline)
        lines.extend(f"     hook: {p}" for p in self.hook_problems[:5])
        lines.append(f"     replay: {self.plan.replay}")
        return "\n".join(lines)


class Run:
    """The services, workers and faults of one run (:func:`run_one`)."""

    def __init__(self, plan: RunPlan, root: Path, brain: BrainIndex) -> None:
        self.plan = plan
        self.root = root
        self.brain = brain
        self.rng = random.Random(plan.seed ^ 0x5EED)
        self.broker = EmbeddedBroker(cluster_id=f"campaign-{plan.seed}")
        self.pg = EmbeddedPostgres()
        self.workers: list[CampaignWorker] = []
        self.everyone: list[CampaignWorker] = []
        self.token = secrets.token_hex(32)
        self.outages: list[tuple[float, float]] = []  # (start, end) monotonic, OUTAGE_KINDS
        self.anchors: list[float] = []  # where each fault's recovery is counted from (row_wait)
        self.fault_windows: list[tuple[float, float]] = []  # (start, excused until): the hook's accounting
        self.settings: Settings | None = None
        self.lock = threading.Lock()

    # services
    def start_services(self) -> Settings:
        self.broker.start()
        self.pg.start()
        with psycopg.connect(self.pg.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE campaign")
        database_url = with_database(self.pg.url, "campaign")
        migrate(database_url)
        self.settings = settings_for(self.broker.url, new_names(), database_url=database_url, topic_partitions=4)
        run(ensure_topics(self.settings))
        return self.settings

    def stop_services(self) -> None:
        for worker in self.everyone:
            worker.__exit__()
        with contextlib.suppress(Exception):
            if self.broker.pid is not None:
                os.kill(self.broker.pid, signal.SIGCONT)
        self.broker.stop()
        self.pg.close()

    # workers
    def start_worker(self) -> CampaignWorker:
        assert self.settings is not None
        index = len(self.everyone)
        env = worker_env(self.settings, self.root / f"data{index}", VOLUNTEER_STATE_DIR=str(self.root / "state"),
                         VOLUNTEER_HOOK_TOKEN=self.token)
        worker = CampaignWorker(env, self.root / f"worker{index}.log", ["--brain", str(CONFORMANCE_BRAIN)])
        worker.web_port = free_port()
        worker.start()
        with self.lock:
            self.workers.append(worker)
            self.everyone.append(worker)
        return worker

    def live(self) -> list[CampaignWorker]:
        with self.lock:
            return [w for w in self.workers if w.proc is not None and w.proc.poll() is None]

    def pick(self, fraction: float) -> CampaignWorker:
        live = self.live()
        return live[min(int(fraction * len(live)), len(live) - 1)]

    # faults
    def apply(self, fault: Fault, result: RunResult) -> None:
        began = time.monotonic()
        with self.lock:  # open before the fault starts, so hook calls during it count as near a fault
            slot = len(self.fault_windows)
            self.fault_windows.append((began, float("inf")))
        kind = fault.kind
        if kind == "add" and len(self.live()) >= MAX_WORKERS:
            kind = "kill"  # full house: take one away instead
        if kind == "kill":
            victim = self.pick(fault.pick)
            victim.kill()
            with self.lock:
                self.workers.remove(victim)
            time.sleep(self.rng.uniform(0.0, 2.0))
            self.start_worker()
        elif kind == "add":
            self.start_worker()
        elif kind == "pause":
            victim = self.pick(fault.pick)
            assert victim.proc is not None
            os.killpg(victim.proc.pid, signal.SIGSTOP)
            time.sleep(fault.hold_s)
            os.killpg(victim.proc.pid, signal.SIGCONT)
        elif kind == "broker-freeze":
            assert self.broker.pid is not None
            os.kill(self.broker.pid, signal.SIGSTOP)
            time.sleep(fault.hold_s)
            os.kill(self.broker.pid, signal.SIGCONT)
            self.outages.append((began, time.monotonic()))
        elif kind == "pg-restart":
            self.pg.stop(mode="immediate")
            time.sleep(fault.hold_s)
            self.pg.start()
            self.outages.append((began, time.monotonic()))
        elif kind == "pg-slow":
            assert self.settings is not None
            slow_inserts(self.settings.database_url, self.rng.uniform(0.1, 0.5), fault.hold_s)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        result.faults_done[kind] += 1
        ended = time.monotonic()
        with self.lock:
            self.fault_windows[slot] = (began, ended + RECOVERY_BOUND_S)
            self.anchors.append(ended if kind in OUTAGE_KINDS else began)
        result.timeline.append(f"fault {kind} from {_utc(began)} to {_utc(ended)}")

    def recovered(self, slack_s: float) -> None:
        """The latest fault's recovery is over (every worker ready, partitions spread): a hook call may
        come back empty until ``slack_s`` after now, or until the bound after the fault's end if later
        (an outage's rebalance starts only once it ends, after the check saw everyone ready)."""
        with self.lock:
            began, until = self.fault_windows[-1]
            self.fault_windows[-1] = (began, max(until, time.monotonic() + slack_s))

    def call_hook(self, number: int, started_at: float) -> HookOutcome:
        live = self.live()
        url = f"http://127.0.0.1:{(live[number % len(live)] if live else self.everyone[0]).web_port}"
        state = self.root / "hook-state"
        state.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
        env.update({"HOME": str(state), "VOLUNTEER_HOOK_URL": url, "VOLUNTEER_HOOK_STATE_DIR": str(state),
                    "VOLUNTEER_STATE_DIR": str(state), "VOLUNTEER_HOOK_TOKEN": self.token,
                    "VOLUNTEER_HOOK_DEADLINE_MS": str(HOOK_DEADLINE_MS)})
        payload = orjson.dumps({"session_id": f"{HOOK_PREFIX}{self.plan.seed}-{number}", "prompt": HOOK_PROMPT,
                                "cwd": str(state), "hook_event_name": "UserPromptSubmit"})
        began = time.monotonic()
        done = subprocess.run([str(Path(sys.executable).parent / "volunteer"), "hook", "user-prompt"], input=payload,
                              capture_output=True, env=env, cwd=ROOT, timeout=60)
        ended = time.monotonic()
        with self.lock:
            windows = list(self.fault_windows)
        in_fault = in_windows(began, ended, windows)
        try:
            pages = hook_pages(done.stdout)
        except (ValueError, KeyError, TypeError):
            pages = frozenset({f"<not a hook answer: {done.stdout[:100]!r}>"})
        return HookOutcome(began - started_at, pages, (ended - began) * 1000, done.returncode, done.stderr, in_fault,
                           began, ended)


_WALL_OFFSET = time.time() - time.monotonic()


def _utc(monotonic: float) -> str:
    """A monotonic instant in the workers' log clock (UTC, to the millisecond)."""
    wall = monotonic + _WALL_OFFSET
    return time.strftime("%H:%M:%S", time.gmtime(wall)) + f".{int(wall * 1000) % 1000:03d}"


def _overlap(start: float, end: float, windows: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in windows)


def run_one(plan: RunPlan, *, brain: BrainIndex | None = None, load: bool = True, keep: Path | None = None,
            keep_all: bool = False) -> RunResult:
    """Run ``plan`` from nothing to a verdict (module doc); never raises for a failed run."""
    brain = brain or load_brain_dir(CONFORMANCE_BRAIN)
    result = RunResult(plan)
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"campaign-{plan.seed}-"))
    the_run = Run(plan, root, brain)
    hogs = 2 * (os.cpu_count() or 1) if load else 0
    producer: TimedProducer | None = None
    watcher: ArrivalWatcher | None = None
    stop_hooks = threading.Event()
    try:
        with LoadGenerator(hogs):
            settings = the_run.start_services()
            workload = build_workload(plan.turns, seed=plan.seed, concurrent=plan.concurrent, prefix=f"c{plan.seed}-")
            for _ in range(plan.workers):
                the_run.start_worker()
            for worker in the_run.live():
                worker.wait_ready(timeout=120)
            watcher = ArrivalWatcher(settings.database_url)
            watcher.start()
            baseline = the_run.call_hook(0, time.monotonic())
            result.hooks.append(baseline)
            if not baseline.pages or baseline.problem(baseline.pages):
                result.hook_problems.append(f"the first hook call, before any fault, gave {baseline}")
            producer = TimedProducer(settings, workload, plan.rate, plan.seed)
            producer.start()
            hook_thread = threading.Thread(target=_hooks, args=(the_run, result, producer, baseline.pages, stop_hooks),
                                           daemon=True)
            hook_thread.start()
            for fault in plan.faults:
                while time.monotonic() - producer.started_at < fault.at_s and producer.is_alive():
                    time.sleep(0.05)
                ready_before = sum(w.ready_count() for w in the_run.live())
                the_run.apply(fault, result)
                result.recoveries_s.append(_wait_recovered(the_run, ready_before, time.monotonic()))
                the_run.recovered(HOOK_RECOVERED_SLACK_S)
            producer.finish(timeout=600)
            result.turns_sent = producer.sent
            sent = Workload(workload.turns[:producer.sent], workload.meta)
            expected = expected_events(sent, brain)
            result.rows_checked = len(expected)
            wait_until_quiet(settings, len(expected) + _hook_rows_lower_bound(result), timeout=240)
            stop_hooks.set()
            hook_thread.join(90)
            with the_run.lock:
                windows = list(the_run.fault_windows)
            for outcome in empty_without_fault(result.hooks[1:], windows):
                result.hook_problems.append(f"call at {outcome.at_s:.1f} s: no pages, with no fault near")
            final = the_run.call_hook(10_000, producer.started_at)
            result.hooks.append(final)
            if final.pages != baseline.pages or final.problem(baseline.pages):
                result.hook_problems.append(f"after recovery the hook gave {sorted(final.pages)}, "
                                            f"not {sorted(baseline.pages)}")
            wait_until_quiet(settings, len(expected), timeout=120)
            for worker in the_run.workers:  # the ones no fault killed
                if worker.proc is not None and worker.proc.poll() is not None:
                    result.error = "a worker exited by itself:\n" + worker.log()[-2000:]
            result.verdict = verify(settings, expected, skip_sessions=(HOOK_PREFIX,))
            watcher.stopping.set()
            watcher.join(10)
            _judge_waits(result, expected, workload, producer, watcher, the_run.outages, the_run.anchors)
            result.load_avg = os.getloadavg()[0]
    except Exception as exc:  # a failed run is a result: it prints its seed
        result.error = f"{type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=-3)
    finally:
        stop_hooks.set()
        if producer is not None:
            producer.stopping.set()
        if watcher is not None:
            watcher.stopping.set()
        result.logs = [w.log() for w in the_run.everyone]
        result.warnings_late = sum(log.count("left out") for log in result.logs)
        result.recovery_restarts = sum(log.count("starting the recovery again") for log in result.logs)
        result.read_stalls = sum(log.count(READ_STALL_MARK) for log in result.logs)
        result.left_to_assignment = sum(log.count(LEFT_TO_ASSIGNMENT_MARK) for log in result.logs)
        result.rejoins = sum(log.count(REJOIN_MARK) for log in result.logs)
        the_run.stop_services()
        if keep is not None and (keep_all or not result.ok or result.warnings_late or result.read_stalls
                                 or result.rejoins):  # evidence
            keep.mkdir(parents=True, exist_ok=True)
            for index, log in enumerate(result.logs):
                (keep / f"seed{plan.seed}-worker{index}.log").write_text(log)
        shutil.rmtree(root, ignore_errors=True)
        result.wall_s = time.monotonic() - began
    return result


def _hook_rows_lower_bound(result: RunResult) -> int:
    return 0  # hook sessions' rows are judged by the hook check, not awaited here


def _hooks(the_run: Run, result: RunResult, producer: TimedProducer, baseline: frozenset[str],
           stop: threading.Event) -> None:
    number = 1
    while not stop.is_set():
        outcome = the_run.call_hook(number, producer.started_at)
        result.hooks.append(outcome)
        problem = outcome.problem(baseline)  # empty answers are judged at the end (empty_without_fault)
        if problem is not None:
            result.hook_problems.append(f"call {number} at {outcome.at_s:.1f} s: {problem}")
        number += 1
        stop.wait(1.5)


def _wait_recovered(the_run: Run, ready_before: int, hit: float, timeout: float = 120) -> float:
    """Seconds from the fault's end (``hit``) until every live worker is ready again with the partitions
    spread (each live worker's latest generation ready); the partitions are 4."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = the_run.live()
        lines = [w.ready_partitions() for w in live]
        owned = [set(line[-1]) if line else set() for line in lines]
        if live and all(lines) and sum(len(o) for o in owned) == 4 \
                and len(set().union(*owned)) == 4:
            return time.monotonic() - hit
        time.sleep(0.2)
    return time.monotonic() - hit


def row_wait(sent: float, seen: float, anchors: list[float]) -> float:
    """How long a row waited after its turn was sent, or after the latest fault anchor before it was
    seen if that came later (liveness after the last fault, as Jepsen checks it): the stall measure.

    A row that meets several faults one after another (a kill, then PostgreSQL down, then a pause of
    the worker that has it) is judged against the recovery of the last one; its whole wait is
    :func:`compound_wait`, reported beside it. Without any fault this is simply ``seen - sent``.
    """
    start = max([sent, *(a for a in anchors if a <= seen)])
    return seen - start


def compound_wait(sent: float, seen: float, outages: list[tuple[float, float]]) -> float:
    """A row's whole wait minus the outages in it (nothing can arrive during those)."""
    return seen - sent - _overlap(sent, seen, outages)


def _judge_waits(result: RunResult, expected: dict[str, Any], workload: Workload, producer: TimedProducer,
                 watcher: ArrivalWatcher, outages: list[tuple[float, float]], anchors: list[float]) -> None:
    """Every expected row's wait (:func:`row_wait`; module doc)."""
    counters: dict[str, int] = {}
    sent_at: dict[tuple[str, int], float] = {}
    for index, turn in enumerate(workload.turns[:len(producer.sent_at)]):
        number = turn.turn if turn.turn is not None else counters.get(turn.session_id, 0) + 1
        counters[turn.session_id] = number
        sent_at[(turn.session_id, number)] = producer.sent_at[index]
    for event in expected.values():
        produced = sent_at.get((event.session_id, event.turn))
        seen = watcher.first_seen.get(event.identity)
        if produced is None or seen is None:
            continue  # a lost row is the verifier's finding
        wait = row_wait(produced, seen, anchors)
        result.worst_wait_s = max(result.worst_wait_s, wait)
        result.worst_compound_s = max(result.worst_compound_s, compound_wait(produced, seen, outages))
        if wait > RECOVERY_BOUND_S:
            result.stalled.append((event.identity, wait, f"sent {_utc(produced)}, first seen {_utc(seen)}"))


# ----------------------------------------------------------------------------- the campaign


@dataclass
class CampaignFigures:
    results: list[RunResult] = field(default_factory=list)

    def render(self) -> str:
        runs = len(self.results)
        failed = [r for r in self.results if not r.ok]
        faults: Counter[str] = Counter()
        for r in self.results:
            faults.update(r.faults_done)
        recoveries = [x for r in self.results for x in r.recoveries_s]
        hooks = [h for r in self.results for h in r.hooks]
        answered = sum(1 for h in hooks if h.pages)
        loads = [r.load_avg for r in self.results if r.load_avg]
        lines = [
            f"campaign: {runs} runs, {runs - len(failed)} exact, {len(failed)} failed",
            "faults: " + ", ".join(f"{k} {faults[k]}" for k in FAULT_KINDS),
            f"rows checked: {sum(r.rows_checked for r in self.results)} "
            f"(turns {sum(r.turns_sent for r in self.results)})",
            (f"recovery after a fault: median {median(recoveries):.1f} s, max {max(recoveries):.1f} s"
             if recoveries else "recovery: no faults"),
            f"worst row wait after its turn or its latest fault: "
            f"{max((r.worst_wait_s for r in self.results), default=0):.1f} s (bound {RECOVERY_BOUND_S:.0f} s); "
            f"through every fault it met, outages discounted: "
            f"{max((r.worst_compound_s for r in self.results), default=0):.1f} s",
            f"hook calls: {len(hooks)}, {answered} with the right pages, {len(hooks) - answered} empty "
            f"(during or right after a fault), problems {sum(len(r.hook_problems) for r in self.results)}",
            f"table recoveries started again after a step's timeout (each a stall for good without "
            f"compat/recovery_retry.py): {sum(r.recovery_restarts for r in self.results)} in "
            f"{sum(1 for r in self.results if r.recovery_restarts)} runs, of which "
            f"{sum(r.left_to_assignment for r in self.results)} during a rebalance, left to the new assignment; "
            f"rebalances rejoined after 30 s: {sum(r.rejoins for r in self.results)}",
            f"changelog reads that received nothing for {recovery_retry.STALL_S:.0f} s and were set going again "
            f"(each a stall for good without it; the log line says what held them): "
            f"{sum(r.read_stalls for r in self.results)} in {sum(1 for r in self.results if r.read_stalls)} runs"
            + "".join(f"\n  {r.read_stalls} in seed {r.plan.seed}" for r in self.results if r.read_stalls),
            f"'left out ... written late' warnings: {sum(r.warnings_late for r in self.results)}"
            + "".join(f"\n  {r.warnings_late} in seed {r.plan.seed} ({', '.join(sorted(r.faults_done))})"
                      for r in self.results if r.warnings_late),
            (f"load average (1 min) at the end of runs: median {median(loads):.1f}, max {max(loads):.1f}"
             if loads else ""),
        ]
        if failed:
            lines.append("failed seeds: " + " ".join(str(r.plan.seed) for r in failed))
        return "\n".join(line for line in lines if line)


def short_plan(seed: int) -> RunPlan:
    """A short run: 10-14 s, two faults, whose kinds are the pair ``seed % 3`` of :data:`FAULT_KINDS`
    (so the seed alone decides the plan and ``--seed S --runs 1 --short`` replays it)."""
    pair = seed % 3
    plan = plan_run(seed, duration_s=(10.0, 14.0), faults=(2, 2), forced=FAULT_KINDS[2 * pair:2 * pair + 2])
    return RunPlan(plan.seed, plan.workers, plan.turns, plan.rate, plan.concurrent, plan.faults, short=True)


def run_campaign(seed: int, runs: int, *, short: bool = False, load: bool = True, keep: Path | None = None,
                 keep_all: bool = False, progress: Any = None) -> CampaignFigures:
    """``runs`` runs with seeds drawn from ``seed`` (``runs == 1``: the run of ``seed`` itself)."""
    brain = load_brain_dir(CONFORMANCE_BRAIN)
    rng = random.Random(seed)
    # short runs' seeds go round the three pairs of kinds (short_plan), so three runs cover every kind
    seeds = [seed] if runs == 1 else [rng.randrange(1, 2**30) * 3 + index % 3 if short else rng.randrange(1, 2**31)
                                      for index in range(runs)]
    figures = CampaignFigures()
    for index, run_seed in enumerate(seeds):
        plan = short_plan(run_seed) if short else plan_run(run_seed)
        result = run_one(plan, brain=brain, load=load, keep=keep, keep_all=keep_all)
        figures.results.append(result)
        if progress is not None:
            progress(index, result)
    return figures
