"""``volunteer context`` / ``volunteer replay`` with the brain in a real PostgreSQL (and ``--stats``)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from pipeline.braindir import iter_brain_dir, load_brain_dir
from pipeline.cli import main
from pipeline.core.op import volunteer_context
from sinks.brain_import import import_brain

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
CONFORMANCE = ROOT / "tests" / "fixtures" / "conformance"
SAMPLES = ROOT / "pipeline" / "samples"


def run(args: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    result = CliRunner(mix_stderr=False).invoke(main, args, input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def conformance_db(migrated_database_url: str) -> str:
    pages, aliases = iter_brain_dir(CONFORMANCE / "brain")
    import_brain(migrated_database_url, pages, aliases)
    return migrated_database_url


def test_context_batch_on_a_database_brain_equals_the_directory_brain(conformance_db: str) -> None:
    cases = [json.loads(line) for line in (CONFORMANCE / "cases-op.jsonl").read_text(encoding="utf-8").splitlines()][:80]
    requests = [
        {"window": c["window"], **{k: v for k, v in c["opts"].items() if k != "lexical_arms"}, "lexical_arms": c["opts"].get("lexical_arms", True)}
        for c in cases
    ]
    stdin = b"\n".join(orjson.dumps(r) for r in requests) + b"\n"
    code, out, err = run(["context", "--database-url", conformance_db, "--batch"], stdin)
    assert code == 0, err
    got = [orjson.loads(line) for line in out.splitlines()]
    brain = load_brain_dir(CONFORMANCE / "brain")
    expected = [
        volunteer_context(
            r["window"], brain, source_ids=r.get("source_ids", ["default"]), prior_context=r.get("prior_context"),
            max_pages=r.get("max_pages"), min_confidence=r.get("min_confidence"), lexical_arms=r["lexical_arms"],
        )
        for r in requests
    ]
    assert got == expected
    assert sum(r["count"] for r in got) > 50


def test_replay_on_a_database_brain(migrated_database_url: str) -> None:
    pages, aliases = iter_brain_dir(SAMPLES / "brain")
    import_brain(migrated_database_url, pages, aliases)
    transcript = str(SAMPLES / "transcript.jsonl")
    code, from_db, err = run(["replay", transcript, "--database-url", migrated_database_url, "--json"])
    assert code == 0, err
    code, from_dir, _ = run(["replay", transcript, "--brain", str(SAMPLES / "brain"), "--json"])
    assert from_db == from_dir and len(from_db.splitlines()) >= 10


def test_stats_with_a_database(migrated_database_url: str) -> None:
    code, out, err = run(["context", "--stats", "--days", "7", "--database-url", migrated_database_url])
    assert code == 0, err
    assert out.startswith("volunteered-context precision — last 7 day(s) (approximate:")
    assert out.endswith("  (no volunteer events in the window)\n")


def test_unreachable_database_is_a_one_line_error() -> None:
    code, _, err = run(["context", "--database-url", "postgresql://nobody@127.0.0.1:1/x", "--window", "user: hi"])
    assert code == 1
    assert err.startswith("Error: cannot reach the database") and err.count("\n") == 1
