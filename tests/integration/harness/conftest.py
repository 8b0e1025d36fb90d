"""The harness tests' real worker (embedded broker, PostgreSQL, sample brain).

Its web port and environment are chosen here: :class:`SameHostWorker` can run on a fixed port and as
the harness's user (HOME), and the module worker is given ``VOLUNTEER_HOOK_TOKEN``, the secret the
hooks of these tests share with it where hook and worker authenticate each other.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from pipeline.agents.answers import HOOK_ENDPOINT_MARK
from pipeline.settings import Settings
from tests.integration.hook.conftest import (
    ROOT,
    SAMPLE_BRAIN,
    Worker,
    free_port,
    hook_database,
    hook_settings,
)

__all__ = ["HOOK_TOKEN", "SameHostWorker", "hook_database", "hook_settings", "worker"]

HOOK_TOKEN = "harness-tests-" + secrets.token_hex(24)


@dataclass
class SameHostWorker(Worker):
    """A worker on web port ``port`` with extra environment (HOME, a shared secret, …).

    ``default_state`` drops ``VOLUNTEER_STATE_DIR``, so the worker keeps its state where a user's
    worker does (under its HOME)."""

    port: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    default_state: bool = False

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.default_state:
            env.pop("VOLUNTEER_STATE_DIR", None)
        return {**env, **self.extra_env}

    def start(self) -> SameHostWorker:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "worker", "--brain", str(SAMPLE_BRAIN), "--web-port",
                 str(self.port or free_port())], env=self.env(), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, count: int = 1, timeout: float = 90) -> None:
        super().wait_ready(count, timeout)
        deadline = time.monotonic() + timeout
        while self.log().count(HOOK_ENDPOINT_MARK) < count:  # this start's endpoint line may come after ready
            assert time.monotonic() < deadline, self.log()[-3000:]
            time.sleep(0.05)
        self.url = re.findall(re.escape(HOOK_ENDPOINT_MARK) + r" (https?://[^/\s]+)/", self.log())[-1]


@pytest.fixture(scope="module")
def worker(hook_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    base = tmp_path_factory.mktemp("harness-worker")
    w = SameHostWorker(hook_settings, base / "worker.log", base / "data",
                       extra_env={"VOLUNTEER_HOOK_TOKEN": HOOK_TOKEN}).start()
    try:
        w.wait_ready()
        yield w
    finally:
        w.stop()
