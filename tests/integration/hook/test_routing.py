"""Two workers share the partitions: a hook that asks the worker that does not own its session's
partition is still answered, because that worker forwards the request to the owner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner

from pipeline.settings import Settings
from tests.integration.hook.conftest import HookRunner, Worker, wait_rows

pytestmark = pytest.mark.integration

ALICE = "people/alice-example"


@pytest.fixture(scope="module")
def two_workers(hook_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Worker, Worker]]:
    base = tmp_path_factory.mktemp("hook-routing")
    first = Worker(hook_settings, base / "w1.log", base / "d1").start()
    second: Worker | None = None
    try:
        first.wait_ready()
        second = Worker(hook_settings, base / "w2.log", base / "d2").start()
        second.wait_ready()
        first.wait_ready(count=2)  # rebalanced: the partitions are split now
        yield first, second
    finally:
        for worker in (second, first):
            if worker is not None:
                worker.stop()


def session_owned_by(owned: list[int], partitions: int, prefix: str) -> str:
    partitioner = DefaultPartitioner()
    for i in range(1000):
        sid = f"{prefix}-{i}"
        if partitioner(sid.encode(), list(range(partitions)), list(range(partitions))) in owned:
            return sid
    raise AssertionError(f"no session id maps to partitions {owned}")


def test_a_request_to_the_other_worker_is_forwarded_to_the_owner(
        two_workers: tuple[Worker, Worker], hook_settings: Settings, tmp_path: Path) -> None:
    first, second = two_workers
    owned_first, owned_second = first.health()["partitions"], second.health()["partitions"]
    assert owned_first and owned_second and not set(owned_first) & set(owned_second)
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    for asked, owner_partitions in ((first, owned_second), (second, owned_first)):
        sid = session_owned_by(owner_partitions, hook_settings.topic_partitions, f"routed-{asked.url[-5:]}")
        hook = HookRunner(asked.url, home, tmp_path / "state", secrets_dir=asked.state_dir)
        result = hook(sid, "Did Alice Example reply?")
        assert result.returncode == 0
        assert f"`{ALICE}`".encode() in result.stdout, (result.stdout, hook.heartbeat())
        rows = wait_rows(hook_settings.database_url, sid, 1)
        assert [(turn, slug, channel) for turn, slug, channel, *_ in rows] == [(1, ALICE, "claude-code")]
