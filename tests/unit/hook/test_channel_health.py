"""The doctor's view of the hook channels: the two quiet cases and the printed/reported/stored check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.hook.channel_health import hook_channel_statuses, merge_into_channels
from pipeline.hook.codex_trust import config_path, our_hook, trust_without_codex
from pipeline.hook.heartbeat import CallRecord, record_call

NOW = 1_800_000_000_000
DAY = 86_400_000


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home")}


def install(env: dict[str, str], harness: str = "claude-code", trusted: bool = True, url: str = "") -> Path:
    """Our hook in the harness's user settings; for Codex also trusted (as Codex records it) by default."""
    home = Path(env["HOME"])
    path = home / (".claude/settings.json" if harness == "claude-code" else ".codex/hooks.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = "" if harness == "claude-code" else " --harness codex"
    prefix = f"env VOLUNTEER_HOOK_URL={url} " if url else ""
    path.write_text(json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": prefix + "/v/bin/volunteer hook user-prompt" + suffix, "timeout": 5}]}]}}))
    if harness == "codex" and trusted:
        hook = our_hook(path)
        assert hook is not None
        trust_without_codex(hook, config_path(env))
    return path


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


def test_codex_untrusted_is_told_apart_and_the_fix_is_trust_not_restart(env: dict[str, str], tmp_path: Path) -> None:
    install(env, "codex", trusted=False)
    found = hook_channel_statuses({}, state_dir=tmp_path / "state", env=env, project_dir=tmp_path, now_ms=NOW)
    (codex,) = found
    assert codex.status == "warn" and "not trusted" in codex.detail and "never called" in codex.detail
    assert "--trust" in codex.hint and "/hooks" in codex.hint and "restart your" not in codex.hint
    assert codex.data["trust"] == {str(Path(env["HOME"]) / ".codex/hooks.json"): "untrusted"}


def test_codex_modified_after_trust_and_disabled(env: dict[str, str], tmp_path: Path) -> None:
    install(env, "codex")
    install(env, "codex", trusted=False, url="http://127.0.0.1:7000")  # new command, old trust entry
    (codex,) = hook_channel_statuses({}, state_dir=tmp_path / "state", env=env, project_dir=tmp_path, now_ms=NOW)
    assert "changed since it was trusted" in codex.detail and "--trust" in codex.hint
    install(env, "codex")
    config = config_path(env)
    config.write_text(config.read_text() + "enabled = false\n")
    (codex,) = hook_channel_statuses({}, state_dir=tmp_path / "state", env=env, project_dir=tmp_path, now_ms=NOW)
    assert "disabled" in codex.detail and "/hooks" in codex.hint


def test_codex_trusted_but_never_called_then_called_but_quiet(env: dict[str, str], tmp_path: Path) -> None:
    install(env, "codex")
    state = tmp_path / "state"
    (codex,) = hook_channel_statuses({}, state_dir=state, env=env, project_dir=tmp_path, now_ms=NOW)
    assert codex.status == "warn" and "trusted" in codex.detail and "never called" in codex.detail
    assert "new Codex session" in codex.hint and codex.data["trust"] == {str(Path(env["HOME"]) / ".codex/hooks.json"):
                                                                         "trusted"}
    calls(state, "codex", CallRecord("", "nothing", reason="no_worker"), CallRecord("", "nothing", reason="no_worker"))
    (codex,) = hook_channel_statuses({}, state_dir=state, env=env, project_dir=tmp_path, now_ms=NOW)
    assert "called 2 times" in codex.detail and "never delivered" in codex.detail and "no_worker x2" in codex.detail


def test_unknown_events_skip_the_reconciliation(env: dict[str, str], tmp_path: Path) -> None:
    install(env)
    state = tmp_path / "state"
    calls(state, "claude-code", CallRecord("", "ok", pages_printed=2, pages_reported=2))
    (status, detail), = statuses(env, state, {}).values()
    assert status == "warn" and "have no event row" in detail
    (claude,) = hook_channel_statuses(None, state_dir=state, env=env, project_dir=state, now_ms=NOW)
    assert claude.status == "ok" and "events not checked" in claude.detail and claude.data["events"] is None


def test_opencode_plugin_installed_but_never_called(env: dict[str, str], tmp_path: Path) -> None:
    from pipeline.hook.install import apply, plan, settings_path

    path = settings_path("opencode", "user", env=env)
    apply(plan(path, uninstall=False, command="/v/bin/volunteer hook user-prompt --harness opencode"))
    (status, detail), = statuses(env, tmp_path / "state").values()
    assert status == "warn" and f"opencode: hook installed ({path}) but never called" == detail
