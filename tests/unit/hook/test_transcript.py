"""Transcript reading: confinement to the harness folder, bounded reads, only new conversation text."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.hook import transcript
from pipeline.hook.transcript import TranscriptRefused, confine, parse_claude_line, parse_codex_line, read_new


@pytest.fixture
def root(tmp_path: Path) -> Path:
    projects = tmp_path / "home" / ".claude" / "projects"
    (projects / "app").mkdir(parents=True)
    return projects


def claude(role: str, content: Any, **extra: Any) -> bytes:
    return orjson.dumps({"type": role, "message": {"role": role, "content": content}, **extra}) + b"\n"


def test_a_file_inside_the_folder_is_accepted(root: Path) -> None:
    path = root / "app" / "s.jsonl"
    path.write_bytes(b"")
    assert confine(str(path), root) == str(path.resolve())
    assert confine(str(root / "app" / "later.jsonl"), root) is None  # not written yet: no transcript


@pytest.mark.parametrize(("make", "reason"), [
    (lambda root, tmp: 42, "transcript_missing"),
    (lambda root, tmp: "", "transcript_missing"),
    (lambda root, tmp: str(root / "app" / "s.txt"), "transcript_not_jsonl"),
    (lambda root, tmp: str(tmp / "outside.jsonl"), "transcript_outside_root"),
    (lambda root, tmp: str(root / "app" / ".." / ".." / ".." / "outside.jsonl"), "transcript_outside_root"),
    (lambda root, tmp: str(tmp / "never.jsonl"), "transcript_outside_root"),
])
def test_refusals(root: Path, tmp_path: Path, make: Any, reason: str) -> None:
    (tmp_path / "outside.jsonl").write_bytes(b"{}\n")
    (root / "app" / "s.txt").write_bytes(b"")
    with pytest.raises(TranscriptRefused) as caught:
        confine(make(root, tmp_path), root)
    assert caught.value.reason == reason


def test_symlinks_and_escaping_directories_are_refused(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "x.jsonl").write_bytes(b"{}\n")
    (root / "link.jsonl").symlink_to(secret / "x.jsonl")
    with pytest.raises(TranscriptRefused, match="transcript_symlink"):
        confine(str(root / "link.jsonl"), root)
    (root / "escape").symlink_to(secret, target_is_directory=True)
    with pytest.raises(TranscriptRefused, match="transcript_outside_root"):
        confine(str(root / "escape" / "x.jsonl"), root)
    (root / "dir.jsonl").mkdir()
    with pytest.raises(TranscriptRefused, match="transcript_not_file"):
        confine(str(root / "dir.jsonl"), root)


def test_claude_lines_keep_conversation_text_only() -> None:
    assert parse_claude_line(orjson.loads(claude("user", "  hello Alice "))) == ("user", "hello Alice")
    blocks = [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Alice led it."},
              {"type": "tool_use", "name": "Bash"}, {"type": "text", "text": "Done."}]
    assert parse_claude_line(orjson.loads(claude("assistant", blocks))) == ("assistant", "Alice led it.\nDone.")
    for skipped in (claude("user", [{"type": "tool_result", "content": "x"}]),
                    claude("assistant", [{"type": "tool_use", "name": "Bash"}]),
                    claude("user", "sub-agent", isSidechain=True), claude("user", "<caveat>", isMeta=True),
                    orjson.dumps({"type": "summary", "summary": "Alice"}),
                    orjson.dumps({"type": "attachment", "attachment": {"content": ["Alice"]}}), b"[1]"):
        assert parse_claude_line(orjson.loads(skipped)) is None


def test_slash_command_records_are_not_the_users_words() -> None:
    for record in ("<command-name>/model</command-name>\n<command-message>model</command-message>",
                   "<command-message>init is analyzing</command-message>\n<command-name>/init</command-name>",
                   "<local-command-stdout>Set model to Alice Example</local-command-stdout>",
                   "<local-command-stderr>error</local-command-stderr>", "<command-args>x</command-args>"):
        assert parse_claude_line(orjson.loads(claude("user", record))) is None
        assert parse_claude_line(orjson.loads(claude("user", [{"type": "text", "text": record}]))) is None
    # the user's own words that merely mention a tag are kept, and assistants are never filtered
    kept = "Why does <command-name> show up in my log, Alice?"
    assert parse_claude_line(orjson.loads(claude("user", kept))) == ("user", kept)
    reply = "<local-command-stdout> is how Claude Code records output."
    assert parse_claude_line(orjson.loads(claude("assistant", reply))) == ("assistant", reply)


def test_codex_lines_keep_typed_prompts_and_replies() -> None:
    user = {"type": "event_msg", "payload": {"type": "user_message", "message": "Ask Alice Example"}}
    reply = {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                  "content": [{"type": "output_text", "text": "She agreed."}]}}
    injected = {"type": "response_item", "payload": {"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": "<env>"}]}}
    assert parse_codex_line(user) == ("user", "Ask Alice Example")
    assert parse_codex_line(reply) == ("assistant", "She agreed.")
    assert parse_codex_line(injected) is None
    assert parse_codex_line({"type": "session_meta", "payload": {"id": "x"}}) is None


def codex_0169_user(*texts: str) -> dict[str, Any]:
    return {"timestamp": "2026-11-30T10:00:00.000Z", "type": "event_msg",
            "payload": {"type": "item_completed", "thread_id": "t", "turn_id": "u",
                        "item": {"type": "UserMessage", "id": "i",
                                 "content": [{"type": "text", "text": t} for t in texts]}}}


def test_codex_0169_user_messages_are_read() -> None:
    assert parse_codex_line(codex_0169_user("Ask Alice Example")) == ("user", "Ask Alice Example")
    assert parse_codex_line(codex_0169_user("two", "parts")) == ("user", "two\nparts")
    assert parse_codex_line(codex_0169_user("  ")) is None
    other = codex_0169_user("x")
    other["payload"]["item"]["type"] = "AgentMessage"
    assert parse_codex_line(other) is None  # only the user's words come from item_completed
    bad = codex_0169_user("x")
    bad["payload"]["item"] = "not an item"
    assert parse_codex_line(bad) is None
    started = codex_0169_user("x")
    started["payload"]["type"] = "item_started"
    assert parse_codex_line(started) is None


def test_a_codex_0169_session_file_reads_as_conversation(root: Path) -> None:
    reply = {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                  "content": [{"type": "output_text", "text": "She agreed."}]}}
    injected = {"type": "response_item", "payload": {"type": "message", "role": "developer",
                                                     "content": [{"type": "input_text", "text": "<ctx>"}]}}
    lines = [{"type": "session_meta", "payload": {"id": "s"}}, codex_0169_user("Ask Alice Example"), injected,
             reply, {"type": "event_msg", "payload": {"type": "user_message", "message": "older format"}}]
    path = root / "app" / "rollout.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    assert read_new(path, None, None, "codex").turns == [
        ("user", "Ask Alice Example"), ("assistant", "She agreed."), ("user", "older format")]


def test_reads_continue_where_the_last_one_stopped(root: Path) -> None:
    path = root / "app" / "s.jsonl"
    path.write_bytes(claude("user", "one") + claude("assistant", "two") + claude("assistant", [
        {"type": "text", "text": "two-b"}]) + b'{"type": "user", "message": {"role": "us')  # still being written
    first = read_new(path, None, None, "claude-code")
    assert first.turns == [("user", "one"), ("assistant", "two\ntwo-b")]  # one reply, several lines
    assert first.end_offset == path.read_bytes().rfind(b"\n") + 1
    with path.open("ab") as fh:
        fh.write(b'er", "content": "three"}}\n' + claude("assistant", "four"))
    second = read_new(path, first.end_offset, first.file_id, "claude-code")
    assert second.turns == [("user", "three"), ("assistant", "four")]
    assert read_new(path, second.end_offset, second.file_id, "claude-code").turns == []


def test_a_replaced_or_truncated_file_is_read_afresh(root: Path) -> None:
    path = root / "app" / "s.jsonl"
    path.write_bytes(claude("user", "one") + claude("assistant", "two"))
    first = read_new(path, None, None, "claude-code")
    replacement = root / "app" / "tmp"
    replacement.write_bytes(claude("user", "new"))
    os.replace(replacement, path)
    assert read_new(path, first.end_offset, first.file_id, "claude-code").turns == [("user", "new")]
    path.write_bytes(claude("user", "x"))  # same inode, shorter than the saved offset
    fresh = read_new(path, None, None, "claude-code")
    assert read_new(path, first.end_offset, fresh.file_id, "claude-code").turns == [("user", "x")]


def test_reads_are_bounded_to_the_newest_bytes(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transcript, "MAX_READ_BYTES", 200)
    path = root / "app" / "big.jsonl"
    path.write_bytes(b"".join(claude("user", f"turn {i:03d}") for i in range(50)))
    chunk = read_new(path, None, None, "claude-code")
    assert chunk.turns and chunk.turns[-1] == ("user", "turn 049")
    assert len(chunk.turns) < 5 and all(t[1].startswith("turn ") for t in chunk.turns)  # no torn first line
    assert chunk.end_offset == path.stat().st_size
