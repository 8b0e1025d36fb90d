"""Whether the consumer group is between two assignments, and how to make a stuck one start again.

A table recovery reads its changelogs through the same aiokafka consumer as the streams, and
aiokafka's Fetcher hands out no fetched record while its subscription has a *reassignment in
progress* (``fetched_records`` waits for the new assignment first): from the moment the consumer
learns the group is rebalancing (its partitions revoked) until the new assignment is installed.
A recovery started in that gap reads nothing until the assignment arrives, and the assignment
starts a recovery of its own anyway. Issue 27's campaign caught exactly that (seed 1561812524):
a timed-out recovery step's retry started the recovery again 1.2 s after the revocation, and the
read then received nothing for 5 s. :mod:`pipeline.compat.recovery_retry` therefore asks
:func:`reassigning` before it starts a recovery again or sets a quiet read going again.

A reassignment that never finishes (a member that joined a generation and never got its sync
answer) would leave the worker in that gap for good, with no error: :func:`request_rejoin` asks
aiokafka's coordinator to rejoin the group, its own remedy when it learns its generation is stale.

Both read the aiokafka consumer that Faust runs on its consumer thread
(``Consumer._thread._consumer``; on the worker's own loop with :mod:`.inloop_consumer`) and never
raise: an answer they cannot read is "not reassigning" and "no rejoin asked", so the recovery
behaves as stock Faust does.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def _client_and_loop(app: Any) -> tuple[Any, Any]:
    thread = getattr(getattr(app, "consumer", None), "_thread", None)
    return getattr(thread, "_consumer", None), getattr(thread, "thread_loop", None)


def aiokafka_client(app: Any) -> Any:
    """The app's aiokafka consumer, or None before Faust has made it (never raises)."""
    return _client_and_loop(app)[0]


def reassigning(app: Any) -> bool:
    """True while the group has revoked this consumer's partitions and not yet assigned new ones."""
    client = aiokafka_client(app)
    try:
        return bool(client._subscription.reassignment_in_progress)
    except AttributeError:  # no consumer yet, or an aiokafka without the flag: as stock Faust
        return False


def request_rejoin(app: Any) -> bool:
    """Ask the coordinator, on the consumer's own loop, to join the group again; whether it was asked."""
    client, loop = _client_and_loop(app)
    coordinator = getattr(client, "_coordinator", None)
    rejoin = getattr(coordinator, "request_rejoin", None)
    if rejoin is None or loop is None or loop.is_closed():
        return False
    loop.call_soon_threadsafe(rejoin)  # the coordinator's future belongs to that loop
    return True
