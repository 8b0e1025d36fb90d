"""The doctor's view of the hook channels: the two quiet cases and the printed/reported/stored check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.hook.doctor import hook_channel_statuses, merge_into_channels
from pipeline.hook.heartbeat import CallRecord, record_call

NOW = 1_800_000_000_000
DAY = 86_400_000


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home")}


def install(env: dict[str, str], harness: str = "claude-code") -> None:
    home = Path(env["HOME"])
    path = home / (".claude/settings.json" if harness == "claude-code" else ".codex/hooks.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = "" if harness == "claude-code" else " --harness codex"
    path.write_text(json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": "/v/bin/volunteer hook user-prompt" + suffix}]}]}}))


def calls(state: Path, channel: str, *records: CallRecord, at: int = NOW) -> None:
    for record in records:
        record.channel = channel
        assert record_call(state, record, at)


def statuses(env: dict[str, str], state: Path, events: dict[str, int] | None = None) -> dict[str, tuple[str, str]]:
    found = hook_channel_statuses(events or {}, state_dir=state, env=env, project_dir=state, now_ms=NOW)
    return {s.channel: (s.status, s.detail) for s in found}


def test_nothing_installed_nothing_said(env: dict[str, str], tmp_path: Path) -> None:
    assert statuses(env, tmp_path / "state") == {}


def test_installed_but_never_called(env: dict[str, str], tmp_path: Path) -> None:
    install(env)
    (status, detail), = statuses(env, tmp_path / "state").values()
    assert status == "warn" and "installed" in detail and "never called" in detail
    hint = hook_channel_statuses({}, state_dir=tmp_path / "state", env=env, project_dir=tmp_path,
                                 now_ms=NOW)[0].hint
    assert "restart your Claude Code sessions" in hint


def test_installed_but_quiet_for_a_week(env: dict[str, str], tmp_path: Path) -> None:
    install(env, "codex")
    calls(tmp_path / "state", "codex", CallRecord("", "ok", pages_printed=1, pages_reported=1), at=NOW - 9 * DAY)
    status, detail = statuses(env, tmp_path / "state", {"codex": 1})["codex"]
    assert status == "warn" and "not called in 7 days" in detail


def test_called_but_never_delivered_names_the_reasons(env: dict[str, str], tmp_path: Path) -> None:
    install(env)
    calls(tmp_path / "state", "claude-code", *(CallRecord("", "degraded", "no_worker") for _ in range(3)),
          CallRecord("", "nothing"))
    status, detail = statuses(env, tmp_path / "state")["claude-code"]
    assert status == "warn" and "called 4 times" in detail and "never delivered" in detail
    assert "no_worker x3" in detail


def test_reconciliation(env: dict[str, str], tmp_path: Path) -> None:
    state = tmp_path / "state"
    calls(state, "claude-code", CallRecord("", "ok", pages_printed=2, pages_reported=2),
          CallRecord("", "ok", pages_printed=1, pages_reported=0))
    status, detail = statuses(env, state, {"claude-code": 2})["claude-code"]
    assert status == "warn" and "1 printed pages not reported yet" in detail
    calls(state, "claude-code", CallRecord("", "nothing", pages_reported=1))  # resent with the next prompt
    assert statuses(env, state, {"claude-code": 3})["claude-code"][0] == "ok"
    status, detail = statuses(env, state, {"claude-code": 1})["claude-code"]
    assert status == "warn" and "2 reported pages have no event row" in detail
    status, detail = statuses(env, state, {"claude-code": 9})["claude-code"]  # other machines add rows
    assert status == "ok" and "3 pages printed, 3 reported, 9 events" in detail


def test_events_without_hook_or_heartbeat_are_reported(env: dict[str, str], tmp_path: Path) -> None:
    assert statuses(env, tmp_path / "state", {"codex": 4, "stream": 10}) == {
        "codex": ("ok", "codex: 0 calls, 0 delivered, 0 pages printed, 0 reported, 4 events in 7 days")}


def test_merged_into_the_channels_check(env: dict[str, str], tmp_path: Path) -> None:
    install(env)
    status, detail, hint, data = merge_into_channels(
        "ok", "active in 7 days: stream=3", "", {"channels": {}}, {"stream": 3},
        state_dir=tmp_path / "state", env=env, project_dir=tmp_path, now_ms=NOW)
    assert status == "warn" and detail.startswith("active in 7 days: stream=3; claude-code: hook installed")
    assert "restart" in hint and data["hooks"]["claude-code"]["status"] == "warn"
    assert merge_into_channels("fail", "x", "fix", {}, {}, state_dir=tmp_path / "state", env=env,
                               project_dir=tmp_path)[0] == "fail"
    assert merge_into_channels("ok", "x", "", {}, {}, state_dir=tmp_path / "none", project_dir=tmp_path,
                               env={"HOME": str(tmp_path / "empty")}) == ("ok", "x", "", {})
