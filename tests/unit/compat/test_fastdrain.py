"""The inline delivery helpers of pipeline.compat.fastdrain: a callback runs to the end in place when
it does not wait, and is resumed exactly like a Task would resume it when it does."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from faust.transport import consumer as faust_consumer

from pipeline.compat import fastdrain, recovery_order
from pipeline.internals import CompatError


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_callback_that_never_waits_finishes_inline() -> None:
    seen: list[int] = []

    async def callback(n: int) -> None:
        seen.append(n)

    async def main() -> tuple[Any, list[int]]:
        blocked = fastdrain.run_inline(callback(7))
        return blocked, list(seen)  # read before anything else could run

    blocked, before = run(main())
    assert blocked is None
    assert before == [7]


def test_a_waiting_callback_is_resumed_with_the_futures_result() -> None:
    async def main() -> tuple[str, list[str]]:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[str] = loop.create_future()
        steps: list[str] = []

        async def callback() -> str:
            steps.append("start")
            value = await gate
            steps.append(value)
            await asyncio.sleep(0)  # a bare yield too
            steps.append("end")
            return value + "!"

        coro = callback()
        blocked = fastdrain.run_inline(coro)
        assert blocked is not None and blocked[0] is gate
        assert steps == ["start"]
        loop.call_later(0.01, gate.set_result, "opened")
        result = await fastdrain.finish(coro, blocked[0])
        return result, steps

    result, steps = run(main())
    assert result == "opened!"
    assert steps == ["start", "opened", "end"]


def test_a_failed_future_raises_inside_the_callback() -> None:
    async def main() -> str:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()

        async def callback() -> str:
            try:
                await gate
            except KeyError:
                return "handled"
            return "not raised"

        coro = callback()
        blocked = fastdrain.run_inline(coro)
        assert blocked is not None
        gate.set_exception(KeyError("x"))
        return str(await fastdrain.finish(coro, blocked[0]))

    assert run(main()) == "handled"


def test_cancelling_the_driver_cancels_the_blocked_callback() -> None:
    """What wait_first does when the flow is suspended: the blocked delivery is abandoned."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        never: asyncio.Future[None] = loop.create_future()
        steps: list[str] = []

        async def callback() -> None:
            try:
                await never
            except asyncio.CancelledError:
                steps.append("cancelled")
                raise
            steps.append("delivered")

        coro = callback()
        blocked = fastdrain.run_inline(coro)
        assert blocked is not None
        task = asyncio.ensure_future(fastdrain.finish(coro, blocked[0]))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return steps

    assert run(main()) == ["cancelled"]


def test_install_patches_the_consumer_a_real_faust_app_creates() -> None:
    recovery_order.install()
    app = faust.App("fastdrain-unit", broker="kafka://127.0.0.1:1")  # never connects: nothing starts
    fastdrain.install(app, pause_s=0.005)
    consumer: Any = app.consumer
    assert consumer._drain_messages.__func__ is fastdrain.drain_messages
    assert getattr(consumer, fastdrain.PAUSE_ATTR) == 0.005  # the loop reads its pause from here


def test_a_faust_consumer_class_missing_a_part_is_refused_at_install(monkeypatch: pytest.MonkeyPatch) -> None:
    recovery_order.install()
    monkeypatch.delattr(faust_consumer.Consumer, "_add_gap")
    app = faust.App("fastdrain-unit-missing", broker="kafka://127.0.0.1:1")
    with pytest.raises(CompatError, match=r"compat patch fastdrain: faust.transport.consumer.Consumer has no "
                                          r"_add_gap\(\) \(faust-streaming 0.15.3"):
        fastdrain.install(app)


def test_a_consumer_missing_an_instance_part_is_refused_when_the_app_creates_it() -> None:
    recovery_order.install()
    app = faust.App("fastdrain-unit-instance", broker="kafka://127.0.0.1:1")
    consumer: Any = app.consumer  # created before the patch, then stripped of a part the loop reads
    del consumer._commit_every
    with pytest.raises(CompatError, match="has no _commit_every"):
        fastdrain.patch_consumer(consumer)
    assert "_drain_messages" not in vars(consumer)  # the stock loop, untouched: no half-patched consumer


def test_with_the_changelog_feed_each_fetch_goes_to_the_feed_before_getmany_sees_it() -> None:
    """What the feed takes out of a fetch never reaches Faust's ``getmany`` (which would make a
    message of every record); without a feed yet the fetch passes untouched."""
    recovery_order.install()
    app = faust.App("fastdrain-unit-changelog", broker="kafka://127.0.0.1:1")
    consumer: Any = app.consumer
    fetched = {"cl": [1, 2], "turns": [3]}

    async def fetch(timeout: float) -> Any:
        return dict(fetched), {"cl", "turns"}

    consumer._wait_next_records = fetch  # what getmany awaits; the patch wraps this one
    fastdrain.patch_consumer(consumer, changelog=True)
    calls: list[Any] = []

    class Feed:
        def take_fetch(self, owner: Any, records: dict[str, Any], active: Any) -> None:
            calls.append((owner, active))
            del records["cl"]

    before = run(consumer._wait_next_records(1.0))
    setattr(consumer, fastdrain.FEED_ATTR, Feed())  # what drain_messages sets as it starts
    after = run(consumer._wait_next_records(1.0))
    assert before == (fetched, {"cl", "turns"})
    assert after == ({"turns": [3]}, {"cl", "turns"}) and calls == [(consumer, {"cl", "turns"})]


def _app_with_queue(tp: Any, queue: Any) -> Any:
    """The two attributes queues_drained reads: the conductor's tp index and a channel's queue."""
    from types import SimpleNamespace

    return SimpleNamespace(topics=SimpleNamespace(_tp_index={tp: [SimpleNamespace(queue=queue)]}))


def test_queues_drained_waits_until_a_full_stream_queue_is_down_to_its_drop_size() -> None:
    from mode.utils.queues import FlowControlEvent, ThrowableQueue

    async def main() -> list[tuple[int, bool]]:
        queue: ThrowableQueue[int] = ThrowableQueue(maxsize=100, flow_control=FlowControlEvent())
        for i in range(100):
            queue.put_nowait(i)
        app = _app_with_queue("tp", queue)
        drained = fastdrain.queues_drained(app, "tp")
        assert drained is not None
        seen = []
        while queue.qsize() > 30:
            queue.get_nowait()
            seen.append((queue.qsize(), drained.done()))
        return seen

    seen = run(main())  # (size after a read, woken yet) for reads from 100 down to 30
    # pressure_drop_size is 40 % of 100; a read checks the size it finds (40) before taking one
    assert [size for size, woken in seen if not woken] == list(range(99, 39, -1))
    assert [size for size, woken in seen if woken] == list(range(39, 29, -1))


def test_queues_drained_is_none_when_there_is_room_or_no_stream() -> None:
    from mode.utils.queues import FlowControlEvent, ThrowableQueue

    async def main() -> tuple[Any, Any]:
        queue: ThrowableQueue[int] = ThrowableQueue(maxsize=100, flow_control=FlowControlEvent())
        for i in range(40):
            queue.put_nowait(i)
        app = _app_with_queue("tp", queue)
        return fastdrain.queues_drained(app, "tp"), fastdrain.queues_drained(app, "other-tp")

    assert run(main()) == (None, None)
