"""``volunteer mcp``: serve the op, stats and page opens as MCP tools (stdio, or HTTP with a credential)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import click

from pipeline.cli.options import brain_options, gate_flags, gate_values, settings_or_fail


def _fail(message: str) -> None:
    """One line on stderr, exit 1 (stdout may be a protocol channel: nothing goes there)."""
    sys.stderr.write(f"volunteer mcp: error: {' '.join(message.split())}\n")
    sys.stderr.flush()
    raise SystemExit(1)


@click.command(name="mcp")
@brain_options
@click.option("--source", "sources", multiple=True, metavar="ID",
              help="Default source scope of a call that names none; repeatable (default: VOLUNTEER_SOURCE, "
                   "else 'default').")
@gate_flags
@click.option("--no-log", is_flag=True,
              help="Do not log volunteered pages as op events (they are logged by default, best-effort).")
@click.option("--http", "listen", metavar="HOST:PORT",
              help="Serve streamable HTTP on http://HOST:PORT/mcp instead of stdio; every request then needs "
                   "'Authorization: Bearer <bearer>' (see --print-bearer).")
@click.option("--token-file", metavar="PATH", type=click.Path(dir_okay=False),
              help="With --http: file (mode 0600) whose first line is a dedicated bearer secret. Default: a "
                   "bearer derived from the agent edge's credential (VOLUNTEER_HOOK_TOKEN, else the per-user "
                   "token file the worker, 'up' and 'bootstrap' share).")
@click.option("--print-bearer", is_flag=True,
              help="Print the bearer an HTTP client must send (from --token-file or the edge credential) and exit.")
def mcp(brain_dir: str | None, database_url: str | None, sources: tuple[str, ...], no_log: bool,
        listen: str | None, token_file: str | None, print_bearer: bool, **gate: Any) -> None:
    """Serve volunteer_context, volunteer_stats and volunteer_opened to MCP clients.

    The brain comes from --brain DIR, or from PostgreSQL (--database-url / VOLUNTEER_DATABASE_URL),
    reloaded live when it changes, as the worker does. Pages a call volunteers are logged in
    context_volunteer_events with channel 'op' and the call's session_id and turn, so
    'volunteer stats' shows the op's precision; logging never delays or fails a call.

    The decision flags (--max-pages, --min-confidence, --no-lexical-arms) are the defaults of a
    call that gives none (else VOLUNTEER_MAX_PAGES, ...); --exclude-slug-prefix applies whatever
    the call says.

    On stdio (the default), stdout carries only the protocol; errors are one line on stderr.

    \b
    Examples:
      volunteer mcp --brain pipeline/samples/brain
      volunteer mcp --database-url postgresql://... --source default
      volunteer mcp --http 127.0.0.1:8765 --brain pipeline/samples/brain
      volunteer mcp --print-bearer      # the 'Authorization: Bearer ...' value for HTTP clients
    \b
    Claude Code:  claude mcp add volunteer -- volunteer mcp --database-url postgresql://...
    See docs/mcp.md for Codex and other clients.
    """
    if print_bearer:
        from pipeline.mcp.auth import CredentialError, shared_hook_credential

        try:
            click.echo(shared_hook_credential(token_file))
        except CredentialError as exc:
            _fail(str(exc))
        return
    try:
        _serve(brain_dir, database_url, sources, gate, no_log, listen, token_file)
    except click.ClickException as exc:
        _fail(exc.format_message())
    except KeyboardInterrupt:
        pass


def _serve(brain_dir: str | None, database_url: str | None, sources: tuple[str, ...], gate: dict[str, Any], no_log: bool,
           listen: str | None, token_file: str | None) -> None:
    import anyio

    from pipeline.core.request import RequestDefaults

    settings = settings_or_fail()
    http: tuple[str, int] | None = None
    token = ""
    if listen is not None:
        from pipeline.mcp.auth import CredentialError, shared_hook_credential
        from pipeline.mcp.server import parse_listen

        try:
            http = parse_listen(listen)
            token = shared_hook_credential(token_file)
        except (ValueError, CredentialError) as exc:
            _fail(str(exc))
    elif token_file is not None:
        _fail("--token-file only matters with --http")
    defaults = RequestDefaults(
        source_ids=tuple(sources) or (settings.source,),
        **gate_values(settings, gate),
    )
    # Events, stats and opens use the database only when one is named (flag or VOLUNTEER_DATABASE_URL):
    # trying the server on a brain directory must not warn about a database nobody asked for.
    url = database_url
    holder = _brain(brain_dir, database_url)

    from pipeline.mcp.oplog import OpEventLog
    from pipeline.mcp.server import VolunteerTools, build_server, serve_http, serve_stdio

    events = None if no_log or not url else OpEventLog(url)
    tools = VolunteerTools(holder, defaults, url, events, refresh_seconds=settings.brain_refresh_seconds)
    server = build_server(tools, version=_version())
    try:
        if http is None:
            # SIGTERM is how clients stop a stdio server: write what is queued (≤ 5 s), then exit at once
            # (the SDK's stdin reader thread would keep an orderly shutdown waiting for input)
            signal.signal(signal.SIGTERM, lambda signum, frame: _exit_after_drain(events))
            anyio.run(serve_stdio, server)
        else:
            anyio.run(serve_http, server, http[0], http[1], token, _announce)
    except OSError as exc:
        _fail(f"cannot listen on {listen}: {exc.strerror or exc}")
    finally:
        if events is not None:
            events.close()


def _brain(brain_dir: str | None, database_url: str | None) -> Any:
    from pipeline.agents.brain_holder import BrainHolder, BrainLoadError

    try:
        if brain_dir:
            return BrainHolder.from_directory(brain_dir)
        if database_url:
            return BrainHolder.from_database(database_url, None)  # calls may name any source
    except BrainLoadError as exc:
        _fail(str(exc))
    _fail("no brain: pass --brain DIR (or set VOLUNTEER_BRAIN), or --database-url URL (or set "
          "VOLUNTEER_DATABASE_URL)")


def _exit_after_drain(events: Any) -> None:
    if events is not None:
        events.close()
    sys.stderr.flush()
    os._exit(0)


def _announce(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("volunteer-stream")
    except PackageNotFoundError:
        return ""
