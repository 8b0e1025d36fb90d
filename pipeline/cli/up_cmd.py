"""``volunteer up``: the embedded broker and database, running until SIGTERM or Ctrl-C."""

from __future__ import annotations

import signal
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import click

from pipeline.embedded.postgres import EmbeddedPostgres, EmbeddedPostgresError, PostgresNotFound
from pipeline.embedded.tansu import BrokerError, EmbeddedBroker


@dataclass
class EmbeddedServices:
    """An embedded Tansu broker and an embedded PostgreSQL (migrated), started and stopped together."""

    broker_port: int = 0
    database_port: int | None = None
    data_dir: Path | None = None
    broker: EmbeddedBroker | None = None
    database: EmbeddedPostgres | None = None
    _stack: ExitStack = field(default_factory=ExitStack)

    @property
    def broker_url(self) -> str:
        assert self.broker is not None
        return self.broker.url

    @property
    def database_url(self) -> str:
        assert self.database is not None
        return self.database.url

    def start(self) -> EmbeddedServices:
        """Start both and migrate; raises ``click.ClickException`` with a one-line reason."""
        from sinks.schema import MigrationError, migrate

        try:
            self.broker = self._stack.enter_context(EmbeddedBroker(port=self.broker_port))
        except BrokerError as exc:
            self.stop()
            raise click.ClickException(str(exc)) from None
        try:
            database = EmbeddedPostgres(self.data_dir, port=self.database_port)
            database.start()
            self._stack.callback(database.close)
            self.database = database
            migrate(database.url)
        except (PostgresNotFound, EmbeddedPostgresError, MigrationError, OSError) as exc:
            self.stop()
            raise click.ClickException(f"cannot start the embedded PostgreSQL: {exc}") from None
        return self

    def alive(self) -> bool:
        broker_ok = self.broker is not None and self.broker.running
        db_ok = self.database is not None and self.database.running
        return broker_ok and db_ok

    def stop(self) -> None:
        """Stop the database, then the broker (reverse start order). Idempotent."""
        self._stack.close()


class StopSignal:
    """SIGINT / SIGTERM set an event instead of raising, so shutdown runs in order."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        self.event.set()

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


@click.command(name="up")
@click.option("--broker-port", type=click.IntRange(0, 65535), default=0, metavar="PORT",
              help="Port of the embedded broker (default: a free one).")
@click.option("--database-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Port of the embedded PostgreSQL (default: a free one).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Keep the database in DIR across runs (default: a throwaway one). The broker is always "
                   "in memory.")
def up(broker_port: int, database_port: int | None, data_dir: Path | None) -> None:
    """Start the embedded broker and database; keep them running until Ctrl-C or SIGTERM.

    First prints two shell-exportable lines, once both accept connections:

    \b
      VOLUNTEER_BROKER=tansu://127.0.0.1:PORT
      VOLUNTEER_DATABASE_URL=postgresql://postgres@127.0.0.1:PORT/postgres

    Any command given these values works against them, e.g. in another terminal:

    \b
      export VOLUNTEER_BROKER=... VOLUNTEER_DATABASE_URL=...
      volunteer brain import pipeline/samples/brain
      volunteer worker &
      volunteer feed --session s1 <<< 'user: Did Alice Example reply?'
      volunteer watch --from-beginning

    The database is migrated (volunteer migrate) before the lines are printed. Everything listens
    on 127.0.0.1 only; the broker keeps its data in memory, so it is gone after 'up' stops.
    """
    services = EmbeddedServices(broker_port=broker_port, database_port=database_port, data_dir=data_dir)
    with StopSignal() as stop:
        services.start()
        try:
            click.echo(f"VOLUNTEER_BROKER={services.broker_url}")
            click.echo(f"VOLUNTEER_DATABASE_URL={services.database_url}")
            sys.stdout.flush()
            click.echo("embedded broker and PostgreSQL are running; stop with Ctrl-C", err=True)
            announce_credential()
            while not stop.event.wait(0.5):
                if not services.alive():
                    raise click.ClickException("an embedded service stopped unexpectedly; shutting down")
        finally:
            started = time.monotonic()
            services.stop()
            click.echo(f"stopped the embedded broker and PostgreSQL ({time.monotonic() - started:.1f}s)", err=True)


def announce_credential() -> None:
    """Create the hooks' secret now (docs/hooks.md "The credential"); say where it is, never what."""
    import os

    from pipeline.hook.credential import CredentialError, ensure_token

    try:
        click.echo(f"hook credential: {ensure_token(os.environ)}", err=True)
    except (CredentialError, OSError) as exc:
        click.echo(f"hook credential: {exc}", err=True)
