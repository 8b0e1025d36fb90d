"""Reference cases S01-S10, P01-P03, F03-F04 (reference-behaviour.md §15.4), copied verbatim into reference_cases.jsonl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

CASES_FILE = Path(__file__).with_name("reference_cases.jsonl")


def reference_cases(prefix: str) -> list[dict[str, Any]]:
    cases = [json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [c for c in cases if c["id"].startswith(prefix)]


def load_case_rows(conn: psycopg.Connection, case: dict[str, Any]) -> None:
    """Pages (last_retrieved_at = now + offset) and events (volunteered_at = now - age) of a case."""
    for page in case.get("pages", []):
        offset = page.get("last_retrieved_offset_s")
        conn.execute(
            "INSERT INTO pages (source_id, slug, type, title, last_retrieved_at, deleted_at) VALUES "
            "(%s, %s, 'person', %s, CASE WHEN %s::float8 IS NULL THEN NULL "
            "ELSE now() + %s::float8 * interval '1 second' END, CASE WHEN %s THEN now() END)",
            (page.get("source_id", "default"), page["slug"], page["slug"], offset, offset, bool(page.get("deleted"))),
        )
    for ev in case.get("events", []):
        conn.execute(
            "INSERT INTO context_volunteer_events (source_id, slug, confidence, match_arm, rationale, channel, "
            "session_id, turn, volunteered_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
            "now() - %s::float8 * interval '1 second')",
            (ev["source_id"], ev["slug"], ev["confidence"], ev["match_arm"], ev["rationale"], ev["channel"],
             ev.get("session_id"), ev.get("turn"), ev["age_s"]),
        )
