"""``volunteer mcp`` over stdio, driven by the MCP SDK's own client: handshake, schemas, every op case."""

from __future__ import annotations

import json
from typing import Any

import anyio
import orjson
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.core.render import format_result
from tests.integration.mcp.helpers import CONFORMANCE, arguments, expected, op_cases, ordered, stdio_session

pytestmark = pytest.mark.integration

BRAIN = ["--brain", str(CONFORMANCE / "brain"), "--no-log"]
CASES = op_cases()

ODD_REQUESTS: list[dict[str, Any]] = [
    {},  # no window: the reference's invalid_params
    {"window": "   \n  "},
    {"window": 5},
    {"window": None},
    {"window": "user: ping Ruth Merckx", "max_pages": "3"},  # not a number: the default, not an error
    {"window": "user: ping Ruth Merckx", "max_pages": 10, "min_confidence": 7},  # clamped
    {"window": "user: ping Ruth Merckx", "min_confidence": "abc", "prior_context": 12},
    {"window": "user: ping Ruth Merckx", "lexical_arms": "no"},
    {"window": "user: ping Ruth Merckx", "source_ids": "default"},  # invalid_params
    {"window": "user: ping Ruth Merckx", "source_ids": [""]},
    {"window": "user: ping Ruth Merckx", "source_ids": None, "exclude_slug_prefixes": None, "max_pages": None},
    {"window": "user: ping Ruth Merckx", "source_ids": []},
    {"window": "user: ping Ruth Merckx", "exclude_slug_prefixes": ["people/"]},
    {"window": "user: ping Ruth Merckx", "exclude_slug_prefixes": "people/"},
    {"window": "user: ping Ruth Merckx", "session_id": ["x"], "turn": "7", "unknown": True},
    {"window": "user:"},
]


def batch_output(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    stdin = b"\n".join(orjson.dumps(r) for r in requests) + b"\n"
    result = CliRunner(mix_stderr=False).invoke(main, ["context", "--brain", str(CONFORMANCE / "brain"), "--batch"],
                                                input=stdin, catch_exceptions=False)
    return [orjson.loads(line) for line in result.stdout.splitlines()]


def test_initialize_and_the_tool_schemas() -> None:
    async def go() -> None:
        async with stdio_session(BRAIN) as session:
            listing = await session.list_tools()
            tools = {t.name: t for t in listing.tools}
            assert list(tools) == ["volunteer_context", "volunteer_stats", "volunteer_opened"]
            ctx = tools["volunteer_context"].input_schema
            assert ctx["type"] == "object"
            assert set(ctx["properties"]) >= {"window", "prior_context", "max_pages", "min_confidence", "source_ids",
                                              "lexical_arms", "exclude_slug_prefixes", "session_id", "turn"}
            # lenient on purpose: no required list, no bounds, unknown keys allowed (values are clamped, not refused)
            assert "required" not in ctx and "additionalProperties" not in ctx
            assert all("minimum" not in p and "maximum" not in p for p in ctx["properties"].values())
            for tool in tools.values():
                assert tool.description and tool.output_schema is not None
                for name, prop in tool.input_schema["properties"].items():
                    assert prop.get("description"), f"{tool.name}.{name} has no description"
            assert set(tools["volunteer_stats"].input_schema["properties"]) == {"days", "source"}
            assert tools["volunteer_opened"].input_schema["required"] == ["slugs"]

    anyio.run(go)


def test_every_conformance_op_case_through_one_server() -> None:
    """All 450 cases on one warm server: structuredContent equals the reference, field by field, in order."""
    mismatches: list[str] = []
    errors = 0

    async def go() -> None:
        nonlocal errors
        async with stdio_session(BRAIN) as session:
            for case in CASES:
                result = await session.call_tool("volunteer_context", arguments(case))
                want = expected(case)
                got = result.structured_content
                if "error" in want:
                    errors += 1
                    ok = result.is_error and ordered(got) == ordered(want) and json.loads(result.content[0].text) == want
                else:
                    ok = (not result.is_error and ordered(got) == ordered(want)
                          and result.content[0].text == format_result(want))
                if not ok:
                    mismatches.append(case["id"])

    anyio.run(go)
    assert mismatches == []
    assert errors == sum("error" in expected(c) for c in CASES)  # blank windows: tool errors, reference message


def test_same_object_as_context_batch_for_odd_requests() -> None:
    """Values are forwarded raw like --batch: wrong types mean defaults or invalid_params, never a crash."""
    want = batch_output(ODD_REQUESTS)
    got: list[Any] = []

    async def go() -> None:
        async with stdio_session(BRAIN) as session:
            for request in ODD_REQUESTS:
                result = await session.call_tool("volunteer_context", request)
                assert result.is_error == ("error" in result.structured_content)
                got.append(result.structured_content)
            # the server is still there and still right
            again = await session.call_tool("volunteer_context", {"window": "user: ping Ruth Merckx"})
            assert not again.is_error and again.structured_content["count"] >= 1

    anyio.run(go)
    assert [ordered(g) for g in got] == [ordered(w) for w in want]
    assert want[0] == {"error": "invalid_params", "message": "window is required unless stats: true"}
    assert want[4]["count"] == want[5]["count"] >= 1


def test_unknown_tool_and_database_tools_without_a_database_are_tool_errors() -> None:
    async def go() -> None:
        env_args = [*BRAIN, "--database-url", "postgresql://nobody@127.0.0.1:1/none"]
        async with stdio_session(env_args) as session:
            unknown = await session.call_tool("no_such_tool", {})
            assert unknown.is_error
            stats = await session.call_tool("volunteer_stats", {"days": 7})
            assert stats.is_error and stats.structured_content["message"].startswith("cannot reach the database")
            opened = await session.call_tool("volunteer_opened", {"slugs": []})
            assert opened.is_error and opened.structured_content["error"] == "invalid_params"
        async with stdio_session(["--brain", str(CONFORMANCE / "brain")]) as session:  # no database named
            stats = await session.call_tool("volunteer_stats", {})
            assert stats.is_error and stats.structured_content["message"] == "stats needs a database (--database-url)"

    anyio.run(go)


def test_stdout_carries_only_the_protocol() -> None:
    """Startup and shutdown print nothing on stdout; a start-up error is one line on stderr."""
    import subprocess

    from tests.integration.mcp.helpers import VOLUNTEER, server_env

    quiet = subprocess.run([VOLUNTEER, "mcp", *BRAIN], env=server_env(), input=b"", capture_output=True, timeout=60)
    assert quiet.returncode == 0 and quiet.stdout == b"" and quiet.stderr == b""
    broken = subprocess.run([VOLUNTEER, "mcp", "--brain", "/nonexistent"], env=server_env(), input=b"",
                            capture_output=True, timeout=60)
    assert broken.returncode == 1 and broken.stdout == b""
    assert broken.stderr.decode().count("\n") == 1 and broken.stderr.startswith(b"volunteer mcp: error: ")
