"""The reads of Faust and aiokafka internals that the agents and the worker metrics need.

They reach these through the port :class:`pipeline.internals.Internals` (they may not import
compat); :func:`install` checks the class-level parts and puts :class:`FaustInternals` behind the
port. The instance-level parts are checked where they are read, with the same guard.

- the batch send of :mod:`pipeline.agents.bulk_send`: the aiokafka producer inside Faust's
  (``Producer._ensure_producer``), its partitioner (``_partitioner``) and the metadata wait
  (``AIOKafkaClient._wait_on_metadata``), so records land where ``send`` would put them;
- the session table (:mod:`pipeline.agents.session_table`): the memory store's key -> partition
  map (``Store._key_partition``), which it must know for locally written keys, and its values
  (``Store.data``), which the window agent reads a batch's states from;
- the worker metrics (:mod:`pipeline.worker_metrics`): the table's store and the app's consumer
  without creating them from the scrape thread (``Collection._data``, ``App._consumer``) and the
  consumer's committed offsets (``Consumer._committed_offset``);
- readiness (:mod:`pipeline.agents.health`): when the consumer last had a Fetch answer, from the
  aiokafka consumer on Faust's consumer thread (``Consumer._thread._consumer``).
- the window and sink agents' batches: a topic's direct feed (:mod:`pipeline.compat.direct_delivery`).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from aiokafka.client import AIOKafkaClient
from faust.stores.memory import Store as MemoryStore
from faust.tables.base import Collection
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline import internals
from pipeline.compat import direct_delivery
from pipeline.internals import require

PATCH = "faust-internals"


class FaustInternals:
    """:class:`pipeline.internals.Internals` for the pinned faust-streaming and aiokafka."""

    def batch_producer(self, faust_producer: Any) -> Any:
        require(PATCH, faust_producer, methods=("_ensure_producer",))
        producer = faust_producer._ensure_producer()
        require(PATCH, producer, "client", "_partitioner", methods=("create_batch", "send_batch"))
        return producer

    async def partitions(self, producer: Any, topic: str) -> tuple[list[int], list[int]]:
        await producer.client._wait_on_metadata(topic)
        cluster = producer.client.cluster
        return sorted(cluster.partitions_for_topic(topic)), list(cluster.available_partitions_for_topic(topic))

    def partitioner(self, producer: Any) -> Callable[[bytes | None, list[int], list[int]], int]:
        chosen: Callable[[bytes | None, list[int], list[int]], int] = producer._partitioner
        return chosen

    def key_partitions(self, store: Any) -> MutableMapping[Any, int] | None:
        if not isinstance(store, MemoryStore):
            return None  # the app's store is memory:// (pipeline/app.py); other kinds keep no such map
        require(PATCH, store, "_key_partition")
        tracked: MutableMapping[Any, int] = store._key_partition
        return tracked

    def store_values(self, store: Any) -> MutableMapping[Any, Any] | None:
        if not isinstance(store, MemoryStore):
            return None
        require(PATCH, store, "data")
        values: MutableMapping[Any, Any] = store.data
        return values

    def created_store(self, table: Any) -> Any | None:
        require(PATCH, table, "_data")
        return table._data

    def created_consumer(self, app: Any) -> Any | None:
        require(PATCH, app, "_consumer")
        return app._consumer

    def committed_offsets(self, consumer: Any) -> dict[Any, int | None]:
        require(PATCH, consumer, "_committed_offset")
        return dict(consumer._committed_offset)

    def newest_fetch_ms(self, consumer: Any) -> int | None:
        # Faust keeps the aiokafka consumer on its consumer thread; aiokafka stamps each partition at
        # every Fetch answer, empty ones included (its public ``last_poll_timestamp``)
        require(PATCH, consumer, "_thread")
        thread = consumer._thread
        require(PATCH, thread, "_consumer")
        client = thread._consumer
        if client is None:
            return None
        stamps = [client.last_poll_timestamp(tp) for tp in client.assignment()]
        return max((int(s) for s in stamps if s), default=None)


    def direct_feed(self, app: Any, topic: Any, max_batch: int) -> internals.DirectFeed:
        return direct_delivery.feed(app, topic, max_batch)


def install() -> None:
    """Check the class-level parts, then serve them through :func:`pipeline.internals.internals`."""
    require(PATCH, faust_aiokafka.Producer, methods=("_ensure_producer",))
    require(PATCH, AIOKafkaProducer, methods=("create_batch", "send_batch"))
    require(PATCH, AIOKafkaClient, methods=("_wait_on_metadata",))
    require(PATCH, Collection, "_data")
    require(PATCH, faust.App, "_consumer")
    internals.use(FaustInternals())
