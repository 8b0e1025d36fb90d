"""The context-pressure notice through the real hook and a running worker: off by default (the
output is exactly what it was), on with ``VOLUNTEER_HOOK_PRESSURE=on`` it comes first, once per
compaction segment, alone when there are no pages, and never for Codex."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex
from pipeline.hook.block import BLOCK_MARKER, payload_for
from pipeline.hook.pressure import notice
from tests.integration.hook.conftest import SAMPLE_BRAIN, HookRunner, expected_items, printed

pytestmark = pytest.mark.integration

PROMPT = "Did Alice Example reply about Kiteline?"


@pytest.fixture(scope="module")
def brain() -> BrainIndex:
    return load_brain_dir(SAMPLE_BRAIN)


def line(obj: dict[str, object]) -> bytes:
    return orjson.dumps(obj) + b"\n"


def assistant(tokens: int) -> bytes:
    return line({"type": "assistant", "message": {"role": "assistant", "model": "claude-sonnet-5-5",
                 "content": [{"type": "text", "text": "Noted."}],
                 "usage": {"input_tokens": 2, "cache_creation_input_tokens": 1000,
                           "cache_read_input_tokens": tokens - 1002, "output_tokens": 50}}})


def user(text: str) -> bytes:
    return line({"type": "user", "message": {"role": "user", "content": text}})


def compaction(uuid: str) -> bytes:
    return line({"type": "system", "subtype": "compact_boundary", "uuid": uuid})


def transcript_of(hook: HookRunner, name: str, *lines: bytes) -> Path:
    path = hook.home / ".claude" / "projects" / "-work-app" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    return path


def context_of(stdout: bytes) -> str:
    text: str = orjson.loads(stdout)["hookSpecificOutput"]["additionalContext"]
    return text


def test_off_by_default_the_output_is_unchanged(hook: HookRunner, brain: BrainIndex) -> None:
    path = transcript_of(hook, "p-off", user("hello there"), assistant(190_000))
    result = hook("p-off", PROMPT, transcript_path=str(path))
    assert result.returncode == 0, result.stderr
    want = expected_items(brain, [("user", "hello there"), ("assistant", "Noted."), ("user", PROMPT)])
    assert want, "the prompt names pages"
    assert result.stdout.decode() == payload_for(want) + "\n"
    session_files = list((hook.state_dir / "sessions").rglob("*.json"))
    assert len(session_files) == 1 and b"pressure" not in session_files[0].read_bytes()


def test_once_per_segment_first_in_the_output(hook: HookRunner, brain: BrainIndex) -> None:
    path = transcript_of(hook, "p-on", user("hello there"), assistant(170_000))
    first = hook("p-on", PROMPT, transcript_path=str(path), VOLUNTEER_HOOK_PRESSURE="on")
    assert first.returncode == 0, first.stderr
    text = context_of(first.stdout)
    assert text.startswith(notice(85) + "\n\n" + BLOCK_MARKER + "\n")
    want = expected_items(brain, [("user", "hello there"), ("assistant", "Noted."), ("user", PROMPT)])
    assert text == notice(85) + "\n\n" + context_of(payload_for(want).encode())
    beat = hook.heartbeat()
    assert (beat["last_outcome"], beat["pages_printed"]) == ("ok", len(want))

    # the next prompt of the same segment: the pages only, as without the notice
    with path.open("ab") as fh:
        fh.write(user(PROMPT) + assistant(180_000))
    second = hook("p-on", "What did Saoirse Byrne say?", transcript_path=str(path), VOLUNTEER_HOOK_PRESSURE="on")
    assert second.returncode == 0, second.stderr
    assert second.stdout and context_of(second.stdout).startswith(BLOCK_MARKER)
    assert printed(second.stdout) == ["people/saoirse-byrne"]

    # after a compaction, a full context again: one more notice, alone when no page is new
    with path.open("ab") as fh:
        fh.write(compaction("seg-2") + user("carry on") + assistant(175_000))
    third = hook("p-on", "carry on please", transcript_path=str(path), VOLUNTEER_HOOK_PRESSURE="on")
    assert third.returncode == 0, third.stderr
    assert context_of(third.stdout) == notice(88)
    fourth = hook("p-on", "and then?", transcript_path=str(path), VOLUNTEER_HOOK_PRESSURE="on")
    assert fourth.returncode == 0 and fourth.stdout == b""


def test_below_the_ratio_and_without_usage_nothing_changes(hook: HookRunner) -> None:
    path = transcript_of(hook, "p-low", user("hello there"), assistant(100_000))
    assert hook("p-low", "just chatting", transcript_path=str(path), VOLUNTEER_HOOK_PRESSURE="on").stdout == b""
    assert hook("p-none", "just chatting", VOLUNTEER_HOOK_PRESSURE="on").stdout == b""  # no transcript, no measurement
    # a configured small window makes the same fill high
    result = hook("p-small", "just chatting", transcript_path=str(path), VOLUNTEER_HOOK_PRESSURE_WINDOW="110000", VOLUNTEER_HOOK_PRESSURE="on")
    assert context_of(result.stdout) == notice(91)


def test_codex_never_gets_it(hook: HookRunner) -> None:
    root = hook.home / ".codex" / "sessions"
    root.mkdir(parents=True, exist_ok=True)
    path = root / "rollout.jsonl"
    path.write_bytes(assistant(190_000))
    result = hook("p-codex", "just chatting", "--harness", "codex", transcript_path=str(path), VOLUNTEER_HOOK_PRESSURE="on")
    assert result.returncode == 0 and result.stdout == b""
