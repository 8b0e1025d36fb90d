"""The hook endpoint's fast lane (agents/fastlane.py) with a real worker, broker and database: a
prompt committed by the request that published it is decided once (the window agent skips its
records), its printed pages are stored once and stay deduped, and a worker killed right after the
lane committed leaves the worker that takes over with the same state: it skips the records
instead of deciding them again."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.settings import Settings
from tests.integration.hook.conftest import HookRunner, Worker, printed, wait_rows
from tests.services.broker import new_names, settings_for

pytestmark = pytest.mark.integration

ALICE, KITELINE = "people/alice-example", "companies/kiteline"
WARM = "Good morning, nothing much to report yet."  # names no page: nothing printed, nothing delivered
PROMPT = "Did Alice Example reply about Kiteline?"
AGAIN = "Kiteline and Alice Example, once more?"


PAUSE = {"VOLUNTEER_FETCH_PAUSE_MS": "1000"}
"""After a fetch that found records the agent waits a second before fetching again, so the next
prompt's records are certainly still unfetched when its request has published them: the lane
takes them (with the usual 5 ms the agent sometimes fetches them first, and then answers itself)."""


def wait_health(worker: Worker, ready: Callable[[dict[str, int]], bool], timeout: float = 30) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        health = worker.health()
        if ready(health):
            return health
        assert time.monotonic() < deadline, health
        time.sleep(0.05)


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return PAUSE


def test_a_lane_committed_prompt_is_decided_once_and_stays_deduped(worker: Worker, hook: HookRunner,
                                                                   hook_settings: Settings) -> None:
    assert printed(hook("lane-1", WARM).stdout) == []  # the window agent: the lane knows the partition after it
    before = worker.health()
    result = hook("lane-1", PROMPT)
    assert printed(result.stdout) == [ALICE, KITELINE]
    assert worker.health()["fast_lane"] == before["fast_lane"] + 1, "the prompt did not take the fast lane"
    # decided once, by the lane; the agent skipped the same record instead of deciding it again
    after = wait_health(worker, lambda h: h["skipped"] > before["skipped"])
    assert after["turns"] == before["turns"] + 1

    again = hook("lane-1", AGAIN)  # its pages were printed and reported: never again in this session
    assert printed(again.stdout) == []
    rows = wait_rows(hook_settings.database_url, "lane-1", 2)
    assert [(turn, slug) for turn, slug, *_ in rows] == [(2, KITELINE), (2, ALICE)]  # ORDER BY turn, slug
    assert hook.heartbeat()["last_reason"] in ("", None)  # no renumbering, no duplicate


def test_a_worker_killed_after_the_lane_committed(hook_settings: Settings, module_broker_url: str,
                                                 tmp_path: Path) -> None:
    # Its own topics and group: the module's worker (still running for this module) must not join
    # it, or the session's partition may be that worker's and the fast lane never taken here.
    own = settings_for(module_broker_url, new_names(), database_url=hook_settings.database_url, topic_partitions=4)
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    first = Worker(own, tmp_path / "w1.log", tmp_path / "d1", env_extra=PAUSE).start()
    second: Worker | None = None
    try:
        first.wait_ready()
        hook = HookRunner(first.url, home, tmp_path / "state", secrets_dir=first.state_dir)
        assert printed(hook("lane-kill", WARM).stdout) == []
        assert hook.heartbeat()["last_reason"] in ("", None)  # answered, not an empty answer at the deadline
        before = first.health()
        assert printed(hook("lane-kill", PROMPT).stdout) == [ALICE, KITELINE]
        assert first.health()["fast_lane"] == before["fast_lane"] + 1, "the prompt did not take the fast lane"
        assert first.proc is not None
        first.proc.send_signal(signal.SIGKILL)  # the agent may not even have fetched the lane's records
        first.proc.wait(30)

        second = Worker(own, tmp_path / "w2.log", tmp_path / "d2").start()
        second.wait_ready()
        hook.url = second.url
        assert printed(hook("lane-kill", AGAIN).stdout) == []  # the lane's state and the delivery survived
        # only the new prompt was decided: the records the lane committed were skipped if redelivered
        health = wait_health(second, lambda h: h["turns"] >= 1 and h["waiting"] == 0)
        time.sleep(1.0)  # a record decided again would show up by now
        assert second.health()["turns"] == 1, health
        rows = wait_rows(own.database_url, "lane-kill", 2)
        assert [(turn, slug) for turn, slug, *_ in rows] == [(2, KITELINE), (2, ALICE)]  # ORDER BY turn, slug
        assert hook.heartbeat()["last_reason"] in ("", None)
    finally:
        for worker in (second, first):
            if worker is not None:
                worker.stop()
