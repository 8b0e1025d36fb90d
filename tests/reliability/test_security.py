"""Secure connections and the least-privilege worker role.

- **Kafka TLS / SASL**: no TLS broker runs here, so the pass-through is checked where it ends: the
  configuration of every aiokafka client the project builds (producer, consumer, admin), the Faust
  credentials and what Faust's own driver hands to aiokafka. A worker set up for TLS against the
  plaintext embedded broker fails with one line that names the security protocol.
- **PostgreSQL TLS**: a real server with TLS on (a test CA, a server certificate for 127.0.0.1);
  ``sslmode`` / ``sslrootcert`` in the URL and the ``PG*`` environment reach libpq from the
  worker's start-up check, its async event writer and the CLI connections: connections are
  encrypted, verify-full accepts the right CA and refuses a wrong one.
- **Worker role**: ``volunteer migrate --create-worker-role`` grants exactly what a worker does; a
  real worker runs as that role end to end, and everything else is refused.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from pipeline import worker as worker_module
from pipeline.agents.batch_types import InRecord
from pipeline.agents.brain_holder import BrainHolder
from pipeline.agents.sink import EventWriter
from pipeline.app import StreamApp
from pipeline.braindir import iter_brain_dir
from pipeline.cli import main as cli_main
from pipeline.core.types import VolunteeredPage
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.settings import Settings, load_settings
from sinks.brain_import import import_brain
from sinks.brain_pg import brain_version, load_brain_snapshot
from sinks.db import connect, connect_async
from sinks.events import insert_events_sync
from sinks.purge import purge_events
from sinks.retrieval import Open, mark_retrieved_sync
from sinks.roles import GRANTS
from sinks.schema import migrate
from tests.integration.stream.harness import ROOT, run, table_rows
from tests.reliability.conftest import Workers
from tests.services.broker import TestNames, settings_for
from topics.clients import connection_kwargs, faust_credentials, make_admin, make_consumer, make_producer
from topics.definitions import ensure_topics
from topics.io import produce_turns
from topics.records import Volunteered, decode_turn, event_id_for, rfc3339_ms

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

SAMPLES = ROOT / "pipeline" / "samples"


# ----------------------------------------------------------------------------- certificates


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=folder)
    return folder / f"{name}.crt"


def make_server_cert(folder: Path, ca: Path) -> tuple[Path, Path]:
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
            "-out", "server.csr", cwd=folder)
    openssl("x509", "-req", "-in", "server.csr", "-CA", str(ca), "-CAkey", str(ca.with_suffix(".key")),
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt", cwd=folder)
    return folder / "server.crt", folder / "server.key"


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tls")


# ----------------------------------------------------------------------------- Kafka


def tls_settings(ca: Path, **extra: Any) -> Settings:
    return load_settings(broker="kafka://broker.example:9093", kafka_ssl_cafile=str(ca), **extra)


def has_ca(context: ssl.SSLContext, common_name: str) -> bool:
    return any(("commonName", common_name) in rdn for cert in context.get_ca_certs() for rdn in cert["subject"])


def test_kafka_tls_and_sasl_reach_every_client(ca_dir: Path) -> None:
    ca = make_ca(ca_dir, "kafka-ca")
    settings = tls_settings(ca, kafka_security_protocol="sasl_ssl", kafka_sasl_mechanism="SCRAM-SHA-512",
                            kafka_sasl_username="volunteer", kafka_sasl_password="s3cret")
    kwargs = connection_kwargs(settings)
    assert kwargs["security_protocol"] == "SASL_SSL" and kwargs["bootstrap_servers"] == ["broker.example:9093"]
    assert has_ca(kwargs["ssl_context"], "kafka-ca")
    assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
        "SCRAM-SHA-512", "volunteer", "s3cret")

    async def clients() -> list[Any]:
        producer, consumer, admin = make_producer(settings), make_consumer(settings, "turns"), make_admin(settings)
        return [producer.client, consumer._client, admin._client]

    for client in asyncio.run(clients()):  # built, never started: nothing listens at broker.example
        assert client._security_protocol == "SASL_SSL"
        assert has_ca(client._ssl_context, "kafka-ca")
        assert (client._sasl_mechanism, client._sasl_plain_username, client._sasl_plain_password) == (
            "SCRAM-SHA-512", "volunteer", "s3cret")

    credentials = faust_credentials(settings)
    auth = credentials_to_aiokafka_auth(credentials)  # what Faust's driver gives its aiokafka clients
    assert auth["security_protocol"] == "SASL_SSL" and auth["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("volunteer", "s3cret")
    assert has_ca(auth["ssl_context"], "kafka-ca")


def test_kafka_tls_alone_and_plaintext(ca_dir: Path) -> None:
    ca = make_ca(ca_dir, "tls-only-ca")
    tls = tls_settings(ca, kafka_security_protocol="SSL")
    auth = credentials_to_aiokafka_auth(faust_credentials(tls))
    assert auth["security_protocol"] == "SSL" and has_ca(auth["ssl_context"], "tls-only-ca")
    assert "sasl_mechanism" not in connection_kwargs(tls)
    plain = load_settings(broker="kafka://broker.example:9092")
    assert faust_credentials(plain) is None and "ssl_context" not in connection_kwargs(plain)


def test_the_worker_app_carries_the_credentials(ca_dir: Path, tmp_path: Path) -> None:
    """The Faust app a worker runs: its broker credentials, as Faust's driver converts them."""
    ca = make_ca(ca_dir, "app-ca")
    settings = tls_settings(ca, kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="PLAIN",
                            kafka_sasl_username="u", kafka_sasl_password="p", data_dir=str(tmp_path),
                            metrics_port=0)
    stream_app = StreamApp(settings, BrainHolder.from_directory(SAMPLES / "brain"), partitions=4)
    auth = credentials_to_aiokafka_auth(stream_app.app.conf.broker_credentials, stream_app.app.conf.ssl_context)
    assert auth["security_protocol"] == "SASL_SSL" and auth["sasl_mechanism"] == "PLAIN"
    assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("u", "p")
    assert has_ca(auth["ssl_context"], "app-ca")


def test_a_worker_set_up_for_tls_names_it_when_the_broker_does_not_answer(
        ca_dir: Path, module_broker_url: str, names: TestNames, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = make_ca(ca_dir, "mismatch-ca")
    settings = settings_for(module_broker_url, names, kafka_security_protocol="SSL", kafka_ssl_cafile=str(ca))
    monkeypatch.setattr(worker_module, "SETUP_TIMEOUT_S", 3.0)  # the plaintext broker never completes TLS
    with pytest.raises(worker_module.WorkerSetupError) as failure:
        worker_module.prepare_topics(settings)
    message = str(failure.value)
    assert "\n" not in message and module_broker_url in message
    assert "VOLUNTEER_KAFKA_SECURITY_PROTOCOL=SSL" in message and "no answer within 3 s" in message


# ----------------------------------------------------------------------------- PostgreSQL TLS


@pytest.fixture(scope="module")
def tls_postgres(ca_dir: Path) -> Iterator[tuple[EmbeddedPostgres, Path]]:
    """A server of its own with TLS on, its certificate signed by a test CA; yields (server, CA)."""
    ca = make_ca(ca_dir / "pg", "pg-ca")
    pg = EmbeddedPostgres()
    pg.start()
    try:
        cert, key = make_server_cert(ca_dir / "pg", ca)
        for source in (cert, key):
            target = pg.root / source.name
            target.write_bytes(source.read_bytes())
            target.chmod(0o600)
            if os.geteuid() == 0:  # the server runs as 'postgres' and must own its key
                owner = pwd.getpwnam("postgres")
                os.chown(target, owner.pw_uid, owner.pw_gid)
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET ssl_cert_file = '{pg.root / cert.name}'")
            conn.execute(f"ALTER SYSTEM SET ssl_key_file = '{pg.root / key.name}'")
            conn.execute("ALTER SYSTEM SET ssl = on")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 10
        while True:
            with psycopg.connect(pg.url, autocommit=True) as conn:
                row = conn.execute("SHOW ssl").fetchone()
            if (row and row[0] == "on") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        migrate(pg.url)
        yield pg, ca
    finally:
        pg.close()


def encrypted(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
    return bool(row and row[0])


def test_sslmode_and_root_certificate_reach_libpq(tls_postgres: tuple[EmbeddedPostgres, Path], ca_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pg, ca = tls_postgres
    verified = f"{pg.url}?sslmode=verify-full&sslrootcert={ca}"
    worker_module.check_database(load_settings(database_url=verified))  # the worker's start-up check
    with connect(verified) as conn:  # the CLI's way in
        assert encrypted(conn)
    with connect(f"{pg.url}?sslmode=disable") as conn:
        assert not encrypted(conn)

    async def write_one() -> tuple[int, bool]:  # the sink's own connection (async, durable)
        writer = EventWriter(verified, "volunteered")
        event = Volunteered(event_id_for("tls", 1, "default", "people/x", "stream"), "tls", 1,
                            VolunteeredPage("people/x", "default", "X", 0.9, "alias", 'alias match "X"', ""),
                            "stream", rfc3339_ms(0))
        result = await writer.write([InRecord(b"tls", event.to_json(), 0, 0)], 0)
        async with await connect_async(verified) as conn:
            cur = await conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            row = await cur.fetchone()
        await writer.close()
        return result.inserted, bool(row and row[0])

    assert asyncio.run(write_one()) == (1, True)

    wrong_ca = make_ca(ca_dir / "other", "other-ca")
    with pytest.raises(worker_module.WorkerSetupError, match="certificate"):
        worker_module.check_database(load_settings(database_url=f"{pg.url}?sslmode=verify-full&sslrootcert={wrong_ca}"))

    monkeypatch.setenv("PGSSLMODE", "verify-full")  # libpq's environment works as well
    monkeypatch.setenv("PGSSLROOTCERT", str(ca))
    with connect(pg.url) as conn:
        assert encrypted(conn)
    monkeypatch.setenv("PGSSLROOTCERT", str(wrong_ca))
    with pytest.raises(psycopg.OperationalError, match="certificate"):
        connect(pg.url)


def test_sslmode_require_against_a_server_without_tls(database_url: str) -> None:
    with pytest.raises(worker_module.WorkerSetupError, match="SSL"):
        worker_module.check_database(load_settings(database_url=f"{database_url}?sslmode=require"))


# ----------------------------------------------------------------------------- least-privilege role


@pytest.fixture
def worker_role(migrated_database_url: str) -> Iterator[tuple[str, str]]:
    """``volunteer migrate --create-worker-role`` on a migrated database with the sample brain;
    yields (role name, the role's URL). The role is dropped afterwards (roles are cluster-wide)."""
    pages, aliases = iter_brain_dir(SAMPLES / "brain")
    import_brain(migrated_database_url, pages, aliases)
    role = f"vw_{uuid.uuid4().hex[:10]}"
    result = CliRunner().invoke(cli_main, ["migrate", "--database-url", migrated_database_url,
                                           "--create-worker-role", role], catch_exceptions=False,
                                env={"VOLUNTEER_WORKER_ROLE_PASSWORD": role})  # TCP logins need one
    assert result.exit_code == 0, result.output
    assert f"worker role {role} created" in result.output
    parts = migrated_database_url.split("@", 1)
    role_url = f"postgresql://{role}:{role}@{parts[1]}"
    try:
        yield role, role_url
    finally:
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


FORBIDDEN = [
    "UPDATE context_volunteer_events SET slug = 'x'",
    "SELECT rationale FROM context_volunteer_events",
    "UPDATE pages SET title = 'x'",
    "DELETE FROM pages",
    "INSERT INTO page_aliases (source_id, alias_norm, slug) VALUES ('default', 'x', 'y')",
    "TRUNCATE context_volunteer_events",
    "DROP TABLE context_volunteer_events",
    "CREATE TABLE worker_scratch (x int)",
    "SELECT * FROM volunteer_stream_schema",
    "UPDATE volunteer_stream_brain_version SET version = 0",
]


@pytest.mark.parametrize("statement", FORBIDDEN)
def test_the_worker_role_is_refused_everything_else(worker_role: tuple[str, str], statement: str) -> None:
    _, role_url = worker_role
    with psycopg.connect(role_url, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)


def test_the_worker_role_can_do_all_a_worker_does(worker_role: tuple[str, str], migrated_database_url: str) -> None:
    role, role_url = worker_role
    snapshot = load_brain_snapshot(role_url)
    assert snapshot.pages > 0 and brain_version(role_url)
    old = Volunteered(event_id_for("old", 1, "default", "people/alice-example", "stream"), "old", 1,
                      VolunteeredPage("people/alice-example", "default", "Alice Example", 0.9, "alias",
                                      'alias match "Alice Example"', ""), "stream", "2020-01-01T00:00:00.000Z")
    with psycopg.connect(role_url, autocommit=True) as conn:
        assert insert_events_sync(conn, [old]) == 1
        assert insert_events_sync(conn, [old]) == 0  # ON CONFLICT DO NOTHING needs no more
        assert mark_retrieved_sync(conn, [Open("default", "people/alice-example")]) == 1
    assert purge_events(role_url, 90, 100) == 1
    # re-running the grants is harmless and keeps the role
    again = CliRunner().invoke(cli_main, ["migrate", "--database-url", migrated_database_url,
                                          "--create-worker-role", role], catch_exceptions=False)
    assert again.exit_code == 0 and "already existed" in again.output


def test_a_worker_runs_end_to_end_as_the_worker_role(worker_role: tuple[str, str], module_broker_url: str,
                                                     names: TestNames, workers: Workers,
                                                     migrated_database_url: str) -> None:
    _, role_url = worker_role
    settings = settings_for(module_broker_url, names, database_url=role_url, topic_partitions=4)
    run(ensure_topics(settings))
    worker = workers.start(settings, brain=None)  # brain from PostgreSQL, as the role
    worker.wait_ready()
    turns = [t for t in (decode_turn(raw) for raw in (SAMPLES / "transcript.jsonl").read_bytes().splitlines())
             if t is not None]
    run(produce_turns(settings, turns))
    deadline = time.monotonic() + 60
    while len(table_rows(migrated_database_url)) < 10 and time.monotonic() < deadline:  # read as the admin
        time.sleep(0.2)
    assert len(table_rows(migrated_database_url)) >= 10, worker.log()[-3000:]
    assert "permission denied" not in worker.log()
    assert worker.stop() == 0


def test_the_documented_grants_are_the_ones_applied() -> None:
    doc = (ROOT / "docs" / "security.md").read_text()
    for grant in GRANTS:
        assert grant.format(database="<database>", schema="<schema>", role="<role>") in doc


def test_migrate_run_as_the_worker_role_fails_in_one_line(worker_role: tuple[str, str]) -> None:
    _, role_url = worker_role
    result = CliRunner().invoke(cli_main, ["migrate", "--database-url", role_url, "--create-worker-role", "nope"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1

