"""``volunteer worker``: the stream worker (Faust) — turns in, volunteered pages out, events stored."""

from __future__ import annotations

from typing import Any

import click

from pipeline.cli.options import (
    broker_option,
    decision_flags,
    decision_options_from_flags,
    settings_with_flags,
)


@click.command(name="worker")
@broker_option
@click.option("--database-url", metavar="URL", default=None,
              help="PostgreSQL for the events (and the brain, unless --brain) [env: VOLUNTEER_DATABASE_URL].")
@click.option("--brain", "brain_dir", metavar="DIR", envvar="VOLUNTEER_BRAIN",
              type=click.Path(file_okay=False, exists=True, path_type=str),
              help="Read the brain from a directory (pages.jsonl [+ aliases.jsonl]) instead of PostgreSQL; "
                   "it is then not refreshed [env: VOLUNTEER_BRAIN].")
@click.option("--web-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Port of the web server, the hooks' endpoint (default 6066 [env: VOLUNTEER_WEB_PORT]; 0 = any "
                   "free port). A taken port stops the worker with one line; hooks find the port in the worker "
                   "registry, and VOLUNTEER_WEB_HOST / VOLUNTEER_WEB_ADVERTISED_URL open it to other hosts "
                   "(docs/hooks.md).")
@click.option("--without-web", is_flag=True, help="Run without the Faust web server.")
@click.option("--partitions", type=click.IntRange(min=1), default=None, metavar="N",
              help="Partitions for topics this worker creates (default 8 [env: VOLUNTEER_TOPIC_PARTITIONS]); "
                   "existing topics keep theirs.")
@click.option("--app-id", default=None, metavar="ID",
              help="Faust app id = consumer group; workers with the same id share the partitions "
                   "(default volunteer-stream [env: VOLUNTEER_APP_ID]).")
@click.option("--loglevel", type=click.Choice(["debug", "info", "warning", "error"]), default=None,
              help="Log level (default info [env: VOLUNTEER_LOG_LEVEL]).")
@decision_flags
def worker(broker: str | None, database_url: str | None, brain_dir: str | None, web_port: int | None,
           without_web: bool, partitions: int | None, app_id: str | None, loglevel: str | None,
           **decision: Any) -> None:
    """Run a stream worker until SIGTERM or Ctrl-C.

    Consumes Turn records from the 'turns' topic (key = session id), keeps a rolling window per
    session in a changelog-backed table, volunteers brain pages to the 'volunteered' topic, and
    writes them to context_volunteer_events. Records that cannot be processed go to 'turns-dlq'
    with a reason. Start several workers with the same --app-id to share the partitions.

    \b
    Examples:
      volunteer up                                   # in another terminal: broker + database
      export VOLUNTEER_BROKER=... VOLUNTEER_DATABASE_URL=...   # the lines 'up' printed
      volunteer worker                               # brain from PostgreSQL (volunteer brain import)
      volunteer worker --brain pipeline/samples/brain --without-web
    """
    from pipeline.worker import WorkerSetupError, build_worker, run_worker

    settings = settings_with_flags(decision, broker=broker, database_url=database_url,
                                   topic_partitions=partitions, app_id=app_id, web_port=web_port)
    options = decision_options_from_flags(settings, decision)
    try:
        stream_app = build_worker(settings, brain_dir=brain_dir, options=options, web_enabled=not without_web,
                                  web_port=web_port)
    except WorkerSetupError as exc:
        raise click.ClickException(str(exc)) from None
    run_worker(stream_app, loglevel=(loglevel or settings.log_level).lower())
