"""The real Claude Code and Codex CLIs, installed by pinned version and driven offline.

Tests that must prove something reaches the *model* (a hook's block, an MCP tool result) run the
real harness CLI against :class:`StandInModel`, a small HTTP server on 127.0.0.1 that records every
request body and answers like the model API (Anthropic Messages for Claude Code, OpenAI Responses
for Codex). No API key and no traffic off the machine.

API (everything a test needs; the pytest fixtures are in ``tests/support/fixtures.py``)::

    claude = require(CLAUDE_CODE)          # binary path; installs into the cache on first use
    with StandInModel() as model:          # model.url = "http://127.0.0.1:<port>"
        home = make_home(tmp_path)         # temporary HOME with ~/.claude and ~/.codex
        first = run_claude(claude, "Hi", home=home, model_url=model.url)
        again = run_claude(claude, "More", home=home, model_url=model.url, resume=first.session_id)
        model.messages()                   # bodies of POST /v1/messages, oldest first
        model.hook_context(model.messages()[-1])  # texts starting "UserPromptSubmit hook additional context: "
        newest_hook_context(model.messages()[-1])  # the same, of the newest turn only

    opencode = require(OPENCODE)           # plugins from ~/.config/opencode/plugins, Anthropic API
    run = run_opencode(opencode, "Hi", home=home, model_url=model.url)     # run.session_id
    run_opencode(opencode, "More", home=home, model_url=model.url, session=run.session_id)

    codex = require(CODEX)
    run = run_codex(codex, "Hi", home=home, model_url=model.url)            # run.thread_id, run.events
    run_codex(codex, "More", home=home, model_url=model.url, resume=run.thread_id)
    model.responses()                      # bodies of POST /v1/responses
    developer_after_user(model.responses()[-1])  # developer texts after the last user message

    model.script(ToolUse("mcp__brain__search", {"query": "x"}))  # next /v1/messages request that
    # offers that tool gets a tool_use answer; every other request gets the text reply

Installation: ``npm install <pkg>@<version>`` into ``~/.cache/volunteer-stream/harnesses/<dir>``
(``VOLUNTEER_HARNESS_CACHE`` overrides the root), under an exclusive file lock so parallel test
processes install once. :func:`require` skips the test when npm is not on PATH (a developer
machine without Node) and *fails* it when npm is there but the install or the binary is broken:
CI has npm, so a broken install must not pass as a skip.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOOK_CONTEXT_PREFIX = "UserPromptSubmit hook additional context: "
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 180


# ----------------------------------------------------------------------------- installation


@dataclass(frozen=True)
class Harness:
    """One harness CLI as published on the npm registry, pinned."""

    name: str  # the hook channel: claude-code | codex | opencode
    package: str
    version: str
    bin_name: str
    post_install: str = ""  # a node script of the package that only links its native binary

    @property
    def cache_dir(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}"

    @property
    def binary(self) -> Path:
        return self.cache_dir / "node_modules" / ".bin" / self.bin_name

    def installed_version(self) -> str | None:
        manifest = self.cache_dir / "node_modules" / self.package / "package.json"
        try:
            return str(json.loads(manifest.read_text(encoding="utf-8"))["version"])
        except (OSError, ValueError, KeyError):
            return None


CLAUDE_CODE = Harness("claude-code", "@anthropic-ai/claude-code", "2.1.328", "claude", post_install="install.cjs")
CODEX = Harness("codex", "@openai/codex", "0.169.0", "codex")
OPENCODE = Harness("opencode", "opencode-ai", "1.18.33", "opencode", post_install="postinstall.mjs")


class NpmMissing(Exception):
    """npm is not on PATH: the real-CLI tests cannot install anything (they skip)."""


class HarnessInstallError(Exception):
    """npm is there but the pinned harness could not be installed or does not run (tests fail)."""


def cache_root() -> Path:
    configured = os.environ.get("VOLUNTEER_HARNESS_CACHE", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "volunteer-stream" / "harnesses"


_verified: dict[Harness, Path] = {}
_verified_lock = threading.Lock()


def _version_ok(harness: Harness) -> str | None:
    """``None`` when the cached binary runs and reports the pinned version, else why not."""
    if harness.installed_version() != harness.version or not harness.binary.exists():
        return f"{harness.package}@{harness.version} is not in {harness.cache_dir}"
    try:
        with tempfile.TemporaryDirectory(prefix="harness-version-") as home:  # no state in the real HOME
            out = subprocess.run([str(harness.binary), "--version"], capture_output=True, timeout=60,
                                 stdin=subprocess.DEVNULL, env={**os.environ, "HOME": home, "DISABLE_AUTOUPDATER": "1"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{harness.binary} --version did not run: {exc}"
    text = out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")
    if out.returncode != 0 or harness.version not in text:
        return f"{harness.binary} --version exited {out.returncode}: {text.strip()[:300]}"
    return None


def install(harness: Harness) -> Path:
    """The pinned harness binary, installed into the cache if needed (idempotent, process-safe)."""
    with _verified_lock:
        if harness in _verified:
            return _verified[harness]
        if shutil.which("npm") is None and _version_ok(harness) is not None:
            raise NpmMissing(f"npm is not on PATH: cannot install {harness.package}@{harness.version}")
        root = cache_root()
        root.mkdir(parents=True, exist_ok=True)
        with (root / f"{harness.name}-{harness.version}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be installing it right now
            if _version_ok(harness) is not None:
                _npm_install(harness)
            problem = _version_ok(harness)
            if problem:
                raise HarnessInstallError(problem)
        _verified[harness] = harness.binary
        return harness.binary


def _npm_install(harness: Harness) -> None:
    """Install into a staging folder, then swap it in, so a killed install leaves no half cache."""
    npm = shutil.which("npm")
    if npm is None:
        raise NpmMissing(f"npm is not on PATH: cannot install {harness.package}@{harness.version}")
    staging = harness.cache_dir.with_name(harness.cache_dir.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "package.json").write_text(json.dumps({"private": True, "dependencies": {}}) + "\n")
    # --ignore-scripts: no install script may reach the network. Claude Code's and opencode's
    # postinstalls only link the native binary of their optional dependency; each is run below, on its own
    # (without it Claude Code's bin is a shell stub with no shebang: "Exec format error").
    cmd = [npm, "install", "--prefix", str(staging), "--save-exact", "--no-audit", "--no-fund",
           "--ignore-scripts", "--loglevel=error", f"{harness.package}@{harness.version}"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise HarnessInstallError(f"npm install {harness.package}@{harness.version} took over "
                                  f"{INSTALL_TIMEOUT_S}s") from None
    if done.returncode == 0 and harness.post_install:
        # the postinstall (run alone, after a verified install) hard-links the native binary from the
        # optional dependency into bin/; it reads nothing from the network
        node = shutil.which("node") or "node"
        done = subprocess.run([node, harness.post_install], capture_output=True, timeout=INSTALL_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, cwd=staging / "node_modules" / harness.package)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise HarnessInstallError(f"installing {harness.package}@{harness.version} exited {done.returncode}: "
                                  + done.stderr.decode(errors="replace").strip()[-500:])
    shutil.rmtree(harness.cache_dir, ignore_errors=True)
    staging.rename(harness.cache_dir)


def require(harness: Harness) -> Path:
    """:func:`install` for a test: skip when npm is missing, fail when the install is broken."""
    import pytest

    try:
        return install(harness)
    except NpmMissing as exc:
        pytest.skip(str(exc))
    except HarnessInstallError as exc:
        pytest.fail(str(exc), pytrace=False)


# ----------------------------------------------------------------------------- the stand-in model API


@dataclass(frozen=True)
class ToolUse:
    """A scripted answer: call tool ``name`` with ``arguments`` (Anthropic ``tool_use``)."""

    name: str
    arguments: Mapping[str, Any]


@dataclass
class Recorded:
    method: str
    path: str
    body: Any  # parsed JSON, or None


@dataclass
class StandInModel:
    """Anthropic Messages + OpenAI Responses on 127.0.0.1 (random port), recording every request.

    Every ``POST /v1/messages`` is answered with a streamed text message (``reply``), unless a
    scripted :class:`ToolUse` is pending whose tool the request offers: then that tool call is the
    answer (``stop_reason: tool_use``) and the script moves on. ``count_tokens`` gets
    ``{"input_tokens": 1}``, every GET ``{}`` (``/v1/models`` an empty list), and ``POST
    /v1/responses`` a streamed assistant message (``reply``).
    """

    reply: str = "ok"
    requests: list[Recorded] = field(default_factory=list)
    _script: list[ToolUse] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the stand-in first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> StandInModel:
        model = self

        class Handler(_Handler):
            owner = model

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="stand-in-model", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> StandInModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, *answers: ToolUse) -> None:
        with self._lock:
            self._script.extend(answers)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self._script.clear()

    def _record(self, method: str, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append(Recorded(method, path, body))

    def _next_tool_use(self, body: Any) -> ToolUse | None:
        offered = {t.get("name") for t in (body or {}).get("tools") or [] if isinstance(t, dict)}
        with self._lock:
            if self._script and self._script[0].name in offered:
                return self._script.pop(0)
        return None

    def posts(self, path: str) -> list[Any]:
        with self._lock:
            return [r.body for r in self.requests if r.method == "POST" and r.path.split("?")[0] == path]

    def messages(self) -> list[Any]:
        """Claude Code's model requests (``POST /v1/messages``), oldest first."""
        return self.posts("/v1/messages")

    def responses(self) -> list[Any]:
        """Codex's model requests (``POST /v1/responses``), oldest first."""
        return self.posts("/v1/responses")

    @staticmethod
    def hook_context(body: Any) -> list[str]:
        """The ``UserPromptSubmit`` hook texts anywhere in an Anthropic request, prefix stripped."""
        return _after_prefix(anthropic_texts(body))


def _after_prefix(texts: list[str]) -> list[str]:
    """What follows each hook-context prefix, to the end of its text part.

    On a resumed prompt Claude Code 2.1 sends the hook's ``additionalContext`` as a text part of
    its own that begins with the prefix; on a session's first prompt it folds it into the
    environment text that follows the prompt, with its own lines (the date, …) after it.
    """
    out: list[str] = []
    for text in texts:
        out.extend(text.split(HOOK_CONTEXT_PREFIX)[1:])
    return out


def newest_hook_context(body: Any) -> list[str]:
    """The hook texts of the request's newest turn (after its last assistant message), prefix stripped.

    Claude Code 2.1 sends a hook's ``additionalContext`` in a message of role ``system`` right
    after the user's prompt; a resumed session's request still holds the earlier turns' blocks.
    """
    messages = list((body or {}).get("messages") or [])
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return _after_prefix(anthropic_texts({"messages": messages[last + 1:]}))


def anthropic_texts(body: Any) -> list[str]:
    """Every text part of the request's messages, in order."""
    out: list[str] = []
    for message in (body or {}).get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
            continue
        for part in content or []:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append(str(part.get("text", "")))
    return out


def responses_items(body: Any) -> list[tuple[str, str]]:
    """``(role, text)`` of each message item of a Responses request, in order."""
    out = []
    for item in (body or {}).get("input") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            text = "".join(str(p.get("text", "")) for p in item.get("content") or [] if isinstance(p, dict))
            out.append((str(item.get("role")), text))
    return out


def developer_after_user(body: Any) -> list[str]:
    """The ``developer`` texts right after the request's last ``user`` message (Codex hook output)."""
    items = responses_items(body)
    last_user = max((i for i, (role, _) in enumerate(items) if role == "user"), default=-1)
    out = []
    for role, text in items[last_user + 1:]:
        if role != "developer":
            break
        out.append(text)
    return out


class _Handler(BaseHTTPRequestHandler):
    owner: StandInModel
    protocol_version = "HTTP/1.0"  # one request per connection; the close ends a stream

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _json(self, obj: Any, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        for name, data in events:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def do_GET(self) -> None:
        self.owner._record("GET", self.path, None)
        self._json({"object": "list", "data": []} if self.path.split("?")[0].endswith("/models") else {})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.owner._record("POST", self.path, body)
        path = self.path.split("?")[0]
        if path.endswith("/count_tokens"):
            self._json({"input_tokens": 1})
        elif path.endswith("/messages"):
            tool = self.owner._next_tool_use(body)
            if isinstance(body, dict) and body.get("stream") is False:
                self._json(_anthropic_message(self.owner.reply, tool))
            else:
                self._sse(list(_anthropic_stream(self.owner.reply, tool)))
        elif path.endswith("/responses"):
            self._sse(list(_responses_stream(self.owner.reply)))
        else:
            self._json({}, 404)


def _anthropic_message(text: str, tool: ToolUse | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = ([{"type": "tool_use", "id": "toolu_standin", "name": tool.name,
                                       "input": dict(tool.arguments)}] if tool else [{"type": "text", "text": text}])
    return {"id": "msg_standin", "type": "message", "role": "assistant", "model": "stand-in", "content": content,
            "stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}


def _anthropic_stream(text: str, tool: ToolUse | None) -> Iterator[tuple[str, dict[str, Any]]]:
    start = {**_anthropic_message(text, None), "content": [], "stop_reason": None}
    yield "message_start", {"type": "message_start", "message": start}
    if tool:
        block: dict[str, Any] = {"type": "tool_use", "id": "toolu_standin", "name": tool.name, "input": {}}
        delta: dict[str, Any] = {"type": "input_json_delta", "partial_json": json.dumps(dict(tool.arguments))}
    else:
        block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": text}
    yield "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use" if tool else "end_turn",
                                                               "stop_sequence": None},
                            "usage": {"output_tokens": 1}}
    yield "message_stop", {"type": "message_stop"}


def _responses_stream(text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    item_id = "msg_standin"
    part = {"type": "output_text", "text": text, "annotations": []}
    done_item = {"type": "message", "id": item_id, "role": "assistant", "status": "completed", "content": [part]}
    response = {"id": "resp_standin", "object": "response", "model": "stand-in", "status": "in_progress",
                "output": []}
    usage = {"input_tokens": 1, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 2}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response}),
        ("response.output_item.added", {"output_index": 0, "item": {**done_item, "status": "in_progress",
                                                                    "content": []}}),
        ("response.content_part.added", {"item_id": item_id, "output_index": 0, "content_index": 0,
                                         "part": {**part, "text": ""}}),
        ("response.output_text.delta", {"item_id": item_id, "output_index": 0, "content_index": 0, "delta": text}),
        ("response.output_text.done", {"item_id": item_id, "output_index": 0, "content_index": 0, "text": text}),
        ("response.output_item.done", {"output_index": 0, "item": done_item}),
        ("response.completed", {"response": {**response, "status": "completed", "output": [done_item],
                                             "usage": usage}}),
    ]
    for seq, (name, data) in enumerate(events):
        yield name, {"type": name, "sequence_number": seq, **data}


# ----------------------------------------------------------------------------- running the CLIs


def make_home(base: Path) -> Path:
    """A temporary HOME holding ``.claude`` and ``.codex`` (the CLIs' user folders)."""
    home = base / "home"
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    return home


_DROPPED_PREFIXES = ("VOLUNTEER_", "ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_")


def base_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without our settings or any harness/API variable, HOME replaced."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_STATE_HOME": str(home / ".local" / "state"), "XDG_CACHE_HOME": str(home / ".cache")})
    env.update(extra or {})
    return env


def claude_env(home: Path, model_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Claude Code offline: the stand-in as the API, a dummy key, no telemetry or other traffic."""
    return base_env(home, {"ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "sk-ant-dummy-offline",
                           "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
                           "ENABLE_TOOL_SEARCH": "false", **(extra or {})})


def codex_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Codex offline: its home under the temporary HOME and a dummy key for the local provider."""
    return base_env(home, {"CODEX_HOME": str(home / ".codex"), "LOCAL_API_KEY": "dummy-offline",
                           **(extra or {})})


@dataclass
class ClaudeRun:
    proc: subprocess.CompletedProcess[str]
    result: dict[str, Any]

    @property
    def session_id(self) -> str:
        return str(self.result["session_id"])


@dataclass
class EventsRun:
    """A run whose stdout is JSON lines: Codex ``exec --json``, opencode ``run --format json``."""

    proc: subprocess.CompletedProcess[str]
    events: list[dict[str, Any]]

    @property
    def session_id(self) -> str:
        """Codex's thread id (its ``thread.started`` event) or opencode's ``sessionID``."""
        for event in self.events:
            found = (event.get("thread_id") if event.get("type") == "thread.started"
                     else event.get("sessionID") or (event.get("part") or {}).get("sessionID"))
            if found:
                return str(found)
        raise AssertionError(f"no session id in the output:\n{self.proc.stdout[-2000:]}")

    @property
    def thread_id(self) -> str:
        return self.session_id


def _run(cmd: list[str], env: Mapping[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    # PWD too: opencode takes its project folder from it rather than from the process's cwd
    return subprocess.run(cmd, env={**env, "PWD": str(cwd)}, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def run_claude(binary: Path, prompt: str, *, home: Path, model_url: str, resume: str | None = None,
               cwd: Path | None = None, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
               timeout: float = RUN_TIMEOUT_S) -> ClaudeRun:
    """``claude -p PROMPT --output-format json [--resume ID] ARGS``; fails with stderr on a bad exit."""
    cmd = [str(binary), "-p", prompt, "--output-format", "json", *(["--resume", resume] if resume else []), *args]
    proc = _run(cmd, claude_env(home, model_url, env), cwd or home, timeout)
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = None
    if proc.returncode != 0 or not isinstance(result, dict):
        raise AssertionError(f"claude exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
                             f"stderr: {proc.stderr[-2000:]}")
    return ClaudeRun(proc, result)


def codex_provider_args(model_url: str) -> list[str]:
    """``-c`` overrides that make Codex use the stand-in as a custom Responses provider."""
    provider = (f'model_providers.local={{name="local",base_url="{model_url}/v1",wire_api="responses",'
                f'env_key="LOCAL_API_KEY"}}')
    return ["-c", "model_provider=local", "-c", "model=stand-in", "-c", provider,
            "-c", "check_for_update_on_startup=false"]


def run_codex(binary: Path, prompt: str, *, home: Path, model_url: str, resume: str | None = None,
              cwd: Path | None = None, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
              timeout: float = RUN_TIMEOUT_S) -> EventsRun:
    """``codex exec [resume ID] --json ... PROMPT``; fails with the output on a bad exit."""
    head = [str(binary), "exec", *(["resume", resume] if resume else [])]
    sandbox = [] if resume else ["-s", "read-only"]  # 'exec resume' keeps the session's sandbox
    cmd = [*head, *codex_provider_args(model_url), "--skip-git-repo-check", *sandbox, "--json", *args, prompt]
    proc = _run(cmd, codex_env(home, env), cwd or home, timeout)
    events = [obj for obj in (_json_line(line) for line in proc.stdout.splitlines()) if obj is not None]
    if proc.returncode != 0:
        raise AssertionError(f"codex exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
                             f"stderr: {proc.stderr[-2000:]}")
    return EventsRun(proc, events)


def opencode_env(home: Path, model_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """opencode offline: its Anthropic provider pointed at the stand-in, no model catalogue fetch,
    no update check, no sharing, no default plugins, no LSP downloads."""
    config = {"$schema": "https://opencode.ai/config.json", "model": "anthropic/claude-sonnet-4-5",
              "small_model": "anthropic/claude-sonnet-4-5", "autoupdate": False, "share": "disabled",
              "provider": {"anthropic": {"options": {"baseURL": model_url + "/v1", "apiKey": "dummy-offline"}}}}
    return base_env(home, {"OPENCODE_CONFIG_CONTENT": json.dumps(config), "OPENCODE_DISABLE_MODELS_FETCH": "1",
                           "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
                           "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
                           **(extra or {})})


def run_opencode(binary: Path, prompt: str, *, home: Path, model_url: str, session: str | None = None,
                 cwd: Path | None = None, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 timeout: float = RUN_TIMEOUT_S) -> EventsRun:
    """``opencode run --format json [--session ID] PROMPT`` (plugins from ``~/.config/opencode/plugins``)."""
    cmd = [str(binary), "run", "--format", "json", "--title", "stand-in", *(["--session", session] if session else []),
           *args, prompt]
    proc = _run(cmd, opencode_env(home, model_url, env), cwd or home, timeout)
    events = [obj for obj in (_json_line(line) for line in proc.stdout.splitlines()) if obj is not None]
    if proc.returncode != 0:
        raise AssertionError(f"opencode exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
                             f"stderr: {proc.stderr[-2000:]}")
    return EventsRun(proc, events)


def _json_line(line: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
