"""Retry with backoff, and which failures are worth retrying: the one policy every agent loop uses.

A batch that the broker or the database refuses is retried, acknowledging nothing meanwhile, until
it goes through (docs/guarantees.md). That is right for a transport failure, which goes away by
itself. It is wrong for a bug: a ``TypeError`` retried forever looks like a healthy worker waiting
for its broker. So the broker loops retry only what :func:`is_transport_error` accepts and let
everything else crash the agent loudly; the database loops retry only ``psycopg.Error`` and
``OSError`` (:mod:`pipeline.agents.dbwriter`).
"""

from __future__ import annotations

from aiokafka import errors as kafka_errors

MAX_BACKOFF_S = 5.0
FIRST_BACKOFF_S = 0.05

TRANSPORT_KAFKA_ERRORS: tuple[type[kafka_errors.KafkaError], ...] = (
    kafka_errors.KafkaConnectionError,
    kafka_errors.KafkaTimeoutError,  # a delivery not confirmed in time: the broker is away
    kafka_errors.NodeNotReadyError,
    kafka_errors.BrokerNotAvailableError,
    kafka_errors.KafkaUnavailableError,
    kafka_errors.NoBrokersAvailable,
    kafka_errors.RequestTimedOutError,
    kafka_errors.ProducerClosed,  # the producer went away under a send (stopping, or restarting)
)
"""aiokafka errors that mean "the broker is not reachable now", whether or not aiokafka flags them
``retriable`` (a ``KafkaTimeoutError`` is not flagged, but it is what a send gets while the broker
is down)."""


def is_transport_error(exc: BaseException) -> bool:
    """A failure of the connection to the broker, not of the program: retry it, do not crash.

    True for ``OSError`` (``TimeoutError`` and ``ConnectionError`` among them), aiokafka's errors
    that aiokafka flags ``retriable`` (leader moved, not enough replicas, coordinator loading, ...)
    and :data:`TRANSPORT_KAFKA_ERRORS`. Faust wraps a client error in its own ``ProducerSendError``,
    so the cause chain is followed.
    """
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, (OSError, *TRANSPORT_KAFKA_ERRORS)):  # TimeoutError is an OSError
            return True
        if isinstance(current, kafka_errors.KafkaError) and current.retriable:
            return True
        current = current.__cause__
        seen += 1
    return False


class Backoff:
    """Exponential delays for one batch: 50 ms, 100 ms, … capped at 5 s."""

    def __init__(self) -> None:
        self._delay = FIRST_BACKOFF_S

    def next(self) -> float:
        delay = self._delay
        self._delay = min(self._delay * 2, MAX_BACKOFF_S)
        return delay
