"""pytest plugin: a real PostgreSQL for the whole session, a fresh database per test.

Where the server comes from, in order: ``VOLUNTEER_TEST_DATABASE_URL``; a testcontainers
``postgres:15`` when a Docker daemon answers; else an :class:`EmbeddedPostgres` of the system's
PostgreSQL 15 (the usual case on the project machine). Each test that asks for ``database_url``
gets its own empty database, dropped afterwards, so tests never see each other's rows.
``migrated_database_url`` is a copy of a database migrated once per session (CREATE DATABASE ...
TEMPLATE), which is much cheaper than migrating per test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pipeline.embedded.postgres import EmbeddedPostgres
from sinks.db import with_database
from sinks.schema import migrate
from tests.services.docker_daemon import docker_available

MIGRATED_TEMPLATE = "volunteer_test_migrated_template"


@dataclass
class PostgresService:
    url: str
    origin: str  # "env" | "testcontainers" | "embedded"
    embedded: EmbeddedPostgres | None = None



@pytest.fixture(scope="session")
def _postgres_service() -> Iterator[PostgresService]:
    env_url = os.environ.get("VOLUNTEER_TEST_DATABASE_URL", "").strip()
    if env_url:
        yield PostgresService(env_url, "env")
        return
    if docker_available():
        from testcontainers.postgres import PostgresContainer

        container: Any = PostgresContainer("postgres:15", driver=None)
        with container:
            yield PostgresService(str(container.get_connection_url()), "testcontainers")
        return
    pg = EmbeddedPostgres()
    pg.start()
    try:
        yield PostgresService(pg.url, "embedded", pg)
    finally:
        pg.close()


@pytest.fixture(scope="session")
def postgres_server_url(_postgres_service: PostgresService) -> str:
    """URL of the session's server (its maintenance database); tests should prefer ``database_url``."""
    return _postgres_service.url


@pytest.fixture
def embedded_postgres(_postgres_service: PostgresService) -> EmbeddedPostgres:
    """The embedded server's handle, for outage tests that stop and start it.

    Skipped (with the reason) when the server came from the environment or a container, because
    then there is nothing this process may stop.
    """
    if _postgres_service.embedded is None:
        pytest.skip(f"PostgreSQL came from {_postgres_service.origin}, not the embedded path; cannot stop it")
    pg = _postgres_service.embedded
    if not pg.running:  # a previous outage test left it stopped: bring it back
        pg.start()
    return pg


def _admin(server_url: str) -> psycopg.Connection:
    return psycopg.connect(server_url, autocommit=True, connect_timeout=10)


def _create_database(server_url: str, template: str | None = None) -> str:
    name = f"vt_{uuid.uuid4().hex[:16]}"
    with _admin(server_url) as conn:
        stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            stmt = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
        conn.execute(stmt)
    return name


def _drop_database(server_url: str, name: str) -> None:
    with suppress(psycopg.Error), _admin(server_url) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def _migrated_template(postgres_server_url: str) -> Iterator[str]:
    name = f"{MIGRATED_TEMPLATE}_{uuid.uuid4().hex[:8]}"
    with _admin(postgres_server_url) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    migrate(with_database(postgres_server_url, name))
    yield name
    _drop_database(postgres_server_url, name)


@pytest.fixture
def database_url(postgres_server_url: str) -> Iterator[str]:
    """A fresh, empty database for this test only (dropped afterwards)."""
    name = _create_database(postgres_server_url)
    try:
        yield with_database(postgres_server_url, name)
    finally:
        _drop_database(postgres_server_url, name)


@pytest.fixture
def migrated_database_url(postgres_server_url: str, _migrated_template: str) -> Iterator[str]:
    """A fresh database for this test with every migration applied."""
    name = _create_database(postgres_server_url, template=_migrated_template)
    try:
        yield with_database(postgres_server_url, name)
    finally:
        _drop_database(postgres_server_url, name)
