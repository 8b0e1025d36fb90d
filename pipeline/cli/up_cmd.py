"""``volunteer up``: the embedded broker and database, running until SIGTERM or Ctrl-C."""

from __future__ import annotations

import ipaddress
import signal
import socket
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
    listen: str | None = None  # None: loopback only; else the address other hosts reach this one by
    broker: EmbeddedBroker | None = None
    database: EmbeddedPostgres | None = None
    _stack: ExitStack = field(default_factory=ExitStack)

    @property
    def broker_url(self) -> str:
        assert self.broker is not None
        return self.broker.url

    @property
    def database_url(self) -> str:
        """The URL to hand out: on the listen address with --listen, else on loopback (password included)."""
        assert self.database is not None
        return self.database.remote_url

    def start(self) -> EmbeddedServices:
        """Start both and migrate; raises ``click.ClickException`` with a one-line reason."""
        from sinks.schema import MigrationError, migrate

        try:
            host = self.listen or "127.0.0.1"
            self.broker = self._stack.enter_context(EmbeddedBroker(host=host, port=self.broker_port))
        except BrokerError as exc:
            self.stop()
            raise click.ClickException(str(exc)) from None
        try:
            database = EmbeddedPostgres(self.data_dir, port=self.database_port, listen=self.listen)
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


def check_listen_address(value: str | None) -> str | None:
    """``--listen``: an address of this host other hosts can reach (not a wildcard, not loopback)."""
    if value is None:
        return None
    try:
        address = ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an IP address (give the address other hosts use, "
                                 "e.g. 10.0.0.5)") from None
    if address.is_unspecified:
        raise click.BadParameter(f"{value} listens everywhere but cannot be advertised; give the one "
                                 "address other hosts reach this host by")
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((str(address), 0))
        except OSError:
            raise click.BadParameter(f"{address} is not an address of this host") from None
    return str(address)


def other_hosts_hint(services: EmbeddedServices) -> list[str]:
    """What to set on the other hosts, for the terminal (the password masked)."""
    assert services.database is not None
    from pipeline.masking import mask

    masked = mask(services.database_url, [services.database.password])
    return [
        f"other hosts: VOLUNTEER_BROKER={services.broker_url}",
        f"             VOLUNTEER_DATABASE_URL={masked}  (password: in the line on stdout)",
        "             on each worker host also VOLUNTEER_WEB_HOST=<its own address> and "
        "VOLUNTEER_WEB_ADVERTISED_URL=http://<its own address>:6066",
        "the embedded broker has no authentication: keep ADDR on a private network (docs/deployment.md)",
    ]


@click.command(name="up")
@click.option("--broker-port", type=click.IntRange(0, 65535), default=0, metavar="PORT",
              help="Port of the embedded broker (default: a free one).")
@click.option("--database-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Port of the embedded PostgreSQL (default: a free one).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Keep the database in DIR across runs (default: a throwaway one). The broker is always "
                   "in memory.")
@click.option("--listen", "listen", default=None, metavar="ADDR",
              help="Also serve other hosts: the broker listens on and advertises ADDR, PostgreSQL listens "
                   "on ADDR too (password logins only, as on loopback) (default: 127.0.0.1 only).")
def up(broker_port: int, database_port: int | None, data_dir: Path | None, listen: str | None) -> None:
    """Start the embedded broker and database; keep them running until Ctrl-C or SIGTERM.

    First prints two shell-exportable lines, once both accept connections:

    \b
      VOLUNTEER_BROKER=tansu://127.0.0.1:PORT
      VOLUNTEER_DATABASE_URL=postgresql://postgres:PASSWORD@127.0.0.1:PORT/postgres

    Any command given these values works against them, e.g. in another terminal:

    \b
      export VOLUNTEER_BROKER=... VOLUNTEER_DATABASE_URL=...
      volunteer brain import pipeline/samples/brain
      volunteer worker &
      volunteer feed --session s1 <<< 'user: Did Alice Example reply?'
      volunteer watch --from-beginning

    The database is migrated (volunteer migrate) before the lines are printed. Everything listens
    on 127.0.0.1 only; the broker keeps its data in memory, so it is gone after 'up' stops.

    The database accepts TCP logins only with its random password, which the printed URL carries
    (it is also kept, 0600, in the data dir's 'password' file): other local users cannot log in.
    Only these two lines show it; every other message masks it.

    With --listen ADDR (an address of this host, e.g. on a private network) workers and clients on
    other hosts can use them: the lines then name ADDR, and PostgreSQL listens there too, with the
    same password rule. The broker itself has no authentication: keep ADDR private.
    """
    listen = check_listen_address(listen)
    services = EmbeddedServices(broker_port=broker_port, database_port=database_port, data_dir=data_dir,
                                listen=listen)
    with StopSignal() as stop:
        services.start()
        try:
            click.echo(f"VOLUNTEER_BROKER={services.broker_url}")
            click.echo(f"VOLUNTEER_DATABASE_URL={services.database_url}")
            sys.stdout.flush()
            if listen is not None:
                for line in other_hosts_hint(services):
                    click.echo(line, err=True)
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
