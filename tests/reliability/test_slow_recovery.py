"""A table recovery whose broker round trip outlasts the request timeout still ends, and no row is lost.

Faust awaits each step of a table recovery (flush the producer, read the changelog ends and
starts, seek, and at the end seek the streams to their committed offsets) with
``broker_request_timeout`` as a timeout; the embedded broker's is 5 s (``REQUEST_TIMEOUT_S`` in
``topics/tansu_client.py``). Under a load of 9-12 on two cores, one such step can take longer. A
step that timed out made Faust's recovery loop end for good, as if the worker were stopping
(mode's ``wait_first`` reports a timeout as "stopped"): the worker kept its partitions and its
group membership and never delivered another record, so rows stopped arriving (what a helper
saw in the two-worker crash run at load 9-12). ``pipeline/compat/recovery_retry.py`` starts the
recovery again instead.

The test makes the slow step happen on purpose: the workers talk to the broker through a proxy
(:mod:`tests.reliability.slowproxy`) that holds the answers to ListOffsets, which every recovery
sends for the earliest changelog offsets, for 7 s while a second worker joins mid-stream.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from pipeline.core.brain import BrainIndex
from pipeline.embedded.tansu import free_port, tansu_binary, wait_for_port
from tests.integration.stream.harness import run
from tests.reliability.conftest import Workers
from tests.reliability.crash import start_live_run, wait_for_rows
from tests.reliability.slowproxy import LIST_OFFSETS, SlowProxy
from tests.reliability.verify import verify, wait_until_quiet
from tests.services.broker import TestNames, settings_for
from topics.definitions import ensure_topics
from topics.tansu_client import REQUEST_TIMEOUT_S

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

HOLD_S = REQUEST_TIMEOUT_S + 2.0
RETRY_MARK = "table recovery: a step got no broker answer"
REVOKING = "Revoking previously assigned partitions"  # aiokafka, at the start of a rebalance


@pytest.fixture
def proxied_broker() -> Iterator[tuple[str, SlowProxy]]:
    """An embedded Tansu broker that advertises a proxy's port: ``(broker URL, proxy)``."""
    port, advertised = free_port(), free_port()
    proxy = SlowProxy(advertised, port)
    cmd = [str(tansu_binary()), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
           "--advertised-listener-url", f"tcp://127.0.0.1:{advertised}", "--storage-engine", "memory://tansu/",
           "--cluster-id", "volunteer-tests-slow"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=tempfile.gettempdir(), start_new_session=True)
    try:
        wait_for_port("127.0.0.1", port, 20, alive=proc)
        yield f"tansu://127.0.0.1:{advertised}", proxy
    finally:
        proc.kill()
        proc.wait()
        proxy.close()


def test_a_recovery_step_slower_than_the_request_timeout_is_retried(
        proxied_broker: tuple[str, SlowProxy], names: TestNames, migrated_database_url: str,
        conformance_brain: BrainIndex, workers: Workers) -> None:
    url, proxy = proxied_broker
    settings = settings_for(url, names, database_url=migrated_database_url, topic_partitions=4)
    run(ensure_topics(settings))
    expected, first, producer = start_live_run(settings, conformance_brain, lambda: workers.start(settings),
                                               turns=2500, seed=73, rate=250)
    wait_for_rows(settings, len(expected) // 5, timeout=120)
    second = workers.start(settings)
    # when the rebalance the second worker causes begins, hold the ListOffsets answers for a few
    # seconds: each worker's recovery asks for the changelog starts about 2 s later (the join), and
    # a recovery started again after its 5 s step timeout is no longer held
    first.wait_for_log(REVOKING, count=2, timeout=120)  # the first is its own start-up
    hold = proxy.hold(LIST_OFFSETS, HOLD_S, for_s=5.0)
    second.wait_ready(timeout=120)
    first.wait_ready(count=2, timeout=120)
    producer.finish()
    wait_until_quiet(settings, len(expected), timeout=120)
    verdict = verify(settings, expected)
    logs = first.log() + second.log()
    print(f"\nListOffsets answers held {HOLD_S:.0f} s during a rebalance ({len(hold.held)} requests), "
          f"recoveries retried {logs.count(RETRY_MARK)}: {verdict.figures()}")
    assert hold.held, "no ListOffsets answer was held: the fault did not happen"
    for worker in (first, second):
        assert worker.proc is not None and worker.proc.poll() is None, worker.log()[-3000:]
    assert verdict.exact, verdict.problems()
    assert RETRY_MARK in logs, "no recovery step timed out: the fault did not reach a recovery"
    assert first.stop() == 0 and second.stop() == 0

