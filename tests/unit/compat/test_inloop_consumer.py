"""The in-loop consumer "thread": Faust's consumer-thread class run as a task of the app's loop.

With mode's real ``QueueServiceThread``: calls run on the caller's thread and loop, stopping ends
the service without cancelling the loop's other tasks (mode's thread would cancel every task of
its own loop), and the app's consumer gets the in-loop class only when the patch asked for it.
(A live broker, rebalances and crashes: tests/integration/stream and tests/reliability.)
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import faust
import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.threads import QueueServiceThread, ServiceThread

from pipeline.compat import inloop_consumer, tansu_transport
from pipeline.internals import CompatError


class _Probe(QueueServiceThread):
    """A concrete mode service thread that records where its calls run."""

    started_in: int | None = None

    async def on_start(self) -> None:
        self.started_in = threading.get_ident()


class _InLoopProbe(inloop_consumer.InLoopThread, _Probe):
    abstract = False


async def _where(value: int) -> tuple[int, int]:
    return threading.get_ident(), value * 2


def test_calls_run_on_the_callers_thread_and_stop_spares_the_loops_other_tasks() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        bystander = asyncio.ensure_future(asyncio.sleep(30))
        probe = _InLoopProbe(loop=loop)
        await probe.start()
        assert probe.thread_loop is loop and probe._thread is None  # no thread was started
        assert probe.started_in == threading.get_ident()
        assert await probe.call_thread(_where, 21) == (threading.get_ident(), 42)
        await probe.stop()
        assert probe._shutdown.is_set()
        assert not bystander.cancelled() and not bystander.done()  # mode's thread would cancel it
        bystander.cancel()

    asyncio.run(scenario())


def test_a_cancelled_caller_leaves_the_call_running() -> None:
    async def scenario() -> None:
        probe = _InLoopProbe(loop=asyncio.get_running_loop())
        await probe.start()
        finished: list[str] = []

        async def slow() -> None:
            await asyncio.sleep(0.05)
            finished.append("done")

        caller = asyncio.ensure_future(probe.call_thread(slow))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0.1)
        assert finished == ["done"]  # as with the thread: the call is not abandoned half-way
        await probe.stop()

    asyncio.run(scenario())


def _consumer_thread(app: Any) -> Any:
    return app.consumer._thread


def test_the_app_consumer_runs_in_loop_only_when_installed() -> None:
    tansu_transport.install()
    plain = faust.App("inloop-off", broker="tansu://127.0.0.1:1")
    assert type(_consumer_thread(plain)) is tansu_transport.TansuConsumerThread

    for url in ("tansu://127.0.0.1:1", "kafka://127.0.0.1:1"):
        app = faust.App(f"inloop-on-{url[:5]}", broker=url)
        inloop_consumer.install(app)
        thread = _consumer_thread(app)
        assert isinstance(thread, inloop_consumer.InLoopThread)
        assert isinstance(thread, faust_aiokafka.AIOKafkaConsumerThread)
        assert thread.thread_loop is thread.parent_loop


def test_a_missing_mode_part_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(ServiceThread, "_shutdown_thread")
    with pytest.raises(CompatError, match=r"compat patch inloop-consumer: .*ServiceThread has no _shutdown_thread\(\)"):
        inloop_consumer.install(faust.App("inloop-missing", broker="tansu://127.0.0.1:1"))
