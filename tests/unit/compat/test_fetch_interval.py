"""The fetch-interval patch: after a Fetch that brought records, the waiting ``getmany`` is woken at
once and the node's next Fetch is held until the interval after the first was sent; a Fetch that
brought nothing is not held; the hold is chosen from the records per second the Fetches found (none
below ``from_rate``, all of it from twice that); a hold whose records were not taken waits for the
take and stops the holds until the next window; it is attached only when the app asked for it; a
changed aiokafka is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.structs import TopicPartition

from pipeline import compat
from pipeline.compat import fetch_interval
from pipeline.internals import CompatError
from pipeline.settings import load_settings

LONG_MS = 60_000
"""An interval no test waits out: a held Fetch shows as a coroutine still running."""


def test_the_hold_is_what_is_left_of_the_interval_after_a_fetch_with_records() -> None:
    assert fetch_interval.hold_s(10.0, 10.02, 0.1, True) == pytest.approx(0.08)
    assert fetch_interval.hold_s(10.0, 10.25, 0.1, True) == 0.0  # answered after the interval: no hold
    assert fetch_interval.hold_s(10.0, 10.02, 0.1, False) == 0.0  # nothing fetched: the broker already waited


def test_no_hold_below_the_rate_then_a_hold_growing_with_it() -> None:
    load = fetch_interval.LoadHold(0.1, 1500)
    assert load.hold_for(500) == 0.0  # issue 5's latency rate: never held
    assert load.hold_for(1500) == 0.0
    assert load.hold_for(2250) == pytest.approx(0.05)
    assert load.hold_for(3000) == pytest.approx(0.1)
    assert load.hold_for(9000) == pytest.approx(0.1)  # never more than the interval
    assert fetch_interval.LoadHold(0.1, 0).hold_for(1) == pytest.approx(0.1)  # from_rate 0: the fixed interval


def test_the_rate_is_the_records_found_over_a_window() -> None:
    load = fetch_interval.LoadHold(0.1, 1500, window_s=0.5)
    assert load.hold_for_s == 0.0  # nothing observed yet: no hold
    assert load.observe(10.0, 10.01, 300) == 0.0  # the window is not full yet
    assert load.observe(10.1, 10.11, 400) == 0.0
    assert load.observe(10.5, 10.51, 900) == pytest.approx(0.1)  # 1,600 records over 0.51 s: ~3,137/s
    assert load.rate == pytest.approx(1600 / 0.51)
    assert load.observe(10.6, 10.61, 0) == pytest.approx(0.1)  # the hold stays until the window is full
    assert load.observe(11.0, 11.02, 0) == 0.0  # an idle window ends the hold
    assert load.rate == 0.0


def test_a_busy_worker_stops_the_holds_until_the_next_window() -> None:
    load = fetch_interval.LoadHold(0.1, 1500, window_s=0.5)
    assert load.observe(10.0, 10.6, 3000) == pytest.approx(0.1)
    load.busy()
    assert load.observe(10.7, 10.72, 300) == 0.0
    assert load.observe(11.2, 11.3, 2000) == pytest.approx(0.1)  # the next window decides again


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="fetch interval"):
        fetch_interval.LoadHold(0, 1500)
    with pytest.raises(ValueError, match="fetch interval"):
        fetch_interval.LoadHold(0.1, -1)


class FakeState:
    def __init__(self, highwater: int | None, paused: bool = False) -> None:
        self.highwater = highwater
        self.paused = paused


class FakeAssignment:
    def __init__(self, states: dict[TopicPartition, FakeState]) -> None:
        self.states = states

    def state_value(self, tp: TopicPartition) -> FakeState | None:
        return self.states.get(tp)


class FakeRequest:
    def __init__(self, topics: list[tuple[str, list[tuple[int, int, int]]]]) -> None:
        self.topics = topics


def test_the_records_waiting_are_each_partition_s_high_watermark_past_the_fetch_offset() -> None:
    request = FakeRequest([("turns", [(0, 100, 1 << 20), (1, 50, 1 << 20)]), ("volunteered", [(0, 7, 1 << 20)])])
    asked = fetch_interval.fetched_from(request)
    assert asked == [(TopicPartition("turns", 0), 100), (TopicPartition("turns", 1), 50),
                     (TopicPartition("volunteered", 0), 7)]
    assignment = FakeAssignment({TopicPartition("turns", 0): FakeState(130), TopicPartition("turns", 1): FakeState(50),
                                 TopicPartition("volunteered", 0): FakeState(None)})
    assert fetch_interval.waiting_records(assignment, asked) == 30  # nothing new in turns-1, no answer for volunteered


def test_records_still_buffered_are_untaken_unless_their_partition_is_paused() -> None:
    tp0, tp1 = TopicPartition("turns", 0), TopicPartition("turns", 1)
    asked = [(tp0, 0), (tp1, 0)]
    fetcher = FakeFetcher([])
    assignment = FakeAssignment({tp0: FakeState(10), tp1: FakeState(10, paused=True)})
    assert not fetch_interval.untaken(fetcher, assignment, asked)
    fetcher._records[tp1] = object()
    assert not fetch_interval.untaken(fetcher, assignment, asked)  # paused: may wait for a whole recovery
    fetcher._records[tp0] = object()
    assert fetch_interval.untaken(fetcher, assignment, asked)


class FakeFetcher:
    """The parts of aiokafka's Fetcher the patch uses; each Fetch returns the next answer."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self._fetch_waiters: set[asyncio.Future[None]] = set()
        self._records: dict[TopicPartition, Any] = {}

    def _notify(self, future: asyncio.Future[None] | None) -> None:
        if future is not None and not future.done():
            future.set_result(None)

    async def _proc_fetch_request(self, assignment: Any, node_id: Any, request: Any) -> bool:
        return self.answers.pop(0)


NO_PARTITIONS = FakeRequest([])
NO_ASSIGNMENT = FakeAssignment({})


def test_a_fetch_with_records_wakes_the_reader_then_holds_the_next_fetch() -> None:
    async def scenario() -> tuple[bool, Any]:
        fetcher = FakeFetcher([True])
        assert fetch_interval.attach(fetcher, LONG_MS)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fetcher._fetch_waiters.add(waiter)
        fetch = asyncio.ensure_future(fetcher._proc_fetch_request(NO_ASSIGNMENT, 0, NO_PARTITIONS))
        await asyncio.wait_for(waiter, 5)  # the reader has its records while the fetch is held
        held = not fetch.done()
        fetch.cancel()  # an unassignment or the consumer's close cancels the fetch task, hold included
        return held, await fetch  # ...and awaits it unguarded: it ends as aiokafka's cancelled fetch does

    assert asyncio.run(scenario()) == (True, False)


def test_a_fetch_without_records_is_not_held() -> None:
    async def scenario() -> list[bool]:
        fetcher = FakeFetcher([False, False])
        assert fetch_interval.attach(fetcher, LONG_MS)
        return [await asyncio.wait_for(fetcher._proc_fetch_request(NO_ASSIGNMENT, 0, NO_PARTITIONS), 5)
                for _ in range(2)]

    assert asyncio.run(scenario()) == [False, False]  # answers pass through, neither waited out the interval


def test_below_the_rate_a_fetch_with_records_is_not_held() -> None:
    async def scenario() -> tuple[list[bool], float]:
        fetcher = FakeFetcher([True, True])
        load = fetch_interval.attach(fetcher, LONG_MS, from_rate=1e12, window_s=0)
        assert load is not None
        tp = TopicPartition("turns", 0)
        request = FakeRequest([("turns", [(0, 0, 1 << 20)])])
        got = [await asyncio.wait_for(fetcher._proc_fetch_request(FakeAssignment({tp: FakeState(5)}), 0, request), 5)
               for _ in range(2)]
        return got, load.rate

    got, rate = asyncio.run(scenario())
    assert got == [True, True]  # neither held for the minute
    assert rate > 0  # the records were counted, the rate was just below from_rate


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
    fetch_interval.install(app, 50, 1500)
    load = fetch_interval.start(client, app)
    assert load is not None
    assert (load.interval_s, load.from_rate) == (0.05, 1500)
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


def test_the_interval_is_asked_for_on_the_embedded_broker_only_and_not_when_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """On by default at 100 ms from 1,500 records/s (docs/performance.md, session 11); 0 turns it off; a
    setting replaces the default; and a real Kafka broker, which answers a Fetch from an index, is left alone."""
    monkeypatch.delenv("VOLUNTEER_FETCH_INTERVAL_MS", raising=False)
    monkeypatch.delenv("VOLUNTEER_FETCH_INTERVAL_FROM_RATE", raising=False)
    default = faust.App("fetch-interval-default", broker="tansu://127.0.0.1:1")
    compat.install(default, load_settings(broker="tansu://127.0.0.1:1"))
    assert getattr(default, fetch_interval._APP_ATTR) == (100.0, 1500.0)

    monkeypatch.setenv("VOLUNTEER_FETCH_INTERVAL_MS", "0")
    off = faust.App("fetch-interval-off", broker="tansu://127.0.0.1:1")
    compat.install(off, load_settings(broker="tansu://127.0.0.1:1"))
    assert not hasattr(off, fetch_interval._APP_ATTR)

    monkeypatch.setenv("VOLUNTEER_FETCH_INTERVAL_MS", "50")
    monkeypatch.setenv("VOLUNTEER_FETCH_INTERVAL_FROM_RATE", "0")
    embedded = faust.App("fetch-interval-set", broker="tansu://127.0.0.1:1")
    compat.install(embedded, load_settings(broker="tansu://127.0.0.1:1"))
    assert getattr(embedded, fetch_interval._APP_ATTR) == (50.0, 0.0)

    real = faust.App("fetch-interval-kafka", broker="kafka://127.0.0.1:1")
    compat.install(real, load_settings(broker="kafka://127.0.0.1:1"))
    assert not hasattr(real, fetch_interval._APP_ATTR)
