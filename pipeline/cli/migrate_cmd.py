"""``volunteer migrate``: create the tables and indexes this service needs, leaving gbrain data alone."""

from __future__ import annotations

import click

from pipeline.cli.options import database_option, fail_on_db_error, resolve_database_url


@click.command(name="migrate")
@database_option
@click.option("--create-worker-role", "worker_role", metavar="NAME", default=None,
              help="Also create (if missing) a least-privilege login role for workers and grant it exactly what "
                   "a worker needs (docs/security.md).")
@click.option("--worker-role-password", "worker_password", metavar="PASSWORD", default=None,
              envvar="VOLUNTEER_WORKER_ROLE_PASSWORD", show_envvar=True,
              help="Password to set on the worker role (prefer the environment variable: a flag ends up in "
                   "shell history). Without it a new role has none.")
def migrate(database_url: str | None, worker_role: str | None, worker_password: str | None) -> None:
    """Create or complete the schema in the database (safe to run any number of times).

    \b
    Creates what is missing and never drops or rewrites existing data, so it can be pointed at a
    live gbrain brain: pages, page_aliases, context_volunteer_events (gbrain's columns and index
    names), a unique index for idempotent event writes, and a brain change counter that workers
    poll. Applied versions are recorded in the table volunteer_stream_schema.

    \b
    Examples:
      volunteer migrate --database-url postgresql://postgres@127.0.0.1:5432/brain
      VOLUNTEER_WORKER_ROLE_PASSWORD=... volunteer migrate --create-worker-role volunteer_worker
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
    if worker_role is not None:
        create_role(url, worker_role, worker_password)
    elif worker_password is not None:
        raise click.UsageError("--worker-role-password / VOLUNTEER_WORKER_ROLE_PASSWORD needs --create-worker-role")


def create_role(url: str, role: str, password: str | None) -> None:
    from sinks.roles import RoleError, create_worker_role

    try:
        with fail_on_db_error(url):
            report = create_worker_role(url, role, password=password)
    except RoleError as exc:
        raise click.ClickException(str(exc)) from None
    for statement in report.statements:
        click.echo(f"  {statement}")
    state = "created" if report.created else "already existed; grants renewed"
    click.echo(f"worker role {role} {state}")
