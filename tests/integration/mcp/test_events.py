"""Op-channel events on a real PostgreSQL: rows, attribution clamps, retried calls, stats, opens, outages."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import psycopg
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.core.pages import Page
from pipeline.embedded.postgres import EmbeddedPostgres
from sinks.brain_import import import_brain
from tests.integration.mcp.helpers import SAMPLES, server_env, stdio_session, wait_for

pytestmark = pytest.mark.integration

WINDOW = "user: ping Alice Example about the secret merger"
SECRET = "secret merger"


def rows(url: str, where: str = "true", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    with psycopg.connect(url) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(f"SELECT source_id, slug, confidence, match_arm, rationale, channel, session_id, turn "
                    f"FROM context_volunteer_events WHERE {where} ORDER BY id", params)
        return list(cur.fetchall())


def test_op_rows_attribution_retry_opened_and_stats(brain_db: str) -> None:
    env = server_env(VOLUNTEER_DATABASE_URL=brain_db)
    out: dict[str, Any] = {}

    async def go() -> None:
        async with stdio_session([], env=env) as session:  # brain and events both from the database
            first = await session.call_tool("volunteer_context", {"window": WINDOW, "session_id": "s-42", "turn": 7})
            retry = await session.call_tool("volunteer_context", {"window": WINDOW, "session_id": "s-42", "turn": 7})
            assert first.structured_content == retry.structured_content
            out["pages"] = first.structured_content["pages"]
            await session.call_tool("volunteer_context", {"window": WINDOW, "session_id": "s" * 300, "turn": 7.5})
            await session.call_tool("volunteer_context", {"window": "user: ok thanks", "session_id": "s-0", "turn": 1})
            assert wait_for(lambda: len(rows(brain_db)) >= 2 * len(out["pages"]))
            time.sleep(0.3)  # a duplicate would have arrived by now
            opened = await session.call_tool("volunteer_opened", {"slugs": [p["slug"] for p in out["pages"]]})
            assert not opened.is_error, opened.content
            out["opened"] = opened.structured_content
            stats = await session.call_tool("volunteer_stats", {"days": 7})
            out["stats"] = stats.structured_content
            out["stats_text"] = stats.content[0].text
            as_op = await session.call_tool("volunteer_context", {"stats": True, "days": 7})  # spec O03
            assert as_op.structured_content == out["stats"]
            default_days = await session.call_tool("volunteer_context", {"stats": True})
            assert default_days.structured_content["days"] == 30 and default_days.structured_content["approximate"]
            not_true = await session.call_tool("volunteer_context", {"stats": "true"})  # spec O09
            assert not_true.is_error and not_true.structured_content == {
                "error": "invalid_params", "message": "window is required unless stats: true"}

    anyio.run(go)
    pages = out["pages"]
    assert [p["slug"] for p in pages] == ["people/alice-example"]
    logged = rows(brain_db, "session_id = %s", ("s-42",))
    assert logged == [{"source_id": "default", "slug": "people/alice-example", "confidence": pages[0]["confidence"],
                       "match_arm": "title", "rationale": pages[0]["rationale"], "channel": "op",
                       "session_id": "s-42", "turn": 7}]  # the retried call wrote nothing more
    clamped = rows(brain_db, "session_id <> %s", ("s-42",))
    assert [(len(r["session_id"]), r["turn"], r["channel"]) for r in clamped] == [(256, None, "op")]
    assert rows(brain_db, "session_id = %s", ("s-0",)) == []  # nothing volunteered, nothing logged
    assert all(SECRET not in json.dumps(r) for r in rows(brain_db))
    assert out["opened"] == {"reported": 1, "updated": 1}
    by_arm = out["stats"]["by_arm"]
    assert by_arm == [{"match_arm": "title", "channel": "op", "volunteered": 2, "used": 2, "precision": 1}]
    assert "title/op: 2/2 used (precision 1)" in out["stats_text"]
    cli = CliRunner(mix_stderr=False).invoke(main, ["stats", "--database-url", brain_db, "--json", "--days", "7"])
    assert json.loads(cli.stdout)["by_arm"] == by_arm


def test_brain_from_the_database_is_refreshed_live(brain_db: str) -> None:
    env = server_env(VOLUNTEER_DATABASE_URL=brain_db, VOLUNTEER_BRAIN_REFRESH_SECONDS="0.2")
    window = {"window": "user: did Quillon Vantablack reply?"}

    async def go() -> None:
        async with stdio_session(["--no-log"], env=env) as session:
            before = await session.call_tool("volunteer_context", window)
            assert before.structured_content["count"] == 0
            import_brain(brain_db, [Page(id=9001, slug="people/quillon-vantablack", title="Quillon Vantablack",
                                         compiled_truth="Quillon runs the lab.")], [])
            for _ in range(100):
                after = await session.call_tool("volunteer_context", window)
                if after.structured_content["count"]:
                    break
                await anyio.sleep(0.1)
            assert [p["slug"] for p in after.structured_content["pages"]] == ["people/quillon-vantablack"]

    anyio.run(go)


def test_context_log_on_the_command_line(brain_db: str) -> None:
    runner = CliRunner(mix_stderr=False)
    args = ["context", "--database-url", brain_db, "--json", "--log", "--session-id", "cli-1", "--turn", "3",
            "--window", WINDOW]
    for _ in range(2):  # run twice: the second is a retry of the same call
        result = runner.invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["count"] == 1
    assert [(r["session_id"], r["turn"], r["channel"]) for r in rows(brain_db)] == [("cli-1", 3, "op")]

    requests = [{"window": WINDOW, "session_id": "b-1", "turn": 1}, {"window": WINDOW, "session_id": "b-1", "turn": 2},
                {"window": WINDOW, "session_id": "b-1", "turn": 2}, {"window": "  "}]
    stdin = b"\n".join(orjson.dumps(r) for r in requests) + b"\n"
    result = runner.invoke(main, ["context", "--database-url", brain_db, "--batch", "--log"], input=stdin)
    assert result.exit_code == 0, result.stderr
    assert [(r["session_id"], r["turn"]) for r in rows(brain_db, "session_id = %s", ("b-1",))] == [("b-1", 1), ("b-1", 2)]

    plain = runner.invoke(main, ["context", "--database-url", brain_db, "--window", WINDOW])
    assert plain.exit_code == 0 and len(rows(brain_db)) == 3  # without --log nothing is written


def test_context_log_with_the_database_down_still_answers() -> None:
    started = time.monotonic()
    result = CliRunner(mix_stderr=False).invoke(main, [
        "context", "--brain", str(SAMPLES / "brain"), "--database-url", "postgresql://nobody@127.0.0.1:1/x",
        "--json", "--log", "--window", WINDOW])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["count"] == 1
    assert time.monotonic() - started < 8
    warnings = [line for line in result.stderr.splitlines() if "op event logging" in line]
    assert len(warnings) == 1 and "dropped 1 event row(s)" in warnings[0] and SECRET not in result.stderr


def test_mcp_keeps_answering_while_the_database_is_down(tmp_path: Path, embedded_postgres: EmbeddedPostgres,
                                                        migrated_database_url: str) -> None:
    """Stop PostgreSQL under a running server: calls still answer at once; rows resume after a restart."""
    errlog = (tmp_path / "stderr.txt").open("w+")
    env = server_env(VOLUNTEER_DATABASE_URL=migrated_database_url)
    timings: list[float] = []

    async def call(session: Any, turn: int) -> None:
        t0 = time.monotonic()
        result = await session.call_tool("volunteer_context", {"window": WINDOW, "session_id": "down", "turn": turn})
        timings.append(time.monotonic() - t0)
        assert result.structured_content["count"] == 1

    async def go() -> None:
        async with stdio_session(["--brain", str(SAMPLES / "brain")], env=env, errlog=errlog) as session:
            await call(session, 1)
            assert wait_for(lambda: len(rows(migrated_database_url)) == 1)
            embedded_postgres.stop()
            try:
                for turn in range(2, 12):
                    await call(session, turn)
                await anyio.sleep(2.5)  # the retries of the failed batch are over
            finally:
                embedded_postgres.start()
            await call(session, 20)
            assert wait_for(lambda: [r["turn"] for r in rows(migrated_database_url)][-1:] == [20], timeout=15)

    anyio.run(go)
    assert max(timings) < 0.5, timings
    errlog.seek(0)
    text = errlog.read()
    warnings = [line for line in text.splitlines() if "op event logging" in line]
    assert warnings and "dropped" in warnings[0] and "works again" in warnings[-1]
    assert SECRET not in text


def test_sigterm_after_a_call_still_writes_its_rows(brain_db: str) -> None:
    """Clients stop stdio servers with SIGTERM: the queued rows are written before the process exits."""
    import subprocess

    from tests.integration.mcp.helpers import VOLUNTEER

    proc = subprocess.Popen([VOLUNTEER, "mcp", "--brain", str(SAMPLES / "brain")],
                            env=server_env(VOLUNTEER_DATABASE_URL=brain_db),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, Any]) -> None:
        proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert json.loads(proc.stdout.readline())["id"] == 1
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "volunteer_context", "arguments": {"window": WINDOW, "session_id": "term", "turn": 9}}})
    assert json.loads(proc.stdout.readline())["result"]["structuredContent"]["count"] == 1
    proc.terminate()
    assert proc.wait(15) == 0
    assert [(r["session_id"], r["turn"]) for r in rows(brain_db)] == [("term", 9)]
