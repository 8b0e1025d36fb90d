"""Migrations against a real PostgreSQL: empty database, gbrain-shaped database, re-runs."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sinks import schema
from sinks.schema import IDENTITY_INDEX, IDENTITY_PARTIAL_INDEX, migrate

pytestmark = pytest.mark.integration

GBRAIN_SQL = Path(__file__).with_name("gbrain_brain.sql")
GBRAIN_TABLES = ("sources", "pages", "page_aliases", "context_volunteer_events")


def load_gbrain(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(GBRAIN_SQL.read_text().encode())


def snapshot(url: str, tables: tuple[str, ...] = GBRAIN_TABLES) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every gbrain table, as text, ordered: what 'nothing changed' means."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with psycopg.connect(url) as conn:
        for table in tables:
            rows = conn.execute(f"SELECT t::text FROM {table} t ORDER BY 1").fetchall()
            out[table] = rows
    return out


def index_names(conn: psycopg.Connection, table: str) -> set[str]:
    rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,)).fetchall()
    return {r[0] for r in rows}


def test_empty_database_gets_the_whole_schema(database_url: str) -> None:
    report = migrate(database_url)
    assert [label.split()[0] for label in report.applied] == ["0001", "0002", "0003", "0004", "0005"]
    assert report.warnings == []
    with psycopg.connect(database_url) as conn:
        cols = conn.execute(
            "SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_name = 'context_volunteer_events' ORDER BY ordinal_position"
        ).fetchall()
        assert [c[0] for c in cols] == [
            "id", "source_id", "slug", "confidence", "match_arm", "rationale", "channel", "session_id",
            "turn", "volunteered_at",
        ]
        nullable = {c[0] for c in cols if c[2] == "YES"}
        assert nullable == {"session_id", "turn"}
        types = {c[0]: c[1] for c in cols}
        assert types["id"] == "bigint" and types["confidence"] == "double precision"
        assert types["turn"] == "integer" and types["volunteered_at"] == "timestamp with time zone"
        defaults = {c[0]: c[3] for c in cols}
        assert defaults["rationale"] == "''::text" and defaults["channel"] == "'op'::text"
        assert defaults["volunteered_at"] == "now()"
        assert {
            "context_volunteer_events_src_time_idx", "context_volunteer_events_src_slug_idx", IDENTITY_INDEX,
        } <= index_names(conn, "context_volunteer_events")
        assert {"page_aliases_lookup_idx", "page_aliases_slug_idx", "page_aliases_uniq"} <= index_names(
            conn, "page_aliases"
        )
        constraints = {
            r[0] for r in conn.execute("SELECT conname FROM pg_constraint WHERE contype = 'u'").fetchall()
        }
        assert {"pages_source_slug_key", "page_aliases_uniq"} <= constraints
        page_cols = {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT column_name, is_nullable FROM information_schema.columns WHERE table_name = 'pages'"
            ).fetchall()
        }
        for name in ("id", "source_id", "slug", "type", "title", "compiled_truth", "frontmatter"):
            assert page_cols[name] == "NO", name
        assert page_cols["deleted_at"] == "YES" and page_cols["last_retrieved_at"] == "YES"
        versions = [r[0] for r in conn.execute("SELECT version FROM volunteer_stream_schema ORDER BY 1")]
        assert versions == [1, 2, 3, 4, 5]
        unique_def = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (IDENTITY_INDEX,)).fetchone()
        assert unique_def is not None
        assert "UNIQUE" in unique_def[0] and "(source_id, channel, session_id, turn, slug)" in unique_def[0]


def test_rerun_is_a_no_op_and_restores_a_dropped_index(database_url: str) -> None:
    migrate(database_url)
    second = migrate(database_url)
    assert second.applied == []
    assert len(second.already) == len(schema.MIGRATIONS)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP INDEX context_volunteer_events_src_slug_idx")
        conn.execute("DROP INDEX " + IDENTITY_INDEX)
    migrate(database_url)
    with psycopg.connect(database_url) as conn:
        assert {"context_volunteer_events_src_slug_idx", IDENTITY_INDEX} <= index_names(conn, "context_volunteer_events")


def test_gbrain_brain_keeps_every_row_and_migrates_twice(database_url: str) -> None:
    load_gbrain(database_url)
    before = snapshot(database_url)
    first = migrate(database_url)
    assert first.warnings == []  # the NULL-identity repeats do not block the unique index
    second = migrate(database_url)
    assert second.applied == []
    assert snapshot(database_url) == before
    with psycopg.connect(database_url) as conn:
        assert IDENTITY_INDEX in index_names(conn, "context_volunteer_events")
        # gbrain's own columns and RLS flag are untouched
        extra = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'pages' "
            "AND column_name IN ('page_kind', 'timeline', 'content_hash', 'emotional_weight')"
        ).fetchone()
        assert extra == (4,)
        rls = conn.execute("SELECT relrowsecurity FROM pg_class WHERE relname = 'context_volunteer_events'").fetchone()
        assert rls == (True,)
        # gbrain-style rows without session/turn can still be logged, repeatedly
        for _ in range(2):
            conn.execute(
                "INSERT INTO context_volunteer_events (source_id, slug, confidence, match_arm) "
                "VALUES ('default', 'people/alice-example', 0.9, 'alias')"
            )
        conn.commit()


def test_old_gbrain_brain_without_retrieval_columns_gets_them_added(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE pages (id SERIAL PRIMARY KEY, source_id TEXT NOT NULL DEFAULT 'default', "
            "slug TEXT NOT NULL, type TEXT NOT NULL, title TEXT NOT NULL, "
            "CONSTRAINT pages_source_slug_key UNIQUE (source_id, slug))"
        )
        conn.execute("INSERT INTO pages (slug, type, title) VALUES ('a', 'person', 'A')")
    migrate(database_url)
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT slug, title, compiled_truth, frontmatter, deleted_at, last_retrieved_at FROM pages"
        ).fetchone()
        assert row == ("a", "A", "", {}, None, None)


def test_duplicate_identities_fall_back_to_a_partial_index_and_delete_nothing(database_url: str) -> None:
    load_gbrain(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for _ in range(2):  # two rows with the same full identity: a unique index is impossible
            conn.execute(
                "INSERT INTO context_volunteer_events (source_id, slug, confidence, match_arm, channel, "
                "session_id, turn) VALUES ('default', 'people/alice-example', 0.9, 'alias', 'op', 's-9', 3)"
            )
    before = snapshot(database_url)
    report = migrate(database_url)
    assert any("duplicate" in w and "nothing was deleted" in w for w in report.warnings)
    assert snapshot(database_url) == before
    with psycopg.connect(database_url) as conn:
        names = index_names(conn, "context_volunteer_events")
        assert IDENTITY_PARTIAL_INDEX in names and IDENTITY_INDEX not in names
        note = conn.execute("SELECT notes FROM volunteer_stream_schema WHERE version = 4").fetchone()
        assert note is not None and "partial unique index" in note[0]
    # re-running keeps the fallback (still duplicates) without failing
    again = migrate(database_url)
    assert any("partial identity index kept" in w for w in again.warnings)
    # once the old duplicates are gone, migrate upgrades to the full index
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM context_volunteer_events WHERE session_id = 's-9'")
    upgraded = migrate(database_url)
    assert any("replaced by the full unique index" in w for w in upgraded.warnings)
    with psycopg.connect(database_url) as conn:
        names = index_names(conn, "context_volunteer_events")
        assert IDENTITY_INDEX in names and IDENTITY_PARTIAL_INDEX not in names


def test_concurrent_migrations_serialise(database_url: str) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            migrate(database_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    with psycopg.connect(database_url) as conn:
        assert [r[0] for r in conn.execute("SELECT version FROM volunteer_stream_schema ORDER BY 1")] == [1, 2, 3, 4, 5]


def test_migrate_accepts_an_open_connection_and_restores_its_mode(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        report = migrate(conn)
        assert len(report.applied) == len(schema.MIGRATIONS)
        assert conn.autocommit is False
        assert schema.applied_versions(conn) == [1, 2, 3, 4, 5]


@pytest.fixture
def worker_role(database_url: str) -> Iterator[str]:
    """A login role that owns nothing: what a locked-down worker account looks like."""
    role = f"worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{role}'")  # TCP logins need a password
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
    yield role
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


def _as(url: str, role: str) -> str:
    """The same URL as ``role`` (whose password is its name)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}:{role}@{rest.split('@', 1)[1]}"


def test_rerun_by_a_role_that_owns_nothing(database_url: str, worker_role: str) -> None:
    migrate(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {worker_role}")
    report = migrate(_as(database_url, worker_role))
    assert report.applied == [] and report.warnings == []


def test_first_run_by_a_non_owner_on_a_gbrain_brain_explains_itself(database_url: str, worker_role: str) -> None:
    load_gbrain(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {worker_role}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {worker_role}")
    with pytest.raises(schema.MigrationError, match=r"must be owner of table context_volunteer_events.*as the owner"):
        migrate(_as(database_url, worker_role))


def test_no_trigger_rights_on_pages_falls_back_with_a_warning(database_url: str, worker_role: str) -> None:
    from sinks.brain_pg import brain_version

    load_gbrain(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE context_volunteer_events")  # a brain from before gbrain's v117
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {worker_role}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {worker_role}")
    report = migrate(_as(database_url, worker_role))
    assert any("could not add change triggers on pages" in w for w in report.warnings)
    assert "/s" in brain_version(_as(database_url, worker_role))
    with psycopg.connect(database_url) as conn:
        assert IDENTITY_INDEX in index_names(conn, "context_volunteer_events")
