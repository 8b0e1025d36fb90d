"""The plain aiokafka clients' work-arounds for the embedded Tansu broker (docs/streaming.md, quirks).

Active only for ``tansu://`` broker URLs (:attr:`Settings.broker_is_embedded`); against real Kafka
or Redpanda every helper here is a no-op or the stock call. The worker's Faust consumer gets the
same fixes through its transport (:mod:`pipeline.compat.tansu_transport`), which reuses the ones
below. What lives here is configuration and client behaviour, needed by every process that talks
to the broker (feed, watch, doctor, the client library, tests, bench), most of which never start an
app and so never run :func:`pipeline.compat.install`:

1. JoinGroup is held for half the session timeout -> :data:`SESSION_TIMEOUT_S` /
   :data:`HEARTBEAT_INTERVAL_S` in :func:`faust_settings` and :func:`consumer_kwargs`. Paired with
   it (not a Tansu bug): :data:`REQUEST_TIMEOUT_S`, so a worker partitioned from the broker drops
   its stuck connections soon and is back within seconds of the heal (docs/guarantees.md).
2. The first group generation is 0, so aiokafka never sends LeaveGroup for it ->
   :func:`fix_leave_group` (wraps one started consumer's ``GroupCoordinator._maybe_leave_group``).
3. ListOffsets(LATEST) returns the base offset of the last batch + 1 -> :func:`high_watermarks`
   reads the Fetch response's high watermark; :func:`end_offsets` uses it.
4. A waiting Fetch is not ended by new records -> :data:`FETCH_MAX_WAIT_MS` in
   :func:`consumer_kwargs` (the worker's consumer: :mod:`pipeline.compat.tansu_transport`).
5. Idempotent / transactional producers fail -> :func:`producer_kwargs` and
   :func:`faust_settings` force at-least-once (the worker refuses exactly-once at install).
6. ``list_consumer_group_offsets`` without partitions is undecodable -> :func:`committed_offsets`.

Two of these reach into aiokafka's internals of a client we built ourselves (the coordinator's
leave step for quirk 2, the consumer's connection for quirk 3); they check the shape first and
raise :class:`pipeline.internals.CompatError` like every patch in :mod:`pipeline.compat`.
"""

from __future__ import annotations

import logging
import types
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import aiokafka
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.group import LeaveGroupRequest

from pipeline.internals import require
from pipeline.settings import Settings

log = logging.getLogger(__name__)

_OFFSET_OUT_OF_RANGE = 1

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
can be held up to the rebalance timeout (docs/deployment.md). Faust also uses it as the
timeout of each step of a table recovery; on a loaded machine a step can exceed it, and the worker
then starts the recovery again (``pipeline/compat/recovery_retry.py``; before that, the recovery
stopped for good)."""
FETCH_MAX_WAIT_MS = 20  # quirk 4: each hop costs ~20 ms instead of ~1.2 s

LEAVE_GROUP_PATCH = "tansu-leave-group (quirk 2)"
HIGHWATER_PATCH = "tansu-high-watermark (quirk 3)"


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


# ----------------------------------------------------------------------------- 2: generation-0 LeaveGroup


def fix_leave_group(consumer: aiokafka.AIOKafkaConsumer) -> None:
    """Make a started group consumer send LeaveGroup also for generation 0 (quirk 2).

    aiokafka only leaves for ``generation > 0``; Tansu numbers the first generation 0, so without
    this the next member waits a whole session timeout for the stopped one to expire. A consumer
    without a group (assign mode) has nothing to leave and is left alone.
    """
    require(LEAVE_GROUP_PATCH, consumer, "_coordinator")
    coordinator = consumer._coordinator
    if coordinator is None or getattr(coordinator, "_tansu_leave_fixed", False):
        return
    require(LEAVE_GROUP_PATCH, coordinator, "generation", "member_id", "group_id", "_group_instance_id",
            methods=("_maybe_leave_group", "_send_req"))
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


def consumer_client(consumer: aiokafka.AIOKafkaConsumer) -> AIOKafkaClient:
    """The connection a started consumer fetches through (the probe of quirk 3 reuses it; the
    doctor counts the brokers in its metadata)."""
    require(HIGHWATER_PATCH, consumer, "_client")
    client: AIOKafkaClient = consumer._client
    return client


async def end_offsets(consumer: aiokafka.AIOKafkaConsumer, partitions: Iterable[TopicPartition],
                      embedded: bool) -> dict[TopicPartition, int]:
    """``consumer.end_offsets`` that is right on the embedded broker too (quirk 3)."""
    tps = list(partitions)
    listed = dict(await consumer.end_offsets(tps))
    if not embedded:
        return listed
    return await high_watermarks(consumer_client(consumer), tps, hint=listed)


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
