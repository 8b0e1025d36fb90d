"""Stats against a real PostgreSQL: the reference cases S01-S10 and the CLI."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from sinks.stats import channel_activity, run_stats_command, usage_stats

from .cases import load_case_rows, reference_cases

pytestmark = pytest.mark.integration

TABLE_CASES = [c for c in reference_cases("S") if "events" in c and "expect" in c]


def _subset(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    for key, value in expected.items():
        assert actual[key] == value, key


@pytest.mark.parametrize("case", TABLE_CASES, ids=[c["id"] for c in TABLE_CASES])
def test_reference_case(migrated_database_url: str, case: dict[str, Any]) -> None:
    with psycopg.connect(migrated_database_url) as conn:
        load_case_rows(conn, case)
        conn.commit()
    result = usage_stats(migrated_database_url, case["source_ids"], case["days"]).to_dict()
    _subset(result, case["expect"])
    assert result["approximate"] is True
    assert result["note"].startswith('approximate: "used" = pages.last_retrieved_at > volunteered_at.')


def test_s03_days_fallbacks(migrated_database_url: str) -> None:
    (case,) = reference_cases("S03")
    inputs = [float("nan") if d == "NaN" else d for d in case["days_inputs"]]
    got = [usage_stats(migrated_database_url, case["source_ids"], d).days for d in inputs]
    assert got == case["expect_days"]


def test_s05_window_excludes_old(migrated_database_url: str) -> None:
    (case,) = reference_cases("S05")
    with psycopg.connect(migrated_database_url) as conn:
        load_case_rows(conn, case)
        conn.commit()
    for sub in case["days_cases"]:
        assert usage_stats(migrated_database_url, case["source_ids"], sub["days"]).total_volunteered == sub[
            "total_volunteered"
        ]


def test_s09_half_up_rounding(migrated_database_url: str) -> None:
    (case,) = reference_cases("S09")
    with psycopg.connect(migrated_database_url) as conn:
        for i in range(case["events_count"]):
            used = i < case["used_count"]
            conn.execute(
                "INSERT INTO pages (slug, type, title, last_retrieved_at) VALUES (%s, 'person', %s, "
                "CASE WHEN %s THEN now() + interval '1 minute' END)",
                (f"p/{i}", f"P {i}", used),
            )
            conn.execute(
                "INSERT INTO context_volunteer_events (source_id, slug, confidence, match_arm, channel) "
                "VALUES ('default', %s, 0.9, %s, %s)",
                (f"p/{i}", case["match_arm"], case["channel"]),
            )
        conn.commit()
    (row,) = usage_stats(migrated_database_url, ["default"]).by_arm
    assert (row.volunteered, row.used, row.precision) == (16, 1, case["expect_precision"])


def test_s10_row_order(migrated_database_url: str) -> None:
    (case,) = reference_cases("S10")
    with psycopg.connect(migrated_database_url) as conn:
        for arm, channel in case["events_arm_channel"]:
            conn.execute(
                "INSERT INTO context_volunteer_events (source_id, slug, confidence, match_arm, channel) "
                "VALUES ('default', 'x', 0.9, %s, %s)",
                (arm, channel),
            )
        conn.commit()
    rows = usage_stats(migrated_database_url, ["default"]).by_arm
    assert [[r.match_arm, r.channel] for r in rows] == case["expect_by_arm_order"]


def test_missing_table_gives_zeroed_stats(database_url: str) -> None:
    result = usage_stats(database_url, ["default"], 7)
    assert result.to_dict()["by_arm"] == [] and result.days == 7 and result.total_volunteered == 0


def test_unreachable_database_raises() -> None:
    with pytest.raises(psycopg.OperationalError):
        usage_stats("postgresql://postgres@127.0.0.1:1/none?connect_timeout=2", ["default"])


def test_stats_command_human_and_json(migrated_database_url: str) -> None:
    (case,) = reference_cases("S01")
    with psycopg.connect(migrated_database_url) as conn:
        load_case_rows(conn, case)
        conn.commit()
    runner = CliRunner()
    human = runner.invoke(main, ["stats", "--database-url", migrated_database_url])
    assert human.exit_code == 0, human.output
    assert human.output.splitlines()[1:] == [
        "total: 2 volunteered, 1 used",
        "  alias/op: 1/1 used (precision 1)",
        "  title/op: 0/1 used (precision 0)",
    ]
    as_json = runner.invoke(main, ["stats", "--database-url", migrated_database_url, "--json", "--days", "abc"])
    assert as_json.exit_code == 0, as_json.output
    obj = json.loads(as_json.output)
    assert obj["days"] == 30 and obj["total_used"] == 1
    assert '"precision": 1\n' in as_json.output  # a JS number, not 1.0
    other = runner.invoke(main, ["stats", "--database-url", migrated_database_url, "--source", "team", "--json"])
    assert json.loads(other.output)["total_volunteered"] == 0
    both = run_stats_command(migrated_database_url, ["team", "default"], 30, as_json=True)
    assert json.loads(both)["total_volunteered"] == 2


def test_stats_command_unreachable_database_is_one_clear_line() -> None:
    result = CliRunner().invoke(main, ["stats", "--database-url", "postgresql://postgres@127.0.0.1:1/x"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot reach the database at postgresql://postgres@127.0.0.1:1/x")
    assert len(result.output.strip().splitlines()) == 1


def test_channel_activity(migrated_database_url: str) -> None:
    with psycopg.connect(migrated_database_url) as conn:
        for channel, age_days, source in [("stream", 0, "default"), ("stream", 1, "team"), ("op", 2, "default"),
                                          ("watch", 8, "default")]:
            conn.execute(
                "INSERT INTO context_volunteer_events (source_id, slug, confidence, match_arm, channel, volunteered_at) "
                "VALUES (%s, 'x', 0.9, 'title', %s, now() - %s * interval '1 day')",
                (source, channel, age_days),
            )
        conn.commit()
    activity = channel_activity(migrated_database_url)
    assert activity is not None
    assert [(a.channel, a.count) for a in activity] == [("op", 1), ("stream", 2)]
    assert all(a.last_fired is not None for a in activity)
    scoped = channel_activity(migrated_database_url, source_ids=["team"])
    assert scoped is not None and [(a.channel, a.count) for a in scoped] == [("stream", 1)]


def test_channel_activity_without_table(database_url: str) -> None:
    assert channel_activity(database_url) is None
