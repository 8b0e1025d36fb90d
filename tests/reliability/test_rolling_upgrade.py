"""A rolling upgrade from the previous release to this code, worker by worker, mid-stream.

Two workers of the previous release (installed from git into their own environment,
:mod:`tests.reliability.upgrade`) process a seeded workload while it is produced; one at a time each
is stopped with SIGTERM (the procedure in docs/operations.md) and replaced by a worker of this
code, so for a while both versions share the group and each takes over sessions whose state the
other wrote. The verifier then judges table and topic, and every value of the session changelog
(written by both versions) must decode with the new code *and* the old one: the state is read
across versions in both directions, which is what makes stepping back safe.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.agents.state import SessionRecord
from pipeline.core.brain import BrainIndex
from tests.integration.stream.harness import CONFORMANCE_BRAIN, WorkerProc, run, worker_env
from tests.reliability.crash import BackgroundProducer, wait_for_rows
from tests.reliability.upgrade import Release, previous_release
from tests.reliability.verify import expected_events, verify, wait_until_quiet
from tests.reliability.workload import build_workload
from tests.services.broker import new_names, settings_for
from topics.definitions import ensure_topics
from topics.io import read_all

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


@dataclass
class ReleaseWorker(WorkerProc):
    """A worker of an older release: its own interpreter, run from its own tree."""

    release: Release | None = None

    def command(self) -> list[str]:
        assert self.release is not None
        return self.release.command("worker", "--without-web", *self.args)

    def workdir(self) -> Path:
        assert self.release is not None
        return self.release.tree


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return previous_release(tmp_path_factory.mktemp("release"))


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[list[WorkerProc]]:
    started: list[WorkerProc] = []
    yield started
    for worker in started:
        worker.__exit__()


OLD_DECODER = """
import sys
from pipeline.agents.state import SessionRecord
bad = 0
for line in sys.stdin.buffer.read().split(b"\\n"):
    if line:
        try:
            SessionRecord.from_bytes(bytes.fromhex(line.decode()))
        except Exception as exc:
            bad += 1
            print(type(exc).__name__, exc, file=sys.stderr)
print(bad)
"""


def test_rolling_upgrade_from_the_previous_release(release: Release, module_broker_url: str,
                                                   migrated_database_url: str, conformance_brain: BrainIndex,
                                                   pool: list[WorkerProc], tmp_path: Path) -> None:
    settings = settings_for(module_broker_url, new_names(), database_url=migrated_database_url, topic_partitions=4)
    run(ensure_topics(settings))
    workload = build_workload(3000, seed=1606, concurrent=200)
    expected = expected_events(workload, conformance_brain)

    def start(version: str, index: int) -> WorkerProc:
        env = worker_env(settings, tmp_path / f"data-{version}-{index}")
        log = tmp_path / f"{version}-{index}.log"
        args = ["--brain", str(CONFORMANCE_BRAIN)]
        worker = (ReleaseWorker(env, log, args, release=release) if version == "old"
                  else WorkerProc(env, log, args)).start()
        pool.append(worker)
        return worker

    group = [start("old", 0), start("old", 1)]
    for worker in group:
        worker.wait_ready(timeout=90)
    producer = BackgroundProducer(settings, workload, rate=120, seed=1606, chunk=50)
    producer.start()
    total = len(expected)
    for index, at in enumerate((0.25, 0.6)):
        assert wait_for_rows(settings, int(at * total), timeout=120) >= int(at * total)
        assert group[index].stop() == 0, group[index].log()[-2000:]  # SIGTERM: drain, commit, leave
        group[index] = start("new", index)
        group[index].wait_ready(timeout=90)
        if index == 0:  # one worker of each version, both owning partitions
            time.sleep(1.0)
            assert group[0].owned_partitions() and group[1].owned_partitions(), group[1].log()[-1500:]
            assert sorted(group[0].owned_partitions() + group[1].owned_partitions()) == [0, 1, 2, 3]
        wait_for_rows(settings, int((at + 0.1) * total), timeout=120)  # both versions at work
    producer.finish()
    wait_until_quiet(settings, total, timeout=240)
    for worker in group:
        assert worker.proc is not None and worker.proc.poll() is None, worker.log()[-3000:]
    verdict = verify(settings, expected)
    print(f"\nrolling upgrade {release.commit[:7]} -> this code ({'same dependencies' if release.same_dependencies else 'own install'}): "
          f"{len(workload.turns)} turns; {verdict.figures()}")
    assert verdict.exact, verdict.problems()
    assert verdict.rows_found == total > 0

    changelog = f"{settings.app_id}-sessions-changelog"
    values = [r.value for r in run(read_all(settings, changelog, idle_s=1.0), timeout=120) if r.value]
    assert len(values) > 100
    for value in values:
        SessionRecord.from_bytes(value)  # raises CorruptState if this code cannot read it
    old = subprocess.run([str(release.python), "-c", OLD_DECODER], input=b"\n".join(v.hex().encode() for v in values),
                         capture_output=True, cwd=release.tree, timeout=120)
    assert old.returncode == 0 and old.stdout.strip() == b"0", old.stderr[-2000:]
    assert all("CorruptState" not in w.log() and "Traceback" not in w.log() for w in pool)
