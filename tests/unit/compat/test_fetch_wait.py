"""The fetch-wait patch: the wait doubles after each empty fetch up to its maximum and is back at the
base after one that brought records; it is attached to a fetcher only when the app asked for it and
the maximum is above the fetcher's own wait; a changed aiokafka is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from aiokafka.consumer.fetcher import Fetcher

from pipeline.compat import fetch_wait
from pipeline.internals import CompatError


def test_the_wait_doubles_while_fetches_are_empty_and_resets_on_records() -> None:
    wait = fetch_wait.GrowingWait(20, 160)
    assert [wait.after(False) for _ in range(5)] == [40, 80, 160, 160, 160]
    assert wait.after(True) == 20
    assert wait.after(False) == 40
    wait = fetch_wait.GrowingWait(20, 100)  # a maximum that is no doubling of the base
    assert [wait.after(False) for _ in range(4)] == [40, 80, 100, 100]


def test_a_wait_range_that_cannot_be_is_refused() -> None:
    with pytest.raises(ValueError, match="need 0 < base"):
        fetch_wait.GrowingWait(20, 10)
    with pytest.raises(ValueError, match="need 0 < base"):
        fetch_wait.GrowingWait(0, 10)


class FakeFetcher:
    """The two parts of aiokafka's Fetcher the patch uses; each Fetch returns the next answer."""

    def __init__(self, answers: list[bool]) -> None:
        self._fetch_max_wait_ms = 20
        self.answers = answers
        self.sent: list[int] = []

    async def _proc_fetch_request(self, assignment: Any, node_id: Any, request: Any) -> bool:
        self.sent.append(self._fetch_max_wait_ms)
        return self.answers.pop(0)


def test_an_attached_fetcher_sends_each_fetch_with_the_grown_wait() -> None:
    fetcher = FakeFetcher([False, False, False, True, False])

    async def fetch_all() -> list[Any]:
        return [await fetcher._proc_fetch_request(None, 0, None) for _ in range(5)]

    assert fetch_wait.attach(fetcher, 60) is not None
    assert asyncio.run(fetch_all()) == [False, False, False, True, False]  # its answers pass through
    assert fetcher.sent == [20, 40, 60, 60, 20]
    assert fetcher._fetch_max_wait_ms == 40


def test_a_maximum_not_above_the_base_changes_nothing() -> None:
    fetcher = FakeFetcher([])
    proc = fetcher._proc_fetch_request
    assert fetch_wait.attach(fetcher, 20) is None
    assert fetcher._proc_fetch_request == proc


def test_only_an_app_that_asked_gets_it() -> None:
    class Client:
        def __init__(self) -> None:
            self._fetcher = FakeFetcher([])

    app = faust.App("fetch-wait-unit", broker="tansu://127.0.0.1:1")
    assert fetch_wait.start(Client(), app) is None
    fetch_wait.install(app, 160)
    wait = fetch_wait.start(Client(), app)
    assert wait is not None and (wait.base_ms, wait.max_ms) == (20, 160)
    with pytest.raises(CompatError, match=r"compat patch fetch-wait: .*has no _fetcher"):
        fetch_wait.start(object(), app)


def test_a_changed_aiokafka_fetch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def changed(self: Any, assignment: Any, node_id: Any) -> bool:  # a later aiokafka
        return False

    monkeypatch.setattr(Fetcher, "_proc_fetch_request", changed)
    app = faust.App("fetch-wait-refused", broker="tansu://127.0.0.1:1")
    with pytest.raises(CompatError, match=r"compat patch fetch-wait: .*_proc_fetch_request is not the coroutine"):
        fetch_wait.install(app, 160)
    assert fetch_wait.start(object(), app) is None  # not asked for: nothing attached later
    with pytest.raises(CompatError, match=r"has no _fetch_max_wait_ms"):
        fetch_wait.attach(object(), 160)
