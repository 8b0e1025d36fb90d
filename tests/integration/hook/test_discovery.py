"""A worker the hook always finds: restarts with connections in TIME_WAIT, two stacks on one machine,
a taken port, and HTTPS for workers on other hosts — real workers, the real hook command.

The hooks here run with default settings (no ``VOLUNTEER_HOOK_URL``, the default deadline, the
state directory derived from ``HOME``) unless a test says otherwise; the workers get only a port
that is free on this machine (never 6066, which other test runs may hold).
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.embedded.tansu import EmbeddedBroker
from pipeline.settings import Settings
from sinks.db import with_database
from tests.integration.hook.conftest import (
    ROOT,
    SAMPLE_BRAIN,
    HookRunner,
    Worker,
    event_rows,
    free_port,
    printed,
    wait_rows,
)
from tests.services.broker import new_names, settings_for
from tests.services.postgres import _create_database, _drop_database

pytestmark = pytest.mark.integration

ALICE = "people/alice-example"
PROMPT = "Did Alice Example reply?"
DEFAULT_APP_ID = "volunteer-stream"
REACHED_WITHIN_S = 5.0


def time_wait_count(port: int) -> int:
    """Connections of ``port`` in TIME_WAIT, from /proc/net/tcp (state 06)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "06":
                count += 1
    return count


def close_after_the_worker(port: int) -> None:
    """One request that the worker closes first, so its side of the connection (local port =
    ``port``) goes to TIME_WAIT: read to EOF before closing. The hook itself stops reading once
    ``Content-Length`` bytes came and may close first, leaving TIME_WAIT on its own side only."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /volunteer/hook/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        while sock.recv(65536):
            pass


def default_hook(home: Path) -> HookRunner:
    """A hook as ``volunteer bootstrap`` installs it with default settings (state under HOME)."""
    (home / ".claude" / "projects").mkdir(parents=True, exist_ok=True)
    runner = HookRunner("", home, home / ".local" / "state" / "volunteer" / "hooks")
    runner.env_extra["VOLUNTEER_HOOK_DEADLINE_MS"] = ""  # blank = the default 800 ms
    return runner


def stack_worker(settings: Settings, home: Path, base: Path, name: str, port: int) -> Worker:
    return Worker(settings, base / f"{name}.log", base / f"{name}-data", state_dir=home / ".local" / "state" / "volunteer",
                  web_port=port, env_extra={"HOME": str(home)}, default_state=True)


def served_within(hook: HookRunner, session_id: str, limit_s: float, **env: str) -> float:
    """Seconds until the hook printed the page (prompting every 0.2 s), or fail after ``limit_s``."""
    configured = dataclasses.replace(hook, env_extra={**hook.env_extra, **env})
    started = time.monotonic()
    while True:
        result = configured(session_id, PROMPT)
        if printed(result.stdout) == [ALICE]:
            return time.monotonic() - started
        if time.monotonic() - started > limit_s:
            raise AssertionError(f"not served within {limit_s}s: {hook.heartbeat()}")
        time.sleep(0.2)


@pytest.fixture
def default_settings(hook_settings: Settings) -> Settings:
    return hook_settings.model_copy(update={"app_id": DEFAULT_APP_ID})


def test_after_a_restart_with_time_wait_the_default_hook_is_served_again(
        default_settings: Settings, tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    hook = default_hook(home)
    first = stack_worker(default_settings, home, tmp_path, "first", port).start()
    second: Worker | None = None
    try:
        first.wait_ready()
        for i in range(5):
            served_within(hook, f"tw-{i}", 30)
        registry = home / ".local" / "state" / "volunteer" / "workers"
        assert len(list(registry.glob("*.json"))) == 1 and registry.stat().st_mode & 0o777 == 0o700
        for _ in range(3):
            close_after_the_worker(port)
        assert time_wait_count(port) > 0  # the old worker's connections hold the port in TIME_WAIT
        first.stop()
        assert list(registry.glob("*.json")) == []  # a clean exit removes the entry
        second = stack_worker(default_settings, home, tmp_path, "second", port).start()
        second.wait_ready()
        assert second.url.endswith(f":{port}"), second.url  # the configured port, not a random one
        assert served_within(hook, "tw-after", REACHED_WITHIN_S) <= REACHED_WITHIN_S
        rows = wait_rows(default_settings.database_url, "tw-after", 1)
        assert [(t, slug, channel) for t, slug, channel, *_ in rows] == [(1, ALICE, "claude-code")]
    finally:
        for w in (second, first):
            if w is not None:
                w.stop()


@pytest.fixture
def stack_b(postgres_server_url: str, _migrated_template: str, hook_settings: Settings) -> Iterator[Settings]:
    name = _create_database(postgres_server_url, template=_migrated_template)
    try:
        with EmbeddedBroker(cluster_id="volunteer-tests-stack-b") as broker:
            yield hook_settings.model_copy(update={"broker": broker.url, "app_id": "stack-b",
                                                   "database_url": with_database(postgres_server_url, name)})
    finally:
        _drop_database(postgres_server_url, name)


def test_two_stacks_on_one_machine_do_not_cross_and_survive_a_restart(
        default_settings: Settings, stack_b: Settings, tmp_path: Path) -> None:
    home, port_a = tmp_path / "home", free_port()
    hook = default_hook(home)
    a = stack_worker(default_settings, home, tmp_path, "a", port_a).start()
    b = stack_worker(stack_b, home, tmp_path, "b", free_port()).start()
    a2: Worker | None = None
    try:
        a.wait_ready()
        b.wait_ready()
        served_within(hook, "two-default", 30)  # default settings: the default stack (A)
        served_within(hook, "two-b", 30, VOLUNTEER_APP_ID="stack-b")  # configured for B: B
        wait_rows(default_settings.database_url, "two-default", 1)
        wait_rows(stack_b.database_url, "two-b", 1)
        assert event_rows(stack_b.database_url, "two-default") == []
        assert event_rows(default_settings.database_url, "two-b") == []
        # Named by broker: B's broker with A's app id is no stack at all, so nothing is sent anywhere.
        result = hook("two-none", PROMPT, VOLUNTEER_BROKER=stack_b.broker)
        assert result.stdout == b"" and hook.heartbeat()["last_reason"] == "no_worker"
        a.stop()
        a2 = stack_worker(default_settings, home, tmp_path, "a2", port_a).start()
        a2.wait_ready()
        assert served_within(hook, "two-after", REACHED_WITHIN_S) <= REACHED_WITHIN_S
        wait_rows(default_settings.database_url, "two-after", 1)
        assert event_rows(stack_b.database_url, "two-after") == []
    finally:
        for w in (a2, b, a):
            if w is not None:
                w.stop()


def test_a_taken_web_port_is_a_one_line_error(hook_settings: Settings, module_broker_url: str,
                                              tmp_path: Path) -> None:
    # topics of its own that do not exist yet: the port is checked before any is created, so the
    # error is the only line (no "created topic" log before it)
    fresh = settings_for(module_broker_url, new_names(), database_url=hook_settings.database_url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        w = Worker(fresh, tmp_path / "w.log", tmp_path / "data")
        result = subprocess.run([sys.executable, "-m", "pipeline", "worker", "--brain", str(SAMPLE_BRAIN),
                                 "--web-port", str(port)], env=w.env(), cwd=ROOT, capture_output=True, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and f"web port {port}" in lines[0] and "VOLUNTEER_WEB_PORT" in lines[0], lines


def test_https_worker_is_verified_by_the_hook(hook_settings: Settings, tmp_path: Path) -> None:
    from tests.reliability.test_security import make_ca, make_server_cert

    ca = make_ca(tmp_path / "tls", "edge-ca")
    cert, key = make_server_cert(tmp_path / "tls", ca)
    other_ca = make_ca(tmp_path / "other", "other-ca")
    w = Worker(hook_settings, tmp_path / "w.log", tmp_path / "data",
               env_extra={"VOLUNTEER_WEB_TLS_CERTFILE": str(cert), "VOLUNTEER_WEB_TLS_KEYFILE": str(key)}).start()
    try:
        w.wait_ready()
        assert w.url.startswith("https://127.0.0.1:"), w.url
        home = tmp_path / "home"
        (home / ".claude" / "projects").mkdir(parents=True)
        hook = HookRunner(w.url, home, tmp_path / "state", secrets_dir=w.state_dir)
        ok = hook("tls-1", PROMPT, VOLUNTEER_WEB_TLS_CAFILE=str(ca))
        assert printed(ok.stdout) == [ALICE], hook.heartbeat()
        refused = hook("tls-2", PROMPT, VOLUNTEER_WEB_TLS_CAFILE=str(other_ca))  # a CA that did not sign it
        assert refused.stdout == b"" and hook.heartbeat()["last_reason"] == "tls_refused"
    finally:
        w.stop()
