"""Codex's own view of our hook's trust (``codex app-server`` ``hooks/list``) against what this project
computes without Codex: the same key and hash, also for a hook that is not first in its file, has a
matcher and a non-default timeout, and the same status through untrusted -> trusted -> modified."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.hook.codex_trust import AppServer, config_path, our_hook, trust_status, trust_without_codex
from tests.support.harness_cli import codex_env

COMMAND = "/opt/v/bin/volunteer hook user-prompt --harness codex"


def listed(codex: Path, home: Path) -> dict[str, Any]:
    server = AppServer(str(codex), codex_env(home), home)
    try:
        server.call("initialize", {"clientInfo": {"name": "volunteer-test", "version": "1"}})
        server.notify("initialized")
        result = server.call("hooks/list", {"cwds": [str(home)]})
    finally:
        server.close()
    hooks = [h for entry in result["data"] for h in entry["hooks"] if h.get("command", "").endswith("--harness codex")
             or "volunteer" in h.get("command", "")]
    assert len(hooks) == 1, result
    return dict(hooks[0])


def write_hooks(path: Path, command: str) -> None:
    path.write_text(json.dumps({"hooks": {"UserPromptSubmit": [
        {"hooks": [{"type": "command", "command": "/usr/bin/true", "timeout": 3}]},
        {"matcher": "", "hooks": [{"type": "command", "command": "/usr/bin/env", "timeout": 2},
                                  {"type": "command", "command": command, "timeout": 7}]}]}}))


def test_computed_key_hash_and_status_agree_with_codex(codex_cli: Path, harness_home: Path) -> None:
    hooks_json = harness_home / ".codex" / "hooks.json"
    write_hooks(hooks_json, COMMAND)
    ours = our_hook(hooks_json)
    assert ours is not None and ours.key.endswith("hooks.json:user_prompt_submit:1:1")
    codex = listed(codex_cli, harness_home)
    assert (codex["key"], codex["currentHash"]) == (ours.key, ours.current_hash)
    config = config_path(codex_env(harness_home))
    assert codex["trustStatus"] == trust_status(ours, config) == "untrusted"

    config.write_text('# kept\nmodel = "stand-in"\n')
    assert trust_without_codex(ours, config)
    assert listed(codex_cli, harness_home)["trustStatus"] == trust_status(ours, config) == "trusted"
    assert config.read_text().startswith('# kept\nmodel = "stand-in"\n')

    write_hooks(hooks_json, "env VOLUNTEER_HOOK_URL=http://127.0.0.1:7002 " + COMMAND)
    changed = our_hook(hooks_json)
    assert changed is not None and changed.key == ours.key and changed.current_hash != ours.current_hash
    codex = listed(codex_cli, harness_home)
    assert codex["currentHash"] == changed.current_hash
    assert codex["trustStatus"] == trust_status(changed, config) == "modified"
