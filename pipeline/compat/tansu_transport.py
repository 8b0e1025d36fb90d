"""Faust's transport for ``tansu://`` URLs: the worker consumer with the embedded broker's fixes.

Faust picks it up through its transport registry: :func:`install` registers the ``tansu`` URL
scheme to :class:`TansuTransport`, so a Faust app configured with ``broker="tansu://..."`` gets the
fixed consumer while a ``kafka://`` app gets stock Faust. The consumer thread subclass overrides
three Faust internals of the pinned version (and, once its consumer has started, gives it the
growing fetch wait of :mod:`pipeline.compat.fetch_wait` and the fetch interval of
:mod:`pipeline.compat.fetch_interval` when the app asked for them):

- quirk 2: ``on_start`` gives the started aiokafka consumer the generation-0 LeaveGroup
  (:func:`topics.tansu_client.fix_leave_group`);
- quirk 3: ``_highwaters`` (the end offsets Faust's table recovery reads to) asks the Fetch
  response's high watermark (:func:`topics.tansu_client.high_watermarks`), not ListOffsets;
- quirk 4: ``_create_worker_consumer`` sets the aiokafka consumer's ``_fetch_max_wait_ms`` (Faust
  passes 1500 ms literally) to :data:`topics.tansu_client.FETCH_MAX_WAIT_MS`.

Quirk 5 is refused here (:func:`check_app`); the configuration side of quirks 1, 4, 5 and the
client-side helpers are in :mod:`topics.tansu_client`. The quirks are listed in docs/streaming.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiokafka
from aiokafka import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.compat import fetch_interval, fetch_wait, inloop_consumer
from pipeline.internals import CompatError, require
from pipeline.settings import EMBEDDED_BROKER_SCHEME
from topics.tansu_client import FETCH_MAX_WAIT_MS, consumer_client, fix_leave_group, high_watermarks

PATCH = "tansu-transport"


def check_app(app: Any) -> None:
    """Refuse a Faust app that would need transactions on the embedded broker (quirk 5)."""
    urls = [str(u) for u in app.conf.broker]
    embedded = any(u.startswith(EMBEDDED_BROKER_SCHEME + "://") for u in urls)
    if embedded and str(app.conf.processing_guarantee).lower().endswith("exactly_once"):
        raise CompatError(
            "exactly-once processing needs idempotent/transactional producers, which the embedded "
            "Tansu broker does not support; use processing_guarantee=at_least_once"
        )


class TansuConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer thread with the fixes for quirks 2, 3 and 4."""

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Faust passes fetch_max_wait_ms=1500 literally; the Fetcher reads it at start().
        require(PATCH, consumer, "_fetch_max_wait_ms")
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer

    async def on_start(self) -> None:
        await super().on_start()
        if self._consumer is not None:
            fix_leave_group(self._consumer)
            fetch_wait.start(self._consumer, self.consumer.app)  # if the app asked for it
            fetch_interval.start(self._consumer, self.consumer.app)  # likewise

    async def _highwaters(self, partitions: list[Any]) -> Mapping[Any, int]:
        consumer = self._ensure_consumer()
        if self.consumer.in_transaction:  # never on Tansu (check_app), kept for parity
            return {tp: consumer.last_stable_offset(tp) for tp in partitions}
        listed = await consumer.end_offsets(partitions)
        fixed = await high_watermarks(consumer_client(consumer), partitions, hint=listed)
        return {tp: fixed[TopicPartition(tp.topic, tp.partition)] for tp in partitions}


class TansuConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> TansuConsumerThread:
        cls: type[TansuConsumerThread] = inloop_consumer.thread_class(TansuConsumerThread, self)
        return cls(self, loop=self.loop, beacon=self.beacon)


class TansuTransport(faust_aiokafka.Transport):
    """Faust transport for ``tansu://host:port`` URLs: stock aiokafka transport + the fixes above."""

    Consumer = TansuConsumer


def install() -> None:
    """Register the ``tansu://`` scheme with Faust (idempotent), once the overridden internals are
    checked to exist."""
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from faust.transport import drivers

    require(PATCH, GroupCoordinator, methods=("_maybe_leave_group", "_send_req"))
    require(PATCH, faust_aiokafka.AIOKafkaConsumerThread, "_consumer", methods=("_ensure_consumer",),
            own_methods=("_highwaters", "_create_worker_consumer", "on_start"))  # the three overridden
    require(PATCH, faust_aiokafka.Consumer, own_methods=("_new_consumer_thread",))
    require(PATCH, drivers, "TRANSPORTS")
    require(PATCH, drivers.TRANSPORTS, "aliases")
    drivers.TRANSPORTS.aliases[EMBEDDED_BROKER_SCHEME] = f"{__name__}:TansuTransport"
