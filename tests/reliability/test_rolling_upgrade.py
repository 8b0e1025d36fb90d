"""A rolling upgrade from the previous release to this code, worker by worker, mid-stream.

Two workers of the previous release (installed from git into their own environment,
:mod:`tests.reliability.upgrade`) process a seeded workload while it is produced; one at a time each
is stopped with SIGTERM (the procedure in docs/operations.md) and replaced by a worker of this
code, so for a while both versions share the group and each takes over sessions whose state the
other wrote. This code seals session values (version 2), which the previous release cannot open, so
the roll follows the two-phase procedure of docs/operations.md: first with sealing off (plain
version-1 values, read by both), then, with no old worker left, again with sealing on. The
verifier then judges table and topic; every changelog value decodes with this code, every value
written while an old worker was in the group decodes with the old one too, and the old one indeed
cannot open the sealed ones (which is why there are two phases).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.agents.session_table import PLAIN_VERSION, SEALED_VERSION, SessionRecord
from pipeline.agents.statecrypt import cipher_from
from pipeline.core.brain import BrainIndex
from tests.integration.stream.harness import CONFORMANCE_BRAIN, WorkerProc, run, worker_env
from tests.reliability.crash import BackgroundProducer
from tests.reliability.upgrade import Release, previous_release
from tests.reliability.verify import expected_events, verify, wait_until_quiet
from tests.reliability.workload import Workload, build_workload
from tests.services.broker import new_names, settings_for
from tests.services.statekey import STATE_KEY_ENV
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
from pipeline.agents.state import SessionRecord  # the module's name in the old release
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
    """The procedure of docs/operations.md for a release whose states the old one cannot open: roll
    worker by worker with ``VOLUNTEER_STATE_SEAL=false`` (plain values both versions read), then,
    once no old worker is left, roll again with sealing on."""
    settings = settings_for(module_broker_url, new_names(), database_url=migrated_database_url, topic_partitions=4)
    run(ensure_topics(settings))
    workload = build_workload(20_000, seed=1606, concurrent=200)  # produced until the roll is over

    def start(version: str, index: int, **env: str) -> WorkerProc:
        full_env = worker_env(settings, tmp_path / f"data-{version}-{index}", **env)
        log = tmp_path / f"{version}-{index}.log"
        args = ["--brain", str(CONFORMANCE_BRAIN)]
        worker = (ReleaseWorker(full_env, log, args, release=release) if version == "old"
                  else WorkerProc(full_env, log, args)).start()
        pool.append(worker)
        return worker

    def replace(index: int, version: str, **env: str) -> None:
        time.sleep(4.0)  # mid-stream: turns keep coming while each worker is replaced
        assert producer.is_alive(), "the workload ran out before the roll did"
        assert group[index].stop() == 0, group[index].log()[-2000:]  # SIGTERM: drain, commit, leave
        group[index] = start(version, index, **env)
        group[index].wait_ready(timeout=90)

    group = [start("old", 0), start("old", 1)]
    for worker in group:
        worker.wait_ready(timeout=90)
    producer = BackgroundProducer(settings, workload, rate=120, seed=1606, chunk=20)
    producer.start()
    # phase 1: this code, writing plain values, replaces the old workers one by one
    replace(0, "new-plain", VOLUNTEER_STATE_SEAL="false")
    time.sleep(1.0)  # one worker of each version, both owning partitions
    assert group[0].owned_partitions() and group[1].owned_partitions(), group[1].log()[-1500:]
    assert sorted(group[0].owned_partitions() + group[1].owned_partitions()) == [0, 1, 2, 3]
    replace(1, "new-plain", VOLUNTEER_STATE_SEAL="false")
    sealing_from_ms = int(time.time() * 1000)
    # phase 2: no old worker is left; sealing on, again one by one
    replace(0, "new")
    replace(1, "new")
    time.sleep(4.0)
    producer.stopping.set()
    producer.finish()
    sent = Workload(workload.turns[:producer.sent], workload.meta)
    expected = expected_events(sent, conformance_brain)
    total = len(expected)
    wait_until_quiet(settings, total, timeout=240)
    for worker in group:
        assert worker.proc is not None and worker.proc.poll() is None, worker.log()[-3000:]
    verdict = verify(settings, expected)
    print(f"\nrolling upgrade {release.commit[:7]} -> this code "
          f"({'its pins already installed' if release.same_dependencies else 'own install'}): "
          f"{producer.sent} turns; {verdict.figures()}")
    assert verdict.exact, verdict.problems()
    assert verdict.rows_found == total > 0

    changelog = f"{settings.app_id}-sessions-changelog"
    records = [r for r in run(read_all(settings, changelog, idle_s=1.0), timeout=120) if r.value]
    cipher = cipher_from(STATE_KEY_ENV["VOLUNTEER_STATE_KEY"], None)
    for rec in records:
        assert rec.key is not None and rec.value is not None
        SessionRecord.from_bytes(rec.value, cipher, rec.key)  # this code reads every value of both phases
    mixed = [r.value for r in records if r.timestamp_ms < sealing_from_ms - 500 and r.value]
    sealed = [r.value for r in records if r.value and r.value[0] == SEALED_VERSION]
    assert len(mixed) > 100 and sealed, (len(mixed), len(sealed))
    assert all(v[0] == PLAIN_VERSION for v in mixed)  # nothing sealed while an old worker could read it
    old_reads = old_decoder(release, mixed)
    assert old_reads.returncode == 0 and old_reads.stdout.strip() == b"0", old_reads.stderr[-2000:]
    # why the procedure has two phases: the old release cannot open a sealed value
    old_sealed = old_decoder(release, sealed)
    assert old_sealed.stdout.strip() == str(len(sealed)).encode(), old_sealed.stdout
    assert all("Traceback" not in w.log() and "unreadable saved state" not in w.log() for w in pool)


def old_decoder(release: Release, values: list[bytes]) -> subprocess.CompletedProcess[bytes]:
    """The old release's own decoder over ``values``; prints how many it could not read."""
    return subprocess.run([str(release.python), "-c", OLD_DECODER], input=b"\n".join(v.hex().encode() for v in values),
                          capture_output=True, cwd=release.tree, timeout=120)
