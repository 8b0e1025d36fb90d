"""A Kafka-protocol proxy in front of a broker that can hold the answers to one kind of request.

Why: a table recovery is a chain of broker round trips, each awaited with a timeout (Faust's
``broker_request_timeout``). To show what happens when one of them is slow, a test needs that
exact request to be slow, at the moment the recovery sends it, without slowing the machine or the
loopback for anyone else (``tc netem`` on ``lo`` would). The proxy reads the request headers
(``size, api_key, api_version, correlation_id``), and while :meth:`SlowProxy.hold` is armed for an
API key, it keeps each answer to such a request for ``seconds`` before passing it on (answers on a
connection keep their order, as the broker sends them). The broker must advertise the proxy's port
(``--advertised-listener-url``), so every connection a client opens goes through it.

It runs its own event loop in a daemon thread; :meth:`close` stops it.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from dataclasses import dataclass, field

LIST_OFFSETS = 2
"""ListOffsets: what Faust's recovery asks for the earliest offset of each changelog partition."""

OFFSET_FETCH = 9
"""OffsetFetch: a group's committed offsets; Faust's seek to them asks it once per partition."""

_SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_CORRELATION = struct.Struct(">i")


@dataclass
class Hold:
    api_key: int
    seconds: float
    until: float  # monotonic time after which new requests are no longer held
    held: list[float] = field(default_factory=list)  # when each request whose answer is held was sent


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = _SIZE.unpack(await reader.readexactly(4))[0]
    return await reader.readexactly(size)


class SlowProxy:
    """``127.0.0.1:port`` -> ``127.0.0.1:upstream``, optionally holding some answers."""

    def __init__(self, port: int, upstream: int) -> None:
        self.port = port
        self.upstream = upstream
        self._hold: Hold | None = None
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the proxy did not start")

    def hold(self, api_key: int, seconds: float, for_s: float) -> Hold:
        """Hold every answer to ``api_key`` requests sent within the next ``for_s`` seconds."""
        hold = Hold(api_key, seconds, time.monotonic() + for_s)
        with self._lock:
            self._hold = hold
        return hold

    def _hold_for(self, api_key: int) -> Hold | None:
        """The armed hold if a request of ``api_key`` sent now is to be held."""
        with self._lock:
            hold = self._hold
        if hold is None or hold.api_key != api_key or time.monotonic() > hold.until:
            return None
        return hold

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._started.set()
        self._loop.run_forever()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            client_w.close()
            return
        pending: dict[int, Hold] = {}  # correlation id -> the hold its answer waits for

        async def requests() -> None:
            while True:
                frame = await _read_frame(client_r)
                api_key, _, correlation = _REQUEST_HEAD.unpack_from(frame)
                hold = self._hold_for(api_key)
                if hold is not None:
                    pending[correlation] = hold
                    hold.held.append(time.monotonic())
                broker_w.write(_SIZE.pack(len(frame)) + frame)
                await broker_w.drain()

        async def answers() -> None:
            while True:
                frame = await _read_frame(broker_r)
                correlation = _CORRELATION.unpack_from(frame)[0]
                hold = pending.pop(correlation, None)
                if hold is not None:
                    await asyncio.sleep(hold.seconds)  # the client may give up and close meanwhile
                client_w.write(_SIZE.pack(len(frame)) + frame)
                await client_w.drain()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(answers())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for writer in (client_w, broker_w):
                writer.close()

    def close(self) -> None:
        def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.stop()

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(10)
