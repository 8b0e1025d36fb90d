"""The topics of docs/contracts.md plus ``page-opens`` (names, partitions, replication from :class:`Settings`) and their creation.

Records travel as raw bytes: Faust topics use the ``raw`` codec and the agents decode with
:mod:`topics.records`, so a malformed record becomes a dead letter instead of crashing a stream.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from pipeline.settings import Settings
from topics.clients import make_admin

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36

RAW = "raw"
"""Faust codec name for bytes in, bytes out."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicSet:
    turns: TopicSpec
    volunteered: TopicSpec
    dlq: TopicSpec
    page_opens: TopicSpec

    def all(self) -> list[TopicSpec]:
        return [self.turns, self.volunteered, self.dlq, self.page_opens]


def topic_specs(settings: Settings) -> TopicSet:
    """``turns`` and ``volunteered`` share the partition count: both are keyed by session id.

    The dead-letter topic gets the same count; it is low-volume and only read by people. So does
    ``page-opens`` (keyed by page, :mod:`topics.page_opens`), so its load spreads like the turns'.
    """
    partitions, replication = settings.topic_partitions, settings.topic_replication
    return TopicSet(
        turns=TopicSpec(settings.topic_turns, partitions, replication),
        volunteered=TopicSpec(settings.topic_volunteered, partitions, replication),
        dlq=TopicSpec(settings.topic_dlq, partitions, replication),
        page_opens=TopicSpec(settings.topic_page_opens, partitions, replication),
    )


class TopicMismatch(RuntimeError):
    """An existing topic has a different partition count than the settings ask for."""


async def ensure_topics(settings: Settings, specs: Iterable[TopicSpec] | None = None) -> dict[str, int]:
    """Create the topics that are missing (idempotent); return each topic's partition count.

    An existing topic with fewer partitions than configured is reported, not altered: the
    session-to-partition mapping (and so every worker's state) depends on it.
    """
    wanted = list(specs) if specs is not None else topic_specs(settings).all()
    admin = make_admin(settings)
    await admin.start()
    try:
        # Create first, describe after: describing (a metadata request) a missing topic makes brokers
        # with auto-creation (Tansu always, Kafka by default) create it with *their* partition count.
        new = [NewTopic(s.name, s.partitions, s.replication, topic_configs=dict(s.config)) for s in wanted]
        with contextlib.suppress(TopicAlreadyExistsError):
            response = await admin.create_topics(new)
            for topic_error in getattr(response, "topic_errors", ()):
                name, code = topic_error[0], topic_error[1]
                if code == 0:
                    log.info("created topic %s", name)
                elif code != _TOPIC_ALREADY_EXISTS:
                    message = topic_error[2] if len(topic_error) > 2 else ""
                    raise TopicMismatch(f"cannot create topic {name!r}: error {code} {message or ''}".strip())
        existing = await _partition_counts(admin, [s.name for s in wanted])
        for spec in wanted:
            have = existing.get(spec.name)
            if have is None:
                raise TopicMismatch(f"topic {spec.name!r} could not be created")
            if have != spec.partitions:
                log.info("topic %s has %d partitions, settings ask for %d; using %d",
                            spec.name, have, spec.partitions, have)
        return existing
    finally:
        await admin.close()


async def _partition_counts(admin: Any, names: list[str]) -> dict[str, int]:
    answer = await admin.describe_topics(names)
    counts: dict[str, int] = {}
    for topic in answer:
        if int(topic.get("error_code", 0)) != 0:
            continue
        counts[str(topic["topic"])] = len(topic.get("partitions", []))
    return counts


async def partition_count(settings: Settings, topic: str) -> int | None:
    admin = make_admin(settings)
    await admin.start()
    try:
        return (await _partition_counts(admin, [topic])).get(topic)
    finally:
        await admin.close()
