"""Fixtures of the hook tests: a real worker (web server on) per module on the embedded services,
and a runner for real ``volunteer hook user-prompt`` processes fed real ``UserPromptSubmit`` JSON.

One worker per module keeps the runtime small: every test uses its own session ids, so tests
share the worker without seeing each other's sessions.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from pipeline.agents.answers import HOOK_ENDPOINT_MARK
from pipeline.agents.wiring import READY_MARK
from pipeline.core.brain import BrainIndex
from pipeline.core.extract import extract_candidates
from pipeline.core.turn_context import turn_context
from pipeline.settings import Settings
from sinks.db import with_database
from tests.services.broker import new_names, settings_for
from tests.services.postgres import _create_database, _drop_database
from tests.services.statekey import STATE_KEY_ENV

ROOT = Path(__file__).resolve().parents[3]
SAMPLE_BRAIN = ROOT / "pipeline" / "samples" / "brain"
HANG_STOP_S = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def signed_get(url: str, path: str, state_dir: Path) -> dict[str, Any]:
    """A GET signed with the state directory's secret, as every request to the edge must be."""
    from pipeline.hook.credential import AUTH_HEADER, load_token, new_nonce, sign_request

    token = load_token({"VOLUNTEER_STATE_DIR": str(state_dir)}, create=False)
    assert token is not None, f"no secret in {state_dir}"
    auth = sign_request(token, "GET", path, b"", int(time.time() * 1000), new_nonce())
    request = urllib.request.Request(url + path, headers={AUTH_HEADER: auth})
    with urllib.request.urlopen(request, timeout=10) as response:
        data: dict[str, Any] = orjson.loads(response.read())
        return data


def signed_post(url: str, path: str, body: dict[str, Any], state_dir: Path, timeout: float = 30) -> dict[str, Any]:
    """POST through the hook's own client, signed with the state directory's secret (proof checked)."""
    from pipeline.hook.credential import load_token
    from pipeline.hook.http import Transport, post_json

    token = load_token({"VOLUNTEER_STATE_DIR": str(state_dir)}, create=False)
    assert token is not None, f"no secret in {state_dir}"
    return post_json(url, path, body, timeout, Transport(token))


@dataclass
class Worker:
    """A ``volunteer worker`` child process with its web server (the hook endpoint) on.

    ``state_dir`` is its ``VOLUNTEER_STATE_DIR`` (the hook credential and the worker registry);
    hooks of the same test use the same one. ``web_port`` None = a free port picked here."""

    settings: Settings
    log_path: Path
    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    env_extra: dict[str, str] = field(default_factory=dict)
    brain: Path = SAMPLE_BRAIN
    state_dir: Path | None = None
    web_port: int | None = None
    default_state: bool = False  # leave VOLUNTEER_STATE_DIR unset (state_dir is then HOME's default)

    def __post_init__(self) -> None:
        if self.state_dir is None:
            self.state_dir = self.data_dir.parent / "volunteer-state"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
        s = self.settings
        env.update({"VOLUNTEER_BROKER": s.broker, "VOLUNTEER_DATABASE_URL": s.database_url,
                    "VOLUNTEER_TOPIC_TURNS": s.topic_turns, "VOLUNTEER_TOPIC_VOLUNTEERED": s.topic_volunteered,
                    "VOLUNTEER_TOPIC_DLQ": s.topic_dlq, "VOLUNTEER_TOPIC_PARTITIONS": str(s.topic_partitions),
                    "VOLUNTEER_APP_ID": s.app_id, "VOLUNTEER_DATA_DIR": str(self.data_dir),
                    "VOLUNTEER_METRICS_PORT": "0", "PYTHONUNBUFFERED": "1", **STATE_KEY_ENV})
        if not self.default_state:
            env["VOLUNTEER_STATE_DIR"] = str(self.state_dir)
        env.update(self.env_extra)
        return env

    def start(self) -> Worker:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "worker", "--brain", str(self.brain), "--web-port",
                 str(free_port() if self.web_port is None else self.web_port)], env=self.env(), cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, count: int = 1, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.log().count(READY_MARK) < count or HOOK_ENDPOINT_MARK not in self.log():
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"worker exited ({self.proc.returncode}):\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready within {timeout}s:\n{self.log()[-3000:]}")
            time.sleep(0.05)
        found = re.findall(re.escape(HOOK_ENDPOINT_MARK) + r" (https?://[^/\s]+)/", self.log())
        assert found, self.log()[-2000:]
        self.url = found[-1]  # the latest start of this log

    def health(self) -> dict[str, Any]:
        assert self.state_dir is not None
        return signed_get(self.url, "/volunteer/hook/health", self.state_dir)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class HookRunner:
    """Runs the real hook command the way a harness does: JSON on stdin, stdout captured."""

    url: str
    home: Path
    state_dir: Path
    env_extra: dict[str, str] = field(default_factory=dict)
    brain: Path = SAMPLE_BRAIN
    secrets_dir: Path | None = None  # VOLUNTEER_STATE_DIR: the workers' (credential, registry)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
        if self.url:
            env["VOLUNTEER_HOOK_URL"] = self.url
        if self.secrets_dir is not None:
            env["VOLUNTEER_STATE_DIR"] = str(self.secrets_dir)
        env.update({"HOME": str(self.home),
                    "VOLUNTEER_HOOK_STATE_DIR": str(self.state_dir),
                    # generous: the 2 shared cores may be busy; deadline behaviour has its own tests
                    "VOLUNTEER_HOOK_DEADLINE_MS": "8000"})
        env.update(self.env_extra)
        env.update(extra)
        return env

    def __call__(self, session_id: str, prompt: str, *args: str, transcript_path: str | None = None,
                 raw_stdin: bytes | None = None, via_click: bool = False,
                 **extra: str) -> subprocess.CompletedProcess[bytes]:
        """The ``volunteer`` executable (its click-free fast path), or ``python -m pipeline`` (click)."""
        payload = {"session_id": session_id, "transcript_path": transcript_path, "cwd": str(self.home),
                   "hook_event_name": "UserPromptSubmit", "prompt": prompt}
        stdin = raw_stdin if raw_stdin is not None else orjson.dumps(payload)
        script = Path(sys.executable).parent / "volunteer"
        launcher = [str(script)] if script.exists() and not via_click else [sys.executable, "-m", "pipeline"]
        return subprocess.run([*launcher, "hook", "user-prompt", *args], input=stdin, capture_output=True,
                              env=self.env(**extra), cwd=ROOT, timeout=HANG_STOP_S)

    def heartbeat(self, channel: str = "claude-code") -> dict[str, Any]:
        path = self.state_dir / "heartbeat.json"
        if not path.exists():
            return {}
        data: dict[str, Any] = orjson.loads(path.read_bytes())["channels"].get(channel, {})
        return data


@pytest.fixture(scope="module")
def hook_database(postgres_server_url: str, _migrated_template: str) -> Iterator[str]:
    name = _create_database(postgres_server_url, template=_migrated_template)
    try:
        yield with_database(postgres_server_url, name)
    finally:
        _drop_database(postgres_server_url, name)


@pytest.fixture(scope="module")
def hook_settings(module_broker_url: str, hook_database: str) -> Settings:
    return settings_for(module_broker_url, new_names(), database_url=hook_database, topic_partitions=4)


@pytest.fixture(scope="module")
def worker_brain() -> Path:
    """The brain directory of the module's worker (a test module overrides it to use its own)."""
    return SAMPLE_BRAIN


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    """Extra environment of the module's worker (a test module overrides it to set its own)."""
    return {}


@pytest.fixture(scope="module")
def worker(hook_settings: Settings, worker_brain: Path, worker_env: dict[str, str],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    base = tmp_path_factory.mktemp("hook-worker")
    w = Worker(hook_settings, base / "worker.log", base / "data", brain=worker_brain, env_extra=worker_env).start()
    try:
        w.wait_ready()
        yield w
    finally:
        w.stop()


@pytest.fixture
def hook(worker: Worker, tmp_path: Path) -> HookRunner:
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    return HookRunner(worker.url, home, tmp_path / "state", secrets_dir=worker.state_dir)


def event_rows(database_url: str, session_id: str, extra: str = "") -> list[tuple[Any, ...]]:
    """``(turn, slug, channel, match_arm, confidence)`` per row, plus ``extra`` columns (", rationale")."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(
            f"SELECT turn, slug, channel, match_arm, confidence{extra} FROM context_volunteer_events "
            "WHERE session_id = %s ORDER BY turn, slug", (session_id,)).fetchall()


def wait_rows(database_url: str, session_id: str, expect: int, timeout: float = 30) -> list[tuple[Any, ...]]:
    """The session's rows once ``expect`` are there, after a short settle so extra rows show up too."""
    deadline = time.monotonic() + timeout
    rows = event_rows(database_url, session_id)
    while len(rows) < expect and time.monotonic() < deadline:
        time.sleep(0.1)
        rows = event_rows(database_url, session_id)
    time.sleep(0.5)
    return event_rows(database_url, session_id)


def expected_items(brain: BrainIndex, turns: Sequence[tuple[str, str]], delivered: Sequence[str] = (),
                   window_turns: int = 4) -> list[dict[str, Any]]:
    """The turn context over the worker's window (last ``window_turns`` turns), excluding what was
    delivered before: pointers then pages, each as the hook is answered (``kind`` first)."""
    window = [(role, extract_candidates(text)) for role, text in turns[-window_turns:]]
    ctx = turn_context(window, brain, source_ids=("default",), exclude_slugs=set(delivered))
    return ([{"kind": "pointer", **p.to_dict()} for p in ctx.pointers]
            + [{"kind": "page", **p.to_dict()} for p in ctx.pages])


POINTER_LINE = re.compile(r"^- \*\*(?P<display>.+?)\*\* → `(?P<slug>[^`]+)`(?: — (?P<synopsis>.+))? "
                          r"\(use get_page before relying on details\)$")
PAGE_LINE = re.compile(r"^- \*\*(?P<display>.+?)\*\* → `(?P<slug>[^`]+)` \((?P<conf>\d\.\d\d), "
                       r"(?P<rationale>.+?)\)(?: — (?P<synopsis>.+))?$")


def block_sections(stdout: bytes) -> dict[str, list[str]]:
    """The hook's one output line, checked against the harness shape and the block's layout:
    ``{"pointer": [lines], "page": [lines]}``."""
    from pipeline.hook.block import BLOCK_MARKER, PAGES_HEADING, POINTERS_HEADING

    assert stdout.endswith(b"\n") and stdout.count(b"\n") == 1, stdout
    out = orjson.loads(stdout)
    assert set(out) == {"hookSpecificOutput"}
    assert out["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    lines: list[str] = out["hookSpecificOutput"]["additionalContext"].split("\n")
    assert lines[0] == BLOCK_MARKER
    sections: dict[str, list[str]] = {"pointer": [], "page": []}
    current: list[str] | None = None
    for i, line in enumerate(lines[1:], start=1):
        if line == "":
            assert lines[i + 1] in (POINTERS_HEADING, PAGES_HEADING), lines
            continue
        if line in (POINTERS_HEADING, PAGES_HEADING):
            current = sections["pointer" if line == POINTERS_HEADING else "page"]
            assert not current, lines
            continue
        assert current is not None, lines
        current.append(line)
    for kind, pattern in (("pointer", POINTER_LINE), ("page", PAGE_LINE)):
        for line in sections[kind]:
            assert pattern.match(line), line
    return sections


def printed(stdout: bytes) -> list[str]:
    """Slugs in the printed block, pointers first; [] when the hook printed nothing."""
    if not stdout:
        return []
    sections = block_sections(stdout)
    return [m.group("slug") for kind, pattern in (("pointer", POINTER_LINE), ("page", PAGE_LINE))
            for m in (pattern.match(line) for line in sections[kind]) if m]
