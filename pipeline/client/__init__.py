"""The asyncio client for applications: publish turns, read volunteered pages (docs/client.md).

::

    from pipeline.client import TurnPublisher, VolunteeredConsumer

Both take a :class:`~pipeline.settings.Settings` (default: from ``VOLUNTEER_*`` variables), so the
broker URL, topic names and TLS/SASL options are the ones the worker uses; ``tansu://`` URLs of the
embedded broker work too.
"""

from __future__ import annotations

from pipeline.client.consumer import Start, VolunteeredConsumer
from pipeline.client.errors import ConsumerClosed, PublishError, TopicUnavailable
from pipeline.client.publisher import Timestamp, TurnPublisher, ts_to_ms
from pipeline.core.types import VolunteeredPage
from topics.records import InvalidRecord, Turn, Volunteered

__all__ = [
    "ConsumerClosed",
    "InvalidRecord",
    "PublishError",
    "Start",
    "Timestamp",
    "TopicUnavailable",
    "Turn",
    "TurnPublisher",
    "Volunteered",
    "VolunteeredConsumer",
    "VolunteeredPage",
    "ts_to_ms",
]
