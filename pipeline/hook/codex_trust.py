"""Codex's hook trust: is our ``UserPromptSubmit`` hook trusted, and how to record that it is.

Codex (0.169 and later) runs a hook from ``hooks.json`` only once the user has trusted it, and the
trust is tied to the hook's content: ``config.toml`` holds, per hook,

    [hooks.state."<real path of hooks.json>:user_prompt_submit:<group>:<handler>"]
    trusted_hash = "sha256:<hex>"

where the hash is SHA-256 of the hook's identity as compact JSON with sorted keys:
``{"event_name": "user_prompt_submit", "hooks": [{"async": false, "command": …, "timeout": …,
"type": "command"}]}`` (a group's ``matcher`` is not part of it: Codex applies no matcher to this
event; ``timeout`` is 600 when the entry has none). An untrusted hook, or one
whose command changed since it was trusted ("modified"), is skipped without a word: no process,
no heartbeat, nothing on stderr.

Two ways to record the trust: through Codex itself (``codex app-server``: ``hooks/list`` gives the
key and ``currentHash``, ``config/batchWrite`` writes the entry the way Codex's ``/hooks`` screen
does; used whenever a ``codex`` executable is at hand), or, without Codex, by computing the same
key and hash and adding the one table to ``config.toml`` as text, verified by re-parsing the file.
``tests/integration/harness`` checks both against the real CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import subprocess
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.hook.install import EVENT, InstallError, is_our_command, write_text_atomically

EVENT_KEY = "user_prompt_submit"
CODEX_DEFAULT_TIMEOUT_S = 600
APP_SERVER_TIMEOUT_S = 30.0

UNTRUSTED, TRUSTED, MODIFIED, DISABLED = "untrusted", "trusted", "modified", "disabled"


@dataclass(frozen=True, slots=True)
class CodexHook:
    """Our hook entry in a Codex ``hooks.json``, with the key and hash Codex gives it."""

    hooks_path: Path
    command: str
    key: str
    current_hash: str


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """``$CODEX_HOME/config.toml`` (default ``~/.codex/config.toml``): where Codex keeps trust."""
    env = os.environ if env is None else env
    codex_home = env.get("CODEX_HOME", "").strip()
    home = Path(env.get("HOME") or Path.home())
    return (Path(codex_home) if codex_home else home / ".codex") / "config.toml"


def hook_key(hooks_path: Path, group: int, handler: int) -> str:
    return f"{os.path.realpath(hooks_path)}:{EVENT_KEY}:{group}:{handler}"


def hook_hash(command: str, timeout_s: int) -> str:
    identity = {"event_name": EVENT_KEY, "hooks": [
        {"async": False, "command": command, "timeout": timeout_s, "type": "command"}]}
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def our_hook(hooks_path: Path, settings: Any = None) -> CodexHook | None:
    """Our entry in that ``hooks.json`` (the first, as Codex numbers them), or ``None``.

    ``settings`` is the file's parsed content when it is not on disk yet (a dry run).
    """
    if settings is None:
        try:
            settings = json.loads(hooks_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
    groups = settings.get("hooks", {}).get(EVENT) if isinstance(settings, dict) else None
    if not isinstance(groups, list):
        return None
    for g, group in enumerate(groups):
        handlers = group.get("hooks") if isinstance(group, dict) else None
        for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
            if isinstance(handler, dict) and is_our_command(handler.get("command")):
                timeout = handler.get("timeout")
                timeout_s = timeout if isinstance(timeout, int) else CODEX_DEFAULT_TIMEOUT_S
                command = str(handler["command"])
                return CodexHook(hooks_path, command, hook_key(hooks_path, g, h), hook_hash(command, timeout_s))
    return None


def _state_table(config: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}
    state = data.get("hooks", {}).get("state", {}) if isinstance(data.get("hooks"), dict) else {}
    return state if isinstance(state, dict) else {}


def trust_status(hook: CodexHook, config: Path) -> str:
    """``trusted``, ``untrusted`` (no entry), ``modified`` (trusted an older command) or ``disabled``."""
    entry = _state_table(config).get(hook.key)
    if not isinstance(entry, dict):
        return UNTRUSTED
    if entry.get("enabled") is False:
        return DISABLED
    trusted = entry.get("trusted_hash")
    if not trusted:
        return UNTRUSTED
    return TRUSTED if trusted == hook.current_hash else MODIFIED


# ----------------------------------------------------------------------------- recording trust


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def trust_text(before: str, key: str, trusted_hash: str) -> str:
    """``config.toml`` text with ``[hooks.state."key"] trusted_hash = …`` set; everything else kept."""
    try:
        old = tomllib.loads(before)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"config.toml is not valid TOML ({exc}); fix it, then run again") from None
    header = f"[hooks.state.{_toml_string(key)}]"
    line = f"trusted_hash = {_toml_string(trusted_hash)}"
    lines = before.splitlines(keepends=True)
    at = next((i for i, text in enumerate(lines) if text.strip() == header), None)
    if at is None:
        after = before + ("" if not before or before.endswith("\n") else "\n") + ("\n" if before else "") \
            + f"{header}\n{line}\n"
    else:
        end = next((i for i in range(at + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
        body = [i for i in range(at + 1, end) if re.match(r"\s*trusted_hash\s*=", lines[i])]
        if body:
            lines[body[0]] = line + "\n"
        else:
            lines.insert(at + 1, line + "\n")
        after = "".join(lines)
    try:
        new = tomllib.loads(after)
    except tomllib.TOMLDecodeError:
        new = None
    expected = json.loads(json.dumps(old))
    expected.setdefault("hooks", {}).setdefault("state", {}).setdefault(key, {})["trusted_hash"] = trusted_hash
    if new != expected:  # e.g. an inline 'hooks = {...}' table that a new header would clash with
        raise InstallError("cannot add the trust entry to config.toml as text safely; trust the hook in "
                           "Codex's /hooks screen, or pass --codex PATH so Codex writes it")
    return after


def trust_without_codex(hook: CodexHook, config: Path) -> bool:
    """Write the trust entry computed here; False when it was already there."""
    if trust_status(hook, config) == TRUSTED:
        return False
    try:
        before = config.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = ""
    except OSError as exc:
        raise InstallError(f"cannot read {config}: {exc.strerror or exc}") from None
    write_text_atomically(config, trust_text(before, hook.key, hook.current_hash))
    return True


class AppServer:
    """A ``codex app-server`` child speaking JSON-RPC (one JSON object per line) on stdio."""

    def __init__(self, codex: str, env: Mapping[str, str], cwd: Path) -> None:
        try:
            self.proc = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, env=dict(env), cwd=cwd, text=True)
        except OSError as exc:
            raise InstallError(f"cannot start '{codex} app-server': {exc.strerror or exc}") from None
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": self.next_id, "method": method, "params": dict(params)}) + "\n")
        self.proc.stdin.flush()
        while True:
            try:
                line = self.lines.get(timeout=APP_SERVER_TIMEOUT_S)
            except queue.Empty:
                raise InstallError(f"codex app-server did not answer {method} within {APP_SERVER_TIMEOUT_S:.0f}s") \
                    from None
            if line is None:
                raise InstallError(f"codex app-server exited before answering {method}")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == self.next_id:
                if "error" in message:
                    raise InstallError(f"codex app-server {method}: {message['error'].get('message', message)}")
                return message.get("result")

    def notify(self, method: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"method": method}) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _listed(server: AppServer, hook: CodexHook, cwd: Path) -> dict[str, Any]:
    result = server.call("hooks/list", {"cwds": [str(cwd)]})
    for entry in (result or {}).get("data") or []:
        for listed in entry.get("hooks") or []:
            if listed.get("key") == hook.key:
                return dict(listed)
    raise InstallError(f"Codex does not list the hook {hook.key}: is {hook.hooks_path} the hooks.json it reads "
                       "(CODEX_HOME)? A project's hooks are listed only once Codex trusts the folder")


def trust_with_codex(hook: CodexHook, codex: str, env: Mapping[str, str], cwd: Path) -> bool:
    """Have Codex itself record the trust (``hooks/list`` + ``config/batchWrite``); False if already trusted."""
    server = AppServer(codex, env, cwd)
    try:
        server.call("initialize", {"clientInfo": {"name": "volunteer-bootstrap", "version": "1"}})
        server.notify("initialized")
        listed = _listed(server, hook, cwd)
        if listed.get("trustStatus") == TRUSTED:
            return False
        server.call("config/batchWrite", {"edits": [{"keyPath": "hooks.state", "mergeStrategy": "upsert",
                                                     "value": {hook.key: {"trusted_hash": listed["currentHash"]}}}]})
        status = _listed(server, hook, cwd).get("trustStatus")
        if status != TRUSTED:
            raise InstallError(f"Codex still reports the hook as {status} after writing its trust")
        return True
    finally:
        server.close()


TRUST_EXPLAINED = (
    "Codex runs a hook only after you trust it, and the trust is tied to the hook's exact command: an "
    "untrusted or changed hook is skipped without any message. Trust it in a Codex session with /hooks, "
    "or run this again with --trust to record it in {config}.")
