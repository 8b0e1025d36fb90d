"""The embedded PostgreSQL: outages keep data, a given data dir persists, missing binaries are explained."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pipeline.embedded import postgres as embedded
from pipeline.embedded.postgres import EmbeddedPostgres, EmbeddedPostgresError, PostgresNotFound

pytestmark = pytest.mark.integration


def _one(url: str, query: str) -> object:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(query).fetchone()
        return row[0] if row else None


def test_stop_and_start_keep_data_and_url(embedded_postgres: EmbeddedPostgres) -> None:
    url = embedded_postgres.url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS outage_probe")
        conn.execute("CREATE TABLE outage_probe (v int)")
        conn.execute("INSERT INTO outage_probe VALUES (42)")
    embedded_postgres.stop()
    assert not embedded_postgres.running
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
    embedded_postgres.start()
    assert embedded_postgres.url == url
    assert _one(url, "SELECT v FROM outage_probe") == 42
    embedded_postgres.restart()
    assert _one(url, "SELECT v FROM outage_probe") == 42
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE outage_probe")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # not pytest's tmp_path: as root the server runs as 'postgres', which cannot enter /tmp/pytest-of-root
    path = Path(tempfile.mkdtemp(prefix="volunteer-pg-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_given_data_dir_survives_close_and_restart_without_data_empties(data_dir: Path) -> None:
    with EmbeddedPostgres(data_dir) as pg:
        assert pg.durable
        assert pg.url == f"postgresql://postgres:{pg.password}@127.0.0.1:{pg.port}/postgres"
        assert len(pg.password) >= 24 and pg.password_path.stat().st_mode & 0o777 == 0o600
        assert _one(pg.url, "SHOW fsync") == "on"  # a user's data dir is never run without fsync
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v text)")
            conn.execute("INSERT INTO kept VALUES ('still here')")
    assert (data_dir / "data" / "PG_VERSION").is_file()
    again = EmbeddedPostgres(data_dir)
    try:
        again.start()
        assert _one(again.url, "SELECT v FROM kept") == "still here"
        again.restart(keep_data=False)
        assert _one(again.url, "SELECT to_regclass('kept') IS NULL") is True
    finally:
        again.close()
    assert data_dir.is_dir()  # a given directory is never deleted


def test_throwaway_cluster_is_fast_and_removed() -> None:
    pg = EmbeddedPostgres()
    pg.start()
    try:
        root = pg.root
        assert _one(pg.url, "SHOW fsync") == "off"
        assert _one(pg.url, "SHOW listen_addresses") == "127.0.0.1"
        assert _one(pg.url, "SELECT current_setting('server_version_num')::int / 10000") == 15
    finally:
        pg.close()
    assert not root.exists()


def test_fixed_port_in_use_is_a_clear_error(embedded_postgres: EmbeddedPostgres, data_dir: Path) -> None:
    clash = EmbeddedPostgres(data_dir, port=embedded_postgres.port)
    with pytest.raises(EmbeddedPostgresError, match="did not start"):
        clash.start()
    clash.close()


def test_missing_binaries_say_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(embedded, "SYSTEM_ROOT", tmp_path)
    monkeypatch.setattr(embedded.shutil, "which", lambda _name: None)
    monkeypatch.delenv("VOLUNTEER_PG_BIN", raising=False)
    with pytest.raises(PostgresNotFound) as info:
        EmbeddedPostgres()
    assert "install postgresql-15" in str(info.value) and "VOLUNTEER_DATABASE_URL" in str(info.value)


def test_a_killed_server_reads_as_stopped_and_starts_again(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir, durable=False)
    try:
        pg.start()
        pid = pg.server_pid()
        assert pid is not None and pg.running
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while pg.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pg.running
        pg.start()  # crash recovery from the stale postmaster.pid
        assert pg.running and _one(pg.url, "SELECT 1") == 1
    finally:
        pg.close()


def test_tcp_login_needs_the_password_and_an_old_trust_cluster_gets_one(data_dir: Path) -> None:
    """Any local user reaches 127.0.0.1: without the password no role may log in over TCP."""
    with EmbeddedPostgres(data_dir) as pg:
        bare = f"postgresql://postgres@127.0.0.1:{pg.port}/postgres?connect_timeout=5"
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(bare).close()
        wrong = f"postgresql://postgres:wrong@127.0.0.1:{pg.port}/postgres?connect_timeout=5"
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(wrong).close()
        assert _one(pg.socket_conninfo, "SELECT 1") == 1  # the owner's socket needs none
        hba = (pg.pgdata / "pg_hba.conf").read_text()
        first_password = pg.password
    # a cluster made before passwords: trust everywhere, no password file
    (data_dir / "data" / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
    (data_dir / "password").unlink()
    with EmbeddedPostgres(data_dir) as pg:
        assert pg.password != first_password
        assert (pg.pgdata / "pg_hba.conf").read_text() == hba
        assert _one(pg.url, "SELECT 1") == 1
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(f"postgresql://postgres@127.0.0.1:{pg.port}/postgres?connect_timeout=5").close()
