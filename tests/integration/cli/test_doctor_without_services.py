"""``volunteer doctor`` with the database and the broker unreachable: the hook channels are still
diagnosed from the settings and the heartbeat, with the fix that applies (not "channels not checked")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from pipeline.hook.heartbeat import CallRecord, record_call

ROOT = Path(__file__).resolve().parents[3]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def doctor(home: Path, state: Path) -> tuple[int, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLUNTEER_", "CODEX_", "CLAUDE_"))}
    env.update({"HOME": str(home), "VOLUNTEER_HOOK_STATE_DIR": str(state)})
    done = subprocess.run([sys.executable, "-m", "pipeline", "doctor", "--json", "--timeout", "1",
                           "--broker", f"kafka://127.0.0.1:{closed_port()}",
                           "--database-url", f"postgresql://volunteer@127.0.0.1:{closed_port()}/none"],
                          capture_output=True, text=True, env=env, cwd=home, timeout=120)
    return done.returncode, {c["check"]: c for c in json.loads(done.stdout)["checks"]}


def bootstrap(home: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VOLUNTEER_", "CODEX_", "CLAUDE_"))}
    env["HOME"] = str(home)
    subprocess.run([sys.executable, "-m", "pipeline", "bootstrap", *args], check=True, capture_output=True,
                   env=env, cwd=home, timeout=60)


def test_database_and_broker_down_the_heartbeat_still_explains_the_hooks(tmp_path: Path) -> None:
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    bootstrap(home)
    bootstrap(home, "--harness", "codex")  # installed, not trusted
    for _ in range(3):
        assert record_call(state, CallRecord("claude-code", "nothing", reason="no_worker"))
    code, checks = doctor(home, state)
    assert code == 1 and checks["database"]["status"] == "fail" and checks["broker"]["status"] == "fail"
    channels = checks["channels"]
    assert channels["status"] == "warn"
    assert "events not checked (database unreachable)" in channels["detail"]
    assert "claude-code: called 3 times" in channels["detail"] and "no_worker x3" in channels["detail"]
    assert "codex: hook installed" in channels["detail"] and "not trusted" in channels["detail"]
    assert channels["data"]["hooks"]["codex"]["trust"] == {str(home / ".codex" / "hooks.json"): "untrusted"}
    assert "volunteer worker" in channels["hint"]


def test_nothing_installed_keeps_the_plain_not_checked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    code, checks = doctor(home, tmp_path / "state")
    assert code == 1 and checks["channels"]["detail"] == "not checked: database unreachable"
