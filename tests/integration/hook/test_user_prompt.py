"""``volunteer hook user-prompt`` processes against a running worker on the embedded broker and
PostgreSQL: the pages of exactly the prompt's turn, the block and its cap, dedupe across prompts,
delivered-only rows, the transcript warm-up and its confinement, Codex, the fail-open paths, and
what ``volunteer doctor`` says about the hook channel.

Expected pages come from the decision core's one-shot op over the same window (an independent
path from the worker's per-session state), with the slugs already delivered excluded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex
from pipeline.hook.block import output_length, payload_for
from pipeline.settings import Settings
from tests.integration.hook.conftest import (
    ROOT,
    SAMPLE_BRAIN,
    HookRunner,
    Worker,
    block_sections,
    event_rows,
    expected_items,
    free_port,
    printed,
    signed_post,
    wait_rows,
)

pytestmark = pytest.mark.integration

ALICE, KITELINE, NORTHWIND = "people/alice-example", "companies/kiteline", "companies/northwind-ventures"
TAIL = "(use get_page before relying on details)"


@pytest.fixture(scope="module")
def brain() -> BrainIndex:
    return load_brain_dir(SAMPLE_BRAIN)


def expected(brain: BrainIndex, turns: Sequence[tuple[str, str]], delivered: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The turn context over the worker's window (last 4 turns), excluding what was delivered before."""
    return expected_items(brain, turns, delivered)


def test_pages_of_the_prompt_in_the_block_format(hook: HookRunner, worker: Worker, brain: BrainIndex,
                                                 hook_settings: Settings) -> None:
    prompt = "Did Alice Example reply about Kiteline? Saoirse Byrne and Northwind Ventures are in too."
    result = hook("fmt-1", prompt)
    assert result.returncode == 0, result.stderr
    want = expected(brain, [("user", prompt)])
    assert [(p["kind"], p["slug"]) for p in want] == [
        ("pointer", ALICE), ("pointer", "people/saoirse-byrne"), ("pointer", KITELINE), ("page", NORTHWIND)]
    sections = block_sections(result.stdout)
    assert sections["pointer"] == [f"- **{p['display']}** → `{p['slug']}` — {p['synopsis']} {TAIL}"
                                   for p in want if p["kind"] == "pointer"]
    assert sections["page"] == [f"- **{p['display']}** → `{p['slug']}` ({p['confidence']:.2f}, {p['rationale']}) — "
                                f"{p['synopsis']}" for p in want if p["kind"] == "page"]
    rows = wait_rows(hook_settings.database_url, "fmt-1", 4)
    assert rows == sorted((1, p["slug"], "claude-code", p["arm"], p["confidence"]) for p in want)
    # pointers are logged with the base confidence (no boost), pages with the gate's
    assert {p["slug"]: p["confidence"] for p in want} == {
        "people/saoirse-byrne": 0.8, ALICE: 0.8, KITELINE: 0.8, NORTHWIND: 0.8500000000000001}
    beat = hook.heartbeat()
    assert (beat["calls"], beat["printed_calls"], beat["pages_printed"], beat["pages_reported"]) == (1, 1, 4, 4)
    assert beat["last_outcome"] == "ok"


def test_rationales_in_the_events_table(hook: HookRunner, brain: BrainIndex, hook_settings: Settings) -> None:
    import psycopg

    prompt = "Did Alice Example reply about Kiteline? Saoirse Byrne and Northwind Ventures are in too."
    assert len(printed(hook("why-1", prompt).stdout)) == 4
    wait_rows(hook_settings.database_url, "why-1", 4)
    with psycopg.connect(hook_settings.database_url, autocommit=True) as conn:
        got: dict[str, str] = dict(conn.execute("SELECT slug, rationale FROM context_volunteer_events WHERE session_id = %s",
                                ("why-1",)).fetchall())
    assert got == {p["slug"]: p["rationale"] for p in expected(brain, [("user", prompt)])}
    assert got[ALICE] == 'title match "Alice Example"'


def test_reflex_off_gives_a_pages_only_block(hook_settings: Settings, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    worker = Worker(hook_settings.with_overrides(app_id=hook_settings.app_id + "-noreflex"), tmp_path / "w.log",
                    tmp_path / "d", env_extra={"VOLUNTEER_REFLEX": "off"}).start()
    try:
        worker.wait_ready()
        hook = HookRunner(worker.url, home, tmp_path / "state", secrets_dir=worker.state_dir)
        result = hook("noreflex-1", "Did Alice Example reply about Kiteline? Saoirse Byrne and Northwind Ventures too.")
        sections = block_sections(result.stdout)
        assert sections["pointer"] == [] and len(sections["page"]) == 3
    finally:
        worker.stop()


def test_dedupe_and_delivered_only_accounting(hook: HookRunner, brain: BrainIndex, hook_settings: Settings) -> None:
    sid = "dedupe-1"
    turns = [("user", "Did Alice Example reply about Kiteline?")]
    first = expected(brain, turns)
    assert [(p["kind"], p["slug"]) for p in first] == [("pointer", ALICE), ("pointer", KITELINE)]
    cap = output_length(payload_for(first[:1]) + "\n")  # equal confidence: the later one is dropped
    one = hook(sid, turns[0][1], VOLUNTEER_HOOK_MAX_CHARS=str(cap))
    assert printed(one.stdout) == [ALICE]
    assert hook.heartbeat()["last_reason"] == "trimmed"

    # Kiteline was proposed but not printed: still eligible. Alice was printed: never again.
    turns.append(("user", "Kiteline and Alice Example again?"))
    second = expected(brain, turns, delivered=[ALICE])
    assert [p["slug"] for p in second] == [KITELINE]
    two = hook(sid, turns[1][1])
    assert block_sections(two.stdout)["pointer"] == [f"- **Kiteline** → `{KITELINE}` — {second[0]['synopsis']} {TAIL}"]

    three = hook(sid, "Alice Example, Kiteline: both done.")
    assert three.returncode == 0 and three.stdout == b""
    assert hook.heartbeat()["last_outcome"] == "nothing"

    rows = wait_rows(hook_settings.database_url, sid, 2)
    assert [(turn, slug, channel) for turn, slug, channel, _, _ in rows] == [
        (1, ALICE, "claude-code"), (2, KITELINE, "claude-code")]
    beat = hook.heartbeat()
    assert (beat["calls"], beat["printed_calls"], beat["pages_printed"], beat["pages_reported"]) == (3, 2, 2, 2)


def claude_line(role: str, content: Any, **extra: Any) -> bytes:
    return orjson.dumps({"type": role, "message": {"role": role, "content": content}, **extra})


def test_first_prompt_warms_the_window_from_the_transcript(hook: HookRunner, brain: BrainIndex,
                                                            hook_settings: Settings) -> None:
    transcript = hook.home / ".claude" / "projects" / "-work-app" / "warm-1.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes(b"\n".join([
        orjson.dumps({"type": "summary", "summary": "Investors"}),
        claude_line("user", "Who leads seed rounds there?"),
        claude_line("assistant", [{"type": "thinking", "thinking": "Kiteline? no"},
                                  {"type": "text", "text": "Alice Example led one last year."}]),
        claude_line("assistant", [{"type": "tool_use", "name": "Bash", "input": {"command": "ls Kiteline"}}]),
        claude_line("user", [{"type": "tool_result", "content": "Kiteline.md"}]),
        claude_line("user", "Kiteline is not the point", isSidechain=True),
        orjson.dumps({"type": "attachment", "attachment": {"type": "hook_additional_context",
                                                           "content": ["Kiteline"]}}),
    ]) + b"\n")
    prompt = "what did she invest in?"
    result = hook("warm-1", prompt, transcript_path=str(transcript))
    want = expected(brain, [("user", "Who leads seed rounds there?"),
                            ("assistant", "Alice Example led one last year."), ("user", prompt)])
    assert [(p["kind"], p["slug"]) for p in want] == [("pointer", ALICE)]  # assistant-introduced: a pointer
    assert printed(result.stdout) == [ALICE]

    # Later prompts send the replies written since, not the whole transcript again.
    with transcript.open("ab") as fh:
        fh.write(claude_line("user", prompt) + b"\n")
        fh.write(claude_line("assistant", "She backed Kiteline in 2024.") + b"\n")
    result = hook("warm-1", "and since then?", transcript_path=str(transcript))
    assert printed(result.stdout) == [KITELINE]
    rows = wait_rows(hook_settings.database_url, "warm-1", 2)
    # turns 1-2 were the warm-up, 3 the first prompt; then the reply (4) and the prompt (5)
    assert [(turn, slug) for turn, slug, *_ in rows] == [(3, ALICE), (5, KITELINE)]


def test_a_refused_transcript_skips_only_the_warm_up(hook: HookRunner, tmp_path: Path,
                                                     hook_settings: Settings) -> None:
    outside = tmp_path / "elsewhere" / "stolen.jsonl"
    outside.parent.mkdir()
    outside.write_bytes(claude_line("assistant", "Alice Example led one last year.") + b"\n")
    # Nothing of the refused file is read (Alice is only in it), the prompt still gets its pages.
    result = hook("refuse-1", "Did Kiteline reply?", transcript_path=str(outside))
    assert result.returncode == 0 and printed(result.stdout) == [KITELINE]
    beat = hook.heartbeat()
    assert (beat["last_outcome"], beat["last_reason"], beat["last_warmup_skipped"]) == (
        "ok", "transcript_outside_root", "transcript_outside_root")
    sneaky = hook.home / ".claude" / "projects" / "link.jsonl"
    sneaky.symlink_to(outside)
    result = hook("refuse-1", "what did she invest in? Lisbon?", transcript_path=str(sneaky))
    assert printed(result.stdout) == ["places/lisbon"]
    beat = hook.heartbeat()
    assert beat["last_warmup_skipped"] == "transcript_symlink"
    assert beat["warmup_skipped"] == {"transcript_outside_root": 1, "transcript_symlink": 1}
    # A transcript that does not exist yet (a brand-new session) is not an error.
    fresh = hook.home / ".claude" / "projects" / "new.jsonl"
    assert printed(hook("refuse-2", "Alice Example?", transcript_path=str(fresh)).stdout) == [ALICE]
    assert hook.heartbeat()["last_warmup_skipped"] is None
    rows = wait_rows(hook_settings.database_url, "refuse-1", 2)
    assert [(turn, slug) for turn, slug, *_ in rows] == [(1, KITELINE), (2, "places/lisbon")]


def test_codex_harness_logs_its_own_channel(hook: HookRunner, hook_settings: Settings) -> None:
    """Through the click command (python -m pipeline), where the others use the executable's fast path."""
    result = hook("codex-1", "Is Saoirse Byrne free?", "--harness", "codex", via_click=True)
    assert printed(result.stdout) == ["people/saoirse-byrne"]
    rows = wait_rows(hook_settings.database_url, "codex-1", 1)
    assert [(turn, slug, channel) for turn, slug, channel, *_ in rows] == [(1, "people/saoirse-byrne", "codex")]
    assert hook.heartbeat("codex")["pages_reported"] == 1


def test_kill_switch_does_nothing_at_all(hook: HookRunner, hook_settings: Settings) -> None:
    result = hook("kill-1", "Did Alice Example reply?", VOLUNTEER_HOOKS="0")
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    assert not hook.state_dir.exists()  # no state, no heartbeat
    assert event_rows(hook_settings.database_url, "kill-1") == []
    # and it is the same session's first prompt once switched back on
    assert printed(hook("kill-1", "Did Alice Example reply?").stdout) == [ALICE]


@pytest.mark.parametrize(("stdin", "reason"), [
    (b"not json", "bad_input"),
    (b"[1, 2]", "bad_input"),
    (orjson.dumps({"prompt": "Alice Example?"}), "bad_session_id"),
])
def test_bad_input_prints_nothing(hook: HookRunner, stdin: bytes, reason: str) -> None:
    result = hook("", "", raw_stdin=stdin)
    assert (result.returncode, result.stdout) == (0, b"")
    assert hook.heartbeat()["last_reason"] == reason


def test_no_worker_prints_nothing_and_keeps_numbering(hook: HookRunner, hook_settings: Settings) -> None:
    down = hook("down-1", "Did Alice Example reply?", VOLUNTEER_HOOK_URL=f"http://127.0.0.1:{free_port()}")
    assert (down.returncode, down.stdout) == (0, b"")
    assert hook.heartbeat()["last_reason"] == "no_worker"
    up = hook("down-1", "Did Alice Example reply?")
    assert printed(up.stdout) == [ALICE]
    rows = wait_rows(hook_settings.database_url, "down-1", 1)
    # No worker passed the handshake, so nothing was numbered or sent: the session starts at turn 1.
    assert [(turn, slug) for turn, slug, *_ in rows] == [(1, ALICE)]


class SilentServer:
    """Accepts connections and reads, but never answers: a worker stuck past the deadline."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def test_deadline_prints_nothing_and_exits_zero(hook: HookRunner) -> None:
    server = SilentServer()
    try:
        # The budget counts from process start: it must outlast a start-up on two busy cores, or the hook
        # gives up before it connects. The server never answers, so any budget ends in "deadline".
        result = hook("slow-1", "Did Alice Example reply?", VOLUNTEER_HOOK_URL=f"http://127.0.0.1:{server.port}",
                      VOLUNTEER_HOOK_DEADLINE_MS="1500")
    finally:
        server.close()
    assert (result.returncode, result.stdout) == (0, b"")
    assert server.accepted, "the hook never reached the endpoint"
    beat = hook.heartbeat()
    assert (beat["last_outcome"], beat["last_reason"], beat["pages_printed"]) == ("degraded", "deadline", 0)


def test_pages_proposed_after_the_deadline_are_neither_counted_nor_suppressed(
        hook: HookRunner, worker: Worker, hook_settings: Settings) -> None:
    # What a hook whose deadline ran out leaves behind: the turn published, nobody waiting.
    body = {"session_id": "late-1", "channel": "claude-code", "wait_turn": 1, "wait_ms": 0,
            "turns": [{"role": "user", "text": "Did Alice Example reply?", "turn": 1}]}
    assert worker.state_dir is not None
    assert signed_post(worker.url, "/volunteer/hook/turns", body, worker.state_dir)["status"] in ("timeout", "ok")
    # The hook's own numbering starts at 1 too: the worker says "duplicate", the hook catches up.
    result = hook("late-1", "Alice Example again?")
    assert printed(result.stdout) == [ALICE]
    rows = wait_rows(hook_settings.database_url, "late-1", 1)
    assert [(turn, slug) for turn, slug, *_ in rows] == [(2, ALICE)]  # 1 was a duplicate, 2 the retry


# ----------------------------------------------------------------------------- doctor's channels check


def doctor(settings: Settings, home: Path, state: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    env.update({"HOME": str(home), "VOLUNTEER_BROKER": settings.broker, "VOLUNTEER_DATABASE_URL": settings.database_url,
                "VOLUNTEER_APP_ID": settings.app_id, "VOLUNTEER_HOOK_STATE_DIR": str(state),
                "VOLUNTEER_TOPIC_TURNS": settings.topic_turns, "VOLUNTEER_TOPIC_VOLUNTEERED": settings.topic_volunteered,
                "VOLUNTEER_TOPIC_DLQ": settings.topic_dlq})
    result = subprocess.run([sys.executable, "-m", "pipeline", "doctor", "--json"], capture_output=True, env=env,
                            cwd=home, timeout=120)
    checks = {c["check"]: c for c in orjson.loads(result.stdout)["checks"]}
    channels: dict[str, Any] = checks["channels"]
    return channels


def install(home: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pipeline", "bootstrap", "--executable", "/v/bin/volunteer"],
                            capture_output=True, env={**os.environ, "HOME": str(home)}, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr


def test_doctor_flags_the_quiet_cases_and_reconciles(worker: Worker, hook_settings: Settings, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    install(home)
    state = tmp_path / "state"
    check = doctor(hook_settings, home, state)
    assert check["status"] == "warn" and "claude-code: hook installed" in check["detail"]
    assert "never called" in check["detail"] and "restart your Claude Code sessions" in check["hint"]

    hook = HookRunner(worker.url, home, state, secrets_dir=worker.state_dir)
    for _ in range(2):
        assert hook("doc-1", "Did Alice Example reply?", VOLUNTEER_HOOK_URL=f"http://127.0.0.1:{free_port()}"
                    ).stdout == b""
    check = doctor(hook_settings, home, state)
    assert check["status"] == "warn" and "called 2 times in 7 days but never delivered" in check["detail"]
    assert "no_worker x2" in check["detail"] and "VOLUNTEER_HOOK_URL" in check["hint"]

    assert b"people/alice-example" in hook("doc-1", "Did Alice Example reply?").stdout
    wait_rows(hook_settings.database_url, "doc-1", 1)
    check = doctor(hook_settings, home, state)
    hooks = check["data"]["hooks"]["claude-code"]
    assert (hooks["calls"], hooks["printed_calls"], hooks["pages_printed"], hooks["pages_reported"]) == (3, 1, 1, 1)
    assert hooks["events"] >= 1 and hooks["status"] == "ok"
    assert "claude-code: 3 calls, 1 delivered, 1 pages printed, 1 reported" in check["detail"]
