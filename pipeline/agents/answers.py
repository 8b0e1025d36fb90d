"""The worker's answer endpoint for hooks: publish a prompt, answer its pages in milliseconds.

A hook cannot join a consumer group (that takes seconds), so it asks a worker over HTTP (Faust's
web server, port ``web_port``):

- ``POST /volunteer/hook/turns`` — the worker publishes the given delivery records and turns on
  ``turns`` (keyed by session, acknowledged by the broker), then waits until its window agent has
  processed the prompt's turn and answers the pages proposed for it (``status: ok``), or
  ``timeout`` when ``wait_ms`` ran out, or ``duplicate`` (with ``last_turn``) when the session is
  already past that turn number. The request is forwarded, body and all, to the worker that owns
  the session's partition (Faust's router knows it from the group assignment); the forwarded
  request is marked so it is never forwarded twice.
- ``POST /volunteer/hook/delivered`` — publish one delivery record (any worker can).
- ``GET /volunteer/hook/health`` — is this a worker, and which partitions does it own.

Answers come from :class:`AnswerBoard`, which the window agent fills after each batch with the
proposals of hook-channel turns (:mod:`pipeline.agents.hooklane`); results are kept for a minute
so an answer that is ready before the request starts waiting is not missed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.agents.hooklane import Proposal
from pipeline.hook.protocol import (
    DELIVERED_PATH,
    HEALTH_PATH,
    HOOK_CHANNELS,
    MAX_WAIT_MS,
    ROUTED_HEADER,
    TURNS_PATH,
    Delivery,
    delivery_from_obj,
)
from topics.records import InvalidRecord, decode_turn

if TYPE_CHECKING:
    from pipeline.app import StreamApp

log = logging.getLogger(__name__)

KEEP_RESULTS_S = 60.0
MAX_RESULTS = 8192
MAX_TURNS_PER_REQUEST = 80
FORWARD_EXTRA_S = 2.0
HOOK_ENDPOINT_MARK = "hook answer endpoint:"
"""Logged (INFO) when the worker starts with its web server on; tests and the bench read the URL."""

Key = tuple[str, int]


class AnswerBoard:
    """Proposals of recent hook-channel turns, and the requests waiting for them."""

    def __init__(self, keep_s: float = KEEP_RESULTS_S, max_results: int = MAX_RESULTS) -> None:
        self.keep_s = keep_s
        self.max_results = max_results
        self._results: OrderedDict[Key, tuple[float, Proposal]] = OrderedDict()
        self._waiters: dict[Key, list[asyncio.Future[Proposal]]] = {}

    def resolve(self, proposals: Iterable[Proposal]) -> None:
        now = time.monotonic()
        for proposal in proposals:
            key = (proposal.session_id, proposal.turn)
            self._results[key] = (now, proposal)
            self._results.move_to_end(key)
            for future in self._waiters.pop(key, ()):
                if not future.done():
                    future.set_result(proposal)
        self._expire(now)

    def forget(self, session_id: str, turn: int) -> None:
        """Drop a kept result before the same turn number is published again."""
        self._results.pop((session_id, turn), None)

    def _expire(self, now: float) -> None:
        results = self._results
        while results:
            key, (at, _) = next(iter(results.items()))
            if now - at <= self.keep_s and len(results) <= self.max_results:
                break
            del results[key]

    async def wait(self, session_id: str, turn: int, timeout_s: float) -> Proposal | None:
        key = (session_id, turn)
        kept = self._results.get(key)
        if kept is not None:
            return kept[1]
        if timeout_s <= 0:
            return None
        future: asyncio.Future[Proposal] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(future)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                if future in waiters:
                    waiters.remove(future)
                if not waiters:
                    del self._waiters[key]

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())


# ----------------------------------------------------------------------------- requests


class BadRequest(ValueError):
    """A request the endpoint refuses (HTTP 400); the message says why."""


@dataclass(frozen=True, slots=True)
class TurnsRequest:
    session_id: str
    key: bytes
    records: list[bytes]  # delivery records first, then turns, in publishing order
    wait_turn: int | None
    wait_ms: int


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("body must be a JSON object")
    return obj


def parse_turns_request(body: bytes, *, max_text_bytes: int, max_session_id_chars: int) -> TurnsRequest:
    """Validate a ``/turns`` request with the worker's own decoders (nothing invalid is published)."""
    obj = _json_object(body)
    session_id = obj.get("session_id")
    channel = obj.get("channel")
    if not isinstance(session_id, str) or not session_id:
        raise BadRequest("session_id must be a non-empty string")
    if channel not in HOOK_CHANNELS:
        raise BadRequest(f"channel must be one of {', '.join(HOOK_CHANNELS)}")
    key = session_id.encode("utf-8", "surrogatepass")
    source_id = obj.get("source_id")
    ts = obj.get("ts")
    records: list[bytes] = []
    try:
        for raw in obj.get("deliveries") or []:
            delivery = delivery_from_obj(raw)
            if delivery.session_id != session_id:
                raise BadRequest("a delivery names another session")
            records.append(delivery.to_json())
        turns = obj.get("turns") or []
        if not isinstance(turns, list) or len(turns) > MAX_TURNS_PER_REQUEST:
            raise BadRequest(f"turns must be a list of at most {MAX_TURNS_PER_REQUEST}")
        for item in turns:
            if not isinstance(item, dict):
                raise BadRequest("every turn must be an object")
            draft = {"session_id": session_id, "role": item.get("role"), "text": item.get("text"),
                     "turn": item.get("turn"), "ts": ts, "source_id": source_id, "channel": channel}
            raw_turn = orjson.dumps({k: v for k, v in draft.items() if v is not None})
            turn = decode_turn(raw_turn, key, max_text_bytes=max_text_bytes,
                               max_session_id_chars=max_session_id_chars)
            if turn is not None:
                records.append(turn.to_json())
    except InvalidRecord as exc:
        raise BadRequest(exc.message) from None
    except orjson.JSONEncodeError as exc:
        raise BadRequest(f"a turn cannot be encoded: {exc}") from None
    wait_turn = obj.get("wait_turn")
    if wait_turn is not None and (isinstance(wait_turn, bool) or not isinstance(wait_turn, int) or wait_turn < 1):
        raise BadRequest("wait_turn must be a turn number")
    wait_ms = obj.get("wait_ms", 0)
    if isinstance(wait_ms, bool) or not isinstance(wait_ms, int | float):
        raise BadRequest("wait_ms must be a number")
    return TurnsRequest(session_id, key, records, wait_turn, int(min(max(wait_ms, 0), MAX_WAIT_MS)))


def parse_delivered_request(body: bytes) -> Delivery:
    try:
        return delivery_from_obj(_json_object(body))
    except InvalidRecord as exc:
        raise BadRequest(exc.message) from None


def answer_for(proposal: Proposal | None) -> dict[str, Any]:
    if proposal is None:
        return {"status": "timeout"}
    if proposal.duplicate:
        return {"status": "duplicate", "turn": proposal.turn, "last_turn": proposal.last_turn}
    # One list in block order, pointers first, each item marked with its kind (docs/hooks.md).
    return {"status": "ok", "turn": proposal.turn, "last_turn": proposal.last_turn,
            "pages": [{"kind": kind, **p.to_dict()} for kind, p in proposal.items()]}


# ----------------------------------------------------------------------------- the endpoint


class HookEndpoint:
    """The three handlers, bound to one worker's :class:`StreamApp`."""

    def __init__(self, ctx: StreamApp) -> None:
        self.ctx = ctx

    def owner_url(self, key: bytes) -> str | None:
        """The web address of the worker owning ``key``'s partition, if that is another worker."""
        app = self.ctx.app
        from pipeline.app import SESSION_TABLE

        try:
            url = app.router.key_store(SESSION_TABLE, key)
            mine = app.conf.canonical_url
        except Exception:  # no assignment yet (starting, rebalancing): answer here
            return None
        if (url.host, url.port) == (mine.host, mine.port):
            return None
        return str(url).rstrip("/")

    async def forward(self, url: str, path: str, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        import aiohttp

        async with self.ctx.app.http_client.post(
            url + path, data=body, headers={ROUTED_HEADER: "1", "Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            return response.status, await response.read()

    async def turns(self, body: bytes, routed: bool) -> tuple[int, bytes]:
        settings = self.ctx.settings
        try:
            req = parse_turns_request(body, max_text_bytes=settings.max_text_bytes,
                                      max_session_id_chars=settings.max_session_id_chars)
        except BadRequest as exc:
            return 400, orjson.dumps({"status": "bad_request", "error": str(exc)})
        if not routed:
            owner = self.owner_url(req.key)
            if owner is not None:
                try:
                    return await self.forward(owner, TURNS_PATH, body, req.wait_ms / 1000 + FORWARD_EXTRA_S)
                except Exception as exc:  # owner unreachable: serve it here (publish, then wait)
                    log.warning("could not forward a hook request to %s (%s); answering here", owner, exc)
        board = self.ctx.answers
        if req.wait_turn is not None:
            board.forget(req.session_id, req.wait_turn)
        from pipeline.agents.wiring import publish

        try:
            await publish(self.ctx, settings.topic_turns, [(req.key, value) for value in req.records])
        except Exception as exc:
            return 503, orjson.dumps({"status": "unavailable", "error": f"publish failed: {exc}"[:200]})
        if req.wait_turn is None:
            return 200, orjson.dumps({"status": "published"})
        proposal = await board.wait(req.session_id, req.wait_turn, req.wait_ms / 1000)
        return 200, orjson.dumps(answer_for(proposal))

    async def delivered(self, body: bytes) -> tuple[int, bytes]:
        try:
            delivery = parse_delivered_request(body)
        except BadRequest as exc:
            return 400, orjson.dumps({"status": "bad_request", "error": str(exc)})
        from pipeline.agents.wiring import publish

        key = delivery.session_id.encode("utf-8", "surrogatepass")
        try:
            await publish(self.ctx, self.ctx.settings.topic_turns, [(key, delivery.to_json())])
        except Exception as exc:
            return 503, orjson.dumps({"status": "unavailable", "error": f"publish failed: {exc}"[:200]})
        return 200, orjson.dumps({"status": "ok"})

    def health(self) -> tuple[int, bytes]:
        ctx = self.ctx
        return 200, orjson.dumps({
            "status": "ok", "app_id": ctx.settings.app_id, "topic": ctx.settings.topic_turns,
            "partitions": sorted(ctx.assigned_partitions(ctx.settings.topic_turns)),
            "waiting": ctx.answers.waiting,
        })


def register_views(ctx: StreamApp) -> None:
    """Add the endpoint to the worker's Faust web server (only when the web server is on)."""
    from faust import web

    endpoint = HookEndpoint(ctx)
    json_type = "application/json"

    class HookTurns(web.View):
        async def post(self, request: Any) -> Any:
            status, data = await endpoint.turns(await request.read(), bool(request.headers.get(ROUTED_HEADER)))
            return self.bytes(data, content_type=json_type, status=status)

    class HookDelivered(web.View):
        async def post(self, request: Any) -> Any:
            status, data = await endpoint.delivered(await request.read())
            return self.bytes(data, content_type=json_type, status=status)

    class HookHealth(web.View):
        async def get(self, request: Any) -> Any:
            status, data = endpoint.health()
            return self.bytes(data, content_type=json_type, status=status)

    ctx.app.page(TURNS_PATH)(HookTurns)
    ctx.app.page(DELIVERED_PATH)(HookDelivered)
    ctx.app.page(HEALTH_PATH)(HookHealth)

    @ctx.app.task
    async def announce_hook_endpoint() -> None:  # runs once logging is set up
        url = str(ctx.app.conf.canonical_url).rstrip("/")
        log.info("%s %s (set VOLUNTEER_HOOK_URL=%s for 'volunteer hook')", HOOK_ENDPOINT_MARK, url + TURNS_PATH, url)
