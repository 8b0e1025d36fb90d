"""Purge against a real PostgreSQL: reference cases P01-P03, batching, the CLI."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from sinks.purge import count_expired, purge_events, purge_events_async

from .cases import load_case_rows, reference_cases

pytestmark = pytest.mark.integration


def _slugs(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT slug FROM context_volunteer_events ORDER BY id")]


def _add_aged(url: str, ages_days: list[float]) -> None:
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO context_volunteer_events (source_id, slug, confidence, match_arm, channel, volunteered_at) "
            "VALUES ('default', %s, 0.9, 'title', 'stream', now() - %s * interval '1 day')",
            [(f"age/{age}", age) for age in ages_days],
        )


def test_p01_purge_90_days(migrated_database_url: str) -> None:
    (case,) = reference_cases("P01")
    with psycopg.connect(migrated_database_url) as conn:
        load_case_rows(conn, case)
    assert purge_events(migrated_database_url, case["ttl_days"]) == case["expect_deleted"]
    assert _slugs(migrated_database_url) == case["expect_remaining_slugs"]


def test_p02_purge_boundary(migrated_database_url: str) -> None:
    (case,) = reference_cases("P02")
    _add_aged(migrated_database_url, case["events_age_days"])
    assert purge_events(migrated_database_url, case["ttl_days"]) == case["expect_deleted"]
    assert _slugs(migrated_database_url) == [f"age/{a}" for a in case["expect_remaining_age_days"]]


def test_p03_missing_table(database_url: str) -> None:
    (case,) = reference_cases("P03")
    assert purge_events(database_url) == case["expect_deleted"]
    assert asyncio.run(purge_events_async(database_url)) == case["expect_deleted"]
    assert count_expired(database_url) == 0


def test_batches_commit_one_by_one(migrated_database_url: str) -> None:
    old, fresh = 1234, 40
    _add_aged(migrated_database_url, [100.0 + i / 1000 for i in range(old)])
    _add_aged(migrated_database_url, [1.0] * fresh)
    assert count_expired(migrated_database_url, 90) == old
    seen_by_others: list[int] = []
    totals: list[int] = []

    def progress(total: int) -> None:
        totals.append(total)
        with psycopg.connect(migrated_database_url) as other:
            row = other.execute("SELECT count(*) FROM context_volunteer_events").fetchone()
            assert row is not None
            seen_by_others.append(int(row[0]))

    assert purge_events(migrated_database_url, 90, batch_size=100, progress=progress) == old
    assert totals == [*range(100, old, 100), old]
    # another session saw each batch committed before the next one started
    assert seen_by_others == [old + fresh - t for t in totals]
    assert len(_slugs(migrated_database_url)) == fresh


def test_async_purge_with_a_given_connection(migrated_database_url: str) -> None:
    _add_aged(migrated_database_url, [91, 92, 93, 5])

    async def run() -> int:
        async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
            return await purge_events_async(conn, 90, batch_size=2)

    assert asyncio.run(run()) == 3
    assert _slugs(migrated_database_url) == ["age/5"]


def test_refuses_a_connection_inside_a_transaction(migrated_database_url: str) -> None:
    with psycopg.connect(migrated_database_url) as conn:
        conn.execute("SELECT 1")
        with pytest.raises(ValueError, match="outside any transaction"):
            purge_events(conn)


def test_bad_arguments(migrated_database_url: str) -> None:
    with pytest.raises(ValueError, match="retention_days"):
        purge_events(migrated_database_url, 0)
    with pytest.raises(ValueError, match="batch_size"):
        purge_events(migrated_database_url, 90, batch_size=0)


def test_purge_command(migrated_database_url: str) -> None:
    _add_aged(migrated_database_url, [40, 20, 10])
    runner = CliRunner()
    dry = runner.invoke(main, ["purge", "--database-url", migrated_database_url, "--days", "15", "--dry-run"])
    assert dry.exit_code == 0 and dry.output.startswith("2 event(s) older than 15 day(s)")
    assert len(_slugs(migrated_database_url)) == 3
    real = runner.invoke(main, ["purge", "--database-url", migrated_database_url, "--days", "15", "--batch-size", "1"])
    assert real.exit_code == 0 and "purged 2 volunteer event(s)" in real.output
    assert _slugs(migrated_database_url) == ["age/10"]
    bad = runner.invoke(main, ["purge", "--database-url", migrated_database_url, "--days", "-1"])
    assert bad.exit_code == 2 and "positive" in bad.output
