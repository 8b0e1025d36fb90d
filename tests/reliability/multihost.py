"""A deployment over network namespaces: ``volunteer up --listen`` on a database host, real workers on
worker hosts, and a client host that produces, calls the hook and reads for the verifier.

The pieces are the single-host ones (:mod:`tests.reliability.crash`, :mod:`tests.reliability.verify`)
run in other namespaces: processes through ``ip netns exec``, the producer and the verifier's reads in
threads that entered the client namespace (:func:`tests.reliability.netns.call_in`), so every byte
between the client and the services crosses the bridge like traffic between machines.
"""

from __future__ import annotations

import os
import secrets
import select
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from pipeline.settings import Settings
from tests.integration.stream.harness import CONFORMANCE_BRAIN, ROOT, WorkerProc, worker_env
from tests.reliability.crash import BackgroundProducer
from tests.reliability.netns import Host, Network, call_in, enter
from tests.reliability.verify import group_lag
from tests.reliability.workload import Workload

WEB_PORT = 6066
HOOK_DEADLINE_MS = 1500
HOOK_SLACK_MS = 1500  # interpreter start and exit around the hook's own deadline, on 2 busy cores


@dataclass
class Services:
    """``volunteer up --listen`` running in the database host's namespace."""

    proc: subprocess.Popen[bytes]
    broker: str
    database_url: str
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_services(host: Host, log_dir: Path, timeout: float = 90) -> Services:
    """Start ``volunteer up --listen <host address>`` inside ``host``; the two lines it prints."""
    stderr_path = log_dir / "up.stderr"
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen([*host.exec_prefix(), sys.executable, "-m", "pipeline", "up", "--listen", host.address],
                                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, bufsize=0,
                                env={k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")})
    values: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while len(values) < 2:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, remaining))
        line = proc.stdout.readline() if ready else b""
        if not line:
            proc.kill()
            raise AssertionError(f"'volunteer up --listen' printed no settings:\n{stderr_path.read_text()[-3000:]}")
        name, _, value = line.decode().strip().partition("=")
        values[name] = value
    return Services(proc, values["VOLUNTEER_BROKER"], values["VOLUNTEER_DATABASE_URL"], stderr_path)


@dataclass
class HostWorker(WorkerProc):
    """A ``volunteer worker`` inside a host's namespace, web server on (hooks, probes)."""

    host: Host | None = None

    def command(self) -> list[str]:
        assert self.host is not None
        return [*self.host.exec_prefix(), sys.executable, "-m", "pipeline", "worker", "--web-port", str(WEB_PORT),
                *self.args]

    def probe(self, path: str, from_ns: str | None = None) -> tuple[int, dict[str, Any]]:
        """GET a probe on the worker's address, from its own host (as a kubelet would) or another."""
        assert self.host is not None
        url = f"http://{self.host.address}:{WEB_PORT}{path}"
        return call_in(from_ns or self.host.ns, lambda: _get(url), timeout=30)


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())
    except OSError as exc:
        return 0, {"error": str(exc)}


@dataclass
class Cluster:
    """The network, the services and the workers of one multi-host run."""

    net: Network
    services: Services
    settings: Settings
    root: Path
    workers: dict[str, HostWorker] = field(default_factory=dict)
    retired: list[HostWorker] = field(default_factory=list)
    worker_env: dict[str, str] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_hex(32))  # VOLUNTEER_HOOK_TOKEN of every host

    @property
    def client(self) -> Host:
        return self.net["client"]

    def start_worker(self, name: str) -> HostWorker:
        host = self.net[name]
        old = self.workers.get(name)
        if old is not None:
            self.retired.append(old)
        index = len(self.retired) + len(self.workers)
        env = worker_env(self.settings, self.root / f"data-{name}-{index}",
                         VOLUNTEER_WEB_HOST=host.address,
                         VOLUNTEER_WEB_ADVERTISED_URL=f"http://{host.address}:{WEB_PORT}",
                         VOLUNTEER_HOOK_TOKEN=self.token, VOLUNTEER_STATE_DIR=str(self.root / f"state-{name}"),
                         **self.worker_env)
        worker = HostWorker(env, self.root / f"{name}-{index}.log", ["--brain", str(CONFORMANCE_BRAIN)], host=host)
        self.workers[name] = worker
        worker.start()
        return worker

    def in_client(self, func: Callable[[], Any], timeout: float = 600) -> Any:
        return call_in(self.client.ns, func, timeout)

    def lag(self) -> int:
        return int(self.in_client(lambda: group_lag(self.settings), timeout=90))

    def logs(self) -> list[str]:
        return [w.log() for w in [*self.retired, *self.workers.values()]]

    def stop(self) -> None:
        for worker in [*self.workers.values(), *self.retired]:
            worker.__exit__()
        self.services.stop()


class ClientProducer(BackgroundProducer):
    """The background producer, running on the client host (its thread enters that namespace)."""

    def __init__(self, ns: str, settings: Settings, workload: Workload, rate: float, seed: int) -> None:
        super().__init__(settings, workload, rate, seed=seed, chunk=20)
        self.ns = ns

    def run(self) -> None:
        try:
            enter(self.ns)
        except BaseException as exc:
            self.error = exc
            return
        super().run()


@dataclass
class HookCall:
    session_id: str
    wall_ms: float
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def pages(self) -> int:
        if not self.stdout.strip():
            return 0
        block = str(orjson.loads(self.stdout)["hookSpecificOutput"]["additionalContext"])
        return block.count("\n- ") + block.startswith("- ")

    def problems(self) -> list[str]:
        """What is wrong with this call: too slow, a non-zero exit, stderr, output that is not a hook answer."""
        out = []
        if self.wall_ms > HOOK_DEADLINE_MS + HOOK_SLACK_MS:
            out.append(f"took {self.wall_ms:.0f} ms (deadline {HOOK_DEADLINE_MS} ms)")
        if self.returncode != 0:
            out.append(f"exit status {self.returncode}")
        if self.stderr.strip():
            out.append(f"stderr: {self.stderr[:300]!r}")
        if self.stdout.strip():
            try:
                answer = orjson.loads(self.stdout)
                assert answer["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
                assert isinstance(answer["hookSpecificOutput"]["additionalContext"], str)
            except (ValueError, KeyError, TypeError, AssertionError):
                out.append(f"stdout is not a hook answer: {self.stdout[:300]!r}")
        return out


def call_hook(cluster: Cluster, url: str, session_id: str, prompt: str, state_dir: Path,
              host: Host | None = None, **extra: str) -> HookCall:
    """The real ``volunteer hook user-prompt`` on the client host (or ``host``), fed a harness's JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    env.update({"HOME": str(state_dir), "VOLUNTEER_HOOK_URL": url, "VOLUNTEER_HOOK_STATE_DIR": str(state_dir),
                "VOLUNTEER_STATE_DIR": str(state_dir), "VOLUNTEER_HOOK_TOKEN": cluster.token,
                "VOLUNTEER_HOOK_DEADLINE_MS": str(HOOK_DEADLINE_MS), **extra})
    payload = orjson.dumps({"session_id": session_id, "prompt": prompt, "cwd": str(state_dir),
                            "hook_event_name": "UserPromptSubmit"})
    script = Path(sys.executable).parent / "volunteer"
    started = time.monotonic()
    done = subprocess.run([*(host or cluster.client).exec_prefix(), str(script), "hook", "user-prompt"], input=payload,
                          capture_output=True, env=env, cwd=ROOT, timeout=60)
    return HookCall(session_id, (time.monotonic() - started) * 1000, done.returncode, done.stdout, done.stderr)
