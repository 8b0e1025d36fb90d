"""What the doctor says about the hook channels: installed? called? delivering? counted?

For each harness (Claude Code, Codex) it combines three sources: the harness settings (is our
hook installed, and where), the hook's heartbeat on this machine (calls, printed and reported
pages over the last days, the last reasons) and the events table (rows per channel over the same
days). It flags the two quiet failures the reference names, "installed but never called" (the
harness reads hooks at session start: restart it) and "called but never delivered anything", and
reconciles pages printed / reported / stored, which tells a lost report from a slow sink.

Codex adds a third: it skips a hook the user has not trusted (or whose command changed since)
without a word, so for Codex "installed" is split into untrusted / modified / disabled (the fix is
to trust it, not to restart anything) and trusted but never called. When the database cannot be
reached the events are unknown (``None``): the settings and the heartbeat still tell the story.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.hook.codex_trust import TRUSTED, config_path, our_hook, trust_status
from pipeline.hook.config import default_state_dir
from pipeline.hook.heartbeat import read_heartbeat, totals_since
from pipeline.hook.install import HARNESSES, SCOPES, InstallError, installed_command, settings_path

OK, WARN = "ok", "warn"


@dataclass
class HookChannelStatus:
    channel: str
    status: str
    detail: str
    hint: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def installed_in(harness: str, env: Mapping[str, str], project_dir: Path | None) -> list[str]:
    """The settings files (all scopes) that hold our hook for this harness."""
    found = []
    for scope in SCOPES:
        try:
            path = settings_path(harness, scope, project_dir, env)
        except InstallError:
            continue
        if installed_command(path) is not None:
            found.append(str(path))
    return found


def _when(ms: Any) -> str:
    if not isinstance(ms, int | float):
        return "never"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _top_reasons(channel_data: Mapping[str, Any], n: int = 3) -> str:
    reasons = channel_data.get("reasons") or {}
    ranked = sorted(((int(v), str(k)) for k, v in reasons.items() if k not in ("ok", "nothing")), reverse=True)
    return ", ".join(f"{k} x{v}" for v, k in ranked[:n])


def codex_trust(where: list[str], env: Mapping[str, str]) -> dict[str, str]:
    """Codex's trust in our hook per installed ``hooks.json``: trusted | untrusted | modified | disabled."""
    config = config_path(env)
    out = {}
    for path in where:
        hook = our_hook(Path(path))
        if hook is not None:
            out[path] = trust_status(hook, config)
    return out


def hook_channel_statuses(events_by_channel: Mapping[str, int] | None, *, days: int = 7,
                          state_dir: str | Path | None = None, env: Mapping[str, str] | None = None,
                          project_dir: Path | None = None, now_ms: int | None = None) -> list[HookChannelStatus]:
    """One status per harness that is installed, was called, or has events; quiet cases are ``warn``.

    ``events_by_channel`` is ``None`` when the events table could not be read: no reconciliation then.
    """
    env = os.environ if env is None else env
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if state_dir is None:
        configured = env.get("VOLUNTEER_HOOK_STATE_DIR", "").strip()
        state_dir = configured or default_state_dir(env)
    heartbeat = read_heartbeat(state_dir).get("channels", {})
    out = []
    for harness in HARNESSES:
        where = installed_in(harness, env, project_dir)
        beat = heartbeat.get(harness) or {}
        events = None if events_by_channel is None else int(events_by_channel.get(harness, 0))
        if not where and not beat and not events:
            continue
        week = totals_since(beat, days, now_ms) if beat else dict.fromkeys(
            ("calls", "printed_calls", "pages_printed", "pages_reported"), 0)
        data: dict[str, Any] = {"installed_in": where, "heartbeat": str(state_dir), "events": events, "days": days,
                "last_call": _when(beat.get("last_call_ms")), "last_delivery": _when(beat.get("last_delivery_ms")),
                **week}
        trust = codex_trust(where, env) if harness == "codex" else {}
        if trust:
            data["trust"] = trust
        status, detail, hint = _judge_trust(trust, beat, config_path(env)) if any(
            t != TRUSTED for t in trust.values()) else _judge(harness, where, beat, week, events, days)
        out.append(HookChannelStatus(harness, status, detail, hint, data))
    return out


TRUST_FIX = ("run 'volunteer bootstrap --harness codex --trust' (or trust it in a Codex session with /hooks); "
             "Codex skips untrusted hooks without a word, so restarting does not help")


def _judge_trust(trust: Mapping[str, str], beat: Mapping[str, Any], config: Path) -> tuple[str, str, str]:
    """Codex skips the hook: which file, why, and the fix (trust it, never "restart")."""
    path, status = next((p, t) for p, t in trust.items() if t != TRUSTED)
    last = f"; last call {_when(beat.get('last_call_ms'))}" if beat else "; never called"
    if status == "modified":
        return (WARN, f"codex: hook in {path} changed since it was trusted, so Codex skips it{last}",
                "the command changed (for example a new --url): " + TRUST_FIX)
    if status == "disabled":
        return (WARN, f"codex: hook in {path} is disabled in Codex ({config}){last}",
                "enable it in a Codex session with /hooks, or remove 'enabled = false' from its "
                "[hooks.state] entry")
    return WARN, f"codex: hook installed ({path}) but not trusted, so Codex skips it{last}", TRUST_FIX


def _judge(harness: str, where: list[str], beat: Mapping[str, Any], week: Mapping[str, int], events: int | None,
           days: int) -> tuple[str, str, str]:
    name = {"claude-code": "Claude Code", "codex": "Codex", "opencode": "opencode"}.get(harness, harness)
    if where and not beat and harness == "codex":
        return (WARN, f"codex: hook installed and trusted ({where[0]}) but never called",
                "start a new Codex session (running ones read hooks when they started), and check that Codex "
                f"reads {where[0]} (CODEX_HOME)")
    if where and not beat:
        return (WARN, f"{harness}: hook installed ({where[0]}) but never called",
                f"restart your {name} sessions: hooks are read when a session starts")
    if where and week["calls"] == 0:
        return (WARN, f"{harness}: hook installed but not called in {days} days (last call {_when(beat.get('last_call_ms'))})",
                f"restart your {name} sessions, and check the hook command in {where[0]}")
    if week["calls"] and not week["printed_calls"]:
        reasons = _top_reasons(beat)
        return (WARN, f"{harness}: called {week['calls']} times in {days} days but never delivered anything"
                      + (f" ({reasons})" if reasons else ""),
                "no_worker/deadline: run 'volunteer worker' with its web server on and point VOLUNTEER_HOOK_URL "
                "at it; 'nothing' only: the brain has no page these prompts mention")
    printed, reported = week["pages_printed"], week["pages_reported"]
    stored = "events not checked" if events is None else f"{events} events"
    detail = (f"{harness}: {week['calls']} calls, {week['printed_calls']} delivered, {printed} pages printed, "
              f"{reported} reported, {stored} in {days} days")
    if printed > reported:
        return (WARN, detail + f"; {printed - reported} printed pages not reported yet",
                "the worker was unreachable right after printing; reports are resent with the session's next "
                "prompt (pages never reported are not counted)")
    if events is not None and events < reported:
        return (WARN, detail + f"; {reported - events} reported pages have no event row",
                "check the worker's sink (database reachable? 'volunteer doctor' lag); rows from other machines "
                "make events exceed this machine's heartbeat, never fall short")
    return OK, detail, ""


def merge_into_channels(status: str, detail: str, hint: str, data: dict[str, Any],
                        events_by_channel: Mapping[str, int] | None, **kwargs: Any) -> tuple[str, str, str, dict[str, Any]]:
    """The doctor's ``channels`` check with the hook channels folded in (worst status wins)."""
    hooks = hook_channel_statuses(events_by_channel, **kwargs)
    if not hooks:
        return status, detail, hint, data
    rank = {OK: 0, WARN: 1}
    worst = max([status, *(h.status for h in hooks)], key=lambda s: rank.get(s, 2))
    detail = "; ".join([detail, *(h.detail for h in hooks)])
    hint = hint or next((h.hint for h in hooks if h.hint), "")
    return worst, detail, hint, {**data, "hooks": {h.channel: {"status": h.status, **h.data} for h in hooks}}
