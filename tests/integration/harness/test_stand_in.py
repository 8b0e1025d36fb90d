"""The harness support itself: the pinned CLIs are installed, and a scripted tool call makes the real
Claude Code call the tool and send its result back to the stand-in (what MCP tests build on)."""

from __future__ import annotations

from pathlib import Path

from tests.support.harness_cli import (
    CLAUDE_CODE,
    CODEX,
    StandInModel,
    ToolUse,
    run_claude,
)


def test_pinned_versions_are_installed(claude_code_cli: Path, codex_cli: Path) -> None:
    assert CLAUDE_CODE.installed_version() == "2.1.328"
    assert CODEX.installed_version() == "0.169.0"
    assert claude_code_cli.exists() and codex_cli.exists()


def test_claude_code_scripted_tool_use_round_trip(claude_code_cli: Path, stand_in_model: StandInModel,
                                                  harness_home: Path) -> None:
    note = harness_home / "note.txt"
    note.write_text("stand-in-marker-42\n")
    stand_in_model.script(ToolUse("Read", {"file_path": str(note)}))
    run_claude(claude_code_cli, "read the note", home=harness_home, model_url=stand_in_model.url,
               args=["--allowedTools", "Read"])
    results = [part for body in stand_in_model.messages() for msg in body["messages"]
               if isinstance(msg["content"], list) for part in msg["content"] if part.get("type") == "tool_result"]
    assert results and "stand-in-marker-42" in str(results[0]["content"])
