"""``volunteer opened``: report that pages were opened, so ``volunteer stats`` can count them as used."""

from __future__ import annotations

import asyncio
import time

import click

from pipeline.cli.options import broker_option, settings_with_flags
from pipeline.settings import Settings
from topics.page_opens import PageOpen, decode_page_open
from topics.records import InvalidRecord, parse_ts_ms

SEND_TIMEOUT_S = 60.0


def build_opens(slugs: tuple[str, ...], source: str, session: str | None, at_ms: int | None) -> list[PageOpen]:
    """The records to send, validated exactly as the worker will validate them."""
    opens = []
    for slug in slugs:
        record = PageOpen(slug, source, session, at_ms)
        try:
            decode_page_open(record.to_json())
        except InvalidRecord as exc:
            raise click.UsageError(f"{slug!r}: {exc.message}") from None
        opens.append(record)
    return opens


async def _send(settings: Settings, opens: list[PageOpen]) -> int:
    from topics.definitions import ensure_topics, topic_specs
    from topics.page_opens import produce_page_opens

    await ensure_topics(settings, [topic_specs(settings).page_opens])
    return await produce_page_opens(settings, opens)


@click.command(name="opened")
@click.argument("slugs", nargs=-1, required=True, metavar="SLUG...")
@broker_option
@click.option("--source", metavar="ID", default=None,
              help="Brain source of the pages (default: default [env: VOLUNTEER_SOURCE]).")
@click.option("--session", metavar="ID", default=None, help="Session the page was opened in (optional, informative).")
@click.option("--at", "at", metavar="TIME", default=None,
              help="When it was opened: RFC 3339 (2026-01-01T12:00:00Z) or epoch milliseconds (default: when "
                   "the worker applies it).")
def opened(slugs: tuple[str, ...], broker: str | None, source: str | None, session: str | None,
           at: str | None) -> None:
    """Tell the pipeline that pages were opened (read) by a user or an agent.

    Publishes one page-open record per SLUG to the 'page-opens' topic; a worker sets the page's
    last_retrieved_at, which is what 'volunteer stats' counts as "used". Like gbrain, a page's
    time is only moved when it is older than 5 minutes, and unknown or deleted pages are ignored.
    Applications publish the same record themselves ({"slug", "source_id", "session_id"?,
    "opened_at"?}, key "SOURCE/SLUG"); see docs/observability.md.

    \b
    Examples:
      volunteer opened people/alice-example
      volunteer opened companies/northwind people/alice-example --session s1
      volunteer opened notes/q3-board --source work --at 2026-01-01T12:00:00Z
    """
    settings = settings_with_flags({}, broker=broker)
    at_ms = None
    if at is not None:
        raw: object = int(at) if at.strip().isdigit() else at
        try:
            at_ms = parse_ts_ms(raw)
        except InvalidRecord:
            raise click.UsageError(f"--at {at!r} is not an RFC 3339 time with an offset or epoch milliseconds") from None
        if at_ms > int(time.time() * 1000) + 60_000:
            click.echo("warning: --at is in the future; the worker uses its own clock for times ahead of it",
                       err=True)
    opens = build_opens(slugs, source or settings.source, session, at_ms)
    try:
        sent = asyncio.run(asyncio.wait_for(_send(settings, opens), SEND_TIMEOUT_S))
    except (TimeoutError, OSError) as exc:
        raise click.ClickException(f"cannot send to the broker at {settings.broker}: {exc or 'timed out'}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("aiokafka"):
            raise click.ClickException(f"cannot send to the broker at {settings.broker}: {exc}") from None
        raise
    pages = ", ".join(f"{o.source_id}/{o.slug}" for o in opens)
    click.echo(f"sent {sent} page open(s) to {settings.topic_page_opens}: {pages}", err=True)
