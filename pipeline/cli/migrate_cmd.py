"""``volunteer migrate``: create the tables and indexes this service needs, leaving gbrain data alone."""

from __future__ import annotations

import click

from sinks.cliopts import database_option, fail_on_db_error, resolve_database_url


@click.command(name="migrate")
@database_option
def migrate(database_url: str | None) -> None:
    """Create or complete the schema in the database (safe to run any number of times).

    \b
    Creates what is missing and never drops or rewrites existing data, so it can be pointed at a
    live gbrain brain: pages, page_aliases, context_volunteer_events (gbrain's columns and index
    names), a unique index for idempotent event writes, and a brain change counter that workers
    poll. Applied versions are recorded in the table volunteer_stream_schema.

    \b
    Example:
      volunteer migrate --database-url postgresql://postgres@127.0.0.1:5432/brain
    """
    from sinks.db import redact
    from sinks.schema import migrate as run_migrations

    url = resolve_database_url(database_url)
    with fail_on_db_error(url):
        report = run_migrations(url)
    for label in report.applied:
        click.echo(f"applied  {label}")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if report.applied:
        click.echo(f"migrated {redact(url)}: {len(report.applied)} step(s) applied, {len(report.already)} already present")
    else:
        click.echo(f"{redact(url)} is up to date ({len(report.already)} step(s) checked)")
