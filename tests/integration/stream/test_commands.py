"""The stream commands as a user runs them: up, demo, feed, watch, and worker's set-up errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from pipeline.core.types import VolunteeredPage
from pipeline.settings import load_settings
from tests.integration.stream.harness import ROOT, run, volunteer_up
from tests.services.broker import TestNames, settings_for
from tests.services.statekey import STATE_KEY_ENV
from topics.clients import make_producer
from topics.definitions import ensure_topics
from topics.io import read_all
from topics.records import Volunteered, decode_turn

pytestmark = pytest.mark.integration


def volunteer(*args: str, env: dict[str, str] | None = None, stdin: bytes = b"",
              timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    base.update({**STATE_KEY_ENV, **(env or {})})
    return subprocess.run([sys.executable, "-m", "pipeline", *args], input=stdin, capture_output=True, env=base,
                          cwd=ROOT, timeout=timeout)


def port_open(host_port: str) -> bool:
    host, port = host_port.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def test_up_prints_settings_that_work_and_stops_cleanly(tmp_path: Path) -> None:
    with volunteer_up(VOLUNTEER_STATE_DIR=str(tmp_path / "state")) as (proc, values):  # 'up' makes the hooks' secret
        settings = load_settings(broker=values["VOLUNTEER_BROKER"], database_url=values["VOLUNTEER_DATABASE_URL"])
        assert settings.broker_is_embedded
        # both accept connections as soon as the lines are out, and the database is migrated
        assert run(ensure_topics(settings)) == {"turns": 8, "volunteered": 8, "turns-dlq": 8, "page-opens": 8}
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            row = conn.execute("SELECT to_regclass('context_volunteer_events') IS NOT NULL").fetchone()
            assert row == (True,)
        # the printed URL carries the cluster's password; without it TCP logins are refused
        bare = settings.database_url.replace(settings.database_url.split("//", 1)[1].split("@", 1)[0], "postgres")
        assert bare != settings.database_url
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(bare, connect_timeout=5).close()
        deadline = time.monotonic() + 30
        while not (tmp_path / "state" / "hook-token").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "state" / "hook-token").stat().st_mode & 0o777 == 0o600
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not port_open(settings.bootstrap_servers[0])
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(settings.database_url, connect_timeout=2).close()


def test_demo_runs_end_to_end_and_exits_0() -> None:
    result = volunteer("demo", "--pace", "0")
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    pages = [line for line in out.splitlines() if "⇢" in line]
    assert len(pages) == 14
    assert "context_volunteer_events (14 rows)" in out
    assert "total: 14 volunteered" in out
    assert re.search(r"total: 14 volunteered, [1-9]\d* used", out), out  # page opens made precision real
    assert "stopped the worker, the broker and the database" in result.stderr.decode()


def test_feed_numbers_turns_and_watch_prints_pages(module_broker_url: str, names: TestNames) -> None:
    settings = settings_for(module_broker_url, names)
    env = {"VOLUNTEER_BROKER": settings.broker, "VOLUNTEER_TOPIC_TURNS": settings.topic_turns,
           "VOLUNTEER_TOPIC_VOLUNTEERED": settings.topic_volunteered, "VOLUNTEER_TOPIC_DLQ": settings.topic_dlq,
           "VOLUNTEER_TOPIC_PARTITIONS": "4"}
    fed = volunteer("feed", "--session", "s1", "--channel", "cli", env=env,
                    stdin=b"user: Did Alice Example reply?\n\nassistant: Not yet.\r\nno prefix line\n")
    assert fed.returncode == 0, fed.stderr.decode()
    assert "numbered by the worker after the session's last turn" in fed.stderr.decode()
    # A second feed of the same session without --first-turn continues it: its turn is unnumbered too,
    # so the worker numbers it after the session's last turn instead of dropping a repeated number 1.
    again = volunteer("feed", "--session", "s1", env=env, stdin=b"user: and Kiteline?\n")
    assert again.returncode == 0, again.stderr.decode()
    explicit = volunteer("feed", "--session", "s1", "--first-turn", "9", env=env, stdin=b"user: and Acme?\n")
    assert explicit.returncode == 0 and "continue with --first-turn 10" in explicit.stderr.decode()
    records = run(read_all(settings, settings.topic_turns, expect=5))
    turns = [decode_turn(r.value, r.key) for r in records]
    assert [(t.turn, t.role, t.text, t.channel) for t in turns if t is not None] == [
        (None, "user", "Did Alice Example reply?", "cli"), (None, "assistant", "Not yet.", "cli"),
        (None, "user", "no prefix line", "cli"), (None, "user", "and Kiteline?", None),
        (9, "user", "and Acme?", None)]

    missing = volunteer("feed", env=env, stdin=b"user: hi\n")
    assert missing.returncode == 2 and b"--session" in missing.stderr

    events = [Volunteered(f"e{i}", sid, i, VolunteeredPage(f"people/p{i}", "default", f"P {i}", 0.85, "title",
                                                           f'exact title match "P {i}"', ""),
                          "stream", "2026-01-01T00:00:00.000Z")
              for i, sid in enumerate(["a", "b", "a"], start=1)]

    async def publish() -> None:
        producer = make_producer(settings)
        await producer.start()
        try:
            for event in events:
                await producer.send_and_wait(settings.topic_volunteered, event.to_json(),
                                             key=event.session_id.encode())
        finally:
            await producer.stop()

    run(publish())
    as_json = volunteer("watch", "--from-beginning", "--json", "--max", "3", env=env, timeout=60)
    assert as_json.returncode == 0, as_json.stderr.decode()
    printed = [orjson.loads(line) for line in as_json.stdout.splitlines()]
    assert sorted(p["event_id"] for p in printed) == ["e1", "e2", "e3"]
    human = volunteer("watch", "--from-beginning", "--session", "a", "--max", "2", env=env, timeout=60)
    assert human.returncode == 0, human.stderr.decode()
    assert sorted(human.stdout.decode().splitlines()) == [
        '[a turn 1] P 1 → people/p1 (0.85, title) — exact title match "P 1"',
        '[a turn 3] P 3 → people/p3 (0.85, title) — exact title match "P 3"']


def test_worker_reports_setup_problems_in_one_line(module_broker_url: str, database_url: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    env: dict[str, Any] = {"VOLUNTEER_BROKER": module_broker_url}
    unreachable = volunteer("worker", "--without-web", "--database-url",
                            f"postgresql://postgres@127.0.0.1:{dead_port}/postgres", env=env)
    assert unreachable.returncode == 1
    assert unreachable.stderr.decode().startswith("Error: cannot reach the database at")
    unmigrated = volunteer("worker", "--without-web", "--database-url", database_url, env=env)
    assert unmigrated.returncode == 1
    assert "run: volunteer migrate" in unmigrated.stderr.decode()
    assert len(unmigrated.stderr.decode().strip().splitlines()) == 1


