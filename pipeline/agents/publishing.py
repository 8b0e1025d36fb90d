"""Publishing from an agent: send records and wait for the broker, retrying transport failures.

The helpers every agent shares (the window and sink agents, the page-opens agent, the hook
endpoint), kept out of the composition module :mod:`pipeline.agents.wiring` so that agents never
import it. Only transport errors are retried (:func:`pipeline.agents.retry.is_transport_error`);
anything else propagates at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pipeline.agents.bulk_send import Placed, send_all
from pipeline.agents.retry import Backoff, is_transport_error

if TYPE_CHECKING:
    from pipeline.agents.context import AgentContext

log = logging.getLogger(__name__)


def now_ms() -> int:
    """The wall clock in milliseconds, the time stamp of dead letters and session activity."""
    return int(time.time() * 1000)


async def publish(ctx: AgentContext, topic: str, items: Sequence[tuple[bytes | None, bytes]]) -> list[Placed]:
    """Send and wait until the broker has every record (raises on a send failure); returns where
    they went (partition and offsets, :data:`pipeline.agents.bulk_send.Placed`)."""
    return await send_all(ctx.app.producer, [(topic, key, value, None) for key, value in items])


async def publish_all(ctx: AgentContext,
                      batches: Sequence[tuple[str, Sequence[tuple[bytes | None, bytes]]]]) -> None:
    """:func:`publish` for several topics with one wait (one produce request when they fit)."""
    await send_all(ctx.app.producer, [(topic, key, value, None) for topic, items in batches for key, value in items])


async def publish_retrying(ctx: AgentContext, topic: str, items: Sequence[tuple[bytes | None, bytes]],
                           what: str) -> bool:
    """:func:`publish`, retried with backoff while the broker is unreachable; False if the worker
    started stopping meanwhile (the caller then acknowledges nothing). Any other error propagates."""
    backoff = Backoff()
    while items:
        try:
            await publish(ctx, topic, items)
            break
        except Exception as exc:
            if not is_transport_error(exc):
                raise  # a bug, not the broker: crash loudly rather than retry forever
            if ctx.app.should_stop:
                return False
            log.warning("%s failed (%s); retrying", what, exc)
            await asyncio.sleep(backoff.next())
    return True
