"""``volunteer stats``: how often volunteered pages were then actually used, per arm and channel."""

from __future__ import annotations

import click

from pipeline.cli.options import database_option, fail_on_db_error, parse_number, resolve_database_url


@click.command(name="stats")
@database_option
@click.option(
    "--source", "sources", multiple=True, metavar="ID",
    help="Brain source to report on; repeat for several (default: VOLUNTEER_SOURCE, else 'default').",
)
@click.option("--days", default="30", metavar="N", show_default=True,
              help="Look-back window in days; anything not > 0 means 30, fractions are floored.")
@click.option("--json", "as_json", is_flag=True, help="Print the result object as JSON.")
def stats(database_url: str | None, sources: tuple[str, ...], days: str, as_json: bool) -> None:
    """Precision of volunteered context: volunteered vs. used, per match arm and channel.

    \b
    A page counts as "used" when pages.last_retrieved_at is later than the moment it was
    volunteered. That is approximate (gbrain throttles last_retrieved_at to one write per 5
    minutes, and unrelated reads count too), exactly as gbrain's volunteer-context --stats.

    \b
    Examples:
      volunteer stats                          last 30 days, source 'default'
      volunteer stats --days 7 --source team --source default --json
    """
    from pipeline.settings import load_settings
    from sinks.stats import run_stats_command

    url = resolve_database_url(database_url)
    scope = list(sources) or [load_settings().source]
    with fail_on_db_error(url):
        click.echo(run_stats_command(url, scope, parse_number(days), as_json), nl=False)
