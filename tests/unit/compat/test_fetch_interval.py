"""The fetch-interval patch: after a Fetch that brought records, the waiting ``getmany`` is woken at
once and the node's next Fetch is held until the interval after the first was sent; a Fetch that
brought nothing is not held; it is attached only when the app asked for it; a changed aiokafka is
refused."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from aiokafka.consumer.fetcher import Fetcher

from pipeline.compat import fetch_interval
from pipeline.internals import CompatError

LONG_MS = 60_000
"""An interval no test waits out: a held Fetch shows as a coroutine still running."""


def test_the_hold_is_what_is_left_of_the_interval_after_a_fetch_with_records() -> None:
    assert fetch_interval.hold_s(10.0, 10.02, 0.1, True) == pytest.approx(0.08)
    assert fetch_interval.hold_s(10.0, 10.25, 0.1, True) == 0.0  # answered after the interval: no hold
    assert fetch_interval.hold_s(10.0, 10.02, 0.1, False) == 0.0  # nothing fetched: the broker already waited


class FakeFetcher:
    """The parts of aiokafka's Fetcher the patch uses; each Fetch returns the next answer."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self._fetch_waiters: set[asyncio.Future[None]] = set()

    def _notify(self, future: asyncio.Future[None] | None) -> None:
        if future is not None and not future.done():
            future.set_result(None)

    async def _proc_fetch_request(self, assignment: Any, node_id: Any, request: Any) -> bool:
        return self.answers.pop(0)


def test_a_fetch_with_records_wakes_the_reader_then_holds_the_next_fetch() -> None:
    async def scenario() -> tuple[bool, Any]:
        fetcher = FakeFetcher([True])
        assert fetch_interval.attach(fetcher, LONG_MS)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fetcher._fetch_waiters.add(waiter)
        fetch = asyncio.ensure_future(fetcher._proc_fetch_request(None, 0, None))
        await asyncio.wait_for(waiter, 5)  # the reader has its records while the fetch is held
        held = not fetch.done()
        fetch.cancel()  # an unassignment or the consumer's close cancels the fetch task, hold included
        return held, await fetch  # ...and awaits it unguarded: it ends as aiokafka's cancelled fetch does

    assert asyncio.run(scenario()) == (True, False)


def test_a_fetch_without_records_is_not_held() -> None:
    async def scenario() -> list[bool]:
        fetcher = FakeFetcher([False, False])
        assert fetch_interval.attach(fetcher, LONG_MS)
        return [await asyncio.wait_for(fetcher._proc_fetch_request(None, 0, None), 5) for _ in range(2)]

    assert asyncio.run(scenario()) == [False, False]  # answers pass through, neither waited out the interval


def test_no_interval_changes_nothing() -> None:
    fetcher = FakeFetcher([])
    proc = fetcher._proc_fetch_request
    assert not fetch_interval.attach(fetcher, 0)
    assert fetcher._proc_fetch_request == proc


def test_only_an_app_that_asked_gets_it() -> None:
    class Client:
        def __init__(self) -> None:
            self._fetcher = FakeFetcher([])

    app = faust.App("fetch-interval-unit", broker="tansu://127.0.0.1:1")
    client = Client()
    proc = client._fetcher._proc_fetch_request
    assert not fetch_interval.start(client, app)
    assert client._fetcher._proc_fetch_request == proc
    fetch_interval.install(app, 50)
    assert fetch_interval.start(client, app)
    assert client._fetcher._proc_fetch_request != proc
    with pytest.raises(CompatError, match=r"compat patch fetch-interval: .*has no _fetcher"):
        fetch_interval.start(object(), app)


def test_a_changed_aiokafka_fetch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def changed(self: Any, assignment: Any, node_id: Any) -> bool:  # a later aiokafka
        return False

    monkeypatch.setattr(Fetcher, "_proc_fetch_request", changed)
    app = faust.App("fetch-interval-refused", broker="tansu://127.0.0.1:1")
    with pytest.raises(CompatError, match=r"compat patch fetch-interval: .*_proc_fetch_request is not the coroutine"):
        fetch_interval.install(app, 50)
    assert not fetch_interval.start(object(), app)  # not asked for: nothing attached later
    with pytest.raises(CompatError, match=r"has no _fetch_waiters"):
        fetch_interval.attach(object(), 50)
