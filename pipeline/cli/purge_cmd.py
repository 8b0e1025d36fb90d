"""``volunteer purge``: delete volunteer events past their retention, in small batches."""

from __future__ import annotations

import sys

import click

from pipeline.cli.options import database_option, fail_on_db_error, resolve_database_url


@click.command(name="purge")
@database_option
@click.option("--days", "retention_days", type=float, default=None, metavar="N",
              help="Retention in days (default: VOLUNTEER_PURGE_RETENTION_DAYS, else 90).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, metavar="ROWS",
              help="Rows deleted per transaction (default: VOLUNTEER_PURGE_BATCH_SIZE, else 5000).")
@click.option("--dry-run", is_flag=True, help="Only count the rows that would be deleted.")
def purge(database_url: str | None, retention_days: float | None, batch_size: int | None, dry_run: bool) -> None:
    """Delete context_volunteer_events rows older than the retention (90 days by default).

    \b
    Runs as many short transactions of --batch-size rows as needed, so a long backlog never
    hits a statement timeout and can be interrupted safely (Ctrl-C keeps what was deleted).
    A database without the events table has nothing to purge (0). Workers run the same purge
    daily on their own (leader only); this command is for doing it by hand.

    \b
    Example:
      volunteer purge --days 30
    """
    from pipeline.settings import load_settings
    from sinks.purge import count_expired, purge_events

    settings = load_settings(database_url=database_url)
    url = resolve_database_url(database_url)
    days = retention_days if retention_days is not None else settings.purge_retention_days
    size = batch_size if batch_size is not None else settings.purge_batch_size
    if not days > 0:
        raise click.BadParameter("must be a positive number of days", param_hint="--days")
    show_progress = sys.stderr.isatty()

    def progress(total: int) -> None:
        if show_progress:
            click.echo(f"\rpurged {total} event(s)…", nl=False, err=True)

    with fail_on_db_error(url):
        if dry_run:
            n = count_expired(url, days)
            click.echo(f"{n} event(s) older than {days:g} day(s) would be purged")
            return
        total = purge_events(url, days, size, progress=progress)
    if show_progress and total:
        click.echo("", err=True)
    click.echo(f"purged {total} volunteer event(s) older than {days:g} day(s)")
