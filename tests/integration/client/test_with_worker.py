"""The client against a real worker: what TurnPublisher sends, the worker decides on, and
VolunteeredConsumer reads back equals what the decision core decides for the same turns.

This is the client's contract with the pipeline (record keys, turn numbering, topic names,
Volunteered JSON), checked with a real ``volunteer worker`` process, a real broker and a migrated
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from pipeline.client import TurnPublisher, Volunteered, VolunteeredConsumer
from pipeline.settings import Settings
from tests.integration.client.helpers import ROOT, SAMPLE_BRAIN, SAMPLE_TRANSCRIPT, replay_pages, run
from tests.services.statekey import STATE_KEY_ENV

pytestmark = pytest.mark.integration

WORKER_STOP_S = 30.0


@pytest.fixture
def worker(client_settings: Settings, migrated_database_url: str, tmp_path: Path) -> Iterator[Path]:
    """``volunteer worker`` on the sample brain, with this test's topics and group; yields its log."""
    log_path = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    env.update({
        "VOLUNTEER_BROKER": client_settings.broker,
        "VOLUNTEER_DATABASE_URL": migrated_database_url,
        "VOLUNTEER_TOPIC_TURNS": client_settings.topic_turns,
        "VOLUNTEER_TOPIC_VOLUNTEERED": client_settings.topic_volunteered,
        "VOLUNTEER_TOPIC_DLQ": client_settings.topic_dlq,
        "VOLUNTEER_APP_ID": client_settings.app_id,
        "VOLUNTEER_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": str(ROOT),
        **STATE_KEY_ENV,
    })
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "worker", "--brain", str(SAMPLE_BRAIN), "--without-web"],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield log_path
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(WORKER_STOP_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def worker_log(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-40:])


def test_published_turns_come_back_as_the_cores_pages(client_settings: Settings, worker: Path) -> None:
    lines = SAMPLE_TRANSCRIPT.read_bytes().splitlines()
    transcript = [orjson.loads(line) for line in lines]
    expected = replay_pages(lines)
    assert len({p.session_id for p in expected}) >= 2, "the sample should volunteer in several sessions"
    session = expected[0].session_id

    async def scenario() -> tuple[list[Volunteered], list[Volunteered]]:
        async with VolunteeredConsumer(client_settings, start="earliest") as everything:
            async with TurnPublisher(client_settings) as publisher:
                for obj in transcript:  # numbered by the client, not by the file
                    record = await publisher.publish(obj["session_id"], obj["role"], obj["text"], ts=obj["ts"],
                                                     channel=obj["channel"])
                    assert record is not None and record.turn == obj["turn"]
            got: list[Volunteered] = []
            try:
                async with asyncio.timeout(90):  # stops a hang only
                    async for page in everything:
                        got.append(page)
                        if len(got) == len(expected):
                            break
            except TimeoutError:
                pytest.fail(f"{len(got)} of {len(expected)} pages arrived; worker log:\n{worker_log(worker)}")
        async with VolunteeredConsumer(client_settings, session_id=session, start="earliest") as one:
            only = await one.drain()
        return got, only

    got, only = run(scenario(), timeout=150)
    key = lambda p: (p.session_id, p.turn, p.slug)  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)  # every field, event_id included
    for s in {p.session_id for p in got}:  # per session, in turn order
        assert [p.turn for p in got if p.session_id == s] == sorted(p.turn for p in got if p.session_id == s)
    assert only == [p for p in got if p.session_id == session]
