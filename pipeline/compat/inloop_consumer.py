"""Run Faust's aiokafka consumer on the worker's own event loop, not in a thread of its own.

Faust (``ThreadDelegateConsumer``) runs the aiokafka consumer in a mode ``ServiceThread`` with a
second event loop, and every call the worker makes to it (``getmany`` for each fetch, ``commit``,
``seek``, ...) crosses threads: the call is queued with ``call_soon_threadsafe`` (a self-pipe write
that wakes the other loop), a method-queue task runs it there, and the result comes back the same
way. Two event loops then poll their sockets, each with its own timers, and the two threads hand
the GIL to each other many times per fetch. Measured on a worker at steady rates
(docs/performance.md, "The pipeline's CPU per turn"): about 1,700 ``futex`` and 950
``epoll_wait`` calls per second, and a CPU cost under traffic far above the cost of the records.

:class:`InLoopThread` keeps Faust's consumer-thread class and all its methods, and changes only
where they run: the consumer's "thread loop" is the app's loop, :meth:`InLoopThread.start` runs
mode's ``_serve`` as a task on it instead of starting a thread, and :meth:`InLoopThread.call_thread`
awaits the call (shielded, so a cancelled caller leaves the call running, as the thread did).
The rebalance callbacks still go through Faust's main-loop method queue, which works unchanged on
one loop. What it costs: a long synchronous stretch on the worker's loop now also delays the
consumer's heartbeats and fetches; the agents never block the loop for long (the largest batch is
decided in tens of milliseconds, brain reloads run in a thread), far under the 3 s session timeout.

:func:`install` is switched by the ``consumer_in_loop`` setting (off by default: a long crash run
with a backlog stalled with it, not yet explained; docs/performance.md, goal 2). Only the mode methods
listed in :data:`CLASS_METHODS` are used; each is checked at install, and a missing one is a
:class:`~pipeline.internals.CompatError` (never a silent fallback to the thread).
"""

from __future__ import annotations

import asyncio
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.threads import QueueServiceThread, ServiceThread

from pipeline.internals import require

PATCH = "inloop-consumer"

_MARK = "_volunteer_consumer_in_loop"

CLASS_METHODS = ("_serve", "_shutdown_thread", "_gather_remaining_tasks", "start", "stop")
"""mode ``ServiceThread`` methods :class:`InLoopThread` drives or replaces, checked at install."""


class InLoopThread(QueueServiceThread):
    """A mode ``QueueServiceThread`` whose "thread" is a task on the parent loop (module doc).

    Mixed in front of Faust's consumer-thread class (:func:`thread_class`).
    """

    abstract = True

    def __init__(self, *args: Any, loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        kwargs.pop("thread_loop", None)
        super().__init__(*args, loop=loop, thread_loop=loop, **kwargs)  # one loop: mode then never closes it

    async def start(self) -> None:
        # mode's start() without the thread: _serve (start, on_thread_started, wait, shut down)
        # runs as a task of this loop; the awaited future reports a failed start the same way.
        assert not self._thread_started.is_set()
        self._thread_started.set()
        running: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._thread_running = running
        self._serving = asyncio.ensure_future(self._serve())
        try:
            if not self.should_stop and self.wait_for_thread:
                await running
        finally:
            self._thread_running = None

    async def stop(self) -> None:
        await ServiceThread.stop(self)
        serving: asyncio.Future[None] | None = getattr(self, "_serving", None)
        if serving is not None and not serving.done():
            await asyncio.wait({serving}, timeout=self.shutdown_timeout)

    async def _gather_remaining_tasks(self) -> None:
        # mode cancels every task of the thread's loop here; on the app's loop that would be the
        # app's own tasks. aiokafka's tasks end with the consumer it stopped just before.
        return None

    async def call_thread(self, fun: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.shield(_call(fun, args, kwargs))

    async def cast_thread(self, fun: Any, *args: Any, **kwargs: Any) -> None:
        task = asyncio.ensure_future(_call(fun, args, kwargs))
        _CASTS.add(task)  # keep it alive until done, as the thread's queue kept the call
        task.add_done_callback(_CASTS.discard)


_CASTS: set[asyncio.Future[Any]] = set()


async def _call(fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = fun(*args, **kwargs)
    if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
        return await result
    return result


_CLASSES: dict[type[Any], type[Any]] = {}


def thread_class(base: type[Any], consumer: Any) -> type[Any]:
    """``base`` (a Faust consumer-thread class), or its in-loop variant if ``consumer``'s app asked."""
    if not getattr(consumer.app, _MARK, False):
        return base
    if base not in _CLASSES:
        _CLASSES[base] = type(f"InLoop{base.__name__}", (InLoopThread, base),
                              {"abstract": False, "__module__": __name__})  # its logger's name
    return _CLASSES[base]


def _new_consumer_thread(self: Any) -> Any:
    cls = thread_class(faust_aiokafka.AIOKafkaConsumerThread, self)
    return cls(self, loop=self.loop, beacon=self.beacon)


def install(app: Any) -> None:
    """Make ``app``'s consumer run on its own loop (module doc); Faust's ``kafka://`` consumer
    class learns to ask :func:`thread_class` once per process, the ``tansu://`` one always does."""
    require(PATCH, ServiceThread, "_thread_running", methods=CLASS_METHODS)
    require(PATCH, QueueServiceThread, methods=("call_thread", "cast_thread"))
    require(PATCH, faust_aiokafka.Consumer, own_methods=("_new_consumer_thread",))
    if getattr(faust_aiokafka.Consumer._new_consumer_thread, _MARK, False) is False:
        setattr(_new_consumer_thread, _MARK, True)
        faust_aiokafka.Consumer._new_consumer_thread = _new_consumer_thread  # type: ignore[method-assign]
    setattr(app, _MARK, True)
