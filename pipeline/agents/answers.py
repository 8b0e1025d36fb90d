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
- ``POST /volunteer/hook/hello`` — the handshake: answers only the worker's proof, so a hook
  knows it talks to a worker holding the secret before it sends a prompt.
- ``GET /volunteer/hook/health`` — is this a worker, and which partitions does it own.

Every request passes :class:`pipeline.agents.edge.EdgeGuard` first (signed with the shared secret,
JSON, no ``Origin``, loopback ``Host``, body within a timeout) and every answer carries the
worker's proof. On top of that, this module keeps requests apart (docs/security.md):

- a request waits only for the turn it published itself (``wait_turn`` = its own last turn), one
  request per turn at a time, and a repeated turn number is answered ``duplicate`` without pages;
- an ``ok`` answer carries the proposal's nonce; a delivery record is accepted only with it (on
  ``/delivered`` a record without it is a 400; in a ``/turns`` request it is dropped and counted
  in ``refused_deliveries``, so a stale stored report cannot block a session's prompts), and a
  request carries at most :data:`MAX_DELIVERIES_PER_REQUEST`;
- a turn number more than :data:`MAX_TURN_AHEAD` beyond the session's last turn is refused
  (``out_of_range``, HTTP 409, with ``last_turn``) before anything is published, so the session is
  not broken and the hook renumbers.

Answers come from :class:`pipeline.agents.answer_board.AnswerBoard`, which the window agent fills after each batch with the
proposals of hook-channel turns (:mod:`pipeline.agents.hooklane`); results are kept for a minute
so an answer that is ready before the request starts waiting is not missed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.agents.batch_types import InRecord
from pipeline.agents.bulk_send import Placed
from pipeline.agents.commit_protocol import WindowCommit
from pipeline.agents.fastlane import consecutive
from pipeline.agents.hooklane import Proposal
from pipeline.agents.publishing import publish
from pipeline.agents.session_table import SESSION_TABLE, CorruptState, SessionRecord
from pipeline.hook.credential import (
    AUTH_HEADER,
    PROOF_HEADER,
    answer_is_proven,
    new_nonce,
    nonce_matches,
    proposal_nonce,
    sign_request,
)
from pipeline.hook.protocol import (
    DELIVERED_PATH,
    HEALTH_PATH,
    HELLO_PATH,
    MAX_DELIVERIES_PER_REQUEST,
    MAX_WAIT_MS,
    ROUTED_HEADER,
    TURNS_PATH,
)
from topics.delivery import HOOK_CHANNELS, Delivery, delivery_from_obj
from topics.records import InvalidRecord, decode_turn

if TYPE_CHECKING:
    from pipeline.agents.context import AgentContext
    from pipeline.agents.edge import Registration

log = logging.getLogger(__name__)

MAX_TURNS_PER_REQUEST = 80
FORWARD_EXTRA_S = 2.0
MAX_TURN_AHEAD = 10_000
"""A turn numbered further beyond the session's last turn is refused (``out_of_range``)."""
HOOK_ENDPOINT_MARK = "hook answer endpoint:"
"""Logged (INFO) when the worker starts with its web server on; tests and the bench read the URL."""

# ----------------------------------------------------------------------------- requests


class BadRequest(ValueError):
    """A request the endpoint refuses (HTTP 400); the message says why."""


class MissingNonce(BadRequest):
    """A delivery without the nonce of the worker's answer for that turn."""


@dataclass(frozen=True, slots=True)
class TurnsRequest:
    session_id: str
    key: bytes
    records: list[bytes]  # delivery records first, then turns, in publishing order
    wait_turn: int | None
    wait_ms: int
    numbers: tuple[int, ...] = ()  # the numbers of the turns it publishes (None-numbered ones left out)
    refused_deliveries: int = 0  # valid records without their proposal's nonce: not published


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("body must be a JSON object")
    return obj


def checked_delivery(raw: Any, token: str) -> Delivery:
    """A delivery from a request: valid, and carrying the nonce of the proposal it reports."""
    delivery = delivery_from_obj(raw)
    if not nonce_matches(token, delivery.session_id, delivery.turn, raw.get("nonce")):
        raise MissingNonce("a delivery without the nonce of the worker's answer for that turn")
    return delivery


def parse_turns_request(body: bytes, *, max_text_bytes: int, max_session_id_chars: int,
                        token: str = "") -> TurnsRequest:
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
    numbers: list[int] = []
    refused = 0
    deliveries = obj.get("deliveries") or []
    if not isinstance(deliveries, list) or len(deliveries) > MAX_DELIVERIES_PER_REQUEST:
        raise BadRequest(f"deliveries must be a list of at most {MAX_DELIVERIES_PER_REQUEST}")
    try:
        for raw in deliveries:
            try:
                delivery = checked_delivery(raw, token)
            except MissingNonce:
                # Dropped, not the whole request: a hook's stored report from before the credential
                # (or from another secret) must not block the session's prompts for good.
                refused += 1
                continue
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
                if turn.turn is not None:
                    numbers.append(turn.turn)
    except InvalidRecord as exc:
        raise BadRequest(exc.message) from None
    except orjson.JSONEncodeError as exc:
        raise BadRequest(f"a turn cannot be encoded: {exc}") from None
    wait_turn = obj.get("wait_turn")
    if wait_turn is not None and (isinstance(wait_turn, bool) or not isinstance(wait_turn, int) or wait_turn < 1):
        raise BadRequest("wait_turn must be a turn number")
    if wait_turn is not None and (not numbers or wait_turn != numbers[-1]):
        # Waiting for a turn someone else publishes would hand that request's pages to this one.
        raise BadRequest("wait_turn must be the number of this request's last turn")
    wait_ms = obj.get("wait_ms", 0)
    if isinstance(wait_ms, bool) or not isinstance(wait_ms, int | float):
        raise BadRequest("wait_ms must be a number")
    return TurnsRequest(session_id, key, records, wait_turn, int(min(max(wait_ms, 0), MAX_WAIT_MS)),
                        tuple(numbers), refused)


def parse_delivered_request(body: bytes, token: str = "") -> Delivery:
    obj = _json_object(body)
    try:
        return checked_delivery(obj, token)
    except InvalidRecord as exc:
        raise BadRequest(exc.message) from None


def answer_for(proposal: Proposal | None, token: str = "") -> dict[str, Any]:
    if proposal is None:
        return {"status": "timeout"}
    if proposal.duplicate:  # the pages were answered to the request that first published this turn
        return {"status": "duplicate", "turn": proposal.turn, "last_turn": proposal.last_turn}
    # One list in block order, pointers first, each item marked with its kind (docs/hooks.md).
    return {"status": "ok", "turn": proposal.turn, "last_turn": proposal.last_turn,
            "nonce": proposal_nonce(token, proposal.session_id, proposal.turn),
            "pages": [{"kind": kind, **p.to_dict()} for kind, p in proposal.items()]}


def answer_outcome(answer: dict[str, Any]) -> tuple[str, int]:
    """The metrics outcome of a waited-for answer and the items it returns."""
    status = answer["status"]
    if status == "ok":
        pages = len(answer["pages"])
        return ("answered" if pages else "empty"), pages
    return str(status), 0  # "timeout" or "duplicate"


# ----------------------------------------------------------------------------- the endpoint


class HookEndpoint:
    """The handlers, bound to one worker's parts (:class:`pipeline.agents.context.AgentContext`)."""

    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.token = ctx.token
        self.window = WindowCommit(ctx)  # the window agent's protocol, for the fast lane

    def owner_url(self, key: bytes) -> str | None:
        """The web address of the worker owning ``key``'s partition, if that is another worker."""
        app = self.ctx.app
        try:
            url = app.router.key_store(SESSION_TABLE, key)
            mine = app.conf.canonical_url
        except Exception:  # no assignment yet (starting, rebalancing): answer here
            return None
        if (url.host, url.port) == (mine.host, mine.port):
            return None
        return str(url).rstrip("/")

    async def forward(self, url: str, path: str, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        """Send the request on to the owner, signed with the secret; its answer must carry its proof."""
        import aiohttp
        from yarl import URL

        full = URL(url + path)
        auth = sign_request(self.token, "POST", full.path_qs, body, int(time.time() * 1000), new_nonce())
        async with self.ctx.app.http_client.post(
            full, data=body, ssl=self.ctx.forward_ssl if self.ctx.forward_ssl is not None else True,
            headers={ROUTED_HEADER: "1", "Content-Type": "application/json", AUTH_HEADER: auth},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            data = await response.read()
            proof = response.headers.get(PROOF_HEADER, "")
            if not answer_is_proven(self.token, auth.rsplit(".", 1)[1], response.status, data, proof):
                raise ConnectionError(f"{url} answered without a valid proof")
            return response.status, data

    def last_turn_here(self, key: bytes) -> int | None:
        """The session's last turn from this worker's table, if it owns the session (else None)."""
        from aiokafka.partitioner import murmur2

        table = self.ctx.table
        partition = (murmur2(key) & 0x7FFFFFFF) % self.ctx.partitions  # the producer's default partitioner
        if partition not in self.ctx.assigned_partitions(self.ctx.settings.topic_turns):
            return None
        raw = table.get(key)
        if raw is None:
            return 0
        try:
            return SessionRecord.from_bytes(raw, self.ctx.cipher, key).state.last_turn  # sealed: needs the key
        except CorruptState:
            return None

    async def turns(self, body: bytes, routed: bool) -> tuple[int, bytes]:
        """Answer one ``/turns`` request and count it by outcome (``volunteer_hook_requests_total``)."""
        status, data, outcome, pages = await self._turns(body, routed)
        self.ctx.metrics.hook_request(outcome, pages)
        return status, data

    async def _turns(self, body: bytes, routed: bool) -> tuple[int, bytes, str, int]:
        settings = self.ctx.settings
        try:
            req = parse_turns_request(body, max_text_bytes=settings.max_text_bytes,
                                      max_session_id_chars=settings.max_session_id_chars, token=self.token)
        except BadRequest as exc:
            return 400, orjson.dumps({"status": "bad_request", "error": str(exc)}), "refused", 0
        if not routed:
            owner = self.owner_url(req.key)
            if owner is not None:
                try:
                    status, data = await self.forward(owner, TURNS_PATH, body, req.wait_ms / 1000 + FORWARD_EXTRA_S)
                    return status, data, "forwarded", 0  # the owner counts its answer
                except Exception as exc:  # owner unreachable: serve it here (publish, then wait)
                    log.warning("could not forward a hook request to %s (%s); answering here", owner, exc)
        last = self.last_turn_here(req.key) if req.numbers else None
        if last is not None and max(req.numbers) > last + MAX_TURN_AHEAD:
            return 409, orjson.dumps({"status": "out_of_range", "last_turn": last,
                                      "error": f"turn numbers may run at most {MAX_TURN_AHEAD} ahead"}), "refused", 0
        board = self.ctx.answers
        if req.wait_turn is not None:
            if board.busy(req.session_id, req.wait_turn):
                return 409, orjson.dumps({"status": "busy", "error": "another request waits for this turn"}), "refused", 0
            board.forget(req.session_id, req.wait_turn)
        try:
            placed = await publish(self.ctx, settings.topic_turns, [(req.key, value) for value in req.records])
        except Exception as exc:
            return 503, orjson.dumps({"status": "unavailable", "error": f"publish failed: {exc}"[:200]}), "error", 0
        if req.wait_turn is None:
            return 200, orjson.dumps({"status": "published", "refused_deliveries": req.refused_deliveries}), "published", 0
        await self.commit_here(req, placed)  # the fast lane; if it cannot, the window agent answers
        proposal = await board.wait(req.session_id, req.wait_turn, req.wait_ms / 1000)
        answer = answer_for(proposal, self.token)
        if req.refused_deliveries:
            answer["refused_deliveries"] = req.refused_deliveries
        outcome, pages = answer_outcome(answer)
        return 200, orjson.dumps(answer), outcome, pages

    async def commit_here(self, req: TurnsRequest, placed: list[Placed]) -> None:
        """The fast lane (:mod:`pipeline.agents.fastlane`): when the records just published are the
        next ones of their partition, commit them here with the window agent's protocol and put
        the proposals on the board; otherwise do nothing (the agent will)."""
        if not self.ctx.settings.hook_fast_lane:
            return
        span = consecutive(placed, self.ctx.settings.topic_turns)
        if span is None or span[2] - span[1] + 1 != len(req.records):
            return
        partition, first, last = span
        app = self.ctx.app
        lane = self.ctx.lane
        claim = lane.claim(partition, first, last, app.rebalancing_count, bool(app.rebalancing))
        if claim is None:
            return
        records = [InRecord(req.key, value, partition, first + i) for i, value in enumerate(req.records)]
        committed = False
        try:
            out = await self.window.make_durable(records)
            committed = True
        except Exception:
            log.exception("the hook fast lane could not commit records %d..%d of partition %d; the window "
                          "agent applies them", first, last, partition)
            return
        finally:
            lane.release(claim, committed)
        self.ctx.answers.resolve(out.proposals)

    async def delivered(self, body: bytes) -> tuple[int, bytes]:
        try:
            delivery = parse_delivered_request(body, self.token)
        except BadRequest as exc:
            return 400, orjson.dumps({"status": "bad_request", "error": str(exc)})
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
            # agents/fastlane.py: requests committed here, and the turns decided and records skipped in all
            "fast_lane": ctx.lane.taken_by_lane, "turns": ctx.counters.turns, "skipped": ctx.counters.skipped,
        })


def register_views(ctx: AgentContext) -> Registration:
    """Add the endpoint to the worker's Faust web server (only when the web server is on); returns
    this worker's entry in the hooks' registry."""
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

    class HookHello(web.View):
        async def post(self, request: Any) -> Any:  # the guard checked the signature; the proof follows
            return self.bytes(orjson.dumps({"status": "ok"}), content_type=json_type, status=200)

    class HookHealth(web.View):
        async def get(self, request: Any) -> Any:
            status, data = endpoint.health()
            return self.bytes(data, content_type=json_type, status=status)

    ctx.app.page(TURNS_PATH)(HookTurns)
    ctx.app.page(DELIVERED_PATH)(HookDelivered)
    ctx.app.page(HEALTH_PATH)(HookHealth)
    ctx.app.page(HELLO_PATH)(HookHello)

    from pipeline.agents.edge import Registration
    from pipeline.hook.registry import HEARTBEAT_S

    url = ctx.advertised_url or str(ctx.app.conf.canonical_url).rstrip("/")
    registration = Registration(ctx.settings, url)

    from pipeline.agents.health import register_health_views

    register_health_views(ctx)  # /livez, /readyz for probes

    @ctx.app.task
    async def announce_hook_endpoint() -> None:  # runs once logging is set up
        try:
            registration.write()
        except OSError as exc:
            log.warning("could not register this worker for the hooks at %s (%s); hooks need VOLUNTEER_HOOK_URL=%s",
                        registration.path, exc, url)
        log.info("%s %s (registered in %s; hooks find it there, or set VOLUNTEER_HOOK_URL=%s)", HOOK_ENDPOINT_MARK,
                 url + TURNS_PATH, registration.path, url)

    @ctx.app.timer(HEARTBEAT_S)
    async def touch_registration() -> None:  # hooks ignore an entry not touched for STALE_S
        if registration.written:
            try:
                registration.touch()
            except OSError as exc:
                log.debug("could not touch %s (%s)", registration.path, exc)

    import atexit

    atexit.register(registration.remove)  # a clean exit (SIGTERM, Ctrl-C); after a kill the entry goes stale
    return registration
