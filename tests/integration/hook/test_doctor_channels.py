"""``volunteer doctor`` on a real deployment with the hook: installed but never called, called but
never delivering, and delivering with printed = reported <= stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.settings import Settings
from tests.integration.hook.conftest import ROOT, HookRunner, Worker, free_port, wait_rows

pytestmark = pytest.mark.integration


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

    hook = HookRunner(worker.url, home, state)
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
