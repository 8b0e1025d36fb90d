"""Every patch of third-party internals (Faust, mode, aiokafka), installed by one :func:`install`.

Called once from the app's start-up (:class:`pipeline.app.StreamApp`), right after the Faust app is
created and before anything uses its transport or consumer. Only the start-up and
:mod:`pipeline.embedded` may import this package (tests/unit/test_import_graph.py); everything else
reaches the patched behaviour through the objects the start-up hands it.

The patches, in the order :func:`install` applies them (docs/architecture.md, "compat"):

1. :mod:`.versions`: faust-streaming, aiokafka and mode-streaming must be exactly the versions
   pinned in pyproject.toml, on every broker (``kafka://`` and ``tansu://``).
2. :mod:`.tansu_transport`: the ``tansu://`` Faust transport (quirks 2, 3, 4 for the worker's
   consumer) and the refusal of exactly-once (quirk 5). Optional by setting: registered only when
   the broker URL is ``tansu://`` (:attr:`Settings.broker_is_embedded`); stock Faust on Kafka.
3. :mod:`.recovery_order`: no record delivered while Faust finishes a table recovery (faust #596).
4. :mod:`.recovery_retry`: a table recovery whose broker step timed out starts again instead of
   ending for good (the worker then never resumed its streams).
   It also watches the changelog read, which Faust waits for without a timeout, and sets it going
   again when it receives nothing (:mod:`.recovery_stall` says what held it); neither restarts a
   read while the group is between two assignments, and one that never finishes is rejoined
   (:mod:`.reassignment`).
5. :mod:`.sticky_assignment`: a worker over its share gives back first the partitions another
   worker claims (a woken zombie's, whose sessions it still holds), not arbitrary ones; the leader
   then gives back its most caught-up partitions, keeping those with records still waiting.
6. :mod:`.changelog_pause`: aiokafka pauses the changelog partitions Faust has paused, so the
   worker's Fetch names only the partitions Faust reads.
7. :mod:`.fetch_wait`: on the embedded broker, a fetch wait that grows while fetches come back
   empty, up to the setting ``fetch_wait_max_ms`` (0: the fixed wait); and
   :mod:`.fetch_interval`: at most one Fetch per ``fetch_interval_ms`` while fetches bring many records
   (from ``fetch_interval_from_rate`` records/s).
8. :mod:`.inloop_consumer`: the aiokafka consumer runs on the worker's loop, not in Faust's consumer
   thread (setting ``consumer_in_loop``, off by default).
9. :mod:`.fastdrain`: records reach the streams a fetch at a time; refuses without 3. Its loop
   also feeds :mod:`.direct_delivery`: the window and sink agents' topics skip Faust's conductor,
   events and streams (setting ``direct_delivery``; the feeds are registered while the agents are
   wired, through the port's ``direct_feed``).
   And a table recovery's changelog records are applied as fetched (:mod:`.changelog_feed`,
   setting ``changelog_direct``).
10. :mod:`.livelock_check`: Faust's livelock detector skips a partition whose position aiokafka is
   still looking up (aiokafka asserts on reading it; a slow broker crashed a worker, issue 27).
11. :mod:`.table_start`: Faust's table manager starts without its fixed one-second sleep (every
   table is declared before the start), so a worker, and a killed worker's replacement, subscribes
   a second sooner.
12. :mod:`.faust_internals`: the few internals the agents and the worker metrics read (the
   producer's batch path, the memory store's key partitions, the table store and consumer without
   creating them), served through the port :func:`pipeline.internals.internals`.

One guard style for all of them (:func:`pipeline.internals.require`): a patch checks that its
target exists with the shape it expects and otherwise raises :class:`CompatError` with one line
naming the patch and the installed versions. There is no warn-and-skip.
"""

from __future__ import annotations

from typing import Any

from pipeline.compat import (
    changelog_pause,
    fastdrain,
    faust_internals,
    fetch_interval,
    fetch_wait,
    inloop_consumer,
    livelock_check,
    recovery_order,
    recovery_retry,
    sticky_assignment,
    table_start,
    tansu_transport,
)
from pipeline.compat.versions import check_versions
from pipeline.internals import CompatError
from pipeline.settings import Settings

__all__ = ["CompatError", "install"]


def install(app: Any, settings: Settings) -> None:
    """Check the pinned versions and apply every patch to the Faust ``app`` (see the module doc)."""
    check_versions()
    if settings.broker_is_embedded:
        tansu_transport.install()
    tansu_transport.check_app(app)  # refuses exactly-once on a tansu:// app, whatever built it
    recovery_order.install()
    recovery_retry.install()
    sticky_assignment.install(sticky_assignment.backlog_of(
        app, lambda: {settings.topic_turns, settings.topic_volunteered}))
    changelog_pause.install()
    if settings.broker_is_embedded and settings.fetch_wait_max_ms:
        fetch_wait.install(app, settings.fetch_wait_max_ms)
    if settings.broker_is_embedded and settings.fetch_interval_ms:
        fetch_interval.install(app, settings.fetch_interval_ms, settings.fetch_interval_from_rate)
    if settings.consumer_in_loop:
        inloop_consumer.install(app)
    fastdrain.install(app, pause_s=settings.fetch_pause_ms / 1000, changelog=settings.changelog_direct)
    livelock_check.install()
    table_start.install()
    faust_internals.install()
