"""Helpers for the stream tests: real ``volunteer worker`` processes, the conformance sessions as
Turn records, and reading what came out (topic and table).

Workers run as child processes (``python -m pipeline worker``) so a test can stop them the way an
operator or a crash would: SIGTERM, or SIGKILL in the middle of a batch.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
import psycopg

from pipeline.agents.wiring import READY_MARK
from pipeline.core.window import parse_watch_line
from pipeline.settings import Settings
from tests.conftest import CONFORMANCE
from tests.services.statekey import STATE_KEY_ENV
from topics.io import read_all
from topics.records import Turn, Volunteered

ROOT = Path(__file__).resolve().parents[3]
CONFORMANCE_BRAIN = CONFORMANCE / "brain"
T = TypeVar("T")

PAGE_KEYS = ("slug", "source_id", "display", "confidence", "arm", "rationale", "synopsis")


def run(coro: Awaitable[T], timeout: float = 120) -> T:
    async def wrapper() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(wrapper())


# ----------------------------------------------------------------------------- conformance data


@dataclass(frozen=True)
class Session:
    session_id: str
    turns: list[Turn]
    expected: list[tuple[Any, ...]]  # (turn, slug, source_id, display, confidence, arm, rationale, synopsis)


def conformance_sessions(*, numbered_every: int = 2) -> list[Session]:
    """The watch sessions run with default flags, as Turn records (reference-behaviour.md §9 line semantics).

    Every ``numbered_every``-th session carries producer turn numbers; the others leave numbering
    to the pipeline, so both paths are covered.
    """
    sessions = []
    for index, line in enumerate((CONFORMANCE / "cases-watch.jsonl").read_bytes().splitlines()):
        case = orjson.loads(line)
        if case["flags"]:
            continue
        expect = case.get("expect_post_snapshot") or case["expect"]
        sid = str(case["session_id"])
        turns = []
        for raw in case["lines"]:
            parsed = parse_watch_line(raw)
            if parsed is None:
                continue
            number = len(turns) + 1 if index % numbered_every == 0 else None
            turns.append(Turn(sid, parsed[0], parsed[1], turn=number))
        assert len(turns) == expect["turns"], sid
        expected = [tuple([e["turn"], *(e[k] for k in PAGE_KEYS)]) for e in expect["emissions"]]
        sessions.append(Session(sid, turns, expected))
    return sessions


def copies(sessions: list[Session], n: int) -> list[Session]:
    """``n`` renamed copies of every session (``<id>~<k>``): more traffic with known answers."""
    out = []
    for k in range(n):
        for s in sessions:
            sid = f"{s.session_id}~{k}"
            turns = [Turn(sid, t.role, t.text, t.turn, t.ts_ms, t.source_id, t.channel) for t in s.turns]
            out.append(Session(sid, turns, list(s.expected)))
    return out


def interleave(sessions: Iterable[Session], start: int = 0, stop: int | None = None) -> list[Turn]:
    """Round-robin over sessions (turn i of every session, then turn i+1...), turns [start, stop)."""
    lists = [s.turns[start:stop] for s in sessions]
    out = []
    for i in range(max((len(x) for x in lists), default=0)):
        out.extend(x[i] for x in lists if i < len(x))
    return out


def expected_events(sessions: Iterable[Session]) -> dict[str, list[tuple[Any, ...]]]:
    return {s.session_id: list(s.expected) for s in sessions}


# ----------------------------------------------------------------------------- reading results


def event_tuple(event: Volunteered) -> tuple[Any, ...]:
    return (event.turn, event.slug, event.source_id, event.display, event.confidence, event.arm, event.rationale,
            event.synopsis)


def volunteered_on_topic(settings: Settings, expect: int, timeout: float = 90) -> list[Volunteered]:
    """Everything on the volunteered topic once at least ``expect`` records are there (or time ran out)."""
    records = run(read_all(settings, settings.topic_volunteered, expect=expect, timeout_s=timeout),
                  timeout=timeout + 30)
    # linger a moment so extra (wrong) records that are in flight are seen too
    more = run(read_all(settings, settings.topic_volunteered, idle_s=0.5, timeout_s=timeout))
    records = more if len(more) > len(records) else records
    return [Volunteered.from_json(r.value) for r in records if r.value is not None]


def distinct_by_session(events: Iterable[Volunteered]) -> dict[str, list[tuple[Any, ...]]]:
    """Per session, in topic order, each event identity once (at-least-once may repeat a record)."""
    seen: set[str] = set()
    out: dict[str, list[tuple[Any, ...]]] = {}
    for event in events:
        if event.event_id in seen:
            continue
        seen.add(event.event_id)
        out.setdefault(event.session_id, []).append(event_tuple(event))
    return out


def table_rows(database_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT session_id, turn, slug, source_id, confidence, match_arm, rationale, channel "
            "FROM context_volunteer_events ORDER BY id").fetchall()


def count_rows(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM context_volunteer_events").fetchone()
        return int(row[0]) if row else 0


def wait_for_rows(database_url: str, expect: int, timeout: float = 90) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + timeout
    rows = table_rows(database_url)
    while len(rows) < expect and time.monotonic() < deadline:
        time.sleep(0.2)
        rows = table_rows(database_url)
    time.sleep(0.3)  # anything extra still in flight
    return table_rows(database_url)


def assert_rows_match(rows: list[tuple[Any, ...]], expected: dict[str, list[tuple[Any, ...]]]) -> None:
    """Exactly one row per expected emission, with the expected values."""
    want = Counter((sid, e[0], e[1], e[2], e[4], e[5], e[6]) for sid, evs in expected.items() for e in evs)
    have = Counter((r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows)
    missing = want - have
    extra = have - want
    assert not missing and not extra, f"missing rows: {list(missing)[:5]}; unexpected rows: {list(extra)[:5]}"


# ----------------------------------------------------------------------------- workers


@contextmanager
def volunteer_up(**extra_env: str) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """``volunteer up`` as a child process; yields it and the two settings it printed (killed at exit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    env.update(extra_env)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "up"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None
        stdout = proc.stdout
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(stdout.readline().decode().strip() for _ in range(2)),
                                  daemon=True)
        reader.start()
        reader.join(60)
        assert [line.split("=", 1)[0] for line in lines] == ["VOLUNTEER_BROKER", "VOLUNTEER_DATABASE_URL"]
        yield proc, dict(line.split("=", 1) for line in lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def worker_env(settings: Settings, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    env.update({
        "VOLUNTEER_BROKER": settings.broker,
        "VOLUNTEER_DATABASE_URL": settings.database_url,
        "VOLUNTEER_TOPIC_TURNS": settings.topic_turns,
        "VOLUNTEER_TOPIC_VOLUNTEERED": settings.topic_volunteered,
        "VOLUNTEER_TOPIC_DLQ": settings.topic_dlq,
        "VOLUNTEER_TOPIC_PARTITIONS": str(settings.topic_partitions),
        "VOLUNTEER_APP_ID": settings.app_id,
        "VOLUNTEER_DATA_DIR": str(data_dir),
        "VOLUNTEER_METRICS_PORT": "0",  # several workers per host; a test that scrapes passes its own port
        "PYTHONUNBUFFERED": "1",
        **STATE_KEY_ENV,
    })
    env.update(extra)
    return env


@dataclass
class WorkerProc:
    """One ``volunteer worker`` child process with its log file."""

    env: dict[str, str]
    log_path: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """What to run (subclasses: another host's namespace, another release)."""
        return [sys.executable, "-m", "pipeline", "worker", "--without-web", *self.args]

    def workdir(self) -> Path:
        return ROOT

    def start(self) -> WorkerProc:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.command(), env=self.env, cwd=self.workdir(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def ready_count(self) -> int:
        return self.log().count(READY_MARK)

    def wait_for_log(self, text: str, count: int = 1, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.log().count(text) < count:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"worker exited ({self.proc.returncode}) before logging {text!r}:\n"
                                     + self.log()[-3000:])
            if time.monotonic() > deadline:
                raise AssertionError(f"worker did not log {text!r} within {timeout}s:\n" + self.log()[-3000:])
            time.sleep(0.05)

    def wait_ready(self, count: int = 1, timeout: float = 60) -> None:
        self.wait_for_log(READY_MARK, count, timeout)

    def owned_partitions(self) -> list[int]:
        """The partitions of the newest ready line."""
        return self.ready_partitions()[-1]

    def ready_partitions(self) -> list[list[int]]:
        """The partitions of every ready line, oldest first (one per rebalance)."""
        out = []
        for line in self.log().splitlines():
            if READY_MARK in line:
                inside = line.split(READY_MARK, 1)[1].split("]", 1)[0].strip(" [")
                out.append([int(p) for p in inside.split(",") if p.strip()])
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("worker did not stop within the timeout:\n" + self.log()[-3000:]) from None
        return int(self.proc.returncode)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> WorkerProc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
