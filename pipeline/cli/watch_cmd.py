"""``volunteer watch``: print volunteered pages from the ``volunteered`` topic as they arrive."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import IO

import click

from pipeline.cli.options import broker_option, quiet_client_logs, settings_with_flags
from pipeline.settings import Settings
from topics.records import InvalidRecord, Volunteered


def human_line(event: Volunteered) -> str:
    from pipeline.core.render import format_page

    return f"[{event.session_id} turn {event.turn}] {format_page(event.page)}"


async def watch_pages(settings: Settings, *, session: str | None, as_json: bool, from_beginning: bool,
                      limit: int | None, out: IO[str], stop: asyncio.Event) -> int:
    """Print pages until ``stop`` is set or ``limit`` pages were printed; returns how many."""
    from topics.io import TopicReader

    shown = 0
    async with TopicReader(settings, settings.topic_volunteered, from_beginning=from_beginning) as reader:
        if not from_beginning:
            click.echo(f"watching {settings.topic_volunteered} on {settings.broker}"
                       + (f" for session {session}" if session else "") + "; Ctrl-C to stop", err=True)
        async for batch in reader.batches(timeout_ms=200):
            for record in batch:
                if record.value is None:
                    continue
                try:
                    event = Volunteered.from_json(record.value)
                except InvalidRecord:
                    continue
                if session is not None and event.session_id != session:
                    continue
                if as_json:
                    out.write(record.value.decode("utf-8") + "\n")
                else:
                    out.write(human_line(event) + "\n")
                shown += 1
                if limit is not None and shown >= limit:
                    out.flush()
                    return shown
            out.flush()
            if stop.is_set():
                return shown
    return shown


@click.command(name="watch")
@broker_option
@click.option("--session", metavar="ID", default=None, help="Only pages volunteered to this session.")
@click.option("--json", "as_json", is_flag=True, help="Print each Volunteered record as one JSON line.")
@click.option("--from-beginning", is_flag=True, help="Start with the pages already on the topic (default: only new ones).")
@click.option("--max", "limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="Exit after printing N pages.")
def watch(broker: str | None, session: str | None, as_json: bool, from_beginning: bool, limit: int | None) -> None:
    """Print volunteered pages as the workers publish them, until Ctrl-C.

    \b
    Human lines:  [SESSION turn N] Display → slug (0.85, title) — rationale
                      synopsis
    --json lines: the Volunteered record (event_id, session_id, turn, slug, source_id, display,
                  confidence, arm, rationale, synopsis, channel, volunteered_at)

    \b
    Examples:
      volunteer watch --session s1
      volunteer watch --from-beginning --json | jq .slug
    """
    settings = settings_with_flags({}, broker=broker)
    quiet_client_logs()

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        task = asyncio.ensure_future(watch_pages(settings, session=session, as_json=as_json,
                                                 from_beginning=from_beginning, limit=limit,
                                                 out=sys.stdout, stop=stop))
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not task.done():
            await asyncio.wait([task], timeout=2)
            if not task.done():
                task.cancel()
                return 0
        return task.result()

    try:
        asyncio.run(run())
    except BrokenPipeError:  # e.g. '| head'
        sys.stderr.close()
    except LookupError as exc:
        raise click.ClickException(f"{exc}; start a worker (or 'volunteer feed') to create it") from None
    except (TimeoutError, OSError) as exc:
        raise click.ClickException(f"cannot read from the broker at {settings.broker}: {exc}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("aiokafka"):
            raise click.ClickException(f"cannot read from the broker at {settings.broker}: {exc}") from None
        raise
