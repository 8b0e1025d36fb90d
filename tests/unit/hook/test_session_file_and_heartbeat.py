"""Per-session numbering state (reserved before publishing, locked, swept) and the heartbeat file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.hook.config import HookConfig, hooks_enabled
from pipeline.hook.heartbeat import CallRecord, apply_call, day_key, read_heartbeat, record_call, totals_since
from pipeline.hook.session_file import SessionStateFile, prompt_digest, session_file_name, sweep_old_sessions

DAY = 86_400_000
NOW = 1_800_000_000_000


def test_numbers_are_reserved_and_saved(tmp_path: Path) -> None:
    with SessionStateFile(tmp_path, "claude-code", "s/../1") as sf:
        assert sf.state.is_new and sf.state.reserve(3) == [1, 2, 3]
        sf.state.remember_prompt("Hi Alice ")
        sf.state.pending.append({"turn": 3, "slugs": ["a"]})
        sf.state.offset, sf.state.file_id = 120, "1:2"
        sf.save()
    assert Path(sf.path).parent == tmp_path / "sessions" / "claude-code"  # the id never becomes a path
    with SessionStateFile(tmp_path, "claude-code", "s/../1") as again:
        state = again.state
        assert not state.is_new and state.reserve(1) == [4]
        assert state.recent_prompts == [prompt_digest("Hi Alice")]
        assert (state.offset, state.file_id, state.pending) == (120, "1:2", [{"turn": 3, "slugs": ["a"]}])
    with SessionStateFile(tmp_path, "codex", "s/../1") as other:
        assert other.state.is_new  # channels are separate


def test_a_corrupt_state_file_restarts_numbering_but_is_not_new(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / "claude-code" / session_file_name("s")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"{broken")
    with SessionStateFile(tmp_path, "claude-code", "s") as sf:
        assert not sf.state.is_new and sf.state.reserve(1) == [1]


def test_one_session_is_locked_while_in_use(tmp_path: Path) -> None:
    order: list[str] = []
    with SessionStateFile(tmp_path, "claude-code", "s") as sf:
        sf.state.reserve(1)
        sf.save()

        def second() -> None:
            with SessionStateFile(tmp_path, "claude-code", "s") as other:
                order.append(f"second saw {other.state.last_turn}")

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.2)
        order.append("first done")
        sf.state.reserve(1)
        sf.save()
    thread.join(10)
    assert order == ["first done", "second saw 2"]


def test_sweep_removes_only_old_session_files(tmp_path: Path) -> None:
    for sid in ("old", "new"):
        with SessionStateFile(tmp_path, "claude-code", sid) as sf:
            sf.save()
    old = tmp_path / "sessions" / "claude-code" / session_file_name("old")
    past = time.time() - 30 * 86400
    os.utime(old, (past, past))
    assert sweep_old_sessions(tmp_path) == 1
    remaining = sorted(p.name for p in (tmp_path / "sessions" / "claude-code").iterdir())
    assert remaining == sorted([session_file_name("new"), session_file_name("new") + ".lock"])


def test_heartbeat_counts_calls_and_deliveries_per_day() -> None:
    data: dict[str, object] = {}
    apply_call(data, CallRecord("claude-code", "nothing"), NOW - 10 * DAY)
    apply_call(data, CallRecord("claude-code", "degraded", "no_worker"), NOW - DAY)
    apply_call(data, CallRecord("claude-code", "ok", "trimmed", pages_printed=2, pages_reported=1), NOW)
    ch = data["channels"]["claude-code"]  # type: ignore[index]
    assert (ch["calls"], ch["printed_calls"], ch["pages_printed"], ch["pages_reported"]) == (3, 1, 2, 1)
    assert (ch["first_call_ms"], ch["last_call_ms"], ch["last_delivery_ms"]) == (NOW - 10 * DAY, NOW, NOW)
    assert ch["reasons"] == {"nothing": 1, "no_worker": 1, "trimmed": 1}
    assert totals_since(ch, 7, NOW) == {"calls": 2, "printed_calls": 1, "pages_printed": 2, "pages_reported": 1}
    assert totals_since(ch, 1, NOW)["calls"] == 1
    apply_call(data, CallRecord("claude-code", "nothing"), NOW + 20 * DAY)
    assert min(ch["days"]) >= day_key(NOW + 6 * DAY)  # older days are pruned


def test_record_call_writes_the_file_and_never_raises(tmp_path: Path) -> None:
    assert record_call(tmp_path / "state", CallRecord("codex", "ok", pages_printed=1, pages_reported=1), NOW)
    beat = read_heartbeat(tmp_path / "state")
    assert beat["channels"]["codex"]["pages_printed"] == 1
    assert orjson.loads((tmp_path / "state" / "heartbeat.json").read_bytes()) == beat
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert record_call(blocker / "state", CallRecord("codex"), NOW) is False
    assert read_heartbeat(tmp_path / "none") == {"version": 1, "channels": {}}


@pytest.mark.parametrize(("value", "enabled"), [("", True), ("1", True), ("0", False), ("off", False),
                                                ("FALSE", False), ("no", False), ("yes", True)])
def test_kill_switch_values(value: str, enabled: bool) -> None:
    assert hooks_enabled({"VOLUNTEER_HOOKS": value}) is enabled


def test_config_from_env_falls_back_on_bad_values(tmp_path: Path) -> None:
    cfg = HookConfig.from_env("nonsense", {"HOME": str(tmp_path), "VOLUNTEER_HOOK_DEADLINE_MS": "abc",
                                           "VOLUNTEER_HOOK_MAX_CHARS": "99999", "VOLUNTEER_HOOK_WARM_TURNS": "nan"})
    assert (cfg.harness, cfg.url, cfg.deadline_ms, cfg.max_chars, cfg.warm_turns) == (
        "claude-code", None, 800.0, 10_000, 4)
    assert Path(cfg.transcript_root) == tmp_path / ".claude" / "projects"
    assert Path(cfg.state_dir) == tmp_path / ".local" / "state" / "volunteer" / "hooks"
    codex = HookConfig.from_env("codex", {"HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "cx"),
                                          "VOLUNTEER_HOOK_URL": "http://h:1/", "VOLUNTEER_SOURCE": "work"})
    assert (Path(codex.transcript_root), codex.url, codex.source_id) == (tmp_path / "cx" / "sessions", "http://h:1",
                                                                         "work")


def test_state_folders_are_0700_and_files_0600_whatever_the_umask(tmp_path: Path) -> None:
    """Issue: state folders came out 0755 (parents made with the umask) and heartbeat.json 0644."""
    import stat as st

    from pipeline.hook.heartbeat import heartbeat_path

    old = os.umask(0o022)
    try:
        state_dir = tmp_path / "home" / ".local" / "state" / "volunteer" / "hooks"
        assert record_call(state_dir, CallRecord("claude-code", "ok", pages_printed=1))
        with SessionStateFile(state_dir, "claude-code", "s1") as state:
            state.save()
        existing = tmp_path / "old"
        existing.mkdir(mode=0o755)
        with SessionStateFile(existing, "claude-code", "s2") as state:
            state.save()
        assert record_call(existing, CallRecord("claude-code", "ok", pages_printed=1))
    finally:
        os.umask(old)
    for folder in (state_dir.parent, state_dir, state_dir / "sessions", state_dir / "sessions" / "claude-code",
                   existing):
        assert st.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for file in (Path(heartbeat_path(state_dir)), Path(heartbeat_path(existing)),
                 *(state_dir / "sessions" / "claude-code").iterdir()):
        assert st.S_IMODE(file.stat().st_mode) == 0o600, file


def test_a_skipped_warm_up_is_counted_apart_from_the_outcome() -> None:
    data: dict[str, Any] = {"channels": {}}
    apply_call(data, CallRecord("codex", "ok", "transcript_symlink", 2, 2, 5.0, warmup="transcript_symlink"), 1_000)
    apply_call(data, CallRecord("codex", "nothing", None, warmup=None), 2_000)
    ch = data["channels"]["codex"]
    assert ch["warmup_skipped"] == {"transcript_symlink": 1}
    assert ch["last_warmup_skipped"] is None and ch["printed_calls"] == 1
