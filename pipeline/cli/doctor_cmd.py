"""``volunteer doctor``: check the broker, topics, database, schema, brain, lag and activity in one go."""

from __future__ import annotations

import json

import click

from pipeline.cli.options import broker_option, settings_with_flags
from pipeline.doctor import DEFAULT_MAX_LAG, DEFAULT_TIMEOUT_S, FAIL, OK, WARN, Check, failed, run_checks

COLORS = {OK: "green", WARN: "yellow", FAIL: "red"}


def human_lines(checks: list[Check]) -> list[str]:
    """``ok|warn|fail  <check>  <detail>``, and ``      fix: ...`` under a warn or fail."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        status = click.style(f"{c.status:<5}", fg=COLORS.get(c.status), bold=c.status == FAIL)
        lines.append(f"{status} {c.name:<{width}}  {c.detail}")
        if c.status != OK and c.hint:
            lines.append(f"{'':<5} {'':<{width}}  fix: {c.hint}")
    return lines


@click.command(name="doctor")
@broker_option
@click.option("--database-url", metavar="URL", default=None,
              help="PostgreSQL of the brain and the events [env: VOLUNTEER_DATABASE_URL].")
@click.option("--app-id", metavar="ID", default=None,
              help="Consumer group of the workers whose lag is checked (default volunteer-stream "
                   "[env: VOLUNTEER_APP_ID]).")
@click.option("--max-lag", type=click.IntRange(min=0), default=DEFAULT_MAX_LAG, show_default=True, metavar="N",
              help="Warn when the group is more than N records behind.")
@click.option("--timeout", type=click.FloatRange(min=0.5, max=300), default=DEFAULT_TIMEOUT_S, show_default=True,
              metavar="SECONDS", help="Per network step; an unreachable service fails after this.")
@click.option("--json", "as_json", is_flag=True, help='Print {"ok": bool, "checks": [...]} instead of lines.')
def doctor(broker: str | None, database_url: str | None, app_id: str | None, max_lag: int, timeout: float,
           as_json: bool) -> None:
    """Check that a deployment works, and say how to fix what does not.

    \b
    One line per check: ok | warn | fail, the check, what was found; a 'fix:' line follows each
    warn and fail. Exit status 0 when nothing failed (warnings allowed), 1 otherwise.
    \b
      broker    the broker answers
      topics    turns, volunteered, turns-dlq and page-opens exist (partition counts)
      database  PostgreSQL answers
      schema    'volunteer migrate' has run and is current
      brain     live pages and aliases per source
      lag       how far the workers' consumer group is behind (and whether a worker runs)
      channels  events per channel in the last 7 days; hooks installed but never called or never
                delivering, Codex hooks not trusted (from the heartbeat alone when the database is down)
      feedback  whether page opens arrive, without which stats precision reads 0

    \b
    Examples:
      volunteer doctor
      volunteer doctor --broker kafka://kafka:9092 --database-url postgresql://... --json
    """
    settings = settings_with_flags({}, broker=broker, database_url=database_url, app_id=app_id)
    checks = run_checks(settings, group=settings.app_id, max_lag=max_lag, timeout=timeout)
    if as_json:
        click.echo(json.dumps({"ok": not failed(checks), "checks": [c.to_dict() for c in checks]}, indent=2,
                              ensure_ascii=False))
    else:
        for line in human_lines(checks):
            click.echo(line)
    if failed(checks):
        raise SystemExit(1)
