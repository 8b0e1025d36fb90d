"""Every work-around for the embedded Tansu broker, in one place (docs/embedded-services.md).

Active only for ``tansu://`` broker URLs (:attr:`Settings.broker_is_embedded`); against real Kafka or
Redpanda none of this runs. Faust picks it up through its transport registry: :func:`install`
registers the ``tansu`` URL scheme to :class:`TansuTransport`, so a Faust app configured with
``broker="tansu://..."`` gets the fixed consumer while a ``kafka://`` app gets stock Faust. Plain
aiokafka clients (feed, watch, tests, bench) take their settings from the ``*_kwargs`` helpers.

The quirks, numbered as in the notes, and where each is handled:

1. JoinGroup is held for half the session timeout -> :data:`SESSION_TIMEOUT_S` /
   :data:`HEARTBEAT_INTERVAL_S` in :func:`faust_settings` and :func:`consumer_kwargs`. Paired with
   it (not a Tansu bug): :data:`REQUEST_TIMEOUT_S`, so a worker partitioned from the broker drops
   its stuck connections soon and is back within seconds of the heal (docs/guarantees.md).
2. The first group generation is 0, so aiokafka never sends LeaveGroup for it ->
   :func:`fix_leave_group` (wraps ``GroupCoordinator._maybe_leave_group`` per instance).
3. ListOffsets(LATEST) returns the base offset of the last batch + 1 -> :func:`high_watermarks`
   reads the Fetch response's high watermark; :class:`TansuConsumerThread` uses it for Faust's
   ``_highwaters`` (table recovery) and :func:`end_offsets` for everyone else.
4. A waiting Fetch is not ended by new records (it returns when its wait runs out; about half of
   ``fetch_max_wait_ms`` measured here, one partition or several), and Faust hard-codes 1500 ms
   -> :data:`FETCH_MAX_WAIT_MS` set on the worker consumer.
5. Idempotent / transactional producers fail -> :func:`producer_kwargs` and
   :func:`faust_settings` force at-least-once; :func:`check_app` refuses exactly-once.
6. ``list_consumer_group_offsets`` without partitions is undecodable -> :func:`committed_offsets`.
7. (gone) Faust web port collisions used to fall back to a free port here; the web port is now the
   agent edge's, for every broker (:mod:`pipeline.agents.edge`: a taken port is an error, and hooks
   find a worker's actual port in the worker registry).

The private internals touched here belong to the exact versions in :data:`PINNED`;
:func:`check_versions` fails loudly when they change, so a silent upgrade cannot bring the data
loss of quirk 3 back.
"""

from __future__ import annotations

import logging
import types
from collections import defaultdict
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

import aiokafka
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.group import LeaveGroupRequest
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.settings import EMBEDDED_BROKER_SCHEME, Settings

log = logging.getLogger(__name__)

_OFFSET_OUT_OF_RANGE = 1

PINNED: Mapping[str, str] = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0", "mode-streaming": "0.7.1"}
"""Versions whose internals this module depends on (also pinned in pyproject.toml)."""

SESSION_TIMEOUT_S = 3.0  # quirk 1: a join then takes ~1.5-2 s instead of 30 s
HEARTBEAT_INTERVAL_S = 1.0
REQUEST_TIMEOUT_S = 5.0
"""Broker request timeout of the worker's consumer and producer (Faust: 90 s and 1200 s).

A request sent into a partition sits in a TCP connection whose retransmission timer doubles while
the packets are dropped (backoff 6, 13 s, after a 15 s cut), so the connection carries traffic again
only at its next retransmission, up to that long after the heal: measured 11.6 s of the 15.2 s from
a heal to every worker ready again. With this timeout aiokafka closes a connection whose request
got no answer within 5 s and connects anew (a connect attempt is bounded by the same timeout), so
after the heal a worker talks to the broker again within about a second. It must exceed the session
timeout (Faust checks) and the JoinGroup hold (half of it). Not used for real Kafka, where a join
can be held up to the rebalance timeout (docs/deployment.md)."""
FETCH_MAX_WAIT_MS = 20  # quirk 4: each hop costs ~20 ms instead of ~1.2 s


class QuirkVersionError(RuntimeError):
    """An installed library differs from the version the Tansu work-arounds were written against."""


def check_versions() -> None:
    """Fail loudly if faust / aiokafka / mode changed: the patched internals may have moved."""
    wrong = []
    for dist, wanted in PINNED.items():
        try:
            found = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found = "not installed"
        if found != wanted:
            wrong.append(f"{dist} {found} (expected {wanted})")
    if wrong:
        raise QuirkVersionError(
            "the embedded-broker work-arounds in pipeline/embedded/tansu_quirks.py were written for "
            + ", ".join(f"{d}=={v}" for d, v in PINNED.items())
            + "; found "
            + "; ".join(wrong)
            + ". Re-check each quirk (tests/integration/stream/test_tansu_quirks.py) before changing the pins."
        )
    # The exact internals used below must still exist.
    thread_cls = faust_aiokafka.AIOKafkaConsumerThread
    for name in ("_highwaters", "_create_worker_consumer", "on_start"):
        if not callable(getattr(thread_cls, name, None)):
            raise QuirkVersionError(f"faust AIOKafkaConsumerThread.{name} is gone; the Tansu fix needs it")
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    if not callable(getattr(GroupCoordinator, "_maybe_leave_group", None)):
        raise QuirkVersionError("aiokafka GroupCoordinator._maybe_leave_group is gone; the Tansu fix needs it")


# ----------------------------------------------------------------------------- settings (1, 4, 5)


def consumer_kwargs(embedded: bool) -> dict[str, Any]:
    """Extra ``AIOKafkaConsumer`` arguments for a group consumer on the embedded broker (quirks 1, 4)."""
    if not embedded:
        return {}
    return {
        "session_timeout_ms": int(SESSION_TIMEOUT_S * 1000),
        "heartbeat_interval_ms": int(HEARTBEAT_INTERVAL_S * 1000),
        "fetch_max_wait_ms": FETCH_MAX_WAIT_MS,
    }


def producer_kwargs(embedded: bool) -> dict[str, Any]:
    """Extra ``AIOKafkaProducer`` arguments: never idempotent on Tansu (quirk 5)."""
    if not embedded:
        return {}
    return {"enable_idempotence": False}


def faust_settings(settings: Settings) -> dict[str, Any]:
    """Faust app configuration that the embedded broker needs (quirks 1 and 5)."""
    if not settings.broker_is_embedded:
        return {}
    return {
        "broker_session_timeout": SESSION_TIMEOUT_S,
        "broker_heartbeat_interval": HEARTBEAT_INTERVAL_S,
        "broker_request_timeout": REQUEST_TIMEOUT_S,
        "producer_request_timeout": REQUEST_TIMEOUT_S,
        "processing_guarantee": "at_least_once",
    }


def check_app(app: Any) -> None:
    """Refuse a Faust app that would need transactions on the embedded broker (quirk 5)."""
    urls = [str(u) for u in app.conf.broker]
    embedded = any(u.startswith(EMBEDDED_BROKER_SCHEME + "://") for u in urls)
    if embedded and str(app.conf.processing_guarantee).lower().endswith("exactly_once"):
        raise QuirkVersionError(
            "exactly-once processing needs idempotent/transactional producers, which the embedded "
            "Tansu broker does not support; use processing_guarantee=at_least_once"
        )


# ----------------------------------------------------------------------------- 2: generation-0 LeaveGroup


def fix_leave_group(consumer: aiokafka.AIOKafkaConsumer) -> None:
    """Make a started group consumer send LeaveGroup also for generation 0 (quirk 2).

    aiokafka only leaves for ``generation > 0``; Tansu numbers the first generation 0, so without
    this the next member waits a whole session timeout for the stopped one to expire.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "_tansu_leave_fixed", False):
        return
    original = coordinator._maybe_leave_group

    async def _maybe_leave_group(self: Any) -> None:
        if self.generation == 0 and self.member_id and self._group_instance_id is None:
            try:
                await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
            except KafkaError as err:
                log.warning("LeaveGroup (generation 0) failed: %s", err)
            else:
                log.debug("LeaveGroup (generation 0) sent for %s", self.group_id)
        await original()

    coordinator._maybe_leave_group = types.MethodType(_maybe_leave_group, coordinator)
    coordinator._tansu_leave_fixed = True


# ----------------------------------------------------------------------------- 3: log end offsets


async def high_watermarks(client: AIOKafkaClient, partitions: Iterable[TopicPartition],
                          hint: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
    """The true log end offset of each partition, from a Fetch response's high watermark (quirk 3).

    ``hint`` (e.g. the wrong ListOffsets answer, which is never past the end) is the fetch position;
    it only keeps the probe's response small.
    """
    tps = list(partitions)
    if not tps:
        return {}
    by_node: dict[int, list[TopicPartition]] = defaultdict(list)
    for tp in tps:
        leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader == -1:
            await client.force_metadata_update()
            leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader == -1:
            raise KafkaError(f"no leader known for {tp.topic}[{tp.partition}]")
        by_node[leader].append(tp)
    result: dict[TopicPartition, int] = {}
    for node_id, node_tps in by_node.items():
        topics: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for tp in node_tps:
            position = max(0, (hint or {}).get(tp, 0))
            topics[tp.topic].append((tp.partition, position, 1))
        # Tansu answers a Fetch with max_wait_time=0 with no partitions at all, so wait >= 1 ms.
        for max_wait_ms in (1, 10, 100):
            response = await client.send(node_id, FetchRequest(max_wait_ms, 0, 1, 0, list(topics.items())))
            for topic, parts in response.topics:
                for partition, error_code, highwater, *_rest in parts:
                    if error_code != 0 and error_code != _OFFSET_OUT_OF_RANGE:
                        raise for_code(error_code)(f"high-watermark probe of {topic}[{partition}] failed")
                    result[TopicPartition(topic, partition)] = int(highwater)
            if all(tp in result for tp in node_tps):
                break
    missing = [tp for tp in tps if tp not in result]
    if missing:
        raise KafkaError(f"high-watermark probe got no answer for {missing}")
    return result


async def end_offsets(consumer: aiokafka.AIOKafkaConsumer, partitions: Iterable[TopicPartition],
                      embedded: bool) -> dict[TopicPartition, int]:
    """``consumer.end_offsets`` that is right on the embedded broker too (quirk 3)."""
    tps = list(partitions)
    listed = dict(await consumer.end_offsets(tps))
    if not embedded:
        return listed
    return await high_watermarks(consumer._client, tps, hint=listed)


# ----------------------------------------------------------------------------- 6: committed offsets


async def committed_offsets(admin: AIOKafkaAdminClient, group_id: str,
                            partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """A group's committed offsets (-1 when none), always asking for explicit partitions (quirk 6)."""
    tps = list(partitions)
    if not tps:
        return {}
    answer = await admin.list_consumer_group_offsets(group_id, partitions=tps)
    return {tp: (meta.offset if meta is not None else -1) for tp, meta in
            ((tp, answer.get(tp)) for tp in tps)}


# ----------------------------------------------------------------------------- Faust transport


class TansuConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer thread with the fixes for quirks 2, 3 and 4."""

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Faust passes fetch_max_wait_ms=1500 literally; the Fetcher reads it at start().
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer

    async def on_start(self) -> None:
        await super().on_start()
        if self._consumer is not None:
            fix_leave_group(self._consumer)

    async def _highwaters(self, partitions: list[Any]) -> Mapping[Any, int]:
        consumer = self._ensure_consumer()
        if self.consumer.in_transaction:  # never on Tansu (check_app), kept for parity
            return {tp: consumer.last_stable_offset(tp) for tp in partitions}
        listed = await consumer.end_offsets(partitions)
        fixed = await high_watermarks(consumer._client, partitions, hint=listed)
        return {tp: fixed[TopicPartition(tp.topic, tp.partition)] for tp in partitions}


class TansuConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> TansuConsumerThread:
        return TansuConsumerThread(self, loop=self.loop, beacon=self.beacon)


class TansuTransport(faust_aiokafka.Transport):
    """Faust transport for ``tansu://host:port`` URLs: stock aiokafka transport + the fixes above."""

    Consumer = TansuConsumer


_installed = False


def install() -> None:
    """Register the ``tansu://`` scheme with Faust (idempotent). Checks the pinned versions first."""
    global _installed
    if _installed:
        return
    check_versions()
    from faust.transport.drivers import TRANSPORTS

    TRANSPORTS.aliases[EMBEDDED_BROKER_SCHEME] = f"{__name__}:TansuTransport"
    _installed = True
