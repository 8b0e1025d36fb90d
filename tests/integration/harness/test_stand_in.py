"""The real CLIs against the stand-in model API, without any hook: the harness support itself works
(a session id comes back, resume continues the same session, every request is recorded)."""

from __future__ import annotations

from pathlib import Path

from tests.support.harness_cli import (
    CLAUDE_CODE,
    CODEX,
    StandInModel,
    ToolUse,
    anthropic_texts,
    responses_items,
    run_claude,
    run_codex,
)


def test_pinned_versions_are_installed(claude_code_cli: Path, codex_cli: Path) -> None:
    assert CLAUDE_CODE.installed_version() == "2.1.328"
    assert CODEX.installed_version() == "0.169.0"
    assert claude_code_cli.exists() and codex_cli.exists()


def test_claude_code_prompt_and_resume_reach_the_stand_in(claude_code_cli: Path, stand_in_model: StandInModel,
                                                           harness_home: Path) -> None:
    first = run_claude(claude_code_cli, "first words", home=harness_home, model_url=stand_in_model.url)
    again = run_claude(claude_code_cli, "second words", home=harness_home, model_url=stand_in_model.url,
                       resume=first.session_id)
    assert again.session_id == first.session_id
    assert first.result.get("result") == "ok"
    last = anthropic_texts(stand_in_model.messages()[-1])
    assert "first words" in last and "second words" in last


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


def test_codex_prompt_and_resume_reach_the_stand_in(codex_cli: Path, stand_in_model: StandInModel,
                                                    harness_home: Path) -> None:
    first = run_codex(codex_cli, "first words", home=harness_home, model_url=stand_in_model.url)
    again = run_codex(codex_cli, "second words", home=harness_home, model_url=stand_in_model.url,
                      resume=first.thread_id)
    assert again.thread_id == first.thread_id
    items = responses_items(stand_in_model.responses()[-1])
    assert ("user", "first words") in items and items[-1] == ("user", "second words")
