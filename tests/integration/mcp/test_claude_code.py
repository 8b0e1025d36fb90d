"""Claude Code (the real CLI, offline) as the MCP client of ``volunteer mcp``.

The stand-in model API answers Claude Code's first request with a ``tool_use`` of
``volunteer_context``; Claude Code calls the tool over stdio and sends the result back in its next
request. The test reads that ``tool_result`` from the recorded request and the op rows from the table.
(Claude Code 2.1.328 passes ``structuredContent`` to the model when a result has it, so the model
sees the op's JSON object; clients without structured content see the text rendering instead.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.braindir import load_brain_dir
from pipeline.core.op import volunteer_context
from tests.integration.mcp.helpers import SAMPLES, VOLUNTEER
from tests.integration.mcp.test_events import rows
from tests.support.harness_cli import StandInModel, ToolUse, run_claude

pytestmark = pytest.mark.integration

TOOL = "mcp__volunteer__volunteer_context"
WINDOW = "user: can you brief me on Alice Example before the call?"


def tool_results(body: Any) -> list[dict[str, Any]]:
    found = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            found.extend(part for part in content if isinstance(part, dict) and part.get("type") == "tool_result")
    return found


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def test_claude_code_calls_the_tool_and_the_model_sees_the_pages(
        claude_code_cli: Path, stand_in_model: StandInModel, harness_home: Path, brain_db: str) -> None:
    migrated_database_url = brain_db
    config = harness_home / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"volunteer": {
        "command": VOLUNTEER, "args": ["mcp"], "env": {"VOLUNTEER_DATABASE_URL": migrated_database_url}}}}))
    stand_in_model.script(ToolUse(TOOL, {"window": WINDOW, "session_id": "cc-session", "turn": 1}))

    run_claude(claude_code_cli, "Brief me on Alice Example.", home=harness_home, model_url=stand_in_model.url,
               args=["--mcp-config", str(config), "--strict-mcp-config", "--allowedTools", TOOL])

    bodies = stand_in_model.messages()
    offered = [b for b in bodies if TOOL in {t.get("name") for t in b.get("tools") or []}]
    assert offered, "Claude Code never offered the MCP tool to the model (server failed to start?)"
    results = [r for b in bodies for r in tool_results(b) if r.get("tool_use_id") == "toolu_standin"]
    assert results, "no tool_result for the scripted tool_use reached the model"
    text = result_text(results[-1])
    assert not results[-1].get("is_error"), text
    # Claude Code hands the model the structuredContent (the op's JSON object) when there is one
    want = volunteer_context(WINDOW, load_brain_dir(SAMPLES / "brain"))
    assert json.loads(text) == want and [p["slug"] for p in want["pages"]] == ["people/alice-example"]

    logged = rows(migrated_database_url, "channel = 'op'")
    assert [(r["slug"], r["session_id"], r["turn"]) for r in logged] == [("people/alice-example", "cc-session", 1)]
