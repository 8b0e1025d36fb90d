"""At most one Fetch per interval while fetches bring many records (embedded broker only).

The embedded broker's cost of a Fetch that returns records grows with the length of the partitions
it reads, not with the records it returns: Tansu 0.6.0's memory engine keeps one object per
produced batch and, for every partition a Fetch finds new records in, lists all of that
partition's batch objects to find the ones at or after the fetch offset (about 2.5 us of broker CPU
per stored batch, per Fetch; docs/performance.md, goal 2). Nothing bounds that list on this broker:
its DeleteRecords is not implemented (the request drops the connection) and it applies no
retention. aiokafka sends the next Fetch as soon as the previous one is answered and its records
are taken, so a worker that keeps up fetched ~21 times a second at 3,000 turns/s, each Fetch reading
6-10 partitions with a few dozen new records each, and the broker spent as much CPU on those reads
as the worker on the turns.

:func:`attach` wraps one aiokafka ``Fetcher``'s ``_proc_fetch_request`` (aiokafka 0.14.0: one
coroutine per Fetch sent; the fetcher sends no other Fetch to that broker while it runs). After a
Fetch that brought records, it first wakes whoever waits for records (the worker's ``getmany``: the
records reach the agents at once, as before), then holds the coroutine until the chosen hold after
that Fetch was sent. The next Fetch then collects everything that arrived meanwhile in one read per
partition. A Fetch that found nothing is not held (the broker already waited), so an idle worker and
the first record after a silence are unchanged; a worker behind (a backlog, a table recovery)
fetches up to its byte limits per Fetch, so the hold costs it little.

The hold is chosen from the load (:class:`LoadHold`): every Fetch's answer tells how many records
were waiting in the partitions it named (each partition's high watermark minus the fetch offset),
and over windows of about half a second that gives the records per second the node's fetches find.
Below ``from_rate`` there is no hold at all, so a lightly loaded worker fetches as before (issue 5's
30 ms median at 500 turns/s); from there the hold grows in proportion to the rate and reaches
``interval_ms`` at twice it. A ``from_rate`` of 0 holds for the whole interval after every Fetch with
records (session 8's fixed interval). When a hold ends and the worker has not yet taken the records
that Fetch brought, the worker is busy, not the broker's reads: the Fetch then waits until they are
taken (at most ``TAKE_MAX_S``), because aiokafka would leave those partitions out of the next Fetch,
and a Fetch of only the quiet partitions finds nothing and waits out its max wait at the broker
(quirk 4) while the busy ones wait behind it; and the fetches after it are not held until the next
window. On by default (``fetch_interval_ms`` 100; 0 turns it off). Session 10 measured 100 ms from 1,500 records/s
on 2 cores, quiet and with CPU hogs up to load 5: every A/B run at 3,000 turns/s kept up with it, at
129-192 instead of 244-418 us of pipeline CPU per turn, and 500 turns/s, bursts and 8,000-14,000
turns/s were unchanged or cheaper; the long crash runs passed with it. It was on by default for one
fresh-clone CI run, where the multi-host fault test (tests/reliability/test_multihost.py) never saw
the group back to normal after either fault (120 s each), and it went back off. That test recovers in
0-5 s at 60 turns/s, a rate at which nothing is held in steady state: a hold there needs a Fetch that
finds a backlog (after a rebalance, in a table recovery), and a backlog is fetched whole by one Fetch
on this broker (up to the byte limits), so a hold delays it by at most the interval once. Session 11
reran that test with it on, and the fresh-clone CI, and turned it on (docs/performance.md, "Session 11").

What it costs: under load every hop of a record through the broker (``turns`` to the window agent,
``volunteered`` to the sink) can wait up to the hold more for the Fetch that brings it. A hook's
turns do not take that hop when the endpoint's fast lane commits them (docs/hooks.md, "Speed").

It is switched on by the ``tansu://`` consumer thread (:mod:`pipeline.compat.tansu_transport`) once
its aiokafka consumer has started, when :func:`install` asked for it on the app (settings
``fetch_interval_ms``, 0: off, and ``fetch_interval_from_rate``). A real Kafka broker answers a
Fetch from an index, so ``kafka://`` workers are left alone. A missing part is a
:class:`~pipeline.internals.CompatError`.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.subscription_state import Assignment, TopicPartitionState
from aiokafka.structs import TopicPartition

from pipeline.internals import CompatError, installed_versions, require

PATCH = "fetch-interval"

_APP_ATTR = "_volunteer_fetch_interval"

SIGNATURE = ["self", "assignment", "node_id", "request"]
"""``Fetcher._proc_fetch_request``'s parameters in the pinned aiokafka."""

FETCHER_PARTS = ("_fetch_waiters", "_records")
"""The fetcher's set of futures that ``getmany`` waits on (woken with ``_notify``) and its buffer of
fetched records by partition (an entry leaves when the consumer has taken all its records)."""

TAKE_POLL_S = 0.005
"""How often a held Fetch looks whether the records it buffered have been taken, once its hold is over."""

TAKE_MAX_S = 1.0
"""The longest a held Fetch waits, after its hold, for its records to be taken."""

WINDOW_S = 0.5
"""How long the records of consecutive Fetches are summed before the rate (and the hold) is updated:
long enough to span several Fetches at any rate worth holding for, short enough that a load that
drops stops the hold within about half a second."""


def hold_s(sent: float, now: float, hold_for_s: float, had_records: bool) -> float:
    """How long to hold the node's next Fetch, sent at ``sent``, answered by ``now`` (seconds)."""
    if not had_records:
        return 0.0
    return max(0.0, sent + hold_for_s - now)


def fetched_from(request: Any) -> list[tuple[TopicPartition, int]]:
    """The partitions a Fetch request names, each with the offset it asks from."""
    return [(TopicPartition(topic, partition), offset)
            for topic, partitions in request.topics for partition, offset, *_ in partitions]


def waiting_records(assignment: Any, asked: list[tuple[TopicPartition, int]]) -> int:
    """The records that were waiting in the partitions a just-answered Fetch named: each one's high
    watermark from the answer (aiokafka's partition state) minus the offset the Fetch asked from."""
    total = 0
    for tp, offset in asked:
        highwater = assignment.state_value(tp).highwater
        if highwater is not None and highwater > offset:
            total += highwater - offset
    return total


def untaken(fetcher: Any, assignment: Any, asked: list[tuple[TopicPartition, int]]) -> bool:
    """Whether records a Fetch buffered for a partition that is not paused are still waiting to be
    taken (a paused partition's records wait for its resume, which may be long: a table recovery)."""
    for tp, _ in asked:
        if tp in fetcher._records:
            state = assignment.state_value(tp)
            if state is not None and not state.paused:
                return True
    return False


class LoadHold:
    """The hold after a Fetch with records, chosen from the records per second the Fetches find.

    ``observe`` is told when each Fetch was sent and answered and how many records were waiting;
    once a window of at least ``window_s`` is full it sets ``rate`` (records/s over the window) and
    ``hold_for_s``: 0 below ``from_rate``, growing linearly to ``interval_s`` at twice ``from_rate``
    and staying there above. With ``from_rate`` 0 the hold is always the whole interval.
    """

    __slots__ = ("_records", "_since", "found", "from_rate", "hold_for_s", "interval_s", "rate", "window_s")

    def __init__(self, interval_s: float, from_rate: float, window_s: float = WINDOW_S) -> None:
        if interval_s <= 0 or from_rate < 0 or window_s < 0:
            raise ValueError(f"fetch interval: need interval > 0 ({interval_s} s), from_rate >= 0 "
                             f"({from_rate}/s), window >= 0 ({window_s} s)")
        self.interval_s = interval_s
        self.from_rate = from_rate
        self.window_s = window_s
        self.rate = 0.0
        self.hold_for_s = interval_s if from_rate == 0 else 0.0
        self._since: float | None = None
        self._records = 0
        self.found = 0
        """All the records the Fetches found waiting so far."""

    def hold_for(self, rate: float) -> float:
        """The hold (seconds) at ``rate`` records/s."""
        if self.from_rate == 0:
            return self.interval_s
        share = (rate - self.from_rate) / self.from_rate
        return self.interval_s * min(1.0, max(0.0, share))

    def busy(self) -> None:
        """The worker had not taken a held Fetch's records when its hold ended: no holds until the
        window after this one."""
        self.hold_for_s = 0.0

    def observe(self, sent: float, now: float, records: int) -> float:
        """Count one Fetch (sent at ``sent``, answered at ``now``, ``records`` waiting); returns the
        hold to use after it."""
        if self._since is None:
            self._since = sent
        self._records += records
        self.found += records
        elapsed = now - self._since
        if elapsed > 0 and elapsed >= self.window_s:
            self.rate = self._records / elapsed
            self.hold_for_s = self.hold_for(self.rate)
            self._since = now
            self._records = 0
        return self.hold_for_s


def attach(fetcher: Any, interval_ms: float, from_rate: float = 0.0, window_s: float = WINDOW_S) -> LoadHold | None:
    """Give one started aiokafka ``fetcher`` the interval, held from ``from_rate`` records/s (0: always);
    None (nothing changed) when ``interval_ms`` is 0."""
    require(PATCH, fetcher, *FETCHER_PARTS, methods=("_proc_fetch_request", "_notify"))
    if interval_ms <= 0:
        return None
    load = LoadHold(interval_ms / 1000, from_rate, window_s)
    proc = fetcher._proc_fetch_request
    notify = fetcher._notify

    async def _proc_fetch_request(assignment: Any, node_id: Any, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        got = await proc(assignment, node_id, request)
        now = loop.time()
        asked = fetched_from(request) if got else []
        hold_for = load.observe(sent, now, waiting_records(assignment, asked))
        hold = hold_s(sent, now, hold_for, bool(got))
        if hold > 0:
            for waiter in list(fetcher._fetch_waiters):  # the records are buffered: hand them over now
                notify(waiter)
            try:
                await asyncio.sleep(hold)
                if untaken(fetcher, assignment, asked):
                    # The worker has not taken what this Fetch brought within the hold: it is busy, and
                    # holding only delays it (aiokafka would also leave those partitions out of the next
                    # Fetch, and a Fetch of only the quiet ones finds nothing and waits out its max wait
                    # at the broker, quirk 4, while the busy ones wait for it). Wait for the take, then
                    # fetch without holds until the next window.
                    load.busy()
                    until = loop.time() + TAKE_MAX_S
                    while loop.time() < until and untaken(fetcher, assignment, asked):
                        await asyncio.sleep(TAKE_POLL_S)
            except asyncio.CancelledError:
                # an unassignment or the consumer's close cancels the fetch task and awaits it
                # unguarded (aiokafka's close): end as aiokafka's own cancelled fetch does
                return False
        return got

    fetcher._proc_fetch_request = _proc_fetch_request
    return load


def start(client: Any, app: Any) -> LoadHold | None:
    """Called with a started aiokafka consumer of ``app``: attach the interval to its fetcher if
    :func:`install` asked for it on ``app``."""
    asked = getattr(app, _APP_ATTR, None)
    if not asked:
        return None
    require(PATCH, client, "_fetcher")
    interval_ms, from_rate = asked
    return attach(client._fetcher, interval_ms, from_rate)


def install(app: Any, interval_ms: float, from_rate: float = 0.0) -> None:
    """Ask for the interval on ``app``'s ``tansu://`` consumer, held from ``from_rate`` records/s
    (0: after every Fetch with records); checks the aiokafka parts it uses first."""
    require(PATCH, Fetcher, methods=("_proc_fetch_request", "_notify"))
    require(PATCH, Assignment, methods=("state_value",))
    require(PATCH, TopicPartitionState, "paused")
    proc = Fetcher._proc_fetch_request
    if not inspect.iscoroutinefunction(proc) or list(inspect.signature(proc).parameters) != SIGNATURE:
        raise CompatError(f"compat patch {PATCH}: aiokafka's Fetcher._proc_fetch_request is not the coroutine "
                          f"({', '.join(SIGNATURE)}) it wraps ({installed_versions()})")
    if "highwater" not in TopicPartitionState.__init__.__code__.co_names:  # the attribute its __init__ sets
        raise CompatError(f"compat patch {PATCH}: aiokafka's TopicPartitionState keeps no highwater "
                          f"({installed_versions()})")
    setattr(app, _APP_ATTR, (float(interval_ms), float(from_rate)))
