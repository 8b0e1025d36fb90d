"""The MCP server: three tools over the SDK's low-level ``Server``, on stdio or streamable HTTP.

Why the low-level server and not ``MCPServer``: ``MCPServer`` builds each tool's schema from a
Python signature and validates arguments with pydantic before the tool runs, so ``max_pages: "3"``
would be refused, where the reference op answers it (the value is ignored, the default applies).
Here the handler receives the arguments exactly as sent and hands them to the same request
evaluation as ``volunteer context --batch`` (:mod:`pipeline.core.request`), so both channels give
the same object for the same request, by construction.

Each call answers with that object as ``structuredContent`` plus a text rendering (the reference's
human format) for clients that show only text. A bad request is a tool error (``isError``) whose
text and structured content are the ``invalid_params`` object; no request can crash the server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
import psycopg
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from pipeline.agents.brain_holder import BrainHolder
from pipeline.core.render import format_result
from pipeline.core.request import RequestDefaults, attribution, evaluate, source_scope
from pipeline.mcp.oplog import OpEventLog
from pipeline.mcp.tools import CONTEXT_TOOL, OPENED_TOOL, STATS_TOOL, TOOLS

log = logging.getLogger(__name__)

SERVER_NAME = "volunteer"
THREAD_WINDOW_CHARS = 200_000
"""Windows longer than this are decided in a worker thread, so one huge call cannot stall the others."""
DB_CALL_TIMEOUT_S = 15.0
MAX_OPENED_SLUGS = 100
MAX_HTTP_BODY_BYTES = 16 * 1024 * 1024
"""The SDK's default (4 MiB) would refuse a window the op accepts (5,000,000 bytes, more once escaped)."""


class ToolFailure(Exception):
    """A call that is answered with ``isError``: ``payload`` is the error object, ``text`` what to show."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(payload.get("message", ""))
        self.payload = payload


def _invalid(message: str) -> ToolFailure:
    return ToolFailure({"error": "invalid_params", "message": message})


def _db_failure(exc: BaseException, url: str) -> ToolFailure:
    from sinks.db import redact

    detail = " ".join(str(exc).split())[:200] or type(exc).__name__
    return ToolFailure({"error": "unavailable", "message": f"cannot reach the database at {redact(url)}: {detail}"})


@dataclass
class VolunteerTools:
    """What the tools need: the brain, the defaults of a request, the database, the event log."""

    brain: BrainHolder
    defaults: RequestDefaults
    database_url: str | None
    events: OpEventLog | None
    refresh_seconds: float = 3.0

    # ------------------------------------------------------------------ tools/call

    async def call(self, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Answer one call. Every failure becomes a tool error; nothing escapes to the protocol layer."""
        try:
            if name == CONTEXT_TOOL:
                if arguments.get("stats") is True:
                    result, text = await self._stats(arguments.get("days"), list(self.defaults.source_ids))
                else:
                    result, text = await self._context(arguments)
            elif name == STATS_TOOL:
                scope = source_scope(arguments.get("source"), self.defaults.source_ids[:1])
                if scope is None:
                    raise _invalid("source must be a source id or a list of source ids")
                result, text = await self._stats(arguments.get("days"), scope)
            elif name == OPENED_TOOL:
                result, text = await self._opened(arguments)
            else:
                raise ToolFailure({"error": "unknown_tool", "message": f"no tool named {name!r}"})
        except ToolFailure as failure:
            return _error_result(failure.payload)
        except Exception as exc:  # a bug must not take the server (and the agent's other tools) down
            log.exception("tool %s failed", name)
            return _error_result({"error": "internal", "message": f"{type(exc).__name__} in {name}"})
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=result)

    async def _context(self, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        brain = self.brain.index  # one consistent brain for the whole call, even during a reload
        window = arguments.get("window")
        if isinstance(window, str) and len(window) > THREAD_WINDOW_CHARS:
            outcome = await anyio.to_thread.run_sync(evaluate, arguments, self.defaults, brain)
        else:
            outcome = evaluate(arguments, self.defaults, brain)
        if not outcome.ok:
            raise ToolFailure(outcome.result)
        if self.events is not None and outcome.pages:
            session_id, turn = attribution(arguments)
            self.events.submit(outcome.pages, session_id, turn)
        return outcome.result, format_result(outcome.result)

    async def _stats(self, days: object, scope: Sequence[str]) -> tuple[dict[str, Any], str]:
        from sinks.stats import format_stats, usage_stats

        url = self._need_database("stats")
        result = await self._in_thread(url, usage_stats, url, list(scope), days)
        return result.to_dict(), format_stats(result)

    async def _opened(self, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        from topics.page_opens import PageOpen, decode_page_open
        from topics.records import InvalidRecord

        slugs = arguments.get("slugs")
        if isinstance(slugs, str):
            slugs = [slugs]
        if not isinstance(slugs, list) or not slugs or not all(isinstance(s, str) and s for s in slugs):
            raise _invalid("slugs must be a non-empty list of page slugs")
        if len(slugs) > MAX_OPENED_SLUGS:
            raise _invalid(f"at most {MAX_OPENED_SLUGS} slugs per call")
        source = arguments.get("source", self.defaults.source_ids[0])
        if not isinstance(source, str) or not source:
            raise _invalid("source must be a source id")
        for slug in slugs:
            try:
                decode_page_open(PageOpen(slug, source, None, None).to_json())
            except InvalidRecord as exc:
                raise _invalid(f"{slug!r}: {exc.message}") from None
        url = self._need_database("opened")
        distinct = sorted(set(slugs))
        updated = await self._in_thread(url, _mark_opened, url, source, distinct)
        result = {"reported": len(distinct), "updated": updated}
        return result, f"reported {len(distinct)} opened page(s) in {source}; {updated} marked as used now\n"

    def _need_database(self, what: str) -> str:
        if not self.database_url:
            raise ToolFailure({"error": "unavailable", "message": f"{what} needs a database (--database-url)"})
        return self.database_url

    async def _in_thread(self, url: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            with anyio.fail_after(DB_CALL_TIMEOUT_S):
                return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            raise _db_failure(exc, url) from None

    # ------------------------------------------------------------------ brain refresh

    async def refresh_forever(self) -> None:
        """Poll the brain's version and swap in a new brain when it changed (as the worker does)."""
        if not self.brain.refreshable:
            return
        while True:
            await anyio.sleep(self.refresh_seconds)
            try:
                await self.brain.refresh()  # database errors keep the loaded brain (logged there)
            except Exception:  # anything else must not stop the server either
                log.exception("brain refresh failed; keeping the loaded brain")


def _mark_opened(url: str, source: str, slugs: Sequence[str]) -> int:
    from sinks.db import connect
    from sinks.retrieval import Open, mark_retrieved_sync

    conn = connect(url)
    try:
        updated = mark_retrieved_sync(conn, [Open(source, slug) for slug in slugs])
        conn.commit()
        return updated
    finally:
        conn.close()


def _error_result(payload: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(payload, ensure_ascii=False))],
        structured_content=payload,
        is_error=True,
    )


def tool_list() -> list[types.Tool]:
    return [
        types.Tool(
            name=name,
            description=description,
            input_schema=input_schema,
            output_schema=output_schema,
            annotations=types.ToolAnnotations(
                read_only_hint=name != OPENED_TOOL, destructive_hint=False, idempotent_hint=True,
                open_world_hint=False,
            ),
        )
        for name, description, input_schema, output_schema in TOOLS
    ]


def build_server(tools: VolunteerTools, version: str = "") -> Server[Any]:
    """The SDK server with our two handlers and a lifespan that runs the brain refresh."""
    listing = types.ListToolsResult(tools=tool_list())
    schemas = {t.name: t.input_schema for t in listing.tools}

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return listing

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await tools.call(params.name, params.arguments or {})

    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(tools.refresh_forever)
            try:
                yield {}
            finally:
                tg.cancel_scope.cancel()

    return Server(
        SERVER_NAME,
        version=version,
        instructions="Call volunteer_context once per turn with the recent turns as window; use the pages it "
        "returns as background, and report the ones you open with volunteer_opened.",
        lifespan=lifespan,
        get_tool_input_schema=schemas.get,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


# ---------------------------------------------------------------------------- transports


async def serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); port 0 picks a free one. ValueError when malformed."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--http wants HOST:PORT (e.g. 127.0.0.1:8765), got {value!r}")
    return host.strip("[]"), int(port_text)


async def serve_http(server: Server[Any], host: str, port: int, token: str,
                     announce: Callable[[str], None]) -> None:
    """Streamable HTTP on ``http://HOST:PORT/mcp`` behind the bearer credential."""
    import socket

    import uvicorn

    from pipeline.mcp.auth import RequireBearer

    app = RequireBearer(server.streamable_http_app(host=host, max_request_body_size=MAX_HTTP_BODY_BYTES), token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # before the announcement: a client that connects on reading it must not be refused
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, log_config=None, lifespan="on")
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    announce(f"volunteer mcp: listening on http://{shown}:{bound}/mcp (bearer credential required)")
    await uvicorn.Server(config).serve(sockets=[sock])

