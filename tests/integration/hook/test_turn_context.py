"""Labelled multi-entity sessions through the real path: a worker on the embedded services with a
brain of its own, and real ``volunteer hook user-prompt`` processes, prompt by prompt.

The labels (``tests/fixtures/hooklane/sessions.jsonl``) say which pages each prompt must push: a
turn naming four to six entities gets all of them on that turn (3 pointers, then the volunteered
pages), re-mentions stay silent, distractors and stand-alone small talk push nothing. Push precision
and recall must both be 1.0, and a silent turn prints nothing at all. The events table must hold
exactly the pushed items, pointers with the reflex rationale and the base confidence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.core.types import ARM_CONFIDENCE
from pipeline.settings import Settings
from tests.integration.hook.conftest import ROOT, HookRunner, block_sections, event_rows, printed, wait_rows

pytestmark = pytest.mark.integration

FIXTURES = ROOT / "tests" / "fixtures" / "hooklane"
SESSIONS: list[dict[str, Any]] = [json.loads(line) for line in (FIXTURES / "sessions.jsonl").read_text().splitlines()
                                  if line.strip()]


@pytest.fixture(scope="module")
def worker_brain() -> Path:
    return FIXTURES / "brain"


def test_labelled_sessions_push_precision_and_recall_one(hook: HookRunner, hook_settings: Settings) -> None:
    true_pos = pushed = wanted = 0
    misses: list[str] = []
    expected_rows: dict[str, list[tuple[int, str]]] = {}
    pointer_slugs: dict[str, set[str]] = {}
    for session in SESSIONS:
        sid = "lane-" + session["session"]
        expected_rows[sid] = []
        pointer_slugs[sid] = set()
        for n, item in enumerate(session["prompts"], start=1):
            result = hook(sid, item["prompt"])
            assert result.returncode == 0, result.stderr
            got, want = printed(result.stdout), set(item["expect"])
            if not want:
                assert result.stdout == b"", (sid, n, result.stdout)  # silent turns print nothing
            else:
                sections = block_sections(result.stdout)
                assert len(sections["pointer"]) == min(3, len(want))  # pointers come first, 3 at most
                pointer_slugs[sid].update(got[: len(sections["pointer"])])
            assert len(got) == len(set(got))
            pushed += len(got)
            wanted += len(want)
            true_pos += len(want & set(got))
            if set(got) != want:
                misses.append(f"{sid} turn {n}: pushed {sorted(got)}, labelled {sorted(want)}")
            expected_rows[sid] += [(n, slug) for slug in sorted(want)]
    precision, recall = true_pos / pushed, true_pos / wanted
    assert (precision, recall) == (1.0, 1.0), misses

    for sid, want_rows in expected_rows.items():
        rows = wait_rows(hook_settings.database_url, sid, len(want_rows))
        got_rows = event_rows(hook_settings.database_url, sid, ", rationale")
        assert sorted((turn, slug) for turn, slug, *_ in got_rows) == sorted(want_rows), sid
        assert len(rows) == len(want_rows)
        for _, slug, channel, arm, confidence, rationale in got_rows:
            assert channel == "claude-code"
            if slug in pointer_slugs[sid]:  # the reflex rationale and the base confidence (reference §10)
                assert confidence == ARM_CONFIDENCE[arm] and rationale.startswith(f"{arm} match \"")
            else:
                assert confidence >= 0.7 and " match \"" in rationale


def codex_user(text: str) -> bytes:
    return orjson.dumps({"type": "event_msg", "payload": {"type": "item_completed", "item": {
        "type": "UserMessage", "content": [{"type": "text", "text": text}]}}}) + b"\n"


def codex_reply(text: str) -> bytes:
    return orjson.dumps({"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                              "content": [{"type": "output_text", "text": text}]}}) + b"\n"


def test_codex_0169_transcript_warms_the_window(hook: HookRunner, hook_settings: Settings) -> None:
    """The user's words of a Codex 0.169 session file reach the window: the entity named there (and
    never in the prompt) is pushed on the first prompt, as a pointer."""
    folder = hook.home / ".codex" / "sessions" / "2026" / "12" / "01"
    folder.mkdir(parents=True)
    transcript = folder / "rollout-lane.jsonl"
    transcript.write_bytes(codex_user("Kofi Mensah sent the draft.") + codex_reply("Noted, I will read it."))
    result = hook("lane-codex", "what does he want changed?", "--harness", "codex",
                       transcript_path=str(transcript))
    assert printed(result.stdout) == ["people/kofi-mensah"]
    assert block_sections(result.stdout)["pointer"], result.stdout
    rows = wait_rows(hook_settings.database_url, "lane-codex", 1)
    assert [(slug, channel) for _, slug, channel, *_ in rows] == [("people/kofi-mensah", "codex")]


def test_stream_consumers_get_the_turn_context_when_the_worker_is_asked(
        hook_settings: Settings, worker_brain: Path, tmp_path: Path) -> None:
    """VOLUNTEER_REFLEX_STREAM=on: an ordinary (non-harness) turn published with the client gets
    pointers then pages at once, written with the stream's channel; pointers as the reference logs them."""
    import asyncio

    from pipeline.client.publisher import TurnPublisher
    from tests.integration.hook.conftest import Worker

    # Topics of its own: the module's worker (stream pointers off) must not also consume this turn and
    # store its pages-only events first (same event ids), which made the test depend on timing.
    from tests.services.broker import new_names, settings_for

    settings = settings_for(hook_settings.broker, new_names(), database_url=hook_settings.database_url,
                            topic_partitions=hook_settings.topic_partitions)
    worker = Worker(settings, tmp_path / "w.log", tmp_path / "d", brain=worker_brain,
                    env_extra={"VOLUNTEER_REFLEX_STREAM": "on"}).start()
    try:
        worker.wait_ready()
        text = SESSIONS[0]["prompts"][0]["prompt"]  # five entities

        async def publish() -> None:
            async with TurnPublisher(settings) as publisher:
                await publisher.publish("lane-stream-1", "user", text, channel="app")

        asyncio.run(publish())
        want = set(SESSIONS[0]["prompts"][0]["expect"])
        rows = wait_rows(settings.database_url, "lane-stream-1", len(want))
        got = event_rows(settings.database_url, "lane-stream-1", ", rationale")
        assert {slug for _, slug, *_ in got} == want and len(rows) == len(want)
        assert {channel for _, _, channel, *_ in got} == {"app"}
        reflex = [r for r in got if r[5] == f'{r[3]} match "{r[5].split(chr(34))[1]}"']
        assert len(reflex) == 3 and all(r[4] == ARM_CONFIDENCE[r[3]] for r in reflex)
    finally:
        worker.stop()
